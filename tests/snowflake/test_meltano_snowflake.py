"""`meltano run` into Snowflake, emulated by fakesnow, checked against the sandbox's ground truth.

The real target-snowflake 0.20.4 creates the tables and loads every row with its own MERGE from
its user stage (fakesnow plus guestdata_fakesnow). The tests run in file order on the module's
copy of the session's full load (conftest.py) and a sandbox as of its instant: the load's
tables and types, what the target sent, a rerun that changes nothing, then mutations that
change exactly their rows. Stats of a day after the sandbox's today are left out of every
comparison (`as_of_the_truth`: a run after a London midnight reads that day too).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import demo_pipeline
from support.snowflake_pipeline import SCHEMA, SnowflakePipeline
from support.streams import (
    BOOKKEEPING_STREAMS,
    STREAM_KEYS,
    as_of_the_truth,
    assert_tables_equal_truth,
    changed_keys,
    keyed_tables,
    truth_today,
)

pytestmark = pytest.mark.snowflake

SCHEMAS = Path(__file__).resolve().parents[2] / "tap_guestdata" / "schemas"
# target-snowflake's own columns (add_record_metadata: true), with their Snowflake types.
METADATA_COLUMNS = {
    "_SDC_EXTRACTED_AT": "TIMESTAMP_TZ",
    "_SDC_RECEIVED_AT": "TIMESTAMP_TZ",
    "_SDC_BATCHED_AT": "TIMESTAMP_TZ",
    "_SDC_DELETED_AT": "TIMESTAMP_TZ",
    "_SDC_SEQUENCE": "NUMBER",
    "_SDC_TABLE_VERSION": "NUMBER",
    "_SDC_SYNC_STARTED_AT": "NUMBER",
}
# Snowflake's reserved and limited keywords (docs: "Reserved & limited keywords"), and DATE,
# which ANSI reserves and Snowflake does not: a name in the first set must be quoted.
SNOWFLAKE_RESERVED = frozenset(
    """ACCOUNT ALL ALTER AND ANY AS BETWEEN BY CASE CAST CHECK COLUMN CONNECT CONNECTION
    CONSTRAINT CREATE CROSS CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER
    DATABASE DELETE DISTINCT DROP ELSE EXISTS FALSE FOLLOWING FOR FROM FULL GRANT GROUP
    GSCLUSTER HAVING ILIKE IN INCREMENT INNER INSERT INTERSECT INTO IS ISSUE JOIN LATERAL LEFT
    LIKE LOCALTIME LOCALTIMESTAMP MINUS NATURAL NOT NULL OF ON OR ORDER ORGANIZATION QUALIFY
    REGEXP REVOKE RIGHT RLIKE ROW ROWS SAMPLE SCHEMA SELECT SET SOME START TABLE TABLESAMPLE
    THEN TO TRIGGER TRUE TRY_CAST UNION UNIQUE UPDATE USING VALUES VIEW WHEN WHENEVER WHERE
    WITH""".split()  # noqa: SIM905 (a word list reads better than 90 quoted words)
)
ANSI_ONLY_RESERVED = {"DATE", "KEY", "PERCENT", "NAME"}


def json_schema(stream: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{stream}.json").read_text())


def expected_snowflake_types(property_schema: dict[str, Any]) -> set[str]:
    """The Snowflake types that faithfully hold a JSON Schema property of the tap."""
    types = {kind for kind in property_schema.get("type", []) if kind != "null"}
    if property_schema.get("format") == "date-time":
        return {"TIMESTAMP_TZ"}  # the project's timestamp_type: the offset kept
    if property_schema.get("format") == "date":
        return {"DATE"}
    if types & {"object", "array"}:
        return {"VARIANT", "OBJECT", "ARRAY"}
    if types == {"integer"}:
        return {"NUMBER"}
    if types == {"number"}:
        return {"FLOAT", "NUMBER"}
    if types == {"boolean"}:
        return {"BOOLEAN"}
    return {"TEXT"}


# Every table the job loads: the API's streams and the tap's record of complete reads.
LOADED_STREAMS = (*STREAM_KEYS, *BOOKKEEPING_STREAMS)


def check_against_truth(
    pipeline: SnowflakePipeline, truth: dict[str, Any]
) -> list[demo_pipeline.StreamCheck]:
    return assert_tables_equal_truth(pipeline.warehouse.tables(list(STREAM_KEYS)), truth)


def business_rows(
    pipeline: SnowflakePipeline, truth: dict[str, Any]
) -> dict[str, dict[tuple, dict]]:
    """Every table keyed by primary key, without the target's _sdc_* columns."""
    return keyed_tables(as_of_the_truth(pipeline.warehouse.tables(list(STREAM_KEYS)), truth))


def statement_kind(statement: str) -> str:
    words = statement.split()
    two = " ".join(words[:2]).upper()
    if two in {"CREATE TABLE", "CREATE SCHEMA", "DROP FILE", "SHOW DATABASES", "DESC TABLE"}:
        return two
    if two.startswith("CREATE OR") and "FILE FORMAT" in statement.upper():
        return "CREATE FILE FORMAT"
    return words[0].upper() if words else ""


def test_full_run_loads_every_table_equal_to_ground_truth(
    snowflake_pipeline: SnowflakePipeline, module_truth: Callable[[], dict]
) -> None:
    """The session's full load (conftest.py `loaded_folder`), read from the module's copy."""
    checks = check_against_truth(snowflake_pipeline, module_truth())
    empty = [check.stream for check in checks if check.rows_in_truth == 0]
    assert not empty, f"the sandbox should have rows for every stream, not for {empty}"
    print("\n" + demo_pipeline.report(checks))


def test_every_column_has_the_snowflake_type_of_its_json_schema(
    snowflake_pipeline: SnowflakePipeline,
) -> None:
    column_types = snowflake_pipeline.warehouse.column_types()
    tables = {table for table, _ in column_types}
    assert tables == {stream.upper() for stream in LOADED_STREAMS}, tables

    wrong, missing = [], []
    for stream in LOADED_STREAMS:
        table = stream.upper()
        expected = {
            name.upper(): expected_snowflake_types(schema)
            for name, schema in json_schema(stream)["properties"].items()
        }
        expected.update({name: {kind} for name, kind in METADATA_COLUMNS.items()})
        actual = {column: kind for (owner, column), kind in column_types.items() if owner == table}
        missing += [f"{table}.{column}" for column in expected.keys() - actual.keys()]
        missing += [
            f"{table}.{column} (not in the schema)" for column in actual.keys() - expected.keys()
        ]
        wrong += [
            f"{table}.{column}: {actual[column]}, expected one of {sorted(kinds)}"
            for column, kinds in expected.items()
            if column in actual and actual[column] not in kinds
        ]
    assert not missing, missing
    assert not wrong, "\n".join(wrong)


def test_mirror_columns_are_fixed_and_reserved_words_resolve(
    snowflake_pipeline: SnowflakePipeline, module_truth: Callable[[], dict]
) -> None:
    column_types = snowflake_pipeline.warehouse.column_types()
    mirror = {column: kind for (table, column), kind in column_types.items() if "MIRROR" in column}
    assert mirror == {"MIRROR_PARTNER": "TEXT", "MIRROR_TO_PARTNER": "BOOLEAN"}, mirror

    # Names SQL reserves, as the target wrote them: Snowflake's reserved words must be quoted;
    # the others (DATE, KEY, ...) may stand bare, and resolve to the same upper-case column.
    creates = [s for s in snowflake_pipeline.statements() if statement_kind(s) == "CREATE TABLE"]
    assert len(creates) == len(LOADED_STREAMS), len(creates)
    names = {table for table, _ in column_types} | {column for _, column in column_types}
    reserved_used = sorted(names & SNOWFLAKE_RESERVED)
    ansi_used = sorted(names & ANSI_ONLY_RESERVED)
    assert "ACCOUNT" in reserved_used and "DATE" in ansi_used, (reserved_used, ansi_used)
    unquoted = [
        name
        for name in reserved_used
        for create in creates
        if re.search(rf"(?<![\"\w]){name}(?![\"\w])", create, re.IGNORECASE)
    ]
    assert not unquoted, f"reserved words written bare: {unquoted}"

    truth = module_truth()
    today = truth_today(truth)
    results = snowflake_pipeline.warehouse.query(
        f'SELECT "DATE", date FROM {SCHEMA}.DAILY_ACCOUNT_STATS '
        f"WHERE date <= '{today}' ORDER BY \"DATE\"",
        f'SELECT "KEY" FROM {SCHEMA}.TIERS ORDER BY "KEY"',
        f'SELECT account_id FROM {SCHEMA}."ACCOUNT"',
    )
    days, keys, accounts = results
    assert [row["DATE"].isoformat() for row in days] == sorted(
        row["date"] for row in truth["daily_account_stats"]
    )
    assert [row["KEY"] for row in keys] == sorted(row["key"] for row in truth["tiers"])
    assert [row["ACCOUNT_ID"] for row in accounts] == [truth["account"]["account_id"]]


def test_the_target_staged_and_merged_every_stream_with_its_own_sql(
    snowflake_pipeline: SnowflakePipeline,
) -> None:
    statements = snowflake_pipeline.statements()
    kinds = Counter(statement_kind(statement) for statement in statements)
    merges = [s for s in statements if statement_kind(s) == "MERGE"]
    puts = [s for s in statements if statement_kind(s) == "PUT"]
    removes = [s for s in statements if statement_kind(s) == "REMOVE"]
    merged_tables = {re.search(r"merge into \S+\.\"?(\w+)\"? ", s, re.I)[1].upper() for s in merges}
    assert merged_tables == {stream.upper() for stream in LOADED_STREAMS}, merged_tables
    # The target's statements, untouched: its user stage, its casts, its de-duplication.
    for merge in merges:
        assert "from '@~/target-snowflake/" in merge, merge[:300]
        assert "ORDER BY SEQ8() DESC) = 1" in merge, merge[:300]
        assert re.search(r"\$1:\w+::TIMESTAMP_TZ", merge), merge[:300]
    assert all("'@~/target-snowflake/" in put for put in puts)
    # One batch per stream here: staged, merged, then removed from the stage.
    assert len(puts) == len(merges) == len(removes), kinds
    print("\nstatements the target sent:", dict(sorted(kinds.items())))


def test_second_run_without_changes_changes_no_row(
    snowflake_pipeline: SnowflakePipeline, module_truth: Callable[[], dict]
) -> None:
    truth = module_truth()
    before = business_rows(snowflake_pipeline, truth)
    merges_before = sum(statement_kind(s) == "MERGE" for s in snowflake_pipeline.statements())
    snowflake_pipeline.run()
    merges = sum(statement_kind(s) == "MERGE" for s in snowflake_pipeline.statements())
    assert merges > merges_before  # the rerun did load (upsert) rows again
    after = business_rows(snowflake_pipeline, truth)
    assert changed_keys(before, after) == {}
    check_against_truth(snowflake_pipeline, module_truth())


def test_mutations_update_exactly_the_changed_rows_on_the_next_run(
    snowflake_pipeline: SnowflakePipeline, module_truth: Callable[[], dict], module_sandbox
) -> None:
    truth_before = module_truth()
    loaded_before = business_rows(snowflake_pipeline, truth_before)
    completed = [r for r in truth_before["redemptions"] if r["status"] == "completed"]
    voided = max(completed, key=lambda r: r["created_at"])
    new_guests = module_sandbox.mutate("add_guests", count=3)["ids"]
    module_sandbox.mutate("void_redemption", redemption_id=voided["id"])

    snowflake_pipeline.run()

    changes = changed_keys(loaded_before, business_rows(snowflake_pipeline, module_truth()))
    assert changes["guests"] == {(guest_id,) for guest_id in new_guests}  # MERGE inserted
    assert (voided["id"],) in changes["redemptions"]  # MERGE updated a matched row
    check_against_truth(snowflake_pipeline, module_truth())
