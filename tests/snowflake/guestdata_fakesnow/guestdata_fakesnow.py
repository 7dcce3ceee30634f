"""fakesnow 0.12.1 with a user stage (`@~`), so target-snowflake 0.20.4 loads rows unchanged.

target-snowflake stages each batch in the user stage and reads it back inside its MERGE:

    put 'file:///tmp/x.json.gz' '@~/target-snowflake/<sync_id>'
    merge into T d using (select $1:col::TYPE as col, ...
        from '@~/target-snowflake/<sync_id>'(file_format => DB.SCHEMA."tf-...")
        QUALIFY ROW_NUMBER() OVER (PARTITION BY key ORDER BY SEQ8() DESC) = 1) s
        on ... when matched then update ... when not matched then insert ...
    remove '@~/target-snowflake/<sync_id>/'

fakesnow supports named and table stages (PUT, COPY INTO) but not the user stage, nor a query
over staged files (`from <stage>(file_format => ...)`), nor REMOVE or DROP FILE FORMAT. This
module adds those, at the cursor, before fakesnow parses the statement:

- PUT to `@~/<path>`: the file is gzipped into a local user-stage folder by fakesnow's own
  upload code; the result rows are Snowflake's (source, target, sizes, status).
- A query over `'@~/<path>'(file_format => F)`: F must be a JSON file format. The staged files
  are read with DuckDB's `read_json_objects` (what fakesnow's own JSON COPY uses) into a
  temporary table, one row per line in file order. In the statement, only the staged-file
  reference becomes that table, `$1` its row column and `SEQ8()` its row number (fakesnow
  renders SEQ8() as a window function, which DuckDB refuses inside the QUALIFY's window), and
  QUALIFY's select aliases are spelt out (see `expand_qualify_aliases`). Everything else (the
  MERGE, its casts, keys, ON/UPDATE/INSERT) is the target's own SQL, run by fakesnow as usual.
- REMOVE `@~/<path>`: deletes the staged files under that prefix, with Snowflake's result rows.
- DROP FILE FORMAT: removes the format from fakesnow's catalogue.
- A session opened with a database and no schema uses PUBLIC, as in Snowflake (fakesnow's
  MERGE asserts a current schema).

Anything else that names `@~` (COPY INTO from the user stage, PUT options, other file types)
raises fakesnow's "not implemented" error instead of guessing. `$GUESTDATA_FAKESNOW_STATEMENT_LOG`,
if set, collects every statement clients sent (JSON lines), so tests can say what ran.

Entry points (console scripts of this package):
- `target-snowflake-fakesnow`: target-snowflake, patched, draining one stream at a time
  (fakesnow is not safe for concurrent transactions); databases in `$FAKESNOW_DB_PATH`.
- `dbt-fakesnow`: dbt (dbt-snowflake, installed beside), patched, on `$FAKESNOW_DB_PATH`, as
  Meltano's `dbt-snowflake--fakesnow` utility runs it.
- `guestdata-fakesnow run --db-path DIR PROGRAM [ARGS]`: any console script of this venv,
  patched (e.g. `dbt`), on the same databases.
- `guestdata-fakesnow query --db-path DIR --database DB SQL...`: each statement's rows as JSON
  lines, values tagged so callers get datetimes, dates and decimals back (see `encode`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import re
import runpy
import shutil
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import fakesnow
import snowflake.connector
import sqlglot
from fakesnow.cursor import FakeSnowflakeCursor
from fakesnow.instance import FakeSnow
from fakesnow.transforms import stage
from fakesnow.transforms.file_format import lookup_file_format
from sqlglot import exp

USER_STAGE = "@~/"
PUT = re.compile(r"^\s*put\s+'(?P<source>[^']+)'\s+'@~/(?P<path>[^']*)'\s*;?\s*$", re.I | re.S)
DROP_FILE_FORMAT = re.compile(
    r"^\s*drop\s+file\s+format\s+(?P<if_exists>if\s+exists\s+)?(?P<name>\S+)\s*;?\s*$", re.I | re.S
)
REMOVE = re.compile(r"^\s*(?:remove|rm)\s+'@~/(?P<path>[^']*)'\s*;?\s*$", re.I | re.S)
PUT_COLUMNS = (
    "source",
    "target",
    "source_size",
    "target_size",
    "source_compression",
    "target_compression",
    "status",
    "message",
)
STAGED_ROW = "staged_row"  # the temporary table's one column: a line of the file, as JSON
DB_PATH_VARIABLE = "FAKESNOW_DB_PATH"
# If set, every statement a client sends is appended here as a JSON line (what ran, for tests).
STATEMENT_LOG_VARIABLE = "GUESTDATA_FAKESNOW_STATEMENT_LOG"
_statement_log_lock = threading.Lock()

_original_execute = FakeSnowflakeCursor.execute
_original_connect = FakeSnow.connect


# ---------------------------------------------------------------- the user stage


def user_stage_root() -> Path:
    """One folder per process, beside fakesnow's own internal stages (also per process)."""
    return Path(stage.LOCAL_BUCKET_PATH) / "user-stage"


def user_stage_dir(path: str) -> Path:
    root = user_stage_root().resolve()
    directory = (root / path).resolve()
    if not directory.is_relative_to(root):  # Snowflake refuses paths that leave the stage
        raise snowflake.connector.errors.ProgrammingError(
            msg=f"invalid stage path '@~/{path}'", errno=1003, sqlstate="42000"
        )
    return directory


def staged_files(prefix: str) -> list[Path]:
    """Files whose stage path starts with `prefix` (Snowflake matches a prefix, not a folder)."""
    root = user_stage_root()
    if not root.exists():
        return []
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and path.relative_to(root).as_posix().startswith(prefix)
    )


def execute(
    self: FakeSnowflakeCursor,
    command: str,
    params: Sequence[Any] | dict[Any, Any] | None = None,
    *args: Any,
    **kwargs: Any,
) -> FakeSnowflakeCursor:
    """fakesnow's execute, with the user stage handled first (see the module docstring)."""
    if log_path := os.environ.get(STATEMENT_LOG_VARIABLE):
        with _statement_log_lock, open(log_path, "a") as log:  # the target runs sinks in threads
            log.write(json.dumps({"statement": command}) + "\n")
    if match := DROP_FILE_FORMAT.match(command):
        return drop_file_format(self, match["name"], if_exists=bool(match["if_exists"]))
    if USER_STAGE not in command:
        return _original_execute(self, command, params, *args, **kwargs)
    # Bind parameters client-side as the connector does (the PUT's file URI is one).
    command, params = self._rewrite_with_params(command, params)
    if match := PUT.match(command):
        return put(self, match["source"], match["path"])
    if match := REMOVE.match(command):
        return remove(self, match["path"])
    return query_staged_files(self, command, params, *args, **kwargs)


def put(cursor: FakeSnowflakeCursor, source: str, path: str) -> FakeSnowflakeCursor:
    url = urlparse(source)
    local = url2pathname(url.path) if url.scheme in ("file", "") else None
    if local is None or not os.path.isfile(local):
        raise snowflake.connector.errors.ProgrammingError(
            msg=f"File doesn't exist: {source}", errno=253006, sqlstate="22000"
        )
    uploaded = stage.upload_files(
        {
            "stageInfo": {
                "locationType": "LOCAL_FS",
                "location": str(user_stage_dir(path)),
                "creds": {},
            },
            "src_locations": [local],
            "parallel": 4,
            "autoCompress": True,  # PUT's default, as fakesnow applies it to named stages
            "sourceCompression": "auto_detect",
            "overwrite": False,
            "command": "UPLOAD",
        }
    )
    rows = [tuple(result[column] for column in PUT_COLUMNS) for result in uploaded]
    return result_rows(cursor, PUT_COLUMNS, rows)


def remove(cursor: FakeSnowflakeCursor, prefix: str) -> FakeSnowflakeCursor:
    root = user_stage_root()
    removed = []
    for path in staged_files(prefix):
        removed.append((path.relative_to(root).as_posix(), "removed"))
        path.unlink()
    return result_rows(cursor, ("name", "result"), removed)


def drop_file_format(
    cursor: FakeSnowflakeCursor, name: str, *, if_exists: bool
) -> FakeSnowflakeCursor:
    """fakesnow creates file formats (a row in its catalogue) but cannot drop them."""
    connection = cursor._conn
    database, schema, format_name = stage.parts_from_var(
        name, connection.database, connection.schema
    )
    deleted = cursor._duck_conn.execute(
        "DELETE FROM _fs_global._fs_information_schema._fs_file_formats "
        "WHERE database_name = ? AND schema_name = ? AND name = ?",
        (database, schema, format_name),
    ).fetchone()
    if not (deleted and deleted[0]) and not if_exists:
        raise snowflake.connector.errors.ProgrammingError(
            msg=f"SQL compilation error:\nFile format '{format_name}' does not exist "
            "or not authorized.",
            errno=2003,
            sqlstate="02000",
        )
    return result_rows(cursor, ("status",), [(f"{format_name} successfully dropped.",)])


def result_rows(
    cursor: FakeSnowflakeCursor, columns: Sequence[str], rows: Sequence[tuple]
) -> FakeSnowflakeCursor:
    """Give the cursor a result set by running a constant SELECT through fakesnow, so its
    rows, row count and description stay consistent."""
    quoted = [exp.to_identifier(column, quoted=True).sql("snowflake") for column in columns]
    if not rows:
        nulls = ", ".join(f"NULL AS {name}" for name in quoted)
        return _original_execute(cursor, f"SELECT {nulls} WHERE FALSE")
    values = ", ".join(
        "(" + ", ".join(exp.convert(value).sql("snowflake") for value in row) + ")" for row in rows
    )
    return _original_execute(
        cursor, f"SELECT * FROM (VALUES {values}) AS result ({', '.join(quoted)})"
    )


def query_staged_files(
    cursor: FakeSnowflakeCursor, command: str, params: Any, *args: Any, **kwargs: Any
) -> FakeSnowflakeCursor:
    statement = sqlglot.parse_one(command, read="snowflake")
    references = [
        table
        for table in statement.find_all(exp.Table)
        if isinstance(table.this, exp.Literal) and table.this.name.startswith(USER_STAGE)
    ]
    if not references:
        raise NotImplementedError(f"this use of the user stage: {command[:200]}")
    temporary_tables = []
    try:
        for table in references:
            temporary_tables.append(staged_table(cursor, table))
        return _original_execute(
            cursor, statement.sql(dialect="snowflake"), params, *args, **kwargs
        )
    finally:
        for name in temporary_tables:
            cursor._duck_conn.execute(f"DROP TABLE IF EXISTS temp.main.{name}")


def staged_table(cursor: FakeSnowflakeCursor, table: exp.Table) -> str:
    """Load the staged files `table` names into a temporary table; point the query at it."""
    unsupported = {key for key, value in table.args.items() if value is not None}
    unsupported -= {"this", "format", "alias"}
    if unsupported or table.args.get("format") is None:
        raise NotImplementedError(
            f"staged-file query with {sorted(unsupported) or 'no file_format'}"
        )
    file_format = table.args["format"].sql(dialect="snowflake")
    connection = cursor._conn
    options = lookup_file_format(
        cursor._duck_conn, file_format, connection.database, connection.schema
    )
    if str(options.get("TYPE", "CSV")).upper() != "JSON":
        raise NotImplementedError(f"staged-file query over {options.get('TYPE')} files")

    name = f"_fs_user_stage_{uuid.uuid4().hex}"
    files = [str(path) for path in staged_files(table.this.name[len(USER_STAGE) :])]
    if files:
        # Insertion order is file order, line by line: rowid then stands in for SEQ8().
        cursor._duck_conn.execute(
            f"CREATE TEMP TABLE {name} AS SELECT json AS {STAGED_ROW} "
            "FROM read_json_objects(?, format = 'newline_delimited')",
            [files],
        )
    else:
        cursor._duck_conn.execute(f"CREATE TEMP TABLE {name} ({STAGED_ROW} JSON)")

    select = table.find_ancestor(exp.Select)
    replacement = exp.to_table(f"temp.main.{name}")
    if alias := table.args.get("alias"):
        replacement.set("alias", alias)
    table.replace(replacement)
    if select is not None:
        for parameter in list(select.find_all(exp.Parameter)):
            if parameter.name == "1":  # $1: the staged row
                parameter.replace(exp.column(STAGED_ROW))
        for sequence in list(select.find_all(exp.Seq8)):  # the row's place in the staged files
            sequence.replace(exp.column("rowid"))
        expand_qualify_aliases(select)
    return name


def identifier_key(identifier: exp.Identifier) -> str:
    """Snowflake's identity of a name: unquoted names are upper case."""
    return identifier.name if identifier.quoted else identifier.name.upper()


def expand_qualify_aliases(select: exp.Select) -> None:
    """Replace select-list aliases in QUALIFY by the expressions they name.

    Snowflake resolves `QUALIFY ... PARTITION BY id` to the alias `id`. DuckDB, once fakesnow
    turns the MERGE into a FULL OUTER JOIN with this query, binds `id` to the target table's
    column instead and fails ("The combining JOIN type must be INNER or LEFT for a LATERAL
    reference"). Writing the aliased expression in place means the same to Snowflake."""
    qualify = select.args.get("qualify")
    if qualify is None:
        return
    aliased = {
        identifier_key(expression.args["alias"]): expression.this
        for expression in select.expressions
        if isinstance(expression, exp.Alias)
    }
    for column in list(qualify.find_all(exp.Column)):
        if not column.table and (expression := aliased.get(identifier_key(column.this))):
            column.replace(expression.copy())


def connect(
    self: FakeSnow, database: str | None = None, schema: str | None = None, **kwargs: Any
) -> Any:
    """A session given a database but no schema uses the database's PUBLIC schema, as in
    Snowflake. fakesnow leaves it unset, and its MERGE (a temporary table per statement)
    then fails an assertion."""
    if database and not schema:
        schema = "PUBLIC"
    return _original_connect(self, database, schema, **kwargs)


@contextmanager
def patched(db_path: str | os.PathLike | None) -> Iterator[None]:
    """fakesnow's patch (databases kept in `db_path`), plus the user stage."""
    if db_path is not None:
        Path(db_path).mkdir(parents=True, exist_ok=True)
    FakeSnowflakeCursor.execute = execute  # type: ignore[method-assign]
    FakeSnow.connect = connect  # type: ignore[method-assign]
    try:
        with fakesnow.patch(db_path=db_path):
            yield
    finally:
        FakeSnowflakeCursor.execute = _original_execute  # type: ignore[method-assign]
        FakeSnow.connect = _original_connect  # type: ignore[method-assign]
        # fakesnow makes its stage folder at import and never removes it (one per process).
        shutil.rmtree(stage.LOCAL_BUCKET_PATH, ignore_errors=True)


# ---------------------------------------------------------------- entry points


def target_snowflake() -> None:
    """`target-snowflake` as Meltano invokes it, on the databases in $FAKESNOW_DB_PATH."""
    from target_snowflake.target import TargetSnowflake

    db_path = os.environ.get(DB_PATH_VARIABLE)
    if not db_path:
        sys.exit(f"{DB_PATH_VARIABLE} is not set: the folder fakesnow keeps its databases in")

    class OneSinkAtATime(TargetSnowflake):
        """The same target, draining one stream at a time. Snowflake serves concurrent
        sessions; fakesnow does not: two MERGE transactions at once each make its temporary
        `merge_candidates`, and one fails on commit ("PRIMARY KEY or UNIQUE constraint
        violation: duplicate key "RAW, PUBLIC, MERGE_CANDIDATES"", seen under load)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.max_parallelism = 1

    with patched(db_path):
        OneSinkAtATime.cli()


def dbt() -> None:
    """`dbt` as Meltano's dbt-snowflake--fakesnow utility invokes it, on $FAKESNOW_DB_PATH."""
    from dbt.cli.main import cli

    db_path = os.environ.get(DB_PATH_VARIABLE)
    if not db_path:
        sys.exit(f"{DB_PATH_VARIABLE} is not set: the folder fakesnow keeps its databases in")
    with patched(db_path):
        cli()  # click exits (SystemExit) with dbt's code; patched() still cleans up


def encode(value: Any) -> Any:
    """JSON for a value the connector returned; types JSON lacks are tagged so they survive."""
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return value


def query(db_path: str, database: str, statements: Sequence[str]) -> None:
    with patched(db_path):
        connection = snowflake.connector.connect(database=database)
        cursor = connection.cursor(snowflake.connector.DictCursor)
        for statement in statements:
            rows = cursor.execute(statement).fetchall()
            encoded = [{name: encode(value) for name, value in row.items()} for row in rows]
            print(json.dumps(encoded))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="guestdata-fakesnow", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run a console script of this venv, patched")
    run_parser.add_argument("--db-path", default=os.environ.get(DB_PATH_VARIABLE))
    run_parser.add_argument("program")
    run_parser.add_argument("arguments", nargs=argparse.REMAINDER)
    query_parser = commands.add_parser("query", help="print each statement's rows as JSON")
    query_parser.add_argument("--db-path", default=os.environ.get(DB_PATH_VARIABLE), required=False)
    query_parser.add_argument("--database", required=True)
    query_parser.add_argument("statements", nargs="+")
    args = parser.parse_args(argv)

    if args.command == "query":
        query(args.db_path, args.database, args.statements)
        return 0
    program = shutil.which(args.program, path=str(Path(sys.executable).parent)) or args.program
    sys.argv = [program, *args.arguments]
    with patched(args.db_path):
        runpy.run_path(program, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
