"""Issue #43, item 4: Snowflake's lookup of the account schemas scales (macros/accounts.sql).

A fakesnow database of its own (no load) holds 1,000 account-like schemas, each with an ACCOUNT
table and a raw GUESTS table, beside a schema the pattern does not match and a matching one
without ACCOUNT. dbt-snowflake, under fakesnow, renders `raw_relations('guests')` once (`dbt
compile --inline`): it names exactly the 1,000 schemas, with their columns, from one query of
information_schema.tables and one of information_schema.columns naming those schemas, none of
them with a function of the catalog's columns (which Snowflake cannot prune schemas by).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from support.snowflake_pipeline import SnowflakePipeline

pytestmark = pytest.mark.snowflake

ACCOUNTS = 1000
PREFIX = "GUESTDATA_LOOKUP_"
PATTERN = PREFIX + "%"
OUTSIDE = "OTHER_LOOKUP_0001"  # has ACCOUNT and GUESTS, but the pattern does not match it
WITHOUT_ACCOUNT = PREFIX + "NO_ACCOUNT"  # matches, has GUESTS, but no ACCOUNT: not an account
GUEST_COLUMNS = "ID,VENUE_ID,EMAIL,VISITED_AT"
# Rendered by dbt: the lookup's result, one line, between markers the test finds in dbt's output.
LOOKUP = (
    "LOOKUP[{% for relation in raw_relations('guests') %}"
    "{{ relation.schema }}:{{ relation.columns | join(',') | upper }};"
    "{% endfor %}]LOOKUP"
)


def account_schema(number: int) -> str:
    return f"{PREFIX}{number:04d}"


# The schemas go into fakesnow's DuckDB file in one transaction: the same 3,000 DDL statements
# through fakesnow (each parsed and transpiled) took 2 minutes on a busy 2-core machine. fakesnow
# reads them back like its own: its information_schema is views over DuckDB's catalog.
CREATE_SCHEMAS = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1])
connection.execute("begin")
for schema, with_account in ((line[1:], line[0] == "+") for line in sys.argv[2:]):
    connection.execute(f"create schema {schema}")
    if with_account:
        connection.execute(f"create table {schema}.ACCOUNT (ID decimal(38, 0), NAME varchar)")
    connection.execute(
        f"create table {schema}.GUESTS (ID decimal(38, 0), VENUE_ID decimal(38, 0),"
        " EMAIL varchar, VISITED_AT timestamptz)"
    )
connection.execute("commit")
"""


@pytest.fixture(scope="module")
def many_schemas(
    fakesnow_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> SnowflakePipeline:
    """A fresh fakesnow folder (no load) holding the 1,000 account schemas and the two others
    (the dbt utility: installed with fakesnow_venv)."""
    folder = tmp_path_factory.mktemp("snowflake-lookup")
    pipeline = SnowflakePipeline.in_folder(folder, fakesnow_venv, base_url=None)
    database = pipeline.warehouse.database
    pipeline.warehouse.query(f"CREATE DATABASE IF NOT EXISTS {database}")  # fakesnow's own setup
    schemas = [f"+{account_schema(number)}" for number in range(ACCOUNTS)]
    schemas += [f"+{OUTSIDE}", f"-{WITHOUT_ACCOUNT}"]
    database_file = pipeline.warehouse.db_path / f"{database}.db"
    python = fakesnow_venv / "bin" / "python"
    subprocess.run([python, "-c", CREATE_SCHEMAS, database_file, *schemas], check=True)
    return pipeline


def test_the_account_lookup_finds_exactly_the_account_schemas_among_1000_under_fakesnow(
    many_schemas: SnowflakePipeline,
) -> None:
    logged_before = len(many_schemas.statements())
    output = many_schemas.invoke_dbt(
        "compile",
        "--inline",
        LOOKUP,
        GUESTDATA_RAW_SCHEMAS=PATTERN,
        GUESTDATA_DBT_SCHEMA="LOOKUP_MODELS",
    )
    # The first match is the command line Meltano logs; the last, what dbt rendered.
    found = re.findall(r"LOOKUP\[(.*?)\]LOOKUP", output.replace("\n", ""))[-1]
    relations = dict(entry.split(":") for entry in found.split(";") if entry)
    assert sorted(relations) == [account_schema(number) for number in range(ACCOUNTS)]
    assert set(relations.values()) == {GUEST_COLUMNS}

    # What dbt asked the catalog for the lookup: one query of the tables naming ACCOUNT, one of
    # the columns naming the schemas it found (1,000 names: one batch).
    catalog = [
        statement
        for statement in many_schemas.statements()[logged_before:]
        if "information_schema" in statement.lower()
        and ("'ACCOUNT'" in statement or "'GUESTS'" in statement)
    ]
    assert len(catalog) == 2, json.dumps(catalog)[:2000]
    tables, columns = catalog
    assert "information_schema.tables" in tables and "'ACCOUNT'" in tables
    assert "information_schema.columns" in columns
    assert all(account_schema(number) in columns for number in range(ACCOUNTS))
    assert OUTSIDE not in columns and WITHOUT_ACCOUNT not in columns
    assert not any("upper(" in statement.lower() for statement in catalog)
