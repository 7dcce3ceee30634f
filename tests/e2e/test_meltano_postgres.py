"""`meltano run` into a real PostgreSQL, checked against the sandbox's ground truth.

The tests run in file order on one sandbox and one database, like a pipeline's life: a first
full load, a no-change rerun, mutations and an incremental run, then a full refresh. The
sandbox serves as of the module's start: stats of a day after its today are left out of every
comparison (`as_of_the_truth`: a run after a London midnight reads that day too).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import demo_pipeline
from demo_pipeline import TARGET_SCHEMA
from support.pipeline import bytecode_share, plugin_venv
from support.streams import (
    STREAM_KEYS,
    as_of_the_truth,
    assert_tables_equal_truth,
    changed_keys,
    keyed_tables,
    truth_rows,
)

pytestmark = pytest.mark.e2e

RUN_ALL = ("--environment=dev", "run", "guestdata-to-postgres")
INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$")
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
INTEGER_TYPES = {"bigint", "integer", "smallint"}


def check_against_truth(database: str, truth: Mapping[str, Any]) -> list[demo_pipeline.StreamCheck]:
    return assert_tables_equal_truth(loaded_tables(database), truth)


def loaded_tables(database: str) -> dict[str, list[dict[str, Any]]]:
    """Every stream's table as loaded, `_sdc_*` columns included."""
    with psycopg.connect(database) as connection:
        return {
            stream: demo_pipeline.database_rows(connection, TARGET_SCHEMA, stream)
            for stream in STREAM_KEYS
        }


def business_rows(database: str, truth: Mapping[str, Any]) -> dict[str, dict[tuple, dict]]:
    """Every table keyed by primary key, without the target's _sdc_* bookkeeping columns."""
    return keyed_tables(as_of_the_truth(loaded_tables(database), truth))


def keyed_truth(truth: Mapping[str, Any]) -> dict[str, dict[tuple, dict]]:
    """The ground truth keyed like `business_rows`."""
    return keyed_tables({stream: truth_rows(truth, stream) for stream in STREAM_KEYS})


def total_and_distinct(database: str, stream: str) -> tuple[int, int]:
    key = sql.SQL(", ").join(sql.Identifier(name) for name in STREAM_KEYS[stream])
    query = sql.SQL("SELECT count(*), count(DISTINCT ({key})) FROM {table}").format(
        key=key, table=sql.Identifier(TARGET_SCHEMA, stream)
    )
    with psycopg.connect(database) as connection:
        total, distinct = connection.execute(query).fetchone()
    return total, distinct


def test_plugin_venvs_start_from_bytecode(meltano_installed: None) -> None:
    """meltano.yml's UV_COMPILE_BYTECODE: every plugin process reads compiled modules (uv writes
    none unless asked; with PYTHONDONTWRITEBYTECODE, each dbt start compiled dbt again: 6.3 s
    against 2.3 s, bench/process_start.py)."""
    for plugin_type, name in (
        ("extractors", "tap-guestdata"),
        ("loaders", "target-postgres"),
        ("utilities", "dbt-postgres"),
    ):
        assert bytecode_share(plugin_venv(plugin_type, name)) > 0.95, name


def test_full_run_loads_every_table_equal_to_ground_truth(
    meltano: Any, database: str, module_truth: Callable[[], dict]
) -> None:
    meltano.run(*RUN_ALL)
    checks = check_against_truth(database, module_truth())
    empty = [check.stream for check in checks if check.rows_in_truth == 0]
    assert not empty, f"the sandbox should have rows for every stream, not for {empty}"


def test_column_types_are_timestamptz_date_integer_boolean_numeric_jsonb(
    database: str, module_truth: Callable[[], dict]
) -> None:
    columns_query = """
        SELECT table_name, column_name, data_type FROM information_schema.columns
        WHERE table_schema = %s
    """
    with psycopg.connect(database) as connection:
        column_types = {
            (table, column): data_type
            for table, column, data_type in connection.execute(columns_query, (TARGET_SCHEMA,))
        }
    # _sdc_* bookkeeping columns included: every instant in the schema carries its zone.
    naive = [col for col, kind in column_types.items() if kind == "timestamp without time zone"]
    assert not naive, naive

    wrong = []
    truth = module_truth()
    for stream in STREAM_KEYS:
        rows = truth_rows(truth, stream)
        fields = {name for row in rows for name in row}
        for name in sorted(fields):
            values = [row[name] for row in rows if row.get(name) is not None]
            actual = column_types.get((stream, name))
            if not values or actual is None:
                continue  # an all-null column has no evidence; a missing one fails elsewhere
            allowed = expected_column_types(values)
            if actual not in allowed:
                wrong.append(f"{stream}.{name}: {actual}, expected one of {sorted(allowed)}")
    assert not wrong, "\n".join(wrong)


def expected_column_types(values: list[Any]) -> set[str]:
    """The PostgreSQL types that faithfully hold these JSON values from the API."""
    if all(isinstance(value, bool) for value in values):
        return {"boolean"}
    if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return INTEGER_TYPES | {"numeric"}
    if all(isinstance(value, int | float) and not isinstance(value, bool) for value in values):
        return {"numeric", "double precision"}
    if all(isinstance(value, str) and INSTANT.match(value) for value in values):
        return {"timestamp with time zone"}
    if all(isinstance(value, str) and DAY.match(value) for value in values):
        return {"date"}
    if all(isinstance(value, str) for value in values):
        return {"text", "character varying"}
    if all(isinstance(value, dict) for value in values):
        return {"jsonb"}
    if all(isinstance(value, list) for value in values):
        return {"jsonb", "ARRAY"}
    return {"jsonb"}


def test_instants_keep_their_offsets_as_the_same_moment(
    database: str, module_truth: Callable[[], dict]
) -> None:
    """A visit at 10:00+01:00 must read back as 09:00Z whatever the session's time zone."""
    guests = {row["id"]: row for row in module_truth()["guests"]}
    with psycopg.connect(database) as connection:
        connection.execute("SET TIME ZONE 'Asia/Tokyo'")
        rows = connection.execute(
            sql.SQL("SELECT id, visited_at FROM {}").format(sql.Identifier(TARGET_SCHEMA, "guests"))
        ).fetchall()
    assert rows
    for guest_id, visited_at in rows:
        expected = dt.datetime.fromisoformat(guests[guest_id]["visited_at"])
        assert visited_at.utcoffset() == dt.timedelta(hours=9)
        assert visited_at == expected


def test_second_run_without_changes_adds_no_rows_and_no_duplicates(
    meltano: Any, database: str, module_truth: Callable[[], dict]
) -> None:
    truth = module_truth()
    before = business_rows(database, truth)
    meltano.run(*RUN_ALL)
    after = business_rows(database, truth)
    assert changed_keys(before, after) == {}
    for stream in STREAM_KEYS:
        total, distinct = total_and_distinct(database, stream)
        assert total == distinct, stream
    check_against_truth(database, truth)


def test_mutations_update_exactly_the_changed_rows_on_the_next_run(
    meltano: Any, database: str, module_truth: Callable[[], dict], module_sandbox
) -> None:
    truth_before = module_truth()
    loaded_before = business_rows(database, truth_before)

    # The newest unused reward and the newest completed redemption: what a lookback re-reads.
    unused = [r for r in truth_before["rewards"] if r["status"] == "issued" and r["uses_remaining"]]
    reward = max(unused, key=lambda r: r["issued_at"])
    completed = [r for r in truth_before["redemptions"] if r["status"] == "completed"]
    voided = max(completed, key=lambda r: r["created_at"])
    member = max(truth_before["members"], key=lambda m: m["last_visit_at"] or "")

    new_guests = module_sandbox.mutate("add_guests", count=3)["ids"]
    redeemed = module_sandbox.mutate("redeem_reward", reward_id=reward["id"])
    module_sandbox.mutate("void_redemption", redemption_id=voided["id"])
    new_lines = module_sandbox.mutate("add_ledger_lines", member_id=member["id"], count=2)["ids"]

    truth_after = module_truth()
    expected_changes = changed_keys(keyed_truth(truth_before), keyed_truth(truth_after))
    # The mutations themselves, as the truth reports them (guards the test's own logic).
    assert {(guest_id,) for guest_id in new_guests} <= expected_changes["guests"]
    assert (reward["id"],) in expected_changes["rewards"]
    assert {(voided["id"],), (redeemed["redemption_id"],)} <= expected_changes["redemptions"]
    assert {(line,) for line in new_lines} <= expected_changes["member_ledger"]

    meltano.run(*RUN_ALL)

    loaded_after = business_rows(database, truth_after)
    assert changed_keys(loaded_before, loaded_after) == expected_changes
    check_against_truth(database, truth_after)


def test_full_refresh_rebuilds_damaged_tables_cleanly(
    meltano: Any, database: str, module_truth: Callable[[], dict]
) -> None:
    # Damage: lose some guests and a whole table's rows; a full refresh must restore them.
    with psycopg.connect(database) as connection:
        connection.execute(
            sql.SQL("DELETE FROM {} WHERE id IN (SELECT id FROM {} ORDER BY id LIMIT 5)").format(
                sql.Identifier(TARGET_SCHEMA, "guests"), sql.Identifier(TARGET_SCHEMA, "guests")
            )
        )
        connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(TARGET_SCHEMA, "tiers")))
    meltano.run("--environment=dev", "run", "--full-refresh", "guestdata-to-postgres")
    check_against_truth(database, module_truth())
    for stream in STREAM_KEYS:
        total, distinct = total_and_distinct(database, stream)
        assert total == distinct, f"{stream}: {total - distinct} duplicate row(s)"


def test_stream_groups_read_the_key_from_the_environment_and_keep_their_own_state(
    meltano: Any, module_sandbox, database: str
) -> None:
    group_key = "gd_owner_growth_3"
    module_sandbox.clear_requests()
    meltano.run(
        "--environment=dev",
        "run",
        "tap-guestdata--stats",
        "target-postgres",
        extra_env={"TAP_GUESTDATA_API_KEY": group_key},
    )
    used_keys = {entry["key"] for entry in module_sandbox.requests_log()}
    assert used_keys == {group_key}, used_keys
    # Only its own streams' endpoints: no guests, no Rewards.
    paths = {entry["path"] for entry in module_sandbox.requests_log()}
    assert not [p for p in paths if p.startswith(("/guests", "/rewards"))], paths
    state_ids = meltano.state_ids()
    assert "dev:tap-guestdata--stats-to-target-postgres" in state_ids, state_ids
    assert "dev:tap-guestdata-to-target-postgres" in state_ids, state_ids


def test_hash_pii_mapping_hashes_emails_and_phones_and_drops_names(
    meltano: Any, database: str, module_truth: Callable[[], dict]
) -> None:
    schema = "guestdata_pii"
    meltano.run(
        "--environment=dev",
        "run",
        "--state-id-suffix=pii",
        "tap-guestdata",
        "hash-pii",
        "target-postgres",
        extra_env={
            "TAP_GUESTDATA__SELECT": json.dumps(["guests.*", "members.*"]),
            "TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": schema,
        },
    )
    truth = module_truth()
    with psycopg.connect(database, row_factory=dict_row) as connection:
        guests = connection.execute(
            sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, "guests"))
        ).fetchall()
        members = connection.execute(
            sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, "members"))
        ).fetchall()
    assert len(guests) == len(truth["guests"]) and len(members) == len(truth["members"])
    guest_truth = {row["id"]: row for row in truth["guests"]}
    for row in guests:
        source = guest_truth[row["id"]]
        assert row["email"] == sha256(source["email"].strip().lower())
        assert row["phone"] == sha256(source["phone"].replace(" ", ""))
        # `__NULL__` removes the property, so the loader never creates those columns.
        assert not {"name", "first_name", "last_name"} & row.keys()
    member_truth = {row["id"]: row for row in truth["members"]}
    for row in members:
        source = member_truth[row["id"]]
        expected_email = sha256(source["email"].strip().lower()) if source["email"] else None
        assert row["email"] == expected_email
        assert not {"first_name", "last_name", "date_of_birth"} & row.keys()
        assert row["points_balance"] == source["points_balance"]  # non-PII fields untouched


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
