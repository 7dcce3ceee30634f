"""One dbt build for every account against one build per account (docs/bench-dbt.md).

Loads one small sandbox account with Meltano into a throwaway database (raw schema `guestdata`),
then copies its raw tables into N account schemas (`guestdata_a00000`...): straight into the
database, as the loader would have left them. Side by side in one run:

- `--accounts 200`: one build of every account's raw schema into one set of models, first and
  nightly (nothing new), against per-account builds (today's layout: each account's own models),
  timed on `--sample` accounts and multiplied by N (each takes the same time: the same data);
- `--tiny 1000 10000`: the models' nightly run (`dbt run`) at that many accounts of a few rows
  per table each, with each run's largest statement (bytes, from dbt's debug log), the
  source-deletions and erasure hooks' seconds (run_results.json) and nightly / first;
  `--erasures 100`: that many of them hold an erasure request (one guest's, recorded by
  erase_person in the template account, then copied);
- `--history medium large`: one account of each size loaded with Meltano and built; then a day
  of new data (as many arrivals, ledger lines, rewards and redemptions as its last whole day
  had) loaded by the daily sync; the nightly build against a `--full-refresh` build of the same
  raw data. The ratios: nightly / full per size, and the nightly build's growth from one size to
  the next. Beside them, the nightly build of the same project over empty raw tables: dbt's fixed
  cost, below which no nightly build goes;
- `--fakesnow 1000`: the same tiny accounts on Snowflake, emulated by fakesnow: one small
  account loaded by target-snowflake, copied into that many schemas of a few rows each, then
  dbt-snowflake's first and nightly `dbt run`, with the largest statement it sent (fakesnow's
  statement log).

Run from the repository root: `PYTHONPATH=tests:scripts .venv/bin/python bench/dbt_build.py`.
`--transform DIR` builds another copy of the dbt project (e.g. with an earlier revision's
macros) against the same loads. `--before DIR` builds both, side by side in one run: each
measured pair of builds (first and nightly) of `--accounts` and `--tiny` runs with the project
of DIR too (e.g. `git archive 8861222 transform | tar -x -C /tmp/before`), on the same raw
schemas into models of its own, and the results name it `..._before`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import support.dbt
from demo_pipeline import Destination
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import LOAD_ONLY, RUN_ALL, Dbt, dbt_env, meltano_project, read_results
from support.pipeline import postgres_server, throwaway_database
from support.snowflake_pipeline import SCHEMA, SnowflakePipeline, installed_fakesnow_venv

RESULTS = Path(__file__).parent / "results"
TEMPLATE = "guestdata"
TINY_ROWS = 3  # rows per raw table of a tiny account
EMPTY_PREFIX = "guestdata_empty_"  # the raw tables without a row (--history)
COPY_BATCH = 100  # account schemas copied per transaction
TINY_RUN_TIMEOUT = 3600  # seconds; a first run of 10,000 accounts took over 600 on a busy machine
PG_BIN = Path("/usr/lib/postgresql/15/bin")
OWN_SERVER_PORT = 5439  # names the Unix socket only: the own server listens on no TCP port
OWN_SERVER_CONNECTIONS = 100
DBT_THREADS = 4  # transform/profiles.yml
# A day of new data: as many rows of each as the last whole London day has (the raw table's time).
DAY_OF = {
    "guests": "visited_at",
    "member_ledger": "created_at",
    "rewards": "issued_at",
    "redemptions": "created_at",
}
LEDGER_MEMBERS = 200  # the day's ledger lines go to this many members (one request each)
LOAD_TIMEOUT = 3600  # a first load of the large account takes minutes, more on a busy machine
# A debug-log entry of dbt's text format starts with its time (colours off: dbt_env); a statement
# dbt sent is the entry "On <connection>: <sql>", its SQL running to the next entry.
LOG_ENTRY = re.compile(r"^(?:\x1b\[0m)?\d{2}:\d{2}:\d{2}\.\d+ \[", re.M)
STATEMENT = re.compile(r"\]: On [^:\s]+: ", re.S)
DELETIONS_HOOK = "apply_source_deletions"  # transform/dbt_project.yml's on-run-start entries
ERASURE_HOOK = "apply_erasures"
# The suppression and salt tables erase_person creates in an account's raw schema
# (macros/erasure_sql.sql): copied to the first --erasures accounts only.
ERASURE_TABLES = ("guestdata_erasures", "guestdata_erasure_salt")
# --fakesnow: the template's raw tables copied into `count` schemas straight in fakesnow's DuckDB
# file, one transaction (through fakesnow, each statement is parsed and transpiled: minutes).
# fakesnow reads them back like its own (its information_schema is views over DuckDB's catalog).
COPY_FAKESNOW_SCHEMAS = """
import sys, duckdb
database_file, template, prefix, count, rows = sys.argv[1:]
connection = duckdb.connect(database_file)
tables = [name for (name,) in connection.execute(
    "select table_name from information_schema.tables"
    " where table_schema = ? and table_type = 'BASE TABLE'", [template]).fetchall()]
connection.execute("begin")
for number in range(int(count)):
    schema = f"{prefix}{number:05d}"
    connection.execute(f'create schema "{schema}"')
    for table in tables:
        connection.execute(f'create table "{schema}"."{table}" as'
                           f' select * from "{template}"."{table}" limit {int(rows)}')
connection.execute("commit")
"""


def copy_accounts(
    conninfo: str, count: int, prefix: str, rows: int | None, erasures: int = 0
) -> None:
    """`count` account schemas holding the template's raw tables (at most `rows` rows each); the
    first `erasures` of them its erasure requests too (ERASURE_TABLES, whole), if it has some."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (TEMPLATE,),
            )
        ]
        limit = sql.SQL(" LIMIT {}").format(sql.Literal(rows)) if rows is not None else sql.SQL("")
        # 10,000 accounts are 190,000 statements: one round trip per schema (its statements in
        # one string, without parameters), one commit per COPY_BATCH schemas.
        for first in range(0, count, COPY_BATCH):
            with connection.transaction():
                for number in range(first, min(first + COPY_BATCH, count)):
                    schema = f"{prefix}{number:05d}"
                    statements = [sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema))]
                    statements += [
                        sql.SQL("CREATE TABLE {} AS SELECT * FROM {}{}").format(
                            sql.Identifier(schema, table),
                            sql.Identifier(TEMPLATE, table),
                            sql.SQL("") if table in ERASURE_TABLES else limit,
                        )
                        for table in tables
                        if number < erasures or table not in ERASURE_TABLES
                    ]
                    connection.execute(sql.SQL("; ").join(statements))


@contextmanager
def own_server(accounts: int) -> Iterator[Destination]:
    """A PostgreSQL of the bench's own (initdb into a temporary directory, a Unix socket only),
    its lock table sized for `accounts`; stopped and removed at exit, whatever happened.

    PostgreSQL locks every relation a query reads until its transaction ends, in a table of
    max_locks_per_transaction x (max_connections + max_prepared_transactions) slots shared by
    all sessions: a union of 10,000 accounts' tables needs 10,000 of them (docs/decisions.md,
    "One warehouse for every account")."""
    with tempfile.TemporaryDirectory(prefix="guestdata-bench-pg-") as folder:
        data = Path(folder) / "data"
        # PostgreSQL refuses to run as root: then as the postgres system user, owning the folder.
        as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if as_owner:
            shutil.chown(folder, "postgres")
        subprocess.run(
            [*as_owner, str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
            check=True,
            capture_output=True,
        )
        settings = {
            "listen_addresses": "''",
            "unix_socket_directories": folder,
            "port": str(OWN_SERVER_PORT),
            "max_connections": str(OWN_SERVER_CONNECTIONS),
            "max_locks_per_transaction": str(locks_per_transaction(accounts)),
        }
        options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        log = Path(folder) / "log"
        pg_ctl = [*as_owner, str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log)]
        subprocess.run([*pg_ctl, "-w", "-o", options, "start"], check=True, capture_output=True)
        try:
            yield Destination(
                label=f"the bench's own PostgreSQL ({options})",
                host=folder,
                port=OWN_SERVER_PORT,
                user="postgres",
                password="",
            )
        finally:
            subprocess.run([*pg_ctl, "-w", "-m", "fast", "stop"], check=False, capture_output=True)


def locks_per_transaction(accounts: int) -> int:
    """max_locks_per_transaction for `accounts`: the source-deletions hook's transaction holds
    two relations per account (guests, read_windows), each of dbt's threads one model's union
    (a table per account), each relation with its primary key's index."""
    held_at_once = 2 * (2 + DBT_THREADS) * accounts
    return max(64, -(-held_at_once // OWN_SERVER_CONNECTIONS))


def timed_build(dbt: Dbt, command: str = "build", *options: str, timeout: float = 600) -> float:
    """Seconds of one `dbt build` (or `dbt run`), every model built."""
    return measured_build(dbt, command, *options, timeout=timeout)["seconds"]


def measured_build(
    dbt: Dbt, command: str = "build", *options: str, timeout: float = 600
) -> dict[str, Any]:
    """One `dbt build` (or `dbt run`), every model built: its seconds, the largest statement it
    sent (bytes of SQL, from dbt's debug log), and the source-deletions and erasure hooks'
    seconds, statements and largest statement."""
    logs = Path(tempfile.mkdtemp(prefix="run-", dir=dbt.target_dir))  # this run's log alone
    # dbt rolls its log over at 10 MB by default; a run of 1,000 accounts logs more.
    log_env = {"DBT_LOG_PATH": str(logs), "DBT_LOG_FILE_MAX_BYTES": "0"}
    started = time.monotonic()
    run = dbt.run(command, *options, extra_env=log_env, timeout=timeout)
    elapsed = time.monotonic() - started
    models = run.statuses("model")
    if not models or set(models.values()) != {"success"}:
        sys.exit(f"dbt build failed: {run.output[-3000:]}")
    logged = (logs / "dbt.log").read_bytes().decode("utf-8", errors="replace")
    shutil.rmtree(logs)  # tens of MB at 1,000 accounts
    measured: dict[str, Any] = {
        "seconds": elapsed,
        "largest_statement_bytes": max(statement_sizes(logged), default=0),
    }
    for name, macro in (("deletions", DELETIONS_HOOK), ("erasure", ERASURE_HOOK)):
        place = hook_place(macro)
        hook_statements = statement_sizes(hook_log(logged, place))
        measured[f"{name}_hook_s"] = hook_seconds(dbt.target_dir, place)
        measured[f"{name}_hook_statements"] = len(hook_statements)
        measured[f"{name}_hook_largest_statement_bytes"] = max(hook_statements, default=0)
    return measured


def statement_sizes(logged: str) -> list[int]:
    """Bytes of each SQL statement in a part of dbt's debug log, in order."""
    sizes = []
    for entry in LOG_ENTRY.split(logged):
        found = STATEMENT.search(entry.split("\n", 1)[0])
        if found is not None:
            sizes.append(len(entry[found.end() :].strip().encode()))
    return sizes


def hook_place(macro: str) -> int:
    """The place of the on-run-start hook calling `macro` in dbt_project.yml's list (dbt names
    a hook by it)."""
    project = (support.dbt.TRANSFORM / "dbt_project.yml").read_text()
    hooks = project.split("on-run-start:", 1)[1].split("\n\n", 1)[0].splitlines()
    calls = [line for line in hooks if line.strip().startswith("- ")]
    return next(number for number, line in enumerate(calls) if macro in line)


def hook_log(logged: str, place: int) -> str:
    """The part of a run's debug log the on-run-start hook at `place` wrote: dbt runs a hook's
    statements while it renders it, before it writes the hook's SQL, so from the hook before's
    SQL to its own."""
    written = 'Writing injected SQL for node "operation.guestdata.guestdata-on-run-start-{}"'
    end = logged.find(written.format(place))
    start = logged.find(written.format(place - 1)) if place else 0
    return logged[max(start, 0) : end] if end >= 0 else ""


def hook_seconds(target_dir: Path, place: int) -> float | None:
    """Seconds the on-run-start hook at `place` took in the last run (run_results.json)."""
    results = json.loads((target_dir / "run_results.json").read_text())["results"]
    name = f"on-run-start-{place}"
    return next(
        (result["execution_time"] for result in results if result["unique_id"].endswith(name)),
        None,
    )


def dbt_for(server: Any, database: str, work: Path, label: str, **env: str) -> Dbt:
    target = work / label
    target.mkdir(parents=True, exist_ok=True)
    # No lookback: the copies' loader times are minutes old, and a nightly build reads only
    # what was loaded since the last one (docs/transform-incremental.md).
    env = {**env, "GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0", "DBT_LOG_PATH": str(target / "logs")}
    return Dbt(env={**dbt_env(server, database), **env}, target_dir=target)


def last_day_counts(conninfo: str) -> dict[str, int]:
    """Rows of each table of DAY_OF whose London day is yesterday's."""
    counts = {}
    with psycopg.connect(conninfo) as connection:
        for table, column in DAY_OF.items():
            statement = sql.SQL(
                "SELECT count(*) FROM {} WHERE ({} AT TIME ZONE 'Europe/London')::date"
                " = (now() AT TIME ZONE 'Europe/London')::date - 1"
            ).format(sql.Identifier(TEMPLATE, table), sql.Identifier(column))
            ((counts[table],),) = connection.execute(statement).fetchall()
    return counts


def add_a_day(sandbox: SandboxProcess, conninfo: str) -> dict[str, int]:
    """The sandbox's account gets as much new data as its last whole day had."""
    counts = last_day_counts(conninfo)
    sandbox.mutate("add_guests", count=counts["guests"])
    sandbox.mutate("add_rewards", count=counts["rewards"])
    sandbox.mutate("add_redemptions", count=counts["redemptions"])
    with psycopg.connect(conninfo) as connection:
        members = [
            member_id
            for (member_id,) in connection.execute(
                f"SELECT id FROM {TEMPLATE}.members ORDER BY id DESC LIMIT {LEDGER_MEMBERS}"
            )
        ]
    per_member = -(-counts["member_ledger"] // len(members))
    for member_id in members[: -(-counts["member_ledger"] // per_member)] if per_member else []:
        sandbox.mutate("add_ledger_lines", member_id=member_id, count=per_member)
    return counts


def history(server: Any, work: Path, size: str, seed: int) -> dict[str, Any]:
    """One account of `size`: its first build, then a day of new data loaded, the nightly build
    against a --full-refresh build of the same raw data (a schema of its own)."""
    with (
        throwaway_database(server, f"guestdata_bench_{size}") as database,
        SandboxProcess(size=size, seed=seed, limits=False) as sandbox,
    ):
        conninfo = server.conninfo(database)
        load = meltano_project(sandbox, server, database, work / f"load-{size}", work / "logs")
        started = time.monotonic()
        load.run(*LOAD_ONLY, timeout=LOAD_TIMEOUT)
        first_load = time.monotonic() - started
        nightly = dbt_for(server, database, work, f"{size}-nightly")
        first = timed_build(nightly)
        day = add_a_day(sandbox, conninfo)
        started = time.monotonic()
        load.run(*LOAD_ONLY, timeout=LOAD_TIMEOUT)
        day_load = time.monotonic() - started
        after_a_day = timed_build(nightly)
        full = dbt_for(server, database, work, f"{size}-full", GUESTDATA_DBT_SCHEMA="full_refresh")
        full_build = timed_build(full, "build", "--full-refresh")
        # The same project over the same tables, empty: what a nightly build costs before it
        # reads a row (dbt's start and its nodes), so the least nightly / full can be.
        copy_accounts(conninfo, 1, EMPTY_PREFIX, 0)
        empty = dbt_for(
            server, database, work, f"{size}-empty", GUESTDATA_PG_SCHEMA=f"{EMPTY_PREFIX}00000"
        )
        timed_build(empty)
        empty_build = timed_build(empty)
        with psycopg.connect(conninfo) as connection:
            ((guests,),) = connection.execute(f"SELECT count(*) FROM {TEMPLATE}.guests").fetchall()
    return {
        "raw_guests": guests,
        "day_of_new_data": day,
        "first_load_s": first_load,
        "day_load_s": day_load,
        "first_build_s": first,
        "nightly_build_s": after_a_day,
        "full_build_s": full_build,
        "nightly_over_full": after_a_day / full_build,
        "empty_nightly_build_s": empty_build,
        "empty_over_full": empty_build / full_build,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=200, help="0: none")
    parser.add_argument(
        "--sample", type=int, default=3, help="per-account builds timed (0: the one build alone)"
    )
    parser.add_argument("--tiny", type=int, nargs="*", default=[1000])
    parser.add_argument("--history", nargs="*", default=["medium", "large"])
    parser.add_argument(
        "--erasures",
        type=int,
        default=0,
        help="this many of the --tiny accounts hold an erasure request (the hooks' cost)",
    )
    parser.add_argument(
        "--fakesnow",
        type=int,
        nargs="*",
        default=[],
        help="tiny accounts on fakesnow (dbt-snowflake): the runs and their largest statement",
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--postgres-url", help="the server to use (default: 127.0.0.1:5432)")
    parser.add_argument(
        "--transform",
        type=Path,
        help="the dbt project to build (default: transform/), e.g. a copy with earlier macros",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="an earlier revision's dbt project, built beside --transform's on the same loads",
    )
    parser.add_argument(
        "--own-server",
        action="store_true",
        help="start a PostgreSQL of the bench's own, its lock table sized for the largest --tiny",
    )
    arguments = parser.parse_args()
    if arguments.transform is not None:
        # Dbt.run reads the project's folder from support.dbt at each call.
        support.dbt.TRANSFORM = arguments.transform.resolve()
    RESULTS.mkdir(exist_ok=True)
    work = RESULTS / "dbt_build-work"
    for folder in ("load", "logs"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"accounts": arguments.accounts, "sample": arguments.sample}
    results["transform"] = str(support.dbt.TRANSFORM)
    if arguments.before is not None:
        results["before"] = str(arguments.before.resolve())
    with (
        own_server(max([arguments.accounts, *arguments.tiny]))
        if arguments.own_server
        else postgres_server(arguments.postgres_url)
    ) as server:
        results["server"] = server.label
        if arguments.accounts or arguments.tiny:
            results.update(across_accounts(server, work, arguments))
        for size in arguments.history:
            results[f"history_{size}"] = history(server, work, size, arguments.seed)
            print(size, json.dumps(results[f"history_{size}"], indent=2), flush=True)
        for count in arguments.fakesnow:
            fakesnow = fakesnow_tiny(work, count, arguments.seed)
            results[f"fakesnow_tiny_{count}"] = fakesnow
            print(count, "tiny accounts on fakesnow:", json.dumps(fakesnow), flush=True)
        for smaller, larger in itertools.pairwise(arguments.history):
            growth = (
                results[f"history_{larger}"]["nightly_build_s"]
                / results[f"history_{smaller}"]["nightly_build_s"]
            )
            results[f"nightly_growth_{smaller}_to_{larger}"] = growth
            print(f"nightly build, {larger} / {smaller}: {growth:.2f}", flush=True)
    (RESULTS / "dbt_build-latest.json").write_text(json.dumps(results, indent=2))


def across_accounts(server: Any, work: Path, arguments: argparse.Namespace) -> dict[str, Any]:
    """Copies of one small account: one build of them all against per-account builds, and the
    tiny accounts' runs."""
    results: dict[str, Any] = {}
    with (
        throwaway_database(server, "guestdata_bench_dbt") as database,
        SandboxProcess(size="small", seed=arguments.seed, limits=False) as sandbox,
    ):
        conninfo = server.conninfo(database)
        meltano_project(sandbox, server, database, work / "load", work / "logs").run(*RUN_ALL)
        if arguments.accounts:
            results["builds_across_accounts"] = builds_across_accounts(
                server, database, work, arguments
            )
            print(json.dumps(results["builds_across_accounts"], indent=2), flush=True)
        if arguments.erasures:
            erase_a_guest(server, database, work, conninfo)
        for count in arguments.tiny:
            prefix = f"guestdata_t{count}_"
            copy_accounts(conninfo, count, prefix, TINY_ROWS, arguments.erasures)
            for suffix, project in projects(arguments):
                with built_from(project):
                    tiny = dbt_for(
                        server,
                        database,
                        work,
                        f"tiny-{count}{suffix}",
                        GUESTDATA_RAW_SCHEMAS=prefix.replace("_", "\\_") + "%",
                        GUESTDATA_DBT_SCHEMA=f"guestdata_tiny_{count}{suffix}",
                    )
                    # dbt run: a few rows break the reconciliations, whose failures would skip
                    # the marts in a build.
                    first = measured_build(tiny, "run", timeout=TINY_RUN_TIMEOUT)
                    nightly = measured_build(tiny, "run", timeout=TINY_RUN_TIMEOUT)
                name = f"tiny_{count}{suffix}"
                results[name] = {
                    "first_s": first["seconds"],
                    "nightly_s": nightly["seconds"],
                    "nightly_over_first": nightly["seconds"] / first["seconds"],
                    **{f"first_{key}": value for key, value in first.items() if key != "seconds"},
                    **{
                        f"nightly_{key}": value
                        for key, value in nightly.items()
                        if key != "seconds"
                    },
                }
                print(count, f"tiny accounts{suffix}:", json.dumps(results[name]), flush=True)
    return results


def projects(arguments: argparse.Namespace) -> list[tuple[str, Path | None]]:
    """The dbt projects each measured pair of builds runs with, and the suffix of their names:
    --transform's (or transform/), then --before's."""
    before = [("_before", arguments.before.resolve())] if arguments.before is not None else []
    return [("", None), *before]


@contextmanager
def built_from(project: Path | None) -> Iterator[None]:
    """Dbt.run (and hook_place) build `project` within (None: --transform's, as set)."""
    chosen = support.dbt.TRANSFORM
    support.dbt.TRANSFORM = project or chosen
    try:
        yield
    finally:
        support.dbt.TRANSFORM = chosen


def fakesnow_tiny(work: Path, count: int, seed: int) -> dict[str, Any]:
    """`count` tiny accounts on fakesnow: a small account loaded by the fakesnow job, copied
    into `count` schemas, then dbt-snowflake's first and nightly `dbt run` of them all (every
    model built), each with its seconds and the largest statement it sent."""
    folder = work / f"fakesnow-{count}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    install = folder / "install"
    install.mkdir()
    venv = installed_fakesnow_venv(install)
    with SandboxProcess(size="small", seed=seed, limits=False) as sandbox:
        pipeline = SnowflakePipeline.in_folder(folder, venv, sandbox.base_url)
        pipeline.run()  # the template account, into SCHEMA
    prefix = f"{SCHEMA}_T{count}_"
    database_file = pipeline.warehouse.db_path / f"{pipeline.warehouse.database}.db"
    copy = [venv / "bin" / "python", "-c", COPY_FAKESNOW_SCHEMAS, database_file, SCHEMA, prefix]
    subprocess.run([*copy, str(count), str(TINY_ROWS)], check=True)
    measured: dict[str, Any] = {}
    for build in ("first", "nightly"):
        logged = len(pipeline.statements())
        started = time.monotonic()
        # dbt run, as --tiny: a few rows break the reconciliations.
        pipeline.invoke_dbt(
            "run", GUESTDATA_RAW_SCHEMAS=f"{prefix}%", GUESTDATA_DBT_SCHEMA=f"TINY_{count}"
        )
        measured[f"{build}_s"] = time.monotonic() - started
        assert pipeline.dbt_target is not None
        results = read_results(pipeline.dbt_target)
        models = {name for name, result in results.items() if result["resource_type"] == "model"}
        failed = {name for name in models if results[name]["status"] != "success"}
        if not models or failed:
            sys.exit(f"dbt run on fakesnow: models not built: {sorted(failed) or 'none ran'}")
        sizes = [len(statement.encode()) for statement in pipeline.statements()[logged:]]
        measured[f"{build}_statements"] = len(sizes)
        measured[f"{build}_largest_statement_bytes"] = max(sizes, default=0)
    measured["nightly_over_first"] = measured["nightly_s"] / measured["first_s"]
    return measured


def erase_a_guest(server: Any, database: str, work: Path, conninfo: str) -> None:
    """An erasure request in the template account (erase_person, as a user records one): a guest
    its tiny copies hold, by email."""
    with psycopg.connect(conninfo) as connection:
        row = connection.execute(
            sql.SQL(
                "SELECT email FROM {} WHERE email IS NOT NULL AND email NOT LIKE '%%*%%' LIMIT 1"
            ).format(sql.Identifier(TEMPLATE, "guests"))
        ).fetchone()
    assert row is not None, "the template account holds no guest with an email"
    erase = dbt_for(server, database, work, "erase", GUESTDATA_PG_SCHEMA=TEMPLATE)
    run = erase.run(
        "run-operation", "erase_person", extra_env={"GUESTDATA_ERASE_IDENTIFIER": row[0]}
    )
    if run.returncode != 0:
        sys.exit(f"erase_person failed: {run.output[-3000:]}")


def builds_across_accounts(
    server: Any, database: str, work: Path, arguments: argparse.Namespace
) -> dict[str, float]:
    accounts, sample = arguments.accounts, arguments.sample
    copy_accounts(server.conninfo(database), accounts, "guestdata_a", None)
    per_account_first, per_account_nightly = [], []
    for number in range(sample):
        schema = f"guestdata_a{number:05d}"
        one = dbt_for(server, database, work, f"one-{number}", GUESTDATA_PG_SCHEMA=schema)
        per_account_first.append(timed_build(one))
        per_account_nightly.append(timed_build(one))
    measured: dict[str, float] = {}
    for suffix, project in projects(arguments):
        with built_from(project):
            every = dbt_for(
                server,
                database,
                work,
                f"every{suffix}",
                GUESTDATA_RAW_SCHEMAS="guestdata\\_a%",
                GUESTDATA_DBT_SCHEMA=f"guestdata_every_account{suffix}",
            )
            one_first, one_nightly = timed_build(every), timed_build(every)
        measured[f"one_build_first_s{suffix}"] = one_first
        measured[f"one_build_nightly_s{suffix}"] = one_nightly
        # a nightly with nothing new against the first build (issue 43: at most 1/4)
        measured[f"one_build_nightly_over_first{suffix}"] = one_nightly / one_first
    if sample:  # --sample 0: the one build alone
        measured["per_account_first_s"] = statistics.median(per_account_first)
        measured["per_account_nightly_s"] = statistics.median(per_account_nightly)
        for build in ("first", "nightly"):
            measured[f"{build}_ratio"] = measured[f"one_build_{build}_s"] / (
                accounts * measured[f"per_account_{build}_s"]
            )
    return measured


if __name__ == "__main__":
    main()
