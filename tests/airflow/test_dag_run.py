"""The DAGs run for real with `dag.test()`: sandbox -> Meltano -> a throwaway PostgreSQL database.

First, in order: the daily DAG (one task, all five groups, three keys) loads every table
equal to the sandbox's truth, its requests spread over all three keys, saving the plain state id
and publishing every group's asset; the transform DAG (scheduled on those assets) then builds the
models into the same database; then a guest's marketing consent flips in the sandbox and the
weekly refresh DAG brings the warehouse up to date. Then a backfill of three days long past
reloads each run's own day (its data interval), leaving the daily state alone. The warehouse's
credentials come from a `postgres` Airflow connection alone (`warehouse_connection_id`): the
workers' environment names no server, user, password or database. Airflow: a throwaway
AIRFLOW_HOME and SQLite metadata database, migrated with `airflow db migrate`; every Airflow
process is a subprocess (see dag_testing.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import psycopg
import pytest
from psycopg import sql

from dag_testing import (
    DAG_TEST_PYTEST_TIMEOUT,
    PROJECT_ROOT,
    Airflow,
    AirflowFactory,
    demo_pipeline,
    meltano_state,
    state_ids,
)
from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.rules import london_today  # the day the truth's stats run to
from guestdata_sandbox.testing import SandboxProcess

pytestmark = [pytest.mark.airflow, DAG_TEST_PYTEST_TIMEOUT]

# Three keys, every task uses them all. Two come from Airflow Variables, one from a plain
# environment variable of the worker.
KEY_SETTINGS = {
    "GUESTDATA_API_KEY_VARIABLES": "guestdata_api_key_1,guestdata_api_key_2,GUESTDATA_TEST_KEY_3",
    "AIRFLOW_VAR_GUESTDATA_API_KEY_1": OWNER_KEYS[0],
    "AIRFLOW_VAR_GUESTDATA_API_KEY_2": OWNER_KEYS[1],
    "GUESTDATA_TEST_KEY_3": OWNER_KEYS[2],
}
# Request paths (sandbox log, without the base path) that only one group reads.
GROUP_OF_PATH = {
    "/guests": "core",
    "/rewards/members": "members",
    "/rewards/rewards": "rewards",
    "/rewards/redemptions": "rewards",
    "/rewards/offers": "offers",
    "/stats": "stats",
}
GROUPS = ("core", "members", "rewards", "offers", "stats")
KEYS = set(OWNER_KEYS[:3])
DAILY_STATE_ID = "dev:tap-guestdata-to-target-postgres"  # the single task's plain state id
WAREHOUSE_CONNECTION = "guestdata_warehouse"
# The local server trusts its users, so no password is checked; one is given so that the test can
# look for it where it must not be.
WAREHOUSE_PASSWORD = "warehouse-pw-3f9c1a"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    """This module's own sandbox: the test mutates it."""
    with SandboxProcess(size="small", seed=23, limits=False) as server:
        yield server


@pytest.fixture(scope="module")
def airflow(
    sandbox: SandboxProcess,
    airflow_for: AirflowFactory,
    postgres: demo_pipeline.Destination,
    database: str,
) -> Airflow:
    airflow = airflow_for(sandbox.base_url, KEY_SETTINGS)
    # The warehouse from the connection alone. Without it the loads would go where meltano.yml's
    # dev environment points (database guestdata), not to this module's throwaway database.
    for name in ("HOST", "PORT", "USER", "PASSWORD", "DATABASE", "SQLALCHEMY_URL"):
        airflow.env.pop(f"TARGET_POSTGRES_{name}", None)
    connection = {
        "conn_type": "postgres",
        "host": postgres.host,
        "port": postgres.port,
        "login": postgres.user,
        "password": postgres.password or WAREHOUSE_PASSWORD,
        "schema": database,
    }
    airflow.env[f"AIRFLOW_CONN_{WAREHOUSE_CONNECTION.upper()}"] = json.dumps(connection)
    airflow.env["GUESTDATA_WAREHOUSE_CONNECTION_ID"] = WAREHOUSE_CONNECTION
    return airflow


def files_holding(secret: str, *folders: Path) -> list[str]:
    """Files under `folders` whose bytes hold `secret` (plugin virtualenvs and links not read)."""
    found = []
    for folder in folders:
        for parent, dirs, files in os.walk(folder, followlinks=False):
            dirs[:] = [d for d in dirs if d not in ("venv", "venvs", ".venv")]
            for name in files:
                path = Path(parent, name)
                if not path.is_symlink() and secret.encode() in path.read_bytes():
                    found.append(str(path))
    return found


# The London day on which this module's last load of today's stats began (set by each load).
stats_loaded_on: list[date] = []


def as_loaded(database_url: str, truth: dict[str, Any]) -> dict[str, Any]:
    """The truth as far as the last stats load could read: the sandbox's stats go on to its
    clock's today (spec 2.4), so after a London midnight the truth has a day no load has read
    yet. Only days after the one that load began on may be left out."""
    with psycopg.connect(database_url) as connection:
        (read_through,) = connection.execute(
            sql.SQL("SELECT max(date)::date FROM {}").format(
                sql.Identifier(demo_pipeline.TARGET_SCHEMA, "daily_account_stats")
            )
        ).fetchone()
    assert read_through >= stats_loaded_on[-1], (read_through, stats_loaded_on)
    return {
        stream: [row for row in rows if row["date"] <= str(read_through)]
        if stream in ("daily_stats", "daily_account_stats")
        else rows
        for stream, rows in truth.items()
    }


def check_against_truth(database_url: str, truth: dict[str, Any]) -> None:
    truth = as_loaded(database_url, truth)
    checks = demo_pipeline.check_database(database_url, truth, demo_pipeline.TARGET_SCHEMA)
    assert all(check.matches for check in checks), "\n" + demo_pipeline.report(checks)
    assert sum(check.rows_in_database for check in checks) > 0


def check_models_against_truth(database_url: str, truth: dict[str, Any]) -> None:
    """The marts exist in the loads' database, in <raw schema>_analytics; venue days as the API."""
    schema = f"{demo_pipeline.TARGET_SCHEMA}_analytics"
    with psycopg.connect(database_url) as connection:
        query = sql.SQL("SELECT venue_id, date::text, visits FROM {}").format(
            sql.Identifier(schema, "fct_venue_daily")
        )
        built = {(venue, day): visits for venue, day, visits in connection.execute(query)}
    daily_stats = as_loaded(database_url, truth)["daily_stats"]
    expected = {(row["venue_id"], row["date"]): row["visits"] for row in daily_stats}
    assert built == expected


def table_assets(database_url: str, schema: str, names: list[str] | None = None) -> list[str]:
    """The Asset URI of each table of `schema` (default: every one it holds), as the DAGs
    publish them: postgres://host:port/database/schema/table (docs/airflow-lineage.md)."""
    where = psycopg.conninfo.conninfo_to_dict(database_url)
    if names is None:
        with psycopg.connect(database_url) as connection:
            rows = connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
            names = [name for (name,) in rows]
    prefix = f"postgres://{where['host']}:{where.get('port') or 5432}/{where['dbname']}/{schema}"
    return sorted(f"{prefix}/{name}" for name in names)


def keys_by_group(sandbox: SandboxProcess) -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}
    for request in sandbox.requests_log():
        for prefix, group in GROUP_OF_PATH.items():
            if request["path"].startswith(prefix):
                used.setdefault(group, set()).add(request["key"])
    return used


def test_dags_load_the_warehouse_and_the_weekly_refresh_updates_consent(
    airflow: Airflow, sandbox: SandboxProcess, database_url: str
) -> None:
    sandbox.clear_requests()

    started = time.monotonic()
    stats_loaded_on.append(london_today())
    daily = airflow.dag_test("guestdata_meltano")
    daily_seconds = time.monotonic() - started
    assert daily["state"] == "success", daily
    # A single account is a plan of one: the queue's plan task, one mapped load.
    assert daily["tasks"] == {"default.plan": "success"}
    assert daily["accounts"] == {"guestdata": {"load": "success"}}
    assert daily["labels"] == {"guestdata.load": "guestdata"}
    check_against_truth(database_url, sandbox.truth(OWNER_KEYS[0]))
    used = keys_by_group(sandbox)
    assert set(used) == set(GROUPS)
    assert set().union(*used.values()) == KEYS, "one task, every key at work"
    assert all(keys <= KEYS for keys in used.values())
    assert state_ids(airflow) == ["dev:tap-guestdata-to-target-postgres"]
    # Each group's asset, and one per raw table the loads wrote (every stream: 15 tables).
    assert daily["assets_published"] == sorted(
        [f"guestdata_raw_{group}" for group in GROUPS]
        + table_assets(database_url, demo_pipeline.TARGET_SCHEMA)
    )

    # What the scheduler does once all five assets are updated: the transform DAG's run.
    started = time.monotonic()
    transform = airflow.dag_test("guestdata_transform")
    transform_seconds = time.monotonic() - started
    assert transform == {**transform, "state": "success", "tasks": {"dbt_build": "success"}}
    # `guestdata_models`, and one per model of transform/models (staging in <schema>_staging).
    models_schema = f"{demo_pipeline.TARGET_SCHEMA}_analytics"
    models = [
        table_assets(database_url, f"{models_schema}_staging", [path.stem])[0]
        if path.parent.name == "staging"
        else table_assets(database_url, models_schema, [path.stem])[0]
        for path in (PROJECT_ROOT / "transform/models").rglob("*.sql")
    ]
    assert transform["assets_published"] == sorted(["guestdata_models", *models])
    check_models_against_truth(database_url, sandbox.truth(OWNER_KEYS[0]))

    # A consent change leaves the guest's place in the API's order as it was; the weekly full
    # refresh reads every guest again.
    guest = sandbox.truth(OWNER_KEYS[0], "guests")[-1]
    sandbox.mutate(
        "set_marketing_consent", guest_id=guest["id"], value=not guest["marketing_consent"]
    )
    sandbox.clear_requests()
    started = time.monotonic()
    stats_loaded_on.append(london_today())
    refresh = airflow.dag_test("guestdata_meltano_weekly_refresh")
    refresh_seconds = time.monotonic() - started
    assert refresh == {**refresh, "state": "success", "tasks": {"default.plan": "success"}}
    assert refresh["accounts"] == {"guestdata": {"load": "success"}}
    with psycopg.connect(database_url) as connection:
        consent = connection.execute(
            sql.SQL("SELECT marketing_consent FROM {} WHERE id = %s").format(
                sql.Identifier(demo_pipeline.TARGET_SCHEMA, "guests")
            ),
            (guest["id"],),
        ).fetchone()
    assert consent == (not guest["marketing_consent"],)
    check_against_truth(database_url, sandbox.truth(OWNER_KEYS[0]))
    used = keys_by_group(sandbox)
    assert set(used) == {"core", "stats"}, used  # guests and stats only
    assert set().union(*used.values()) <= KEYS
    refreshed = ["guests", "read_windows", "daily_stats", "daily_account_stats"]
    assert refresh["assets_published"] == sorted(
        [
            "guestdata_raw_refresh",
            *table_assets(database_url, demo_pipeline.TARGET_SCHEMA, refreshed),
        ]
    )
    assert "dev:tap-guestdata-to-target-postgres:refresh" in state_ids(airflow)

    # Keys reach Meltano through the environment only, never through the DAG's output; the
    # task's log is the tap's own lines (its plan, its progress).
    output = airflow.output()
    assert OWNER_KEYS[1] not in output
    # The load and the build had the warehouse from its connection, and left its password in
    # no log and no file (Airflow's home, the Meltano project's system directory).
    assert output.count(f"warehouse: credentials from connection {WAREHOUSE_CONNECTION}") >= 3
    password = json.loads(airflow.env[f"AIRFLOW_CONN_{WAREHOUSE_CONNECTION.upper()}"])["password"]
    assert password not in output
    assert files_holding(password, airflow.home, PROJECT_ROOT / ".meltano") == []
    assert "requests in all" in output and "Plan: guests:" in output, "the tap's lines"
    print(
        f"\ndag.test(): daily DAG {daily_seconds:.1f} s (in Airflow {daily['seconds']:.1f} s), "
        f"transform {transform_seconds:.1f} s, "
        f"weekly refresh {refresh_seconds:.1f} s (in Airflow {refresh['seconds']:.1f} s)"
    )


def dated_requests(sandbox: SandboxProcess) -> list[tuple[str, str, str]]:
    """(path, from, to) of every request in the sandbox's log with a date window, in order."""
    dated = []
    for request in sandbox.requests_log():
        query = parse_qs(request["query"])
        if "from" in query or "to" in query:
            dated.append((request["path"], query["from"][0], query["to"][0]))
    return dated


def test_a_backfill_of_three_days_reloads_each_runs_own_interval(
    airflow: Airflow, sandbox: SandboxProcess, database_url: str
) -> None:
    """`airflow backfill create` over the daily DAG, for three London days 100 days ago, of
    guests and stats (the run's params): each run reads its own day, under a state id of its
    own; the daily state stays as it was."""
    today = london_today()
    days = [today - timedelta(days=100 - n) for n in range(3)]
    daily_state = meltano_state(airflow, DAILY_STATE_ID)
    sandbox.clear_requests()

    result = airflow.dag_test(
        "guestdata_meltano",
        run={
            # A schedule at 05:00 UTC: the runs whose intervals start on these days.
            "backfill": {"from": f"{days[0]}T00:00:00+00:00", "to": f"{days[-1]}T23:59:00+00:00"},
            "conf": {"reload_streams": ["core", "stats"]},
        },
    )

    runs = result["runs"]
    assert [run["data_interval"] for run in runs] == [
        [f"{day} 05:00:00+00:00", f"{day + timedelta(days=1)} 05:00:00+00:00"] for day in days
    ]
    assert all(run["run_type"] == "backfill" for run in runs), runs
    assert all(run["accounts"] == {"guestdata": {"load": "success"}} for run in runs), runs
    # Only those days' requests, one run after the other, each its own day.
    dated = dated_requests(sandbox)
    assert [window for _, *window in dated] == sorted(window for _, *window in dated)
    assert {(first, last) for _, first, last in dated} == {(str(d), str(d)) for d in days}
    paths = {path for path, _, _ in dated}
    assert paths == {"/guests", "/stats"}, "guests and stats only, as the params chose"
    truth = sandbox.truth(OWNER_KEYS[0])
    for day in days:
        venue_days = sum(1 for row in truth["daily_stats"] if row["date"] == str(day))
        stats = [r for r in dated if r[0] == "/stats" and r[1] == str(day)]
        assert len(stats) == venue_days + 1, f"{day}: one per venue, one for the account"
    # The daily state is untouched; each run saved its own.
    assert meltano_state(airflow, DAILY_STATE_ID) == daily_state
    assert {f"{DAILY_STATE_ID}:reload-{day}-{day}" for day in days} <= set(state_ids(airflow))
    check_against_truth(database_url, truth)
