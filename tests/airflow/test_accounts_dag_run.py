"""Many accounts, for real: `dag.test()` of the daily DAG built from an accounts configuration.

Eight sandbox accounts in one DAG, two queues, and Airflow's `max_map_length` at 3: Growth with
Rewards (two keys), three more owner keys of it as accounts of their own, limited access
(contacts masked), Rewards off (its Rewards streams are skipped), a plan without Rewards (core
alone), and one whose key is revoked. Each queue's plan returns its accounts in batches (never
more than 3), each batch one mapped task labelled with its accounts' names. Each account loads
into its own schema with its own state ids and equals its own ground truth; the revoked one
fails its batch's task, which names it, and the task's retry runs it alone: every other account
is loaded once. Stream groups core and rewards (small accounts: all groups in one Meltano run,
every key of the account).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from dag_testing import Airflow, AirflowFactory, demo_pipeline, state_ids
from guestdata_sandbox.accounts import (
    LIMITED_ACCESS_KEY,
    NO_REWARDS_PLAN_KEY,
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
    "quay": [OWNER_KEYS[2]],
    "pier": [OWNER_KEYS[3]],
    "dock": [OWNER_KEYS[4]],
    "meadow": [NO_REWARDS_PLAN_KEY],
}
CORE_ONLY = ("revoked", "meadow")
GOOD = tuple(name for name in KEYS if name != "revoked")
MAX_MAP_LENGTH = 3


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
            entry("quay"),
            entry("pier"),
            entry("dock"),
            entry("meadow", groups=["core"]),
        ],
    }


def groups_of(name: str) -> list[str]:
    return ["core"] if name in CORE_ONLY else list(STREAMS)


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
        "AIRFLOW__CORE__MAX_MAP_LENGTH": str(MAX_MAP_LENGTH),
        # One retry, at once: a failed batch's retry runs its failed accounts alone.
        "GUESTDATA_RETRIES": "1",
        "GUESTDATA_RETRY_DELAY_MINUTES": "0",
    }
    return airflow_for(sandbox.base_url, settings)


def tables_in(database_url: str, schema: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {name for (name,) in rows}


def test_accounts_load_in_batches_and_a_revoked_key_fails_only_its_account(
    airflow: Airflow, sandbox: SandboxProcess, database_url: str
) -> None:
    sandbox.clear_requests()
    run = airflow.dag_test("guestdata_meltano", check=False)

    assert run["state"] == "failed", run
    # Per queue at most MAX_MAP_LENGTH mapped batches, labelled with their accounts' names.
    batches = [
        label.removesuffix(".load").split(", ") for label in run["labels"] if ".load" in label
    ]
    assert sorted(name for batch in batches for name in batch) == sorted(KEYS)
    assert len(batches) <= 2 * MAX_MAP_LENGTH and max(map(len, batches)) > 1, batches
    (failed_batch,) = [batch for batch in batches if "revoked" in batch]
    assert len(failed_batch) > 1, "the revoked account shares its batch: it fails it alone"
    for batch in batches:
        label = run["labels"][f"{', '.join(batch)}.load"]
        assert batch == failed_batch or label == ", ".join(batch), run["labels"]
    # The failed batch's task, and only it, fails; no models (two groups only).
    assert run["accounts"] == {
        name: {"load": "failed", "dbt_build": "upstream_failed"}
        if name in failed_batch
        else {"load": "success", "dbt_build": "skipped"}
        for name in KEYS
    }, run
    assert set(run["tasks"]) == {"worker_1.plan", "worker_2.plan"}, run
    assert set(run["tasks"].values()) == {"success"}, run
    # The task names the failed account; its retry ran it alone (the others: done).
    output = airflow.output()
    assert (
        "1 of 2 failed: revoked" in output or f"1 of {len(failed_batch)} failed: revoked" in output
    )
    account_reads: dict[str, int] = {}
    for request in sandbox.requests_log():
        if request["path"] == "/me":
            account_reads[request["key"]] = account_reads.get(request["key"], 0) + 1
    for name in GOOD:
        reads = sum(account_reads.get(key, 0) for key in KEYS[name])
        assert reads == 1, f"{name}: loaded {reads} times"
    for partner in set(failed_batch) - {"revoked"}:
        assert f"{partner}: done by an earlier try of this task" in output, "retried alone"
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
                for group in groups_of(name)
                for stream in STREAMS[group]
            ]
        assert all(check.matches for check in checks), f"{name}\n" + demo_pipeline.report(checks)
        assert checks[2].rows_in_database > 0, f"{name}: no guests loaded"
        # Only the selected groups' tables, in the account's own schema.
        loaded = tables_in(database_url, schema_of(name))
        allowed = {
            s for group in groups_of(name) for s in (*STREAMS[group], *BOOKKEEPING.get(group, ()))
        }
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
    print(f"\ndag.test() of eight accounts in {len(batches)} batches: {run['seconds']:.1f} s")
