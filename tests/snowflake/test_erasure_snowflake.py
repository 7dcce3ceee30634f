"""Erasure on request (transform/macros/erasure.sql) under dbt-snowflake, against fakesnow.

The same macro as on PostgreSQL, in Snowflake SQL, run as users run it without an account
(`meltano invoke dbt-snowflake--fakesnow run-operation erase_person`), on the module's load and
build. In order: the person leaves every table that held them, the audit line counts those rows
and names no one; a second run changes nothing; a build passes every test; the next daily sync
reads the member again and its build erases them again before the models read them. The salt
is the warehouse's own (guestdata_erasure_salt): no statement fakesnow ran and no file dbt wrote
holds its value.
"""

from __future__ import annotations

from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    Person,
    assert_every_model_built_and_every_test_passed,
    audit_line,
    erased_again,
    files_holding,
    person_to_erase,
)
from support.snowflake_pipeline import DBT_JOB, SnowflakePipeline

pytestmark = pytest.mark.snowflake

SCHEMAS = ("GUESTDATA", "GUESTDATA_ANALYTICS", "GUESTDATA_ANALYTICS_STAGING")


@pytest.fixture(scope="module")
def salted(built: SnowflakePipeline) -> SnowflakePipeline:
    """The module's load and build; the first erasure makes the salt inside the warehouse."""
    return built


def salt(pipeline: SnowflakePipeline) -> str:
    ((row,),) = pipeline.warehouse.query("SELECT salt FROM GUESTDATA.GUESTDATA_ERASURE_SALT")
    value = row["SALT"]
    assert isinstance(value, str) and len(value) == 64, "two random UUIDs as hex"
    return value


@pytest.fixture(scope="module")
def person(module_sandbox: SandboxProcess) -> Person:
    return person_to_erase(module_sandbox)


def rows_holding(pipeline: SnowflakePipeline, person: Person) -> dict[str, int]:
    """Table (lower case) -> rows whose text columns hold the person's email or a phone."""
    (columns,) = pipeline.warehouse.query(
        "SELECT table_schema, table_name, column_name FROM information_schema.columns "
        f"WHERE table_schema IN {SCHEMAS} AND data_type = 'TEXT'"
    )
    by_table: dict[tuple[str, str], list[str]] = {}
    for row in columns:
        by_table.setdefault((row["TABLE_SCHEMA"], row["TABLE_NAME"]), []).append(row["COLUMN_NAME"])
    tables = sorted(by_table)
    values = [value.lower() for value in (person.email, *person.phones)]
    counts = pipeline.warehouse.query(
        *(
            f"SELECT count(*) AS n FROM {schema}.{table} WHERE "
            + " OR ".join(
                f"contains(lower({c}), '{v}')" for c in by_table[schema, table] for v in values
            )
            for schema, table in tables
        )
    )
    return {
        table.lower(): rows[0]["N"]
        for (_, table), rows in zip(tables, counts, strict=True)
        if rows[0]["N"]
    }


def every_table(pipeline: SnowflakePipeline) -> dict[str, list[Any]]:
    (tables,) = pipeline.warehouse.query(
        f"SELECT table_schema, table_name FROM information_schema.tables "
        f"WHERE table_schema IN {SCHEMAS}"
    )
    names = sorted(f"{row['TABLE_SCHEMA']}.{row['TABLE_NAME']}" for row in tables)
    contents = pipeline.warehouse.query(*(f"SELECT * FROM {name}" for name in names))
    return {name: sorted(rows, key=repr) for name, rows in zip(names, contents, strict=True)}


def test_erase_person_under_fakesnow_removes_the_person_from_every_table(
    salted: SnowflakePipeline, person: Person, dbt_target: Any
) -> None:
    before = rows_holding(salted, person)
    assert before == person.rows_per_table()
    output = salted.invoke_dbt(
        "run-operation", "erase_person", GUESTDATA_ERASE_IDENTIFIER=person.email.upper()
    )
    assert rows_holding(salted, person) == {}
    _, kind, identifiers, counts = audit_line(output)
    assert (kind, counts) == ("email", before)
    assert list(counts) == list(person.rows_per_table())  # the audit line's order
    assert identifiers == 1 + len(person.phones) + person.arrivals + 1
    given = [person.email, *person.phones]
    assert not [value for value in given if value.lower() in output.lower()]
    assert files_holding(dbt_target, given) == []


def test_a_second_erase_under_fakesnow_changes_nothing(
    salted: SnowflakePipeline, person: Person
) -> None:
    before = every_table(salted)
    output = salted.invoke_dbt(
        "run-operation", "erase_person", GUESTDATA_ERASE_IDENTIFIER=person.email
    )
    assert audit_line(output)[3] == dict.fromkeys(person.rows_per_table(), 0)
    assert every_table(salted) == before


def test_the_next_daily_sync_and_build_under_fakesnow_keep_the_person_out(
    salted: SnowflakePipeline, person: Person, module_sandbox: SandboxProcess, dbt_target: Any
) -> None:
    module_sandbox.mutate("update_member", member_id=person.member_id, fields={"visit": True})
    already = salted.log_path.read_text()
    salted.run(*DBT_JOB)  # load (the member is read again), then dbt build
    output = salted.log_path.read_text()[len(already) :]
    assert erased_again(output)["members"] == 1
    assert_every_model_built_and_every_test_passed(dbt_target)
    assert rows_holding(salted, person) == {}
    # The salt: named by every statement that hashed with it, contained in none.
    statements = salted.statement_log.read_text()
    assert "guestdata_erasure_salt" in statements.lower()
    assert salt(salted) not in statements
    assert files_holding(dbt_target, [salt(salted)]) == []
