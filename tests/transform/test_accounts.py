"""One set of models for two accounts whose ids collide (docs/transform.md "Across accounts").

The module's load (raw schema `guestdata`) and a second account's load of the same ids (raw
schema `guestdata_twin`), built once into one models schema from every raw schema matching
`guestdata%`. Each account's rows equal its truth; a full refresh, a deletion followed and an
erasure in the twin leave the first account's rows exactly as they were.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    MARTS,
    RAW_SCHEMA,
    REFRESH_LOAD_ONLY,
    RUN_ALL,
    Dbt,
    dbt_env,
    expected_venue_daily,
    meltano_project,
    model_rows,
    person_to_erase,
    query,
)
from support.pipeline import MeltanoProject

pytestmark = pytest.mark.e2e

TWIN = "guestdata_twin"
MODELS = "guestdata_every_account"
EVERY_ACCOUNT = {"GUESTDATA_RAW_SCHEMAS": "guestdata%", "GUESTDATA_DBT_SCHEMA": MODELS}


@pytest.fixture(scope="module")
def twin(
    loaded: MeltanoProject,
    sandbox: SandboxProcess,
    pg_server: Any,
    e2e_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    """The same ids loaded again as another account's raw schema."""
    project = meltano_project(
        sandbox,
        pg_server,
        e2e_database,
        tmp_path_factory.mktemp("dbt-target-twin"),
        tmp_path_factory.mktemp("logs-twin"),
        TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA=TWIN,
    )
    project.run(*RUN_ALL)
    return project


def every_account_dbt(
    pg_server: Any, database: str, target_dir: Path, raw_schema: str = RAW_SCHEMA
) -> Dbt:
    env = {**dbt_env(pg_server, database, raw_schema), **EVERY_ACCOUNT}
    env["DBT_LOG_PATH"] = str(target_dir / "logs")
    return Dbt(env=env, target_dir=target_dir)


@pytest.fixture(scope="module")
def every_account(
    twin: MeltanoProject,
    pg_server: Any,
    e2e_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Dbt:
    return every_account_dbt(pg_server, e2e_database, tmp_path_factory.mktemp("dbt-every"))


def rows_of(conninfo: str, account: str) -> dict[str, list[str]]:
    """Every mart's rows of one account (source_relation is each row's first column)."""
    return {
        mart: [row for row in rows if row.startswith(f"({account},")]
        for mart, rows in model_rows(conninfo, MODELS, MARTS).items()
    }


def venue_days(conninfo: str, account: str) -> dict[tuple[int, str], tuple[int, int, int]]:
    rows = query(
        conninfo,
        f"SELECT venue_id, date::text, visits, unique_guests, marketing_opt_ins "
        f"FROM {MODELS}.fct_venue_daily WHERE source_relation = %s AND has_api_stats",
        account,
    )
    return {(row[0], row[1]): (row[2], row[3], row[4]) for row in rows}


def test_one_build_holds_both_accounts_each_equal_to_its_truth(
    every_account: Dbt, sandbox: SandboxProcess, conninfo: str
) -> None:
    run = every_account.build()
    assert run.returncode == 0, run.output[-3000:]
    assert set(run.statuses("test").values()) == {"pass"}
    truth = sandbox.truth(OWNER_KEYS[0])
    accounts = query(
        conninfo,
        f"SELECT source_relation, account_id, account_name FROM {MODELS}_staging."
        "stg_guestdata__account ORDER BY source_relation",
    )
    account_id = truth["account"]["account_id"]
    assert accounts == [(RAW_SCHEMA, account_id, None), (TWIN, account_id, "twin")]
    expected = expected_venue_daily(truth)
    for account in (RAW_SCHEMA, TWIN):
        built = venue_days(conninfo, account)
        assert {key: built[key] for key in expected} == expected, account
    # The same guest ids in both accounts, each once per account.
    assert query(
        conninfo,
        f"SELECT count(*), count(DISTINCT guest_visit_id) "
        f"FROM {MODELS}_staging.stg_guestdata__guests",
    ) == [(2 * len(truth["guests"]), len(truth["guests"]))]


def test_a_full_refresh_a_deletion_and_an_erasure_in_one_account_leave_the_other_unchanged(
    every_account: Dbt,
    twin: MeltanoProject,
    sandbox: SandboxProcess,
    pg_server: Any,
    e2e_database: str,
    conninfo: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    first_before = rows_of(conninfo, RAW_SCHEMA)
    twin_before = rows_of(conninfo, TWIN)
    guests = sandbox.truth(OWNER_KEYS[0], "guests")
    person = person_to_erase(sandbox)
    deleted = next(g for g in guests if g["email"].lower() != person.email)
    sandbox.mutate("delete_guest", guest_id=deleted["id"])
    twin.run(*REFRESH_LOAD_ONLY)  # the twin's full refresh, which follows the deletion
    erase_in_twin = every_account_dbt(
        pg_server, e2e_database, tmp_path_factory.mktemp("dbt-erase-twin"), raw_schema=TWIN
    )
    erased = erase_in_twin.run(
        "run-operation", "erase_person", extra_env={"GUESTDATA_ERASE_IDENTIFIER": person.email}
    )
    assert erased.returncode == 0, erased.output[-3000:]
    run = every_account.build()
    assert run.returncode == 0, run.output[-3000:]

    assert rows_of(conninfo, RAW_SCHEMA) == first_before
    assert rows_of(conninfo, TWIN) != twin_before
    visits = f"SELECT sum(visits) FROM {MODELS}.fct_venue_daily WHERE source_relation = %s"
    assert query(conninfo, visits, RAW_SCHEMA) == [(len(guests),)]
    assert query(conninfo, visits, TWIN) == [(len(guests) - 1,)]
    audience = (
        f"SELECT source_relation FROM {MODELS}.marketing_audience WHERE contact_key = %s "
        "ORDER BY source_relation"
    )
    assert query(conninfo, audience, person.email) == [(RAW_SCHEMA,)]


def test_the_pattern_leaves_out_schemas_without_the_account_table(
    every_account: Dbt, conninfo: str
) -> None:
    """The models' own schemas match guestdata% too; only raw schemas hold `account`."""
    assert query(
        conninfo,
        f"SELECT DISTINCT source_relation FROM {MODELS}_staging.stg_guestdata__venues "
        "ORDER BY source_relation",
    ) == [(RAW_SCHEMA,), (TWIN,)]
