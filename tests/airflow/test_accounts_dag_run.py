"""Many accounts, for real: `dag.test()` of the daily DAG built from an accounts configuration.

Four sandbox accounts in one DAG, two queues: Growth with Rewards (two keys), limited access
(contacts masked), Rewards off (its Rewards streams are skipped), and one whose key is revoked.
Each loads into its own schema with its own state ids and equals its own ground truth; the
revoked one fails its own task and nothing else. Two stream groups per account (core, rewards),
one mapped task each (small accounts: all groups in one Meltano run, every key of the
account), planned at run time, labelled with the account's name.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from dag_testing import Airflow, AirflowFactory, demo_pipeline, state_ids
from guestdata_sandbox.accounts import (
    LIMITED_ACCESS_KEY,
    OWNER_KEYS,
    REVOKED_KEY,
    REWARDS_OFF_KEY,
)
from guestdata_sandbox.testing import SandboxProcess

pytestmark = pytest.mark.airflow

STREAMS = {
    "core": ("account", "venues", "guests"),
    "rewards": ("rewards", "redemptions"),
}
BOOKKEEPING = {"core": ("read_windows",)}  # the complete reads of guests (deletions.py)
# account name -> the keys behind its key variables
KEYS = {
    "harbour": [OWNER_KEYS[0], OWNER_KEYS[1]],
    "saltmarsh": [LIMITED_ACCESS_KEY],
    "northgate": [REWARDS_OFF_KEY],
    "revoked": [REVOKED_KEY],
}
GOOD = ("harbour", "saltmarsh", "northgate")


def accounts_document(base_url: str) -> dict[str, Any]:
    def entry(name: str, **extra: Any) -> dict[str, Any]:
        keys = [f"guestdata_{name}_key_{n}" for n in range(1, len(KEYS[name]) + 1)]
        return {"name": name, "keys": keys, "groups": list(STREAMS), **extra}

    return {
        "queues": ["worker_1", "worker_2"],
        "accounts": [
            entry("harbour", base_url=base_url, size="small"),
            entry("saltmarsh", target_schema="raw_saltmarsh"),
            entry("northgate"),
            entry("revoked", groups=["core"]),
        ],
    }


def key_variables() -> dict[str, str]:
    """Every key in an Airflow Variable (AIRFLOW_VAR_<NAME>), as an operator would set them."""
    return {
        f"AIRFLOW_VAR_GUESTDATA_{name.upper()}_KEY_{n}": key
        for name, keys in KEYS.items()
        for n, key in enumerate(keys, 1)
    }


def schema_of(name: str) -> str:
    return "raw_saltmarsh" if name == "saltmarsh" else f"guestdata_{name}"


@pytest.fixture(scope="module")
def sandbox(module_sandbox: SandboxProcess) -> SandboxProcess:
    return module_sandbox  # this module's own small sandbox (tests/conftest.py)


@pytest.fixture(scope="module")
def airflow(sandbox: SandboxProcess, airflow_for: AirflowFactory) -> Airflow:
    settings = {
        "GUESTDATA_ACCOUNTS": json.dumps(accounts_document(sandbox.base_url)),
        **key_variables(),
    }
    return airflow_for(sandbox.base_url, settings)


def tables_in(database_url: str, schema: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {name for (name,) in rows}


def test_each_account_loads_its_own_schema_and_a_revoked_key_fails_only_its_task(
    airflow: Airflow, sandbox: SandboxProcess, database_url: str
) -> None:
    sandbox.clear_requests()
    run = airflow.dag_test("guestdata_meltano", check=False)

    assert run["state"] == "failed", run
    # One mapped load per account, labelled with its name; no models (two groups only).
    assert run["accounts"] == {
        **{name: {"load": "success", "dbt_build": "skipped"} for name in GOOD},
        "revoked": {"load": "failed", "dbt_build": "upstream_failed"},
    }, run
    # Airflow labels each account's task with the account's name (`dag.test()` renders the
    # label of a failed task as its map index; the scheduler's workers render it early).
    assert all(run["labels"][f"{name}.load"] == name for name in GOOD), run["labels"]
    assert set(run["tasks"]) == {"worker_1.plan", "worker_2.plan"}, run
    assert set(run["tasks"].values()) == {"success"}, run
    # Each good account its own state id; the revoked account's failed run may leave one of
    # its own (Meltano records the failed job), never anyone else's.
    ids = set(state_ids(airflow))
    good = {f"dev:tap-guestdata-to-target-postgres:{name}" for name in GOOD}
    assert good <= ids and ids - good <= {"dev:tap-guestdata-to-target-postgres:revoked"}, ids
    assert not tables_in(database_url, "guestdata_revoked")
    assert not tables_in(database_url, "guestdata"), "nothing in the single-account schema"

    for name in GOOD:
        truth = sandbox.truth(KEYS[name][0])
        expected = demo_pipeline.truth_tables(truth)
        with psycopg.connect(database_url) as connection:
            checks = [
                demo_pipeline.compare_stream(
                    stream,
                    demo_pipeline.database_rows(connection, schema_of(name), stream),
                    expected[stream],
                )
                for streams in STREAMS.values()
                for stream in streams
            ]
        assert all(check.matches for check in checks), f"{name}\n" + demo_pipeline.report(checks)
        assert checks[2].rows_in_database > 0, f"{name}: no guests loaded"
        # Only the selected groups' tables, in the account's own schema.
        loaded = tables_in(database_url, schema_of(name))
        allowed = {s for group in STREAMS for s in (*STREAMS[group], *BOOKKEEPING.get(group, ()))}
        assert loaded <= allowed, loaded
    # Rewards off: the streams are skipped (empty tables, as its truth has none), its core loads.
    with psycopg.connect(database_url) as connection:
        for schema, rewards in (("guestdata_northgate", 0), ("guestdata_harbour", None)):
            count = connection.execute(f'SELECT count(*) FROM "{schema}".rewards').fetchone()[0]
            assert count == rewards if rewards is not None else count > 0, (schema, count)

    # Each account's requests carried only its own keys; harbour's one task, both its keys.
    keys_used: dict[str, set[str]] = {}
    for request in sandbox.requests_log():
        keys_used.setdefault(request["key"], set()).add(request["path"])
    assert set(keys_used) == {key for keys in KEYS.values() for key in keys}
    assert OWNER_KEYS[1] not in airflow.output()
    print(f"\ndag.test() of four accounts: {run['seconds']:.1f} s in Airflow")
