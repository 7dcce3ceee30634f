"""Erasure on request (transform/macros/erasure.sql) on a real load into PostgreSQL.

In order, on one sandbox and database: a guest who is also a member is in every table that
holds people; `erase_person` with their email leaves no table holding their email or phone, its
audit line counts exactly the rows that held them and names no one, and nothing dbt wrote holds
the identifier; a second run changes no row anywhere; a build after it passes every test; the
next daily sync and the weekly refresh load the person again (the API still serves them) and the
build that follows erases them again before any model reads them, while staging already keeps
them out; released, the refresh brings them back into the audience. The salt is made by the
warehouse and kept in its own table: after an erasure and a build, its value is in no file dbt
wrote (target/, logs/) and in no statement the server logged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    RAW_SCHEMA,
    REFRESH_LOAD_ONLY,
    RUN_ALL,
    Dbt,
    DbtRun,
    Person,
    ServerStatementLog,
    assert_every_model_built_and_every_test_passed,
    audit_line,
    erased_again,
    files_holding,
    person_to_erase,
    query,
)
from support.pipeline import MeltanoProject

pytestmark = pytest.mark.e2e

MODELS_SCHEMA = f"{RAW_SCHEMA}_analytics"
SCHEMAS = (RAW_SCHEMA, MODELS_SCHEMA, f"{MODELS_SCHEMA}_staging")


@pytest.fixture(scope="module", autouse=True)
def statement_log(conninfo: str, e2e_database: str) -> Iterator[ServerStatementLog]:
    """Every statement the server runs on the module's database, from before the first load."""
    yield ServerStatementLog(conninfo, e2e_database)


def salt(conninfo: str) -> str:
    """The warehouse's own salt, read by name (this statement does not contain it)."""
    ((value,),) = query(conninfo, f"SELECT salt FROM {RAW_SCHEMA}.guestdata_erasure_salt")
    assert isinstance(value, str) and len(value) == 64, "two random UUIDs as hex"
    return value


@pytest.fixture(scope="module")
def person(sandbox: SandboxProcess) -> Person:
    return person_to_erase(sandbox)


def rows_holding(conninfo: str, person: Person) -> dict[str, int]:
    """Table -> rows whose text columns hold the person's email or one of their phones, for
    every table of the raw and model schemas."""
    columns = query(
        conninfo,
        "SELECT table_schema, table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = ANY(%s) AND data_type IN ('text', 'character varying')",
        list(SCHEMAS),
    )
    by_table: dict[tuple[str, str], list[str]] = {}
    for schema, table, column in columns:
        by_table.setdefault((schema, table), []).append(column)
    needles = [f"%{value.lower()}%" for value in (person.email, *person.phones)]
    holding = {}
    for (schema, table), names in sorted(by_table.items()):
        condition = sql.SQL(" OR ").join(
            sql.SQL("lower({}) LIKE ANY(%s)").format(sql.Identifier(name)) for name in names
        )
        statement = sql.SQL("SELECT count(*) FROM {} WHERE {}").format(
            sql.Identifier(schema, table), condition
        )
        with_params = [needles] * len(names)
        (count,) = query(conninfo, statement.as_string(), *with_params)[0]
        if count:
            holding[table] = count
    return holding


def every_table(conninfo: str) -> dict[str, list[tuple]]:
    """Every row of every table of the raw and model schemas, sorted."""
    tables = query(
        conninfo,
        "SELECT table_schema, table_name FROM information_schema.tables "
        "WHERE table_schema = ANY(%s)",
        list(SCHEMAS),
    )
    content = {}
    for schema, table in tables:
        statement = sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table))
        content[f"{schema}.{table}"] = sorted(query(conninfo, statement.as_string()), key=repr)
    return content


def erase(dbt: Dbt, identifier: str) -> DbtRun:
    run = dbt.run(
        "run-operation", "erase_person", extra_env={"GUESTDATA_ERASE_IDENTIFIER": identifier}
    )
    assert run.returncode == 0, run.output[-3000:]
    return run


def test_erase_person_removes_the_email_and_phone_from_every_table_and_names_no_one(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str, person: Person, target_dir: Path
) -> None:
    before = rows_holding(conninfo, person)
    assert before == person.rows_per_table()
    # Upper case and spaces: the command normalises the email as the rows are normalised.
    run = erase(dbt, f"  {person.email.upper()} ")
    assert rows_holding(conninfo, person) == {}
    request_hash, kind, identifiers, counts = audit_line(run.output)
    assert kind == "email"
    assert counts == before  # every row that held the person changed, and no other row
    assert list(counts) == list(person.rows_per_table())  # the audit line's order
    # The email, each phone, every arrival's id and the member id.
    assert identifiers == 1 + len(person.phones) + person.arrivals + 1
    assert query(
        conninfo,
        f"SELECT count(*), count(DISTINCT request_hash), min(request_hash) "
        f"FROM {RAW_SCHEMA}.guestdata_erasures",
    ) == [(identifiers, 1, request_hash)]
    # The member keeps their id, balance and ledger, as an anonymised member does (spec 2.8).
    assert query(
        conninfo,
        f"SELECT email, phone_e164, first_name, last_name, date_of_birth, "
        f"anonymised_at IS NOT NULL FROM {RAW_SCHEMA}.members WHERE id = %s",
        person.member_id,
    ) == [("********", "********", "********", None, None, True)]
    assert query(
        conninfo,
        f"SELECT member_status, email, first_name FROM {MODELS_SCHEMA}.dim_members "
        f"WHERE member_id = %s",
        person.member_id,
    ) == [("anonymised", None, None)]
    # Neither the output nor anything dbt wrote (logs, target/) holds the identifier.
    identifiers_given = [person.email, *person.phones]
    assert not [v for v in identifiers_given if v.lower() in run.output.lower()]
    assert files_holding(target_dir, identifiers_given) == []
    assert salt(conninfo) not in run.output


def test_a_second_erase_changes_nothing(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str, person: Person
) -> None:
    before = every_table(conninfo)
    run = erase(dbt, person.email)
    assert audit_line(run.output)[3] == dict.fromkeys(person.rows_per_table(), 0)
    assert every_table(conninfo) == before


def test_a_build_after_the_erasure_passes_every_test_and_the_salt_is_in_no_sql_text(
    loaded: MeltanoProject,
    dbt: Dbt,
    conninfo: str,
    person: Person,
    target_dir: Path,
    statement_log: ServerStatementLog,
) -> None:
    run = dbt.build()
    assert run.returncode == 0, run.output[-3000:]
    assert_every_model_built_and_every_test_passed(target_dir)
    assert "marketing_audience_has_no_person_erased_on_request" in run.statuses("test")
    assert rows_holding(conninfo, person) == {}
    # The salt: in no file dbt wrote and in no statement the server ran, though every hash was
    # computed by those statements (they name its table).
    assert files_holding(target_dir, [salt(conninfo)]) == []
    logged = statement_log.text()
    assert "guestdata_erasure_salt" in logged and "guestdata_erasures" in logged
    assert salt(conninfo) not in logged
    # The arrivals still count as visits (the API counts them until the vendor erases them).
    assert query(
        conninfo,
        f"SELECT sum(erased_visits), sum(visits - api_visits) FROM {MODELS_SCHEMA}.fct_venue_daily",
    ) == [(person.arrivals, 0)]


def test_the_next_syncs_load_the_person_again_and_the_build_erases_them_first(
    loaded: MeltanoProject, dbt: Dbt, sandbox: SandboxProcess, conninfo: str, person: Person
) -> None:
    # A visit moves the member's updated-at: the daily run reads the member again (spec 4.2).
    sandbox.mutate("update_member", member_id=person.member_id, fields={"visit": True})
    daily = loaded.run(*RUN_ALL)
    assert erased_again(daily.stdout + daily.stderr)["members"] == 1
    assert rows_holding(conninfo, person) == {}

    # The weekly refresh reads every guest again, the person's arrivals included.
    loaded.run(*REFRESH_LOAD_ONLY)
    assert rows_holding(conninfo, person) == {"guests": person.arrivals}
    # Staging keeps them out even before the build erases the raw rows again.
    compiled = dbt.run("compile", "--select", "stg_guestdata__guests")
    assert compiled.returncode == 0, compiled.output[-3000:]
    staged = (dbt.target_dir / "compiled" / "guestdata" / "models" / "staging").joinpath(
        "stg_guestdata__guests.sql"
    )
    assert query(
        conninfo,
        f"SELECT count(*) FILTER (WHERE is_erased), count(*) FILTER (WHERE email ILIKE %s) "
        f"FROM ({staged.read_text().replace('%', '%%')}) AS staged",
        person.email,
    ) == [(person.arrivals, 0)]

    build = dbt.build()
    assert build.returncode == 0, build.output[-3000:]
    assert erased_again(build.output)["guests"] == person.arrivals
    assert rows_holding(conninfo, person) == {}


def test_a_released_erasure_lets_the_refresh_bring_the_person_back(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str, person: Person
) -> None:
    """The counterfactual: without the suppression entry the sync would bring them back."""
    (request_hash,) = query(
        conninfo, f"SELECT DISTINCT request_hash FROM {RAW_SCHEMA}.guestdata_erasures"
    )[0]
    released = dbt.run(
        "run-operation", "release_erasure", "--args", f"{{request_hash: {request_hash}}}"
    )
    assert released.returncode == 0, released.output[-3000:]
    assert f"erasure {request_hash} released: " in released.output
    assert query(conninfo, f"SELECT count(*) FROM {RAW_SCHEMA}.guestdata_erasures") == [(0,)]
    loaded.run(*REFRESH_LOAD_ONLY)
    build = dbt.build()
    assert build.returncode == 0, build.output[-3000:]
    assert query(
        conninfo,
        f"SELECT count(*) FROM {MODELS_SCHEMA}.marketing_audience WHERE contact_key = %s",
        person.email,
    ) == [(1,)]
