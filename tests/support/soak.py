"""The soak test's parts (tests/soak/test_soak.py): the accounts DAG's own load and build steps
called directly, what each account's marts must hold by its truth, and what they hold.

The DAG's steps: `AccountsDag` builds each day's `AccountsPlan` from that day's accounts
configuration (tap_guestdata/airflow/plan.py), and runs the operators' `execute` with a small
fake context: one `GuestDataLoadOperator` per account (a mapped task of one account, as the
DAG maps few accounts), then one `GuestDataModelsOperator` whose `failed_loads` come from the
load tasks' XComs, as in a DAG run. Airflow is imported only when an `AccountsDag` is made, so
collecting the soak in another suite's process imports none of it.

Expectations are read from the sandbox's ground truth through `support.dbt.Window` (what a run
with `start_date` reads), with the people erased on request taken out as the models take them
out (docs/transform.md, "Across accounts"; transform/models/staging/stg_guestdata__guests.sql).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from demo_pipeline import PROJECT_ROOT
from support.dbt import (
    LONDON,
    MARTS,
    Window,
    expected_members,
    expected_rewards,
    instant,
    model_rows,
    query,
    read_results,
)
from support.pipeline import MELTANO

# Offer funnel columns of fct_offer_performance (support.dbt.OFFER_FUNNEL's order).
FUNNEL = ("issued", "outstanding", "redeemed", "voided", "expired", "claimed")


@dataclass(frozen=True)
class SoakAccount:
    """A sandbox account as an entry of the accounts configuration."""

    name: str
    account_id: int
    keys: tuple[str, ...]  # the keys its Airflow connection holds
    rewards: bool  # the key reads Rewards data: dim_members, fct_rewards, offers have its rows
    split: bool = False  # one Meltano run per stream group, each its own state id

    @property
    def schema(self) -> str:
        return f"guestdata_{self.name}"

    @property
    def truth_key(self) -> str:
        return self.keys[0]

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "split": self.split}


def accounts_document(accounts: Iterable[SoakAccount]) -> str:
    """The accounts configuration (docs/airflow-accounts.md) of `accounts`, one queue."""
    return json.dumps({"accounts": [account.entry() for account in accounts]})


def connection_env(account: SoakAccount, base_url: str, keys: Iterable[str] | None = None):
    """The account's `guestdata` Airflow connection as a secrets backend gives it
    (`AIRFLOW_CONN_GUESTDATA_<NAME>`): the sandbox as host, its keys."""
    first, *more = list(keys if keys is not None else account.keys)
    value = {"conn_type": "guestdata", "host": base_url, "password": first}
    value["extra"] = {"api_keys": more}
    return f"AIRFLOW_CONN_GUESTDATA_{account.name.upper()}", json.dumps(value)


# ------------------------------------------------------------------ the operators' context


class TaskInstance(SimpleNamespace):
    """What the operators read of `ti` (one try), with the DAG run's XCom store."""

    def __init__(self, xcoms: dict[tuple[str, str], list[Any]], task_id: str) -> None:
        super().__init__(dag_id="soak", run_id="soak", task_id=task_id, map_index=-1)
        self.try_number = 1
        self.xcoms = xcoms

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms.setdefault((self.task_id, key), []).append(value)

    def xcom_pull(self, task_ids: list[str], key: str) -> list[Any]:
        """Every map index's value of every task named (None where it pushed none)."""
        return [value for task_id in task_ids for value in self.xcoms.get((task_id, key), [None])]


class OutletEvents(dict):
    """`context["outlet_events"]`: the assets each load publishes, kept."""

    def __missing__(self, alias: Any) -> Any:
        published: list[Any] = []
        self[alias] = SimpleNamespace(add=published.append, published=published)
        return self[alias]


def run_context(
    xcoms: dict[tuple[str, str], list[Any]],
    task_id: str,
    *,
    params: Mapping[str, Any] | None = None,
    interval: tuple[dt.datetime, dt.datetime] | None = None,
    run_type: str = "scheduled",
) -> dict[str, Any]:
    return {
        "ti": TaskInstance(xcoms, task_id),
        "params": dict(params or {}),
        "dag_run": SimpleNamespace(run_type=run_type),
        "data_interval_start": interval[0] if interval else None,
        "data_interval_end": interval[1] if interval else None,
        "outlet_events": OutletEvents(),
    }


class OperatorLog:
    """Stands in for the operators' logger: every line (Meltano's output included) to a file,
    none to the terminal; the lines of the current step kept for a failure's message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def start(self, title: str) -> None:
        self.lines = []
        self.write(f"===== {title}")

    def write(self, line: str) -> None:
        self.lines.append(line)
        with self.path.open("a") as log:
            log.write(line + "\n")

    def _log(self, message: str, *args: Any, **_: Any) -> None:
        self.write(message % args if args else message)

    info = warning = error = exception = debug = _log

    def tail(self, lines: int = 40) -> str:
        wanted = [line for line in self.lines if "ERROR" in line or "rror" in line][-15:]
        return "\n".join([*wanted, "...", *self.lines[-lines:]])


@dataclass
class StepResult:
    """One operator's `execute`: `success`, `failed`, `skipped`, or `held` (a build)."""

    outcome: str
    message: str = ""


class AccountsDag:
    """The accounts DAG's own load and build steps (tap_guestdata/airflow/dags.py), called
    directly. `env`: what every Meltano run gets beyond the worker's environment (the database,
    the state store, start_date), as a deployment's `env` or worker environment would."""

    def __init__(self, env: Mapping[str, str], target_dir: Path, log: OperatorLog) -> None:
        from airflow.sdk.exceptions import AirflowException, AirflowSkipException

        from tap_guestdata.airflow import operators
        from tap_guestdata.airflow.config import PipelineConfig, settings_reader
        from tap_guestdata.airflow.dags import DAG_ID, REFRESH_DAG_ID
        from tap_guestdata.airflow.plan import AccountsPlan

        self.operators, self.env, self.target_dir, self.log = operators, dict(env), target_dir, log
        self.errors = (AirflowException, AirflowSkipException)
        self.daily_id, self.refresh_id = DAG_ID, REFRESH_DAG_ID
        self.PipelineConfig, self.settings_reader, self.AccountsPlan = (
            PipelineConfig,
            settings_reader,
            AccountsPlan,
        )

    def plan(self, document: str) -> Any:
        """The plan the DAG file would build from this accounts configuration (no Variable)."""
        given = {
            "project_root": str(PROJECT_ROOT),
            "meltano_bin": str(MELTANO),
            "meltano_environment": "dev",
            "meltano_after_load": "auto",  # guestdata-pg-types:timestamptz
            "meltano_transform": "auto",  # dbt-postgres:build
            "retries": "0",
            "accounts": document,
        }
        config = self.PipelineConfig.load(self.settings_reader(given, None))
        return self.AccountsPlan(config, config.accounts, single=False)

    def load_task_ids(self, plan: Any, *, refresh: bool) -> list[str]:
        return [f"{queue}.accounts.load" for queue in plan.queues(None, refresh=refresh)]

    def load(
        self,
        plan: Any,
        name: str,
        xcoms: dict[tuple[str, str], list[Any]],
        *,
        refresh: bool = False,
        params: Mapping[str, Any] | None = None,
        interval: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> StepResult:
        """The load task of one account (a mapped task of a batch of one), as the DAG makes it
        (dags.queue_group): its account's `AccountLoad` from the plan."""
        operators, config = self.operators, plan.config
        account = plan.load_of(name, refresh=refresh)
        (queue,) = {spec.queue for spec in plan.specs_of(name, refresh=refresh)}
        task_id = f"{queue}.accounts.load"
        operator = operators.GuestDataLoadOperator(
            task_id="load",
            accounts=[account],
            blocks=[operators.EXTRACTOR, config.target, *config.after_load],
            env=self.env,
            full_refresh=refresh,
            reloadable=not refresh,
            project_root=config.project_root,
            meltano_bin=config.meltano_bin,
            environment=config.environment,
        )
        self.log.start(f"load {name}{' (refresh)' if refresh else ''}")
        context = run_context(xcoms, task_id, params=params, interval=interval)
        try:
            operator.execute(context)
        except self.errors[1] as skipped:
            return StepResult("skipped", str(skipped))
        except self.errors[0] as failure:
            return StepResult("failed", str(failure))
        return StepResult("success")

    def build(
        self,
        plan: Any,
        dag_id: str,
        xcoms: dict[tuple[str, str], list[Any]],
        *,
        refresh: bool = False,
    ) -> StepResult:
        """The run's one `dbt_build` (dags.models_build): every account's models, the raw schemas
        whose load failed from the load tasks' XComs. Its dbt target/ and logs: the soak's."""
        operators, config = self.operators, plan.config
        models = plan.models(dag_id)
        env = {**models.env, "DBT_TARGET_PATH": str(self.target_dir)}
        env["DBT_LOG_PATH"] = str(self.target_dir / "logs")
        operator = operators.GuestDataModelsOperator(
            task_id="dbt_build",
            accounts=[dataclasses.replace(models, env=env)],
            unmodelled=plan.outside_models(),
            load_task_ids=self.load_task_ids(plan, refresh=refresh),
            blocks=list(config.transform),
            env=self.env,
            project_root=config.project_root,
            meltano_bin=config.meltano_bin,
            environment=config.environment,
        )
        self.log.start(f"build ({dag_id})")
        (run_results := self.target_dir / "run_results.json").unlink(missing_ok=True)
        try:
            operator.execute(run_context(xcoms, "dbt_build"))
        except self.errors[0] as failure:
            held = "held accounts" in str(failure) and type(failure).__name__ == (
                "AirflowFailException"
            )
            return StepResult("held" if held else "failed", str(failure))
        assert run_results.exists(), "the build wrote no run_results.json"
        return StepResult("success")

    def models_schema(self, plan: Any) -> str:
        return plan.models(self.daily_id).env["GUESTDATA_DBT_SCHEMA"]


def held_schemas(message: str) -> set[str]:
    """The raw schemas `GUESTDATA ACCOUNTS HELD: a, b (<status table> says why)...` names."""
    listed = message.split("held accounts:", 1)[1].split("(", 1)[0]
    return {schema.strip() for schema in listed.split(",") if schema.strip()}


def build_statuses(target_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The last build's models and tests, by name, with their status (run_results.json)."""
    results = read_results(target_dir)
    models = {n: r["status"] for n, r in results.items() if r["resource_type"] == "model"}
    tests = {n: r["status"] for n, r in results.items() if r["resource_type"] == "test"}
    return models, tests


# ------------------------------------------------------------------ what the truth says


def london_day_of(text: str) -> str:
    return instant(text).astimezone(LONDON).date().isoformat()


@dataclass
class Expected:
    """An account's marts by its truth, inside the window, keyed as `Built` reads them."""

    venue_days: dict[tuple[int, str], tuple[int, ...]]
    audience: dict[str, tuple[int, tuple[int, ...]]]
    members: dict[int, tuple] = field(default_factory=dict)
    rewards: dict[int, tuple] = field(default_factory=dict)
    offers: dict[int, tuple] = field(default_factory=dict)


def expected_marts(
    truth: dict[str, Any], window: Window, erased: frozenset[str], rewards: bool
) -> Expected:
    """What the marts hold of an account whose truth is `truth` and from whom the contacts in
    `erased` (lower-case emails) were erased on request.

    - fct_venue_daily, every day of the window: visits, unique guests and opt-ins of the API's
      own daily_stats, and beside them the same as `api_*` (the stats loaded); a person erased
      on request no longer counts as a unique guest (the API still counts them);
    - marketing_audience: each consenting contact of the window, not an anonymised member's nor
      erased, with their arrivals and the venues (sorted) they visited;
    - a member erased on request reads `anonymised` in dim_members (docs/security.md);
    - with Rewards: dim_members, fct_rewards and fct_offer_performance as in
      tests/transform/test_start_date.py.
    """
    if rewards:
        read = window.read(truth)
    else:  # no offers to take the rewards' reach from (Window.read): guests and stats alone
        day = window.start_date.isoformat()
        read = {
            "guests": [g for g in truth["guests"] if instant(g["visited_at"]) >= window.start],
            "daily_stats": [row for row in truth["daily_stats"] if row["date"] >= day],
        }
    erased_days: dict[tuple[int, str], set[str]] = defaultdict(set)
    for guest in read["guests"]:
        if (email := guest["email"].lower()) in erased:
            erased_days[(guest["venue_id"], london_day_of(guest["visited_at"]))].add(email)
    venue_days = {
        (row["venue_id"], row["date"]): (
            row["visits"],
            row["unique_guests"] - len(erased_days.get((row["venue_id"], row["date"]), ())),
            row["marketing_opt_ins"],
            row["visits"],
            row["unique_guests"],
            row["marketing_opt_ins"],
        )
        for row in read["daily_stats"]
    }
    anonymised = [m for m in truth.get("members") or [] if m["anonymised_at"]]
    excluded = {m["email"].lower() for m in anonymised} | {m["phone_e164"] for m in anonymised}
    excluded |= erased
    visits: dict[str, list[int]] = defaultdict(list)
    consenting: set[str] = set()
    for guest in read["guests"]:
        email = guest["email"].lower()
        visits[email].append(guest["venue_id"])
        if guest["marketing_consent"]:
            consenting.add(email)
    audience = {
        email: (len(visits[email]), tuple(sorted(set(visits[email]))))
        for email in consenting - excluded
    }
    expected = Expected(venue_days, audience)
    if rewards:
        read_rewards = {row["id"] for row in read["rewards"]}
        expected.members = expected_members(truth)
        for member in truth["members"]:  # erased on request: read as the API anonymises
            if member["email"].lower() in erased:  # (docs/security.md, Erasure)
                _, *rest = expected.members[member["id"]]
                expected.members[member["id"]] = ("anonymised", *rest)
        expected.rewards = {
            key: row for key, row in expected_rewards(truth).items() if key in read_rewards
        }
        whole = window.whole_funnels(truth)
        expected.offers = {
            offer: (*funnel, whole[offer]) for offer, funnel in window.funnel(truth).items()
        }
    return expected


# ------------------------------------------------------------------ what the marts hold


def built_marts(conninfo: str, models: str, relation: str) -> Expected:
    """One account's marts, read as `expected_marts` states them."""

    def rows(statement: str) -> list[tuple]:
        return query(conninfo, statement.format(models=models), relation)

    venue_days = rows(
        "SELECT venue_id, date::text, visits, unique_guests, marketing_opt_ins, api_visits,"
        " api_unique_guests, api_marketing_opt_ins FROM {models}.fct_venue_daily"
        " WHERE source_relation = %s"
    )
    audience = rows(
        "SELECT contact_key, visits, venue_ids FROM {models}.marketing_audience"
        " WHERE source_relation = %s"
    )
    members = rows(
        "SELECT member_id, member_status, tier_key, points_balance, ledger_points_sum,"
        " balance_matches_ledger FROM {models}.dim_members WHERE source_relation = %s"
    )
    rewards = rows(
        "SELECT reward_id, status_as_read, redemption_id FROM {models}.fct_rewards"
        " WHERE source_relation = %s"
    )
    offers = rows(
        f"SELECT offer_id, {', '.join(FUNNEL)}, has_whole_funnel"
        " FROM {models}.fct_offer_performance WHERE source_relation = %s"
    )
    return Expected(
        venue_days={(row[0], row[1]): tuple(row[2:]) for row in venue_days},
        audience={row[0]: (row[1], tuple(row[2])) for row in audience},
        members={row[0]: tuple(row[1:]) for row in members},
        rewards={row[0]: tuple(row[1:]) for row in rewards},
        offers={row[0]: tuple(row[1:]) for row in offers},
    )


def differences(label: str, expected: Mapping[Any, Any], built: Mapping[Any, Any]) -> str | None:
    """How two keyed tables differ (None: row for row equal), with a few examples."""
    if expected == built:
        return None
    missing = sorted(set(expected) - set(built), key=repr)
    extra = sorted(set(built) - set(expected), key=repr)
    changed = sorted((k for k in set(expected) & set(built) if expected[k] != built[k]), key=repr)
    parts = [f"{label}: {len(expected)} expected, {len(built)} built"]
    if missing:
        parts.append(f"{len(missing)} missing, e.g. {[(k, expected[k]) for k in missing[:3]]}")
    if extra:
        parts.append(f"{len(extra)} extra, e.g. {[(k, built[k]) for k in extra[:3]]}")
    if changed:
        examples = [(k, expected[k], built[k]) for k in changed[:3]]
        parts.append(f"{len(changed)} differ (key, expected, built), e.g. {examples}")
    return "; ".join(parts)


def compare(expected: Expected, built: Expected) -> list[str]:
    """Every mart that differs from what the truth says, described."""
    found = [
        differences("fct_venue_daily", expected.venue_days, built.venue_days),
        differences("marketing_audience", expected.audience, built.audience),
        differences("dim_members", expected.members, built.members),
        differences("fct_rewards", expected.rewards, built.rewards),
        differences("fct_offer_performance", expected.offers, built.offers),
    ]
    return [problem for problem in found if problem]


def mart_snapshot(conninfo: str, models: str, relation: str) -> dict[str, list[str]]:
    """Every row of every mart of one account (every column but built_at), as text."""
    return {
        mart: [row for row in rows if row.startswith(f"({relation},")]
        for mart, rows in model_rows(conninfo, models, MARTS).items()
    }


def rows_per_model(conninfo: str, models: str, relation: str) -> dict[str, int]:
    """Every table of the models and staging schemas holding rows of one account."""
    tables = query(
        conninfo,
        "SELECT table_schema || '.' || table_name FROM information_schema.columns"
        " WHERE table_schema IN (%s, %s) AND column_name = 'source_relation' ORDER BY 1",
        models,
        f"{models}_staging",
    )
    counts = {}
    for (table,) in tables:
        ((rows,),) = query(
            conninfo, f"SELECT count(*) FROM {table} WHERE source_relation = %s", relation
        )
        if rows:
            counts[table] = rows
    return counts


def account_statuses(conninfo: str, models: str) -> dict[str, tuple[str, str | None, bool]]:
    """guestdata_account_status: raw schema -> status, held_reasons, is_catching_up."""
    rows = query(
        conninfo,
        f"SELECT source_relation, status, held_reasons, is_catching_up"
        f" FROM {models}.guestdata_account_status",
    )
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def live_raw_guests(conninfo: str, schema: str) -> int:
    """Guests whose newest raw row is not flagged deleted: what the account's load holds."""
    ((count,),) = query(
        conninfo,
        f"SELECT count(*) FROM (SELECT DISTINCT ON (id) _sdc_deleted_at FROM {schema}.guests"
        " ORDER BY id, _sdc_batched_at DESC) AS newest WHERE _sdc_deleted_at IS NULL",
    )
    return int(count)
