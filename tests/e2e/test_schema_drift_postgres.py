"""Issue #10, point 3 end to end: a field the sandbox starts sending mid-life becomes a new
PostgreSQL column holding its values, through `meltano run` and target-postgres.

Its own target schema and state id, so the other e2e modules' tables and state are untouched.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from guestdata_sandbox.testing import SandboxProcess

pytestmark = pytest.mark.e2e

SCHEMA = "guestdata_drift"
FIELD = "loyalty_segment"
VALUES = ["gold", "silver"]  # by guest id
WARNING_TEXT = f"Schema drift: guests: the API sends field '{FIELD}'"
RUN_CORE = (
    "--environment=dev",
    "run",
    "--state-id-suffix=drift",
    "tap-guestdata--core",
    "target-postgres",
)
TARGET_ENV = {"TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": SCHEMA}


def guest_column(database: str) -> tuple[str | None, dict[int, Any]]:
    """The new column's PostgreSQL type (None if absent) and its value per guest id."""
    with psycopg.connect(database) as connection:
        found = connection.execute(
            "SELECT data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'guests' AND column_name = %s",
            (SCHEMA, FIELD),
        ).fetchone()
        if found is None:
            return None, {}
        query = sql.SQL("SELECT id, {} FROM {}").format(
            sql.Identifier(FIELD), sql.Identifier(SCHEMA, "guests")
        )
        return found[0], dict(connection.execute(query).fetchall())


def test_a_field_added_mid_life_becomes_a_column_holding_its_values(
    meltano: Any, module_sandbox: SandboxProcess, database: str
) -> None:
    meltano.run(*RUN_CORE, extra_env=TARGET_ENV)
    column_type, _ = guest_column(database)
    assert column_type is None, "the column exists before the API sends the field"

    module_sandbox.mutate("add_field", path="/guests", field=FIELD, values=VALUES)
    new_ids = module_sandbox.mutate("add_guests", count=3)["ids"]
    incremental = meltano.run(*RUN_CORE, extra_env=TARGET_ENV)
    output = incremental.stdout + incremental.stderr
    drift_lines = [line for line in output.splitlines() if "drift" in line]
    assert output.count(WARNING_TEXT) == 1, drift_lines

    column_type, values = guest_column(database)
    assert column_type in {"character varying", "text"}, column_type
    # The rows the incremental run re-read (today's) hold the API's values, the new ones too.
    loaded = {guest_id: value for guest_id, value in values.items() if value is not None}
    assert set(new_ids) <= set(loaded), (new_ids, len(loaded))
    assert all(value == VALUES[guest_id % 2] for guest_id, value in loaded.items())

    # A full refresh fills the column for the rows read before the field existed.
    meltano.run(*RUN_CORE[:2], "--full-refresh", *RUN_CORE[2:], extra_env=TARGET_ENV)
    truth = {row["id"]: row[FIELD] for row in module_sandbox.truth("gd_owner_growth_1", "guests")}
    _, values = guest_column(database)
    assert values == truth
