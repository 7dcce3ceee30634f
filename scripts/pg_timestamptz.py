"""Turn the `timestamp without time zone` columns of the target schema into timestamptz.

Run by Meltano as `guestdata-pg-types:timestamptz` after target-postgres. Why: the target
(meltanolabs 0.8.1) maps JSON Schema `date-time` to `timestamp without time zone`, storing each
instant as wall time in the session's zone (pinned to UTC in meltano.yml with PGTZ=UTC). Read back
as UTC, the instant is exact. Once a column is timestamptz the target keeps it: it compares column
types by their generic name (TIMESTAMP) and casts its naive staging values in the same UTC session.

Connection: libpq's PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE, which Meltano sets from the
utility's settings; the schema from GUESTDATA_PG_SCHEMA. Idempotent: a second run changes nothing.
"""

from __future__ import annotations

import os
import sys

import psycopg
from psycopg import sql

ALTER_COLUMN = sql.SQL("ALTER COLUMN {column} TYPE timestamptz USING {column} AT TIME ZONE 'UTC'")
NAIVE_COLUMNS = """
    SELECT table_name, column_name
    FROM information_schema.columns
    WHERE table_schema = %s AND data_type = 'timestamp without time zone'
    ORDER BY table_name, ordinal_position
"""


def convert_schema(conninfo: str, schema: str) -> dict[str, list[str]]:
    """Convert every naive timestamp column of `schema`; return {table: [columns]} converted."""
    converted: dict[str, list[str]] = {}
    with psycopg.connect(conninfo, autocommit=False) as connection:
        rows = connection.execute(NAIVE_COLUMNS, (schema,)).fetchall()
        for table, column in rows:
            converted.setdefault(table, []).append(column)
        for table, columns in converted.items():
            # One ALTER per table so it rewrites the table once, not once per column.
            alterations = sql.SQL(", ").join(
                ALTER_COLUMN.format(column=sql.Identifier(column)) for column in columns
            )
            connection.execute(
                sql.SQL("ALTER TABLE {table} {alterations}").format(
                    table=sql.Identifier(schema, table), alterations=alterations
                )
            )
        connection.commit()
    return converted


def main() -> int:
    schema = os.environ.get("GUESTDATA_PG_SCHEMA") or "guestdata"
    converted = convert_schema("", schema)
    total = sum(len(columns) for columns in converted.values())
    print(f"guestdata-pg-types: {total} column(s) in {len(converted)} table(s) of {schema!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
