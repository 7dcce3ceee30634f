"""One dbt build for every account against one build per account (docs/bench.md, "dbt builds
across accounts").

Loads one small sandbox account with Meltano into a throwaway database (raw schema `guestdata`),
then copies its raw tables into N account schemas (`guestdata_a00000`...): straight into the
database, as the loader would have left them. Side by side in one run:

- `--accounts 200`: one build of every account's raw schema into one set of models, first and
  nightly (nothing new), against per-account builds (today's layout: each account's own models),
  timed on `--sample` accounts and multiplied by N (each takes the same time: the same data);
- `--tiny 1000 10000`: the models' nightly run (`dbt run`) at that many accounts of a few rows
  per table each.

Run from the repository root: `PYTHONPATH=tests:scripts .venv/bin/python bench/dbt_build.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import RUN_ALL, Dbt, dbt_env, meltano_project
from support.pipeline import postgres_server, throwaway_database

RESULTS = Path(__file__).parent / "results"
TEMPLATE = "guestdata"
TINY_ROWS = 3  # rows per raw table of a tiny account


def copy_accounts(conninfo: str, count: int, prefix: str, rows: int | None) -> None:
    """`count` account schemas holding the template's raw tables (at most `rows` rows each)."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (TEMPLATE,),
            )
        ]
        limit = sql.SQL(" LIMIT {}").format(sql.Literal(rows)) if rows else sql.SQL("")
        for number in range(count):
            schema = f"{prefix}{number:05d}"
            with connection.transaction():
                connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                for table in tables:
                    connection.execute(
                        sql.SQL("CREATE TABLE {} AS SELECT * FROM {}{}").format(
                            sql.Identifier(schema, table), sql.Identifier(TEMPLATE, table), limit
                        )
                    )


def timed_build(dbt: Dbt, command: str = "build") -> float:
    """Seconds of one `dbt build` (or `dbt run`), every model built."""
    started = time.monotonic()
    run = dbt.run(command)
    elapsed = time.monotonic() - started
    models = run.statuses("model")
    if not models or set(models.values()) != {"success"}:
        sys.exit(f"dbt build failed: {run.output[-3000:]}")
    return elapsed


def dbt_for(server: Any, database: str, work: Path, label: str, **env: str) -> Dbt:
    target = work / label
    target.mkdir(parents=True, exist_ok=True)
    # No lookback: the copies' loader times are minutes old, and a nightly build reads only
    # what was loaded since the last one (docs/transform.md, "What is incremental").
    env = {**env, "GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0", "DBT_LOG_PATH": str(target / "logs")}
    return Dbt(env={**dbt_env(server, database), **env}, target_dir=target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--sample", type=int, default=3, help="per-account builds timed")
    parser.add_argument("--tiny", type=int, nargs="*", default=[1000])
    parser.add_argument("--seed", type=int, default=42)
    arguments = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    work = RESULTS / "dbt_build-work"
    for folder in ("load", "logs"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"accounts": arguments.accounts, "sample": arguments.sample}
    with (
        postgres_server() as server,
        throwaway_database(server, "guestdata_bench_dbt") as database,
        SandboxProcess(size="small", seed=arguments.seed, limits=False) as sandbox,
    ):
        conninfo = server.conninfo(database)
        meltano_project(sandbox, server, database, work / "load", work / "logs").run(*RUN_ALL)
        copy_accounts(conninfo, arguments.accounts, "guestdata_a", None)

        per_account_first, per_account_nightly = [], []
        for number in range(arguments.sample):
            schema = f"guestdata_a{number:05d}"
            one = dbt_for(server, database, work, f"one-{number}", GUESTDATA_PG_SCHEMA=schema)
            per_account_first.append(timed_build(one))
            per_account_nightly.append(timed_build(one))
        every = dbt_for(
            server,
            database,
            work,
            "every",
            GUESTDATA_RAW_SCHEMAS="guestdata\\_a%",
            GUESTDATA_DBT_SCHEMA="guestdata_every_account",
        )
        one_first, one_nightly = timed_build(every), timed_build(every)
        results["builds_across_accounts"] = {
            "per_account_first_s": statistics.median(per_account_first),
            "per_account_nightly_s": statistics.median(per_account_nightly),
            "one_build_first_s": one_first,
            "one_build_nightly_s": one_nightly,
            "first_ratio": one_first / (arguments.accounts * statistics.median(per_account_first)),
            "nightly_ratio": one_nightly
            / (arguments.accounts * statistics.median(per_account_nightly)),
        }
        print(json.dumps(results["builds_across_accounts"], indent=2), flush=True)

        for count in arguments.tiny:
            prefix = f"guestdata_t{count}_"
            copy_accounts(conninfo, count, prefix, TINY_ROWS)
            tiny = dbt_for(
                server,
                database,
                work,
                f"tiny-{count}",
                GUESTDATA_RAW_SCHEMAS=prefix.replace("_", "\\_") + "%",
                GUESTDATA_DBT_SCHEMA=f"guestdata_tiny_{count}",
            )
            # dbt run: a few rows per table break the reconciliations, whose failures would
            # skip the marts in a build.
            first = timed_build(tiny, "run")
            nightly = timed_build(tiny, "run")
            results[f"tiny_{count}"] = {"first_s": first, "nightly_s": nightly}
            print(count, "tiny accounts:", results[f"tiny_{count}"], flush=True)
    (RESULTS / "dbt_build-latest.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
