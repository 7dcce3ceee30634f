"""Many accounts, for real: `dag.test()` of the daily DAG built from an accounts configuration.

Eight sandbox accounts in one DAG, two queues, and Airflow's `max_map_length` at 3: Growth with
Rewards (two keys), three more owner keys of it as accounts of their own, limited access
(contacts masked), Rewards off (its Rewards streams are skipped), a plan without Rewards (core
alone), and one whose key is revoked. Each queue's plan returns its accounts in batches (never
more than 3), each batch one mapped task labelled with its accounts' names. Each account loads
into its own schema with its own state ids and equals its own ground truth; the revoked one
fails its batch's task, which names it, and the task's retry runs it alone: every other account
is loaded once. Stream groups: harbour every one (so the models have every raw table),
saltmarsh and northgate core and rewards, the others core (small accounts: all groups in one
Meltano run, every key of the account).

Then the run's one `dbt build` (after every load, the revoked one's failure included) builds
every account's models into one schema: each loaded account's `fct_venue_daily` equals its
truth; the revoked account, never loaded, is not in them; saltmarsh, loaded outside the
`guestdata_` schemas, is not either, and the build's log says so. The run fails (its load did).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dag_testing import DAG_TEST_PYTEST_TIMEOUT, Airflow, AirflowFactory, demo_pipeline, state_ids
from guestdata_sandbox.accounts import (
    LIMITED_ACCESS_KEY,
    NO_REWARDS_PLAN_KEY,
    OWNER_KEYS,
    REVOKED_KEY,
    REWARDS_OFF_KEY,
)
from guestdata_sandbox.testing import SandboxProcess
from support.streams import assert_tables_equal_truth, truth_today

pytestmark = [pytest.mark.airflow, DAG_TEST_PYTEST_TIMEOUT]

STREAMS = {
    "core": ("account", "venues", "guests"),
    "rewards": ("rewards", "redemptions"),
}
BOOKKEEPING = {"core": ("read_windows",)}  # the complete reads of guests (stream/deletions.py)
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
# harbour loads every group: the models need each raw table in some account's schema. An
# account with rewards but not members and offers would fail the models' relationship tests.
GROUPS_OF = {
    "harbour": ["core", "members", "rewards", "offers", "stats"],
    "saltmarsh": ["core", "rewards"],
    "northgate": ["core", "rewards"],
}
FULL = "harbour"
MODELS_SCHEMA = "guestdata_analytics"  # the one build's (plan.MODELS_SCHEMA)
GOOD = tuple(name for name in KEYS if name != "revoked")
MAX_MAP_LENGTH = 3


def accounts_document(base_url: str) -> dict[str, Any]:
    def entry(name: str, **extra: Any) -> dict[str, Any]:
        keys = [f"guestdata_{name}_key_{n}" for n in range(1, len(KEYS[name]) + 1)]
        groups = GROUPS_OF.get(name, ["core"])
        return {"name": name, "keys": keys, "groups": groups, **extra}

    return {
        "queues": ["worker_1", "worker_2"],
        "accounts": [
            entry("harbour", base_url=base_url, size="small"),
            entry("saltmarsh", target_schema="raw_saltmarsh"),
            entry("northgate"),
            entry("revoked"),
            entry("quay"),
            entry("pier"),
            entry("dock"),
            entry("meadow"),
        ],
    }


def groups_of(name: str) -> list[str]:
    """The groups checked against the truth (harbour's others: through the models)."""
    return [group for group in GROUPS_OF.get(name, ["core"]) if group in STREAMS]


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
    # The failed batch's task, and only it, fails; the one build still runs after every load,
    # and all_loaded fails the run.
    assert run["accounts"] == {
        name: {"load": "failed" if name in failed_batch else "success"} for name in KEYS
    }, run
    assert run["tasks"] == {
        "worker_1.plan": "success",
        "worker_2.plan": "success",
        "dbt_build": "success",
        "all_loaded": "upstream_failed",
    }, run
    assert run["assets_published"].count("guestdata_models") == 1, run
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
    # The build heard of the failed load; with no schema of its own it has nothing to hold.
    assert "loads failed in this run, their marts held: guestdata_revoked" in output
    # What the retry read (the batch's done accounts) is gone once no try is left to read it.
    assert not [key for key in run["variables"] if key.startswith("guestdata_done_")], run
    # Each good account its own state id; the revoked account's failed run may leave one of
    # its own (Meltano records the failed job), never anyone else's.
    ids = set(state_ids(airflow))
    good = {f"dev:tap-guestdata-to-target-postgres:{name}" for name in GOOD}
    assert good <= ids and ids - good <= {"dev:tap-guestdata-to-target-postgres:revoked"}, ids
    assert not tables_in(database_url, "guestdata_revoked")
    assert not tables_in(database_url, "guestdata"), "nothing in the single-account schema"

    for name in GOOD:
        truth = sandbox.truth(KEYS[name][0])
        with psycopg.connect(database_url) as connection:
            tables = {
                stream: demo_pipeline.database_rows(connection, schema_of(name), stream)
                for group in groups_of(name)
                for stream in STREAMS[group]
            }
        checks = assert_tables_equal_truth(tables, truth, label=name)
        assert checks[2].rows_in_database > 0, f"{name}: no guests loaded"
        # Only the selected groups' tables, in the account's own schema.
        loaded = tables_in(database_url, schema_of(name))
        allowed = {
            s for group in groups_of(name) for s in (*STREAMS[group], *BOOKKEEPING.get(group, ()))
        }
        assert loaded <= allowed or name == FULL, loaded
        assert name != FULL or {"members", "offers", "daily_stats"} <= loaded, loaded
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
    check_models(database_url, sandbox, output)
    print(f"\ndag.test() of eight accounts in {len(batches)} batches: {run['seconds']:.1f} s")


def check_models(database_url: str, sandbox: SandboxProcess, output: str) -> None:
    """The one build: every loaded account of the pattern in one models schema, as its truth;
    the revoked account (its load failed, nothing earlier) and saltmarsh (outside) absent."""
    with psycopg.connect(database_url) as connection:
        query = sql.SQL("SELECT account_name, venue_id, date::text, visits FROM {}").format(
            sql.Identifier(MODELS_SCHEMA, "fct_venue_daily")
        )
        built: dict[str | None, dict[tuple[str, str], int]] = {}
        for account, venue, day, visits in connection.execute(query):
            built.setdefault(account, {})[(venue, day)] = visits
    modelled = [name for name in GOOD if schema_of(name).startswith("guestdata_")]
    assert sorted(built, key=str) == sorted(modelled), "every loaded account, the others not"
    for name in modelled:
        truth = sandbox.truth(KEYS[name][0])
        expected = {(row["venue_id"], row["date"]): row["visits"] for row in truth["daily_stats"]}
        today = truth_today(truth)  # as_of_the_truth
        assert {key: n for key, n in built[name].items() if key[1] <= today} == expected, name
    # The models' schemas match the pattern too: the build did not read them as raw.
    assert "not in the models (their raw schema is outside guestdata\\_%): saltmarsh" in output
    assert "dbt build" in output or "dbt-postgres" in output
