"""Helpers of the dbt tests: a dbt runner, its results, the marts' rows, the shared fixtures.

The PostgreSQL server, database and Meltano fixtures are `support.pipeline`'s (the e2e suite's
too), so there is one definition.
Builds after the first call the plugin's dbt directly (no Meltano start-up) with the PG*
variables meltano.yml's dbt-postgres utility would hand it, and a target directory of their own
so each build's run_results.json can be read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from demo_pipeline import PROJECT_ROOT
from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.pipeline import MeltanoProject, run_in_project, sandbox_project
from support.streams import rewards_read_from

DBT = PROJECT_ROOT / ".meltano" / "utilities" / "dbt-postgres" / "venv" / "bin" / "dbt"
TRANSFORM = PROJECT_ROOT / "transform"
RAW_SCHEMA = "guestdata"
RUN_ALL = ("--environment=dev", "run", "guestdata-to-postgres")  # the daily job: load, dbt build
# The daily job's load without its build.
LOAD_ONLY = (
    "--environment=dev",
    "run",
    "tap-guestdata",
    "target-postgres",
    "guestdata-pg-types:timestamptz",
)
# The weekly refresh (guests re-read whole, so deletions are followed), without and with the build.
REFRESH_LOAD_ONLY = (
    "--environment=dev",
    "run",
    "--full-refresh",
    "tap-guestdata--refresh",
    "target-postgres",
    "guestdata-pg-types:timestamptz",
)
REFRESH_AND_BUILD = (*REFRESH_LOAD_ONLY, "dbt-postgres:build")
MARTS = (
    "fct_venue_daily",
    "dim_members",
    "fct_rewards",
    "fct_offer_performance",
    "marketing_audience",
)
# The models built incrementally (docs/transform-incremental.md).
INCREMENTAL_STAGING = (
    "stg_guestdata__guests",
    "stg_guestdata__guest_reads",
    "stg_guestdata__member_ledger",
    "stg_guestdata__rewards",
    "stg_guestdata__redemptions",
)
INCREMENTAL_MARTS = ("fct_venue_daily", "marketing_audience", "dim_members")
LONDON = ZoneInfo("Europe/London")


def london_day(days_ago: int) -> dt.date:
    """Today's London date, `days_ago` days back."""
    return dt.datetime.now(LONDON).date() - dt.timedelta(days=days_ago)


@dataclass
class DbtRun:
    returncode: int
    output: str
    results: dict[str, dict[str, Any]]  # node name -> {"status", "failures", "resource_type"}

    def statuses(self, resource_type: str) -> dict[str, str]:
        return {
            name: result["status"]
            for name, result in self.results.items()
            if result["resource_type"] == resource_type
        }


@dataclass
class Dbt:
    """dbt of the Meltano plugin on one database and raw schema."""

    env: dict[str, str]
    target_dir: Path

    def build(self, *args: str) -> DbtRun:
        return self.run("build", *args)

    def run(
        self, *args: str, extra_env: dict[str, str] | None = None, timeout: float = 600
    ) -> DbtRun:
        """`dbt ARGS` (a command and its options) on this project, database and target dir."""
        command = [str(DBT), *args, "--project-dir", str(TRANSFORM)]
        command += ["--profiles-dir", str(TRANSFORM), "--target-path", str(self.target_dir)]
        result = run_in_project(command, {**self.env, **(extra_env or {})}, timeout=timeout)
        return DbtRun(
            result.returncode, result.stdout + result.stderr, read_results(self.target_dir)
        )


def read_results(target_dir: Path) -> dict[str, dict[str, Any]]:
    path = target_dir / "run_results.json"
    if not path.exists():
        return {}
    results = json.loads(path.read_text())["results"]
    # unique_id: <type>.<project>.<name>[.<hash of a generic test's arguments>]
    return {
        result["unique_id"].split(".")[2]: {
            "status": result["status"],
            "failures": result["failures"],
            "resource_type": result["unique_id"].split(".")[0],
        }
        for result in results
    }


def dbt_env(destination: Any, database: str, raw_schema: str = RAW_SCHEMA) -> dict[str, str]:
    """What meltano.yml's dbt-postgres utility hands dbt (its `env:` names)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "DBT_"))}
    env.update(
        {
            "PGHOST": destination.host,
            "PGPORT": str(destination.port),
            "PGUSER": destination.user,
            "PGPASSWORD": destination.password,
            "PGDATABASE": database,
            "GUESTDATA_PG_SCHEMA": raw_schema,
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
            "DBT_USE_COLORS": "false",
        }
    )
    return env


def meltano_env_with_dbt_paths(env: dict[str, str], target_dir: Path) -> dict[str, str]:
    """Meltano's dbt writes into the test's own target dir (never the repo's transform/target)."""
    return {**env, "DBT_TARGET_PATH": str(target_dir), "DBT_LOG_PATH": str(target_dir / "logs")}


def meltano_project(
    sandbox: SandboxProcess,
    destination: Any,
    database: str,
    target_dir: Path,
    logs: Path,
    **overrides: str,
) -> MeltanoProject:
    """`sandbox_project`, its dbt runs writing to `target_dir`."""
    project = sandbox_project(sandbox.base_url, destination, database, logs, **overrides)
    project.env = meltano_env_with_dbt_paths(project.env, target_dir)
    return project


def query(conninfo: str, statement: str, *params: Any) -> list[tuple]:
    with psycopg.connect(conninfo) as connection:
        return connection.execute(statement, params).fetchall()


# When the build that wrote a row started (macros/incremental.sql): two builds of the same data
# differ in it and in nothing else.
BUILD_STAMP = "built_at"

# When the rows behind a mart row were read: two loads of the same data differ only in these
# (and in BUILD_STAMP).
READ_TIMES = {
    "api_stats_read_at",
    "guests_read_started_at",
    "guests_read_completed_at",
    "loaded_at",
}


def mart_rows(conninfo: str, schema: str) -> dict[str, list[tuple]]:
    """Every mart's rows, sorted, without the read times (READ_TIMES) and BUILD_STAMP, for
    comparing two builds."""
    tables: dict[str, list[tuple]] = {}
    with psycopg.connect(conninfo) as connection:
        for mart in MARTS:
            columns = [
                name
                for (name,) in connection.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (schema, mart),
                )
                if name not in READ_TIMES and name != BUILD_STAMP
            ]
            query = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(schema, mart)
            )
            tables[mart] = sorted(connection.execute(query).fetchall(), key=repr)
    return tables


def model_rows(conninfo: str, schema: str, models: tuple[str, ...]) -> dict[str, list[str]]:
    """Each model's rows as text, every column but BUILD_STAMP, sorted: two builds of the same
    data compare row for row."""
    with psycopg.connect(conninfo) as connection:
        rows = {}
        for model in models:
            columns = [
                sql.Identifier(name)
                for (name,) in connection.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                    " AND table_name = %s AND column_name <> %s ORDER BY ordinal_position",
                    (schema, model, BUILD_STAMP),
                )
            ]
            statement = sql.SQL("SELECT row({})::text FROM {}").format(
                sql.SQL(", ").join(columns), sql.Identifier(schema, model)
            )
            rows[model] = sorted(text for (text,) in connection.execute(statement))
        return rows


RECONCILIATIONS = {
    "reconcile_venue_daily_visits_with_api_stats",
    "reconcile_venue_daily_opt_ins_with_api_stats",
    "reconcile_member_balance_with_ledger",
    "reconcile_offer_funnel_with_offer_stats",
}
# a staging model per stream, the reads of guests, the marts, and guestdata_account_status
MODEL_COUNT = 14 + 1 + len(MARTS) + 1


def assert_every_model_built_and_every_test_passed(target_dir: Path) -> None:
    """What a build wrote to target_dir/run_results.json: every model, every test green."""
    run = DbtRun(0, "", read_results(target_dir))
    models = run.statuses("model")
    assert len(models) == MODEL_COUNT and set(models.values()) == {"success"}, models
    tests = run.statuses("test")
    assert set(tests) >= RECONCILIATIONS
    assert len(tests) > 60
    assert set(tests.values()) == {"pass"}, {name: s for name, s in tests.items() if s != "pass"}


# ------------------------------------------------------------------ the marts the truth implies
# One reading of the sandbox's ground truth for the PostgreSQL and the Snowflake model tests.

OFFER_FUNNEL = ("issued", "outstanding", "redeemed", "voided", "expired", "claimed")


def expected_venue_daily(truth: dict[str, Any]) -> dict[tuple[int, str], tuple[int, int, int]]:
    """(venue_id, London date) -> visits, unique guests, opt-ins (the API's own per-day figures)."""
    return {
        (row["venue_id"], row["date"]): (
            row["visits"],
            row["unique_guests"],
            row["marketing_opt_ins"],
        )
        for row in truth["daily_stats"]
    }


@dataclass
class ExpectedAudience:
    """Who may be mailed (consenting, not erased), and every person's visited venues."""

    allowed: set[str]
    visits: dict[str, list[int]]
    erased: set[str]


def expected_audience(truth: dict[str, Any]) -> ExpectedAudience:
    anonymised = [member for member in truth["members"] if member["anonymised_at"]]
    erased = {member["email"].lower() for member in anonymised} | {
        member["phone_e164"] for member in anonymised
    }
    visits: dict[str, list[int]] = defaultdict(list)
    for guest in truth["guests"]:
        visits[guest["email"].lower()].append(guest["venue_id"])
    allowed = {
        guest["email"].lower()
        for guest in truth["guests"]
        if guest["marketing_consent"] and guest["email"].lower() not in erased
    }
    return ExpectedAudience(allowed, visits, erased)


def expected_members(truth: dict[str, Any]) -> dict[int, tuple]:
    """member_id -> status, tier, balance, ledger sum, balance matches ledger."""
    ledger: dict[int, int] = defaultdict(int)
    for line in truth["member_ledger"]:
        ledger[line["member_id"]] += line["delta"]
    return {
        member["id"]: (
            "anonymised" if member["anonymised_at"] else "left" if member["left_at"] else "active",
            member["tier_key"],
            member["points_balance"],
            ledger[member["id"]],
            True,
        )
        for member in truth["members"]
    }


def expected_rewards(truth: dict[str, Any]) -> dict[int, tuple]:
    """reward_id -> status as read, redemption_id."""
    return {
        reward["id"]: (reward["status"], reward["redemption_id"]) for reward in truth["rewards"]
    }


def expected_offer_funnel(truth: dict[str, Any]) -> dict[int, tuple]:
    """offer_id -> the OFFER_FUNNEL counts of offer_stats."""
    return {
        stats["offer_id"]: tuple(stats[name] for name in OFFER_FUNNEL)
        for stats in truth["offer_stats"]
    }


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Window:
    """What a first run with `start_date` reads of the truth, and so what the marts hold
    (docs/tap.md, "What a start_date reads"): guests, daily statistics and redemptions from
    start_date; members and their ledgers whole; rewards from the longest offer validity
    before start_date, in days of 24 hours."""

    start_date: dt.date

    @property
    def start(self) -> dt.datetime:
        return dt.datetime.combine(self.start_date, dt.time(), LONDON).astimezone(dt.timezone.utc)

    def rewards_from(self, truth: dict[str, Any]) -> dt.datetime:
        return rewards_read_from(truth, self.start)

    def read(self, truth: dict[str, Any]) -> dict[str, Any]:
        """The truth's rows the window reads, stream by stream."""
        rewards_from = self.rewards_from(truth)
        day = self.start_date.isoformat()
        return {
            **truth,
            "guests": [row for row in truth["guests"] if instant(row["visited_at"]) >= self.start],
            "daily_stats": [row for row in truth["daily_stats"] if row["date"] >= day],
            "rewards": [
                row for row in truth["rewards"] if instant(row["issued_at"]) >= rewards_from
            ],
            "redemptions": [
                row for row in truth["redemptions"] if instant(row["created_at"]) >= self.start
            ],
        }

    def funnel(self, truth: dict[str, Any]) -> dict[int, tuple]:
        """offer_id -> the OFFER_FUNNEL counts of the rows the window reads, by
        fct_offer_performance's rules (an offer older than the window: not its whole life)."""
        read = self.read(truth)
        counts = {offer["id"]: dict.fromkeys(OFFER_FUNNEL, 0) for offer in truth["offers"]}
        for reward in read["rewards"]:
            funnel = counts[reward["offer_id"]]
            funnel["issued"] += 1
            funnel["outstanding"] += reward["status"] == "issued"
            funnel["expired"] += reward["status"] == "expired"
            funnel["claimed"] += reward["issued_via"] == "points"
        for redemption in read["redemptions"]:
            status = "redeemed" if redemption["status"] == "completed" else "voided"
            counts[redemption["offer_id"]][status] += 1
        return {
            offer: tuple(funnel[name] for name in OFFER_FUNNEL) for offer, funnel in counts.items()
        }

    def whole_funnels(self, truth: dict[str, Any]) -> dict[int, bool]:
        """offer_id -> has_whole_funnel: created inside the window."""
        return {
            offer["id"]: instant(offer["created_at"]) >= self.start for offer in truth["offers"]
        }


# ------------------------------------------------------------------ erasure on request
# One reading of the erase command's output for the PostgreSQL and the Snowflake tests.

COUNTS = r"((?:\w+=\d+ ?)+)"  # table=rows ... (the line may run into other output)
AUDIT_LINE = re.compile(
    r"erasure ([0-9a-f]{32}) \((\w+), (\d+) identifiers suppressed\): " + COUNTS
)


@dataclass(frozen=True)
class Person:
    email: str
    phones: frozenset[str]
    member_id: int
    arrivals: int

    def rows_per_table(self) -> dict[str, int]:
        """The tables that hold this consenting guest and member after a build, and how many
        rows: what erase_person's audit line counts, in its order."""
        return {
            "guests": self.arrivals,
            "members": 1,
            "stg_guestdata__guests": self.arrivals,
            "stg_guestdata__members": 1,
            "dim_members": 1,
            "marketing_audience": 1,
        }


def person_to_erase(sandbox: SandboxProcess, key: str = OWNER_KEYS[0]) -> Person:
    """The consenting guest with the most arrivals who is also a member (not anonymised), in
    the account of `key`."""
    truth = sandbox.truth(key)
    members = {m["email"].lower(): m for m in truth["members"] if not m["anonymised_at"]}
    arrivals: dict[str, list[dict]] = defaultdict(list)
    for guest in truth["guests"]:
        arrivals[guest["email"].lower()].append(guest)
    email = max(
        (e for e, rows in arrivals.items() if e in members and rows[0]["marketing_consent"]),
        key=lambda e: (len(arrivals[e]), e),
    )
    member = members[email]
    phones = frozenset({member["phone_e164"], *(guest["phone"] for guest in arrivals[email])})
    return Person(email, phones, member["id"], len(arrivals[email]))


def table_counts(text: str) -> dict[str, int]:
    return {table: int(count) for table, count in (part.split("=") for part in text.split())}


def audit_line(output: str) -> tuple[str, str, int, dict[str, int]]:
    """erase_person's audit line: request hash, kind, identifiers suppressed, rows changed."""
    ((request_hash, kind, identifiers, counts),) = AUDIT_LINE.findall(output)
    return request_hash, kind, int(identifiers), table_counts(counts)


def erased_again(output: str) -> dict[str, int]:
    """The rows the build's on-run-start erased again (apply_erasures' line)."""
    (counts,) = re.findall(r"erased again: " + COUNTS, output)
    return table_counts(counts)


def files_holding(folder: Path, values: list[str]) -> list[str]:
    """Files under `folder` (dbt's logs and target/) that hold any of `values`, any case."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace").lower()
            found += [f"{path}: {value}" for value in values if value.lower() in text]
    return found


class ServerStatementLog:
    """What the PostgreSQL server logged for one database from now on: `log_statement = 'all'`
    set on that database (its new sessions log every statement, literals included), read back
    from the server's log file. The statement history a salt must never reach."""

    def __init__(self, conninfo: str, database: str) -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(
                sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(
                    sql.Identifier(database)
                )
            )
            self.path = server_log_file(connection)
        self.offset = self.path.stat().st_size

    def text(self) -> str:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            return log.read().decode("utf-8", "replace")


def server_log_file(connection: psycopg.Connection) -> Path:
    """The server's log: the collector's current file, or Debian's pg_ctlcluster log."""
    settings = dict(
        connection.execute(
            "SELECT name, setting FROM pg_settings "
            "WHERE name IN ('logging_collector', 'data_directory', 'cluster_name')"
        ).fetchall()
    )
    candidates = []
    if settings.get("logging_collector") == "on":
        (current,) = connection.execute("SELECT pg_current_logfile()").fetchone()
        candidates.append(Path(settings["data_directory"]) / current)
    cluster = settings.get("cluster_name", "").replace("/", "-")
    candidates.append(Path(f"/var/log/postgresql/postgresql-{cluster}.log"))
    for path in candidates:
        if path.is_file() and os.access(path, os.R_OK):
            return path
    raise AssertionError(
        f"the server's statement log is not readable here (tried {candidates}): run the tests "
        "as a user who can read it, against a server that logs to a file"
    )
