"""Helpers of the Celery cluster tests: the command, its DAG runs, what the sandbox saw, and the
warehouse's tables and models against the sandbox's truth."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import requests

import demo_pipeline
from guestdata_cluster import DAG_ID, Cluster, ClusterError, Rest, default_accounts, task_label
from guestdata_cluster.deploy import account_connections
from guestdata_cluster.stack import kill_worker
from guestdata_cluster.state import LOCAL_POSTGRES, LOCAL_REDIS, WAREHOUSE_CONNECTION
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import expected_audience, expected_members, expected_venue_daily, query
from tap_guestdata.airflow.accounts import REFRESH_GROUP, TaskSpec, parse_config, plan_tasks
from tap_guestdata.airflow.plan import MODELS_SCHEMA
from tap_guestdata.run.catalog import GROUPS

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COMMAND = PROJECT_ROOT / "scripts" / "cluster"
# Not the default cluster's (gdc, 10.200.0, 7); a second checkout on the same machine passes its
# own through the environment so two runs never meet.
NAME = os.environ.get("GUESTDATA_CLUSTER_TEST_NAME", "gdt")
SUBNET = os.environ.get("GUESTDATA_CLUSTER_TEST_SUBNET", "10.201.0")
REDIS_DB = int(os.environ.get("GUESTDATA_CLUSTER_TEST_REDIS_DB", "11"))
# The services `up` is given (`--redis-url`, `--postgres-url`): the shared local ones.
REDIS_URL = f"{LOCAL_REDIS}/{REDIS_DB}"
POSTGRES_URL = LOCAL_POSTGRES
TIME_SCALE = 0.25  # the sandbox's rate-limit minute lasts 15 s
WINDOW_SECONDS = 60.0 * TIME_SCALE
PER_KEY, PER_ADDRESS = 120, 600  # spec 8, per window
HEARTBEAT_TIMEOUT = 30  # production: see docs/scale-out.md
RETRY_DELAY_SECONDS = 5
# The groups whose tables are checked one by one against the truth (the others: through the
# models).
STREAMS = {"core": ("account", "venues", "guests"), "members": ("members", "member_ledger")}
# Every account loads offers too: a member's tier is in `tiers` (offers), and the models test
# that relationship within each account.
LOADED = (*STREAMS, "offers")
# One account loads every group, so each run ends with the models' build (it needs each raw
# table in some account's schema).
FULL = "harbour"
SANDBOX_ACCOUNTS, VARIABLES = default_accounts(LOADED)
ACCOUNTS = {
    "accounts": [
        {**account, "groups": list(GROUPS)} if account["name"] == FULL else account
        for account in SANDBOX_ACCOUNTS["accounts"]
    ]
}
# The kill test's deployment: one account, its members group alone, so the one task that is
# killed is the only one the sandbox's latency has to stretch; its first key alone, so the
# requests in flight when it dies (4: max_workers per key) are as many as the bound was set for.
KILL_ACCOUNTS = {
    "accounts": [
        {
            **ACCOUNTS["accounts"][0],
            "groups": ["members"],
            "keys": ACCOUNTS["accounts"][0]["keys"][:1],
        }
    ],
}
# The warehouse connection's password: the local server trusts its clients and never checks it,
# but it is a secret the workers must not keep, so the tests look for it in their files.
WAREHOUSE_PASSWORD = "gdt-warehouse-pw-7d41c2"
LONDON = ZoneInfo("Europe/London")
LEDGER_PATH = "/ledger"  # /rewards/members/{id}/ledger: the member_ledger stream's requests


@dataclass
class LocalCluster:
    """`scripts/cluster --home <home>` with this module's names, subnet and Redis db."""

    home: Path
    api_url: str
    api_port: int
    logs: Path  # where `down` keeps each cluster's logs
    up_seconds: list[float] = field(default_factory=list)
    accounts: Mapping[str, Any] = field(default_factory=lambda: ACCOUNTS)
    # Names and services: the module's defaults, or (the fault test) servers of its own.
    name: str = NAME
    subnet: str = SUBNET
    redis_url: str = REDIS_URL
    postgres_url: str = POSTGRES_URL
    # The sandbox's keys by Variable name: given to `up` as Variables (the old way), or, with
    # `connections`, in each account's `guestdata` connection (and the warehouse's connection
    # gets WAREHOUSE_PASSWORD).
    variables: Mapping[str, str] = field(default_factory=lambda: VARIABLES)
    connections: bool = False

    def command(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(COMMAND), "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, (
            f"scripts/cluster {' '.join(args)}:\n" + (result.stdout + result.stderr)[-4000:]
        )
        return result

    def up(
        self,
        accounts: Mapping[str, Any] = ACCOUNTS,
        *,
        models: bool = True,
        extra: Sequence[str] = (),
    ) -> float:
        """`up` with `accounts` (the DAG's accounts document) and the sandbox keys' Variables;
        `models=False`: `--no-models` (no dbt deployed, the loads alone); `extra`: more of
        `up`'s options."""
        files = self.logs.parent  # the test's own folder, not the cluster's
        (files / "accounts.json").write_text(json.dumps(accounts))
        if self.connections:
            connections = {
                **account_connections(accounts, self.variables, self.api_url),
                WAREHOUSE_CONNECTION: {"password": WAREHOUSE_PASSWORD},
            }
            (files / "connections.json").write_text(json.dumps(connections))
            keys = ["--connections", str(files / "connections.json")]
        else:
            (files / "variables.json").write_text(json.dumps(self.variables))
            keys = ["--variables", str(files / "variables.json")]
        self.accounts = accounts
        started = time.monotonic()
        self.command(
            "up", "--name", self.name, "--subnet", self.subnet,
            "--redis-url", self.redis_url, "--postgres-url", self.postgres_url,
            "--api-port", str(self.api_port), "--api-url", self.api_url,
            "--accounts", str(files / "accounts.json"),
            *keys,
            "--time-scale", str(TIME_SCALE),
            "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT),
            "--retry-delay-seconds", str(RETRY_DELAY_SECONDS),
            # A STATE every 2 s (default 10): the kill test measures what a resume redoes,
            # not how stale the last STATE was.
            "--env", "TAP_GUESTDATA_STATE_INTERVAL_SECONDS=2",
            *([] if models else ["--no-models"]),
            *extra,
            timeout=600,
        )  # fmt: skip
        self.up_seconds.append(time.monotonic() - started)
        return self.up_seconds[-1]

    def down(self) -> float:
        """`down`, after keeping the cluster's logs (processes' and tasks') for a post-mortem."""
        kept = self.logs / f"cluster-{len(list(self.logs.iterdir())) + 1}"
        for part in ("logs", "airflow/logs"):
            if (self.home / part).exists():
                shutil.copytree(self.home / part, kept / part)
        started = time.monotonic()
        self.command("down", timeout=300)
        return time.monotonic() - started

    def keys_in_logs(self) -> list[str]:
        """Log files (processes' and tasks') that hold an API key in clear."""
        found = []
        for folder in (self.home / "logs", self.home / "airflow" / "logs"):
            for path in folder.rglob("*"):
                if path.is_file():
                    text = path.read_text(errors="replace")
                    found += [f"{path}: {key}" for key in VARIABLES.values() if key in text]
        return found

    def keys_at_rest(self) -> list[str]:
        """Files of the workers' Meltano project (run directories, logs, the tasks' own
        directories) that hold an API key in clear; plugin virtualenvs and links are not read,
        nor meltano.yml (its dev environment names the sandbox's public owner key)."""
        found = []
        for folder, dirs, files in os.walk(self.home / "project", followlinks=False):
            dirs[:] = [d for d in dirs if d not in ("venvs", ".venv", "target", "dbt_packages")]
            for name in files:
                path = Path(folder, name)
                if path.is_symlink() or path.stat().st_size > 50_000_000:
                    continue
                if path == self.home / "project" / "meltano.yml":
                    continue
                text = path.read_text(errors="replace")
                found += [f"{path}: {key}" for key in VARIABLES.values() if key in text]
        return found

    def secrets_on_workers(self) -> list[str]:
        """Files of the workers (their AIRFLOW_HOME, task logs included; the Meltano project
        copy and its `.meltano`; the processes' logs) whose bytes hold a key or the warehouse's
        password. Plugin virtualenvs and links are not read, nor meltano.yml (its dev
        environment names the sandbox's public owner key)."""
        secrets = {key.encode(): f"key {name}" for name, key in self.variables.items()}
        secrets[WAREHOUSE_PASSWORD.encode()] = "the warehouse's password"
        found = []
        for part in ("airflow", "project", "logs"):
            for folder, dirs, files in os.walk(self.home / part, followlinks=False):
                dirs[:] = [d for d in dirs if d not in ("venv", "venvs", ".venv")]
                for name in files:
                    path = Path(folder, name)
                    if path.is_symlink() or path == self.home / "project" / "meltano.yml":
                        continue
                    data = path.read_bytes()
                    found += [f"{path}: {what}" for key, what in secrets.items() if key in data]
        return found

    def task_logs(self) -> str:
        """Every task log of the cluster, as one text."""
        folder = self.home / "airflow" / "logs"
        return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())

    def is_up(self) -> bool:
        return (self.home / "cluster.json").exists()

    @property
    def state(self) -> Cluster:
        return Cluster.load(self.home)

    def kill_worker(self, worker: int) -> int:
        """`scripts/cluster kill-worker N` in this process: the kill lands at once, not after a
        command's start-up (bootstrap, imports), while the task goes on sending requests."""
        return len(kill_worker(self.state, worker))

    def plan(self) -> dict[str, TaskSpec]:
        """The planner's tasks of the daily DAG for the deployed accounts, by the label of
        their mapped task, `<account>.load` (planned as the DAG plans them: with the weekly
        refresh, which is a DAG of its own). Small accounts: one spec, one task, each."""
        config = parse_config(Path(self.state.accounts_file).read_text())
        specs = [spec for spec in plan_tasks(config) if spec.group != REFRESH_GROUP]
        return {f"{spec.account}.load": spec for spec in specs}

    def warehouse(self) -> str:
        return self.state.database_url("warehouse")

    def meltano_state(self, state_id: str) -> tuple[str, str]:
        """(partial, completed) state Meltano stored for `state_id` ('' if none)."""
        url = self.state.database_url("meltano")
        with psycopg.connect(url) as connection:
            row = connection.execute(
                "SELECT partial_state, completed_state FROM state WHERE state_id = %s",
                (state_id,),
            ).fetchone()
        return (row[0] or "", row[1] or "") if row else ("", "")


def when(value: str | None) -> float:
    """An Airflow REST timestamp as a Unix time (0 for none)."""
    return datetime.fromisoformat(value).timestamp() if value else 0.0


@dataclass
class DagRun:
    run_id: str
    state: str
    started: float
    ended: float
    tasks: dict[str, dict[str, Any]]  # task label (`task_label`) -> its instance (last try)
    tries: dict[str, list[dict[str, Any]]]  # task label -> every try

    @property
    def seconds(self) -> float:
        return self.ended - self.started


def run_dag(
    cluster: LocalCluster, timeout: float, during: Callable[[Rest, str], None] | None = None
) -> DagRun:
    """Trigger the accounts DAG through the REST API and wait; `during` runs every second."""
    rest = Rest(cluster.state).login()
    run_id = rest.trigger(DAG_ID)
    deadline = time.monotonic() + timeout
    state = ""
    while state not in ("success", "failed"):
        assert time.monotonic() < deadline, f"the DAG run did not end in {timeout:.0f} s"
        if during is not None:
            during(rest, run_id)
        time.sleep(1)
        try:
            state = rest.run_state(DAG_ID, run_id)
        except (requests.RequestException, ClusterError):
            continue  # the api-server, or its database, is down (the fault test): ask again
    run = rest.call("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
    tasks = {task_label(task): task for task in rest.task_instances(DAG_ID, run_id)}
    tries = {
        label: rest.tries(DAG_ID, run_id, task["task_id"], task["map_index"])
        for label, task in tasks.items()
    }
    return DagRun(run_id, state, when(run["start_date"]), when(run["end_date"]), tasks, tries)


def table_checks(sandbox: SandboxProcess, cluster: LocalCluster) -> dict[str, str]:
    """Every deployed account's tables (its groups' streams) against its own ground truth:
    account -> a report where they differ, or where nothing at all was loaded."""
    problems = {}
    with psycopg.connect(cluster.warehouse()) as connection:
        for account in cluster.accounts["accounts"]:
            name = account["name"]
            key = cluster.variables[account["keys"][0]]
            expected = demo_pipeline.truth_tables(sandbox.truth(key))
            checks = [
                demo_pipeline.compare_stream(
                    stream,
                    demo_pipeline.database_rows(connection, f"guestdata_{name}", stream),
                    expected[stream],
                )
                for group in account["groups"]
                if group in STREAMS
                for stream in STREAMS[group]
            ]
            loaded = sum(check.rows_in_database for check in checks)
            if not all(check.matches for check in checks) or not loaded:
                problems[name] = demo_pipeline.report(checks)
    return problems


def account_rows(
    warehouse: str, relation: str, model: str, columns: str, schema: str = MODELS_SCHEMA
) -> list[tuple[Any, ...]]:
    """One account's rows of a model (`relation`: its raw schema, the rows' source_relation)."""
    statement = f"SELECT {columns} FROM {schema}.{model} WHERE source_relation = %s"
    return query(warehouse, statement, relation)


def london_day(instant: str) -> str:
    """The Europe/London day of an API timestamp (spec 2.4 counts London days)."""
    return datetime.fromisoformat(instant).astimezone(LONDON).date().isoformat()


def venue_day_figures(
    key: tuple[int, str], figures: Sequence[int], masked_days: set[tuple[int, str]]
) -> tuple[int | None, ...]:
    """A venue-day's visits, unique guests and opt-ins. Two people whose contacts mask alike
    count as one unique guest: a day's unique guests are compared where no contact was masked."""
    visits, unique_guests, opt_ins = figures
    return (visits, None if key in masked_days else unique_guests, opt_ins)


def contact_masked(guest: Mapping[str, Any]) -> bool:
    """The API masked the guest's email or phone (`*`s): the models' `is_masked` rule."""
    return "*" in f"{guest.get('email') or ''}{guest.get('phone') or ''}"


def model_checks(sandbox: SandboxProcess, cluster: LocalCluster) -> dict[str, list[str]]:
    """Every deployed account's rows of the run's one build (the models schema of the accounts
    DAG, every account's rows in each model) against its own ground truth: account -> the
    models that differ, or a line saying nothing was built for it."""
    problems = {}
    warehouse = cluster.warehouse()
    for account in cluster.accounts["accounts"]:
        name = account["name"]
        relation = f"guestdata_{name}"  # the account's raw schema: each model row's first column
        # Rewards off: no members in the truth (the stream is skipped), so none in the models.
        truth = {"members": [], "member_ledger": [], **sandbox.truth(VARIABLES[account["keys"][0]])}
        # The audience leaves out masked contacts (a key without contact access, spec 2.8).
        unmasked = [guest for guest in truth["guests"] if not contact_masked(guest)]
        audience = expected_audience({**truth, "guests": unmasked})
        masked_days = {
            (guest["venue_id"], london_day(guest["visited_at"]))
            for guest in truth["guests"]
            if contact_masked(guest)
        }
        day_figures = functools.partial(venue_day_figures, masked_days=masked_days)
        rows = functools.partial(account_rows, warehouse, relation)
        built: dict[str, Any] = {
            "stg_guestdata__account": rows(
                "stg_guestdata__account", "account_id, account_name", f"{MODELS_SCHEMA}_staging"
            ),
            "fct_venue_daily": {
                (venue, day): day_figures((venue, day), figures)
                for venue, day, *figures in rows(
                    "fct_venue_daily",
                    "venue_id, date::text, visits, unique_guests, marketing_opt_ins",
                )
            },
            "marketing_audience": {
                contact: (visits, venue_ids)
                for contact, visits, venue_ids in rows(
                    "marketing_audience", "contact_key, visits, venue_ids"
                )
            },
            "dim_members": {
                member: tuple(figures)
                for member, *figures in rows(
                    "dim_members",
                    "member_id, member_status, tier_key, points_balance, ledger_points_sum, "
                    "balance_matches_ledger",
                )
            },
        }
        expected: dict[str, Any] = {
            "stg_guestdata__account": [(truth["account"]["account_id"], name)],
            "fct_venue_daily": {
                key: day_figures(key, figures)
                for key, figures in expected_venue_daily(truth).items()
            },
            "marketing_audience": {
                contact: (len(audience.visits[contact]), sorted(set(audience.visits[contact])))
                for contact in audience.allowed
            },
            "dim_members": expected_members(truth),
        }
        differ = [
            f"{model}: {len(built[model])} rows built, {len(expected[model])} in the truth"
            for model in expected
            if built[model] != expected[model]
        ]
        if not built["fct_venue_daily"]:
            differ.append("fct_venue_daily: nothing built")
        if differ:
            problems[name] = differ
    return problems


def requests_by(log: Sequence[Mapping[str, Any]], field_name: str) -> dict[str, list[float]]:
    grouped: dict[str, list[float]] = {}
    for entry in log:
        grouped.setdefault(str(entry[field_name]), []).append(float(entry["time"]))
    return grouped


def ledger_requests(log: Sequence[Mapping[str, Any]], keys: set[str]) -> int:
    return sum(1 for e in log if e["key"] in keys and str(e["path"]).endswith(LEDGER_PATH))


def save_figures(path: Path, figures: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(figures, indent=2))
    print("\n" + json.dumps(figures, indent=2))
