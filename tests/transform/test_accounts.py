"""One set of models for two accounts whose ids collide (docs/transform.md "Across accounts").

The sandbox serves account 1006 (`--colliding-account`): its own data under account 1001's ids.
The module's load of 1001 (raw schema `guestdata`) and 1006's load (raw schema
`guestdata_twin`) are built once into one models schema from every raw schema matching
`guestdata%`. Each account's rows equal its own truth; a full refresh, a deletion followed and an
erasure in the twin leave the first account's rows exactly as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from guestdata_sandbox.accounts import COLLIDING_ACCOUNT, COLLIDING_KEY, OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    LOAD_ONLY,
    MARTS,
    RAW_SCHEMA,
    REFRESH_LOAD_ONLY,
    Dbt,
    dbt_env,
    expected_venue_daily,
    meltano_project,
    model_rows,
    person_to_erase,
    query,
)
from support.pipeline import MeltanoProject
from support.sandbox import this_instant

pytestmark = pytest.mark.e2e

TWIN = "guestdata_twin"
MODELS = "guestdata_every_account"
# A batch of 1 byte: every account's select a view of its own, as thousands of accounts' are cut
# into views (macros/accounts.sql, bounded_union_all), and every hook one account a statement;
# the builds of one account, and the Airflow and Snowflake tests of several, put them whole.
EVERY_ACCOUNT = {
    "GUESTDATA_RAW_SCHEMAS": "guestdata%",
    "GUESTDATA_DBT_SCHEMA": MODELS,
    "GUESTDATA_STATEMENT_BATCH_BYTES": "1",
}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    """The module's sandbox (tests/transform/conftest.py's, as of the module's start), serving
    the colliding account too."""
    with SandboxProcess(
        size="small", seed=31, limits=False, colliding_account=True, as_of=this_instant()
    ) as server:
        yield server


@pytest.fixture(scope="module")
def load_job() -> tuple[str, ...]:
    """Each account's load alone, as the accounts DAG runs them: one build of every account
    follows (`every_account`); a build of each account's own would go unread."""
    return LOAD_ONLY


@pytest.fixture(scope="module")
def twin(
    loaded: MeltanoProject,
    sandbox: SandboxProcess,
    pg_server: Any,
    e2e_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    """Account 1006, whose ids are the module's account's, in a raw schema of its own."""
    project = meltano_project(
        sandbox,
        pg_server,
        e2e_database,
        tmp_path_factory.mktemp("dbt-target-twin"),
        tmp_path_factory.mktemp("logs-twin"),
        TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA=TWIN,
        TAP_GUESTDATA_API_KEY=COLLIDING_KEY,
    )
    project.run(*LOAD_ONLY)
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
    truth = {RAW_SCHEMA: sandbox.truth(OWNER_KEYS[0]), TWIN: sandbox.truth(COLLIDING_KEY)}
    accounts = query(
        conninfo,
        f"SELECT source_relation, account_id, account_name FROM {MODELS}_staging."
        "stg_guestdata__account ORDER BY source_relation",
    )
    first_id = truth[RAW_SCHEMA]["account"]["account_id"]
    assert accounts == [(RAW_SCHEMA, first_id, None), (TWIN, COLLIDING_ACCOUNT, "twin")]
    for account, its_truth in truth.items():
        expected = expected_venue_daily(its_truth)
        built = venue_days(conninfo, account)
        assert expected and {key: built[key] for key in expected} == expected, account
        guests = query(
            conninfo,
            f"SELECT guest_visit_id, email FROM {MODELS}_staging.stg_guestdata__guests "
            "WHERE source_relation = %s ORDER BY guest_visit_id",
            account,
        )
        assert guests == sorted((g["id"], g["email"]) for g in its_truth["guests"]), account
    # The ids collide: every guest id of the twin is also one of the first account's.
    twin_ids = {g["id"] for g in truth[TWIN]["guests"]}
    assert twin_ids and twin_ids <= {g["id"] for g in truth[RAW_SCHEMA]["guests"]}
    # Each account's selects were views of their own (EVERY_ACCOUNT), and none is left.
    logged = (every_account.target_dir / "logs" / "dbt.log").read_text()
    for union in (
        "stg_guestdata__members__union_members",
        "stg_guestdata__guest_reads__union_read_windows",
        "stg_guestdata__guest_reads__union_guests_held",
        # cut to 57 characters, and `_<n>`: PostgreSQL's names end at 63
        "stg_guestdata__daily_account_stats__union_daily_account_s",
    ):
        assert f'{union}_2" as' in logged and f'{union}_3"' not in logged, union
    assert not query(
        conninfo, "SELECT viewname FROM pg_views WHERE schemaname LIKE %s", f"{MODELS}%"
    )


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
    twin_guests = sandbox.truth(COLLIDING_KEY, "guests")
    person = person_to_erase(sandbox, COLLIDING_KEY)
    # a twin guest whose id the first account holds too, not the person erased below
    deleted = next(g for g in twin_guests if g["email"].lower() != person.email)
    audience = f"SELECT count(*) FROM {MODELS}.marketing_audience WHERE source_relation = %s"
    in_audience = audience + " AND contact_key = %s"
    assert query(conninfo, in_audience, TWIN, person.email) == [(1,)]
    sandbox.mutate("delete_guest", guest_id=deleted["id"], account_id=COLLIDING_ACCOUNT)
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

    # Only the twin had new raw rows: the build read its schema alone, and the first account
    # keeps what its last build made (macros/changed_accounts.sql).
    assert "accounts with new raw rows: 1 of 2" in run.output
    members = (
        every_account.target_dir / "compiled/guestdata/models/staging/stg_guestdata__members.sql"
    ).read_text()
    assert f'"{TWIN}"."members" as raw_table' in members
    assert f'"{RAW_SCHEMA}"."members" as raw_table' not in members
    assert rows_of(conninfo, RAW_SCHEMA) == first_before
    assert rows_of(conninfo, TWIN) != twin_before
    visits = f"SELECT sum(visits) FROM {MODELS}.fct_venue_daily WHERE source_relation = %s"
    assert query(conninfo, visits, RAW_SCHEMA) == [(len(guests),)]
    assert query(conninfo, visits, TWIN) == [(len(twin_guests) - 1,)]
    held = f"SELECT count(*) FROM {MODELS}_staging.stg_guestdata__guests WHERE source_relation = %s"
    deleted_held = held + " AND guest_visit_id = %s"
    assert query(conninfo, deleted_held, RAW_SCHEMA, deleted["id"]) == [(1,)]  # the same id
    assert query(conninfo, deleted_held, TWIN, deleted["id"]) == [(0,)]
    by_email = held + " AND lower(email) = %s"
    assert query(conninfo, by_email, TWIN, person.email) == [(0,)]
    assert query(conninfo, in_audience, TWIN, person.email) == [(0,)]


def test_the_pattern_leaves_out_schemas_without_the_account_table(
    every_account: Dbt, conninfo: str
) -> None:
    """The models' own schemas match guestdata% too; only raw schemas hold `account`."""
    assert query(
        conninfo,
        f"SELECT DISTINCT source_relation FROM {MODELS}_staging.stg_guestdata__venues "
        "ORDER BY source_relation",
    ) == [(RAW_SCHEMA,), (TWIN,)]


def rows_per_model(conninfo: str, account: str) -> dict[str, int]:
    """Every model's (staging and marts) rows of one account, by table."""
    tables = query(
        conninfo,
        "SELECT table_schema || '.' || table_name FROM information_schema.columns"
        " WHERE table_schema IN (%s, %s) AND column_name = 'source_relation' ORDER BY 1",
        MODELS,
        f"{MODELS}_staging",
    )
    counts = {
        table: query(conninfo, f"SELECT count(*) FROM {table} WHERE source_relation = %s", account)
        for (table,) in tables
    }
    return {table: rows for table, ((rows,),) in counts.items() if rows}


def test_an_offboarded_account_leaves_every_model_and_renamed_back_is_read_in_full(
    every_account: Dbt, loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str
) -> None:
    """The twin's raw schema renamed out of the pattern (offboarding): the next build leaves none
    of its rows in any model, its audience included. Renamed into the pattern under another name
    after the first account's refresh moved every watermark past the twin's rows (a lookback of
    0 h stands in for more than the lookback passing), it is read in full: its own watermark."""
    no_lookback = {"GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0"}
    renamed, outside = "guestdata_twin_renamed", "offboarded_twin"
    twin_days = venue_days(conninfo, TWIN)
    twin_held = rows_per_model(conninfo, TWIN)
    assert twin_days and twin_held[f"{MODELS}.marketing_audience"] > 0
    first_days = expected_venue_daily(sandbox.truth(OWNER_KEYS[0]))

    def rename(old: str, new: str) -> None:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            connection.execute(f"ALTER SCHEMA {old} RENAME TO {new}")

    rename(TWIN, outside)
    try:
        loaded.run(*REFRESH_LOAD_ONLY)  # the first account's guests, loaded after the twin's
        run = every_account.run("build", extra_env=no_lookback)
        assert run.returncode == 0, run.output[-3000:]
        assert rows_per_model(conninfo, TWIN) == {}
        built = venue_days(conninfo, RAW_SCHEMA)
        assert {key: built[key] for key in first_days} == first_days

        rename(outside, renamed)
        run = every_account.run("build", extra_env=no_lookback)
        assert run.returncode == 0, run.output[-3000:]
        assert venue_days(conninfo, renamed) == twin_days
        held = rows_per_model(conninfo, renamed)
        assert {table: held.get(table) for table in twin_held} == twin_held
    finally:
        for old in (outside, renamed):
            if query(conninfo, "SELECT 1 FROM pg_namespace WHERE nspname = %s", old):
                rename(old, TWIN)


def account_status(conninfo: str) -> list[tuple[Any, ...]]:
    """guestdata_account_status: each account's status, why, and whether it is catching up."""
    return query(
        conninfo,
        f"SELECT source_relation, status, held_reasons, is_catching_up, marts_built_at IS NOT NULL"
        f" FROM {MODELS}.guestdata_account_status ORDER BY source_relation",
    )


def first_account_is_current(conninfo: str, sandbox: SandboxProcess) -> None:
    """The first account's marts equal its truth: venue days and every arrival counted."""
    truth = sandbox.truth(OWNER_KEYS[0])
    expected = expected_venue_daily(truth)
    built = venue_days(conninfo, RAW_SCHEMA)
    assert expected and {key: built[key] for key in expected} == expected
    visits = f"SELECT sum(visits) FROM {MODELS}.fct_venue_daily WHERE source_relation = %s"
    assert query(conninfo, visits, RAW_SCHEMA) == [(len(truth["guests"]),)]


def audience_of(conninfo: str, account: str) -> set[str]:
    rows = query(
        conninfo,
        f"SELECT contact_key FROM {MODELS}.marketing_audience WHERE source_relation = %s",
        account,
    )
    return {key for (key,) in rows}


def test_one_accounts_bad_row_holds_its_marts_and_no_other_accounts(
    every_account: Dbt,
    loaded: MeltanoProject,
    twin: MeltanoProject,
    sandbox: SandboxProcess,
    conninfo: str,
) -> None:
    """The twin serves a guest at a venue it does not list. Its staging test fails for it alone:
    the twin is held (its marts keep the last good build's rows), the first account's marts take
    the night's arrivals, the build fails naming the twin, and guestdata_account_status says
    why. Once the row is gone (the API's deletion followed) the twin is current again."""
    baseline = every_account.build()  # the twin's last good build
    assert baseline.returncode == 0, baseline.output[-3000:]
    twin_before = rows_of(conninfo, TWIN)
    assert twin_before["fct_venue_daily"] and twin_before["marketing_audience"]
    for account_id in (1001, COLLIDING_ACCOUNT):  # the first account is 1001
        sandbox.mutate("add_guests", count=3, account_id=account_id)
    twin.run(*LOAD_ONLY)
    loaded.run(*LOAD_ONLY)
    bad_guest = 990_000_001
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            f"CREATE TEMP TABLE bad AS SELECT * FROM {TWIN}.guests ORDER BY id LIMIT 1;"
            f" UPDATE bad SET id = {bad_guest}, venue_id = 990000, _sdc_batched_at = now();"
            f" INSERT INTO {TWIN}.guests SELECT * FROM bad"
        )

    held = every_account.build()
    assert held.returncode != 0
    assert "ACCOUNT HELD twin (guestdata_twin): stg_guestdata__guests.venue_id:" in held.output
    assert "GUESTDATA ACCOUNTS HELD: guestdata_twin" in held.output, held.output[-3000:]
    relationship = "stg_guestdata__guests.venue_id: guestdata_relationships_in_account: 1 rows"
    assert account_status(conninfo) == [
        (RAW_SCHEMA, "current", None, False, True),
        (TWIN, "held", relationship, False, True),
    ]
    statuses = held.statuses("model")
    assert {statuses[mart] for mart in MARTS} == {"success"}
    first_account_is_current(conninfo, sandbox)
    assert rows_of(conninfo, TWIN) == twin_before  # its new arrivals wait

    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(
            f"UPDATE {TWIN}.guests SET _sdc_deleted_at = now() WHERE id = {bad_guest}"
        )
    mended = every_account.build()
    assert mended.returncode == 0, mended.output[-3000:]
    assert account_status(conninfo) == [
        (RAW_SCHEMA, "current", None, False, True),
        (TWIN, "current", None, True, True),
    ]
    # Every arrival per venue-day (unique guests differ by the person erased above).
    truth = sandbox.truth(COLLIDING_KEY)
    expected = {key: counts[0] for key, counts in expected_venue_daily(truth).items()}
    built = venue_days(conninfo, TWIN)
    assert {key: built[key][0] for key in expected} == expected
    twin_visits = f"SELECT sum(visits) FROM {MODELS}.fct_venue_daily WHERE source_relation = %s"
    assert query(conninfo, twin_visits, TWIN) == [(len(truth["guests"]),)]


def test_an_account_whose_load_failed_is_held_then_catches_up_whole(
    every_account: Dbt,
    loaded: MeltanoProject,
    twin: MeltanoProject,
    sandbox: SandboxProcess,
    conninfo: str,
) -> None:
    """The accounts DAG names the twin's load as failed (GUESTDATA_FAILED_LOADS): the twin is
    held, its new people stay out of its audience, the first account's come in. At the next
    build it catches up: its keys are computed whole, so the people loaded before the marts'
    watermark moved past them (the first account loaded after, no lookback: hours passing)
    come in too."""
    no_lookback = {"GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0"}
    arrivals = {}
    for account_id in (COLLIDING_ACCOUNT, 1001):  # new people who may be sent marketing
        arrivals[account_id] = sandbox.mutate("add_guests", count=3, account_id=account_id)["ids"]
        for guest_id in arrivals[account_id]:
            sandbox.mutate(
                "set_marketing_consent", guest_id=guest_id, value=True, account_id=account_id
            )
    twin.run(*LOAD_ONLY)
    loaded.run(*LOAD_ONLY)
    people = {
        account: {
            g["email"].lower() for g in sandbox.truth(key)["guests"] if g["id"] in arrivals[number]
        }
        for account, key, number in (
            (RAW_SCHEMA, OWNER_KEYS[0], 1001),
            (TWIN, COLLIDING_KEY, COLLIDING_ACCOUNT),
        )
    }
    assert all(len(found) == 3 for found in people.values()), people
    twin_before = rows_of(conninfo, TWIN)

    load_failed = every_account.run(
        "build", extra_env={"GUESTDATA_FAILED_LOADS": f" {TWIN.upper()} ", **no_lookback}
    )
    assert load_failed.returncode != 0
    assert "ACCOUNT HELD twin (guestdata_twin): its load failed" in load_failed.output
    assert account_status(conninfo)[1][:3] == (TWIN, "held", "its load failed")
    assert rows_of(conninfo, TWIN) == twin_before
    assert people[RAW_SCHEMA] <= audience_of(conninfo, RAW_SCHEMA)
    assert not people[TWIN] & audience_of(conninfo, TWIN)

    caught_up = every_account.run("build", extra_env=no_lookback)
    assert caught_up.returncode == 0, caught_up.output[-3000:]
    assert [row[1:4] for row in account_status(conninfo)] == [
        ("current", None, False),
        ("current", None, True),
    ]
    assert people[TWIN] <= audience_of(conninfo, TWIN)


def test_a_column_two_adjacent_schemas_lack_reads_null_of_its_type_where_it_exists(
    loaded: MeltanoProject, pg_server: Any, e2e_database: str, conninfo: str, tmp_path: Path
) -> None:
    """A tap upgrade adds a non-text column; two accounts not reloaded since lack it. In the union,
    their nulls take the column's type from the schema that has it: a bare null is text, and two
    adjacent text branches fail the union against the bigint one, for every account.

    Each account's select a view of its own (EVERY_ACCOUNT's batch of 1 byte), so the views'
    union meets the types too, and the views are gone once the models are built."""
    schemas = ("guestdata_typed_a", "guestdata_typed_b", "guestdata_typed_c")
    models = "guestdata_typed_models"
    try:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            for schema in schemas:  # copies of the module's account, each an account schema
                connection.execute(f"CREATE SCHEMA {schema}")
                for table in ("account", "guests"):
                    connection.execute(
                        f"CREATE TABLE {schema}.{table} AS SELECT * FROM {RAW_SCHEMA}.{table}"
                    )
            for schema in schemas[1:]:  # the union tree pairs them: (a) union all (b union all c)
                connection.execute(f"ALTER TABLE {schema}.guests DROP COLUMN venue_id")
        typed = every_account_dbt(pg_server, e2e_database, tmp_path)
        run = typed.run(
            "run",
            "--select",
            "stg_guestdata__account stg_guestdata__guests",
            extra_env={
                "GUESTDATA_RAW_SCHEMAS": "guestdata\\_typed\\_%",
                "GUESTDATA_DBT_SCHEMA": models,
            },
        )
        assert run.returncode == 0, run.output[-3000:]
        logged = (tmp_path / "logs" / "dbt.log").read_text()
        staging = f'"{e2e_database}"."{models}_staging"'
        for number in (1, 2, 3):
            view = f'{staging}."stg_guestdata__guests__union_guests_{number}"'
            assert f"create view {view}" in logged
        assert "stg_guestdata__guests__union_guests_4" not in logged
        assert not query(
            conninfo,
            "SELECT viewname FROM pg_views WHERE schemaname LIKE %s",
            f"{models}%",
        )
        venues = query(
            conninfo,
            f"SELECT source_relation, count(venue_id), count(*) FROM {models}_staging."
            "stg_guestdata__guests GROUP BY source_relation ORDER BY source_relation",
        )
        arrivals = venues[0][2]
        assert arrivals > 0
        assert venues == [
            (schemas[0], arrivals, arrivals),
            (schemas[1], 0, arrivals),
            (schemas[2], 0, arrivals),
        ]
    finally:
        with psycopg.connect(conninfo, autocommit=True) as connection:
            for schema in (*schemas, f"{models}_staging", models):
                connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
