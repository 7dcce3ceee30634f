"""How long Airflow takes to parse `dags/` with many accounts: the DagBag fill the DAG processor
does on every parse (Airflow's default `dagbag_import_timeout` is 30 s), and the serialized
size of the DAGs it stores, and the Variables each parse reads, for generated accounts
configurations side by side.

    .venv/bin/python bench/dag_parse.py [--accounts 1000 10000] [--runs 3] [--ref GIT_REV]

Accounts are generated like a reseller's: four worker queues, one key to five keys each, sizes
mixed (one in a hundred large, so split by group), one in fifty on a schedule of its own (five
schedules), one in ten with a subset of the stream groups. Each parse runs in a fresh Python
process (Airflow imported first, not timed). `--ref` parses the same files with the DAG factory
of another git revision too (e.g. the one before the accounts were mapped at run time), from a
temporary worktree, for a ratio measured in the same run. The median of --runs is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ["core", "members", "rewards", "offers", "stats"]
DEFAULT_TIMEOUT = 30.0  # Airflow's [core] dagbag_import_timeout
SCHEDULES = ["0 1 * * *", "0 2 * * *", "30 2 * * *", "0 3 * * 1-5", "none"]

# Runs in the child: parse, count, serialize; prints one JSON line.
PARSE = """
import json, os, sys, time
# The revision asked for, ahead of the working directory and the editable install.
sys.path.insert(0, os.environ["GUESTDATA_PROJECT_ROOT"])
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import Variable
from airflow.serialization.serialized_objects import DagSerialization
# Every Variable the parse reads (each one a lookup of the metadata database or secrets backend).
reads = []
real_get = Variable.get
Variable.get = lambda key, *args, **kwargs: reads.append(key) or real_get(key, *args, **kwargs)
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.perf_counter() - started
Variable.get = real_get
started = time.perf_counter()
size = sum(len(json.dumps(DagSerialization.to_dict(dag))) for dag in bag.dags.values())
print(json.dumps({
    "parse_seconds": seconds,
    "variable_reads": len(reads),
    "serialize_seconds": time.perf_counter() - started,
    "serialized_bytes": size,
    "dags": len(bag.dags),
    "tasks": sum(len(dag.tasks) for dag in bag.dags.values()),
    "import_errors": {str(k): str(v)[-300:] for k, v in bag.import_errors.items()},
    "factory": sys.modules["tap_guestdata"].__file__,
}))
"""


def accounts_document(count: int) -> dict[str, Any]:
    accounts = []
    for n in range(count):
        name = f"venue_{n:05d}"
        entry: dict[str, Any] = {
            "name": name,
            "keys": [f"{name}_key_{k}" for k in range(1, n % 5 + 2)],
            "size": "large" if n % 100 == 0 else ("medium" if n % 7 == 0 else "small"),
        }
        if n % 50 == 1:
            entry["schedule"] = SCHEDULES[(n // 50) % len(SCHEDULES)]
        if n % 10 == 3:
            entry["groups"] = GROUPS[: 2 + n % 3]
        accounts.append(entry)
    return {"queues": [f"worker_{q}" for q in range(1, 5)], "accounts": accounts}


def parse_once(accounts_file: Path, source: Path, home: Path) -> dict[str, Any]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "GUESTDATA_"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # Measured past Airflow's 30 s default (which would turn the parse into an import
        # error); the table flags a parse over it.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
        "GUESTDATA_ACCOUNTS": str(accounts_file),
        "GUESTDATA_PROJECT_ROOT": str(source),
    }
    result = subprocess.run(
        [sys.executable, "-c", PARSE, str(source / "dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"parse failed:\n{result.stderr[-3000:]}")
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    if figures["import_errors"]:
        raise SystemExit(f"import errors: {figures['import_errors']}")
    if not figures.pop("factory").startswith(str(source)):
        raise SystemExit(f"{source}: its tap_guestdata was not the one imported")
    return figures


def measure(label: str, source: Path, accounts_file: Path, runs: int, home: Path) -> dict[str, Any]:
    samples = [parse_once(accounts_file, source, home) for _ in range(runs)]
    median = statistics.median(sample["parse_seconds"] for sample in samples)
    return {"code": label, **samples[0], "parse_seconds": round(median, 2)}


def worktree(ref: str, scratch: Path) -> Path:
    path = scratch / "ref"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), ref],
        check=True,
        capture_output=True,
    )
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ref", help="also parse with the DAG factory of this git revision")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dag-parse-"))
    home = scratch / "airflow-home"
    home.mkdir()
    sources = {"this checkout": ROOT}
    if args.ref:
        sources[args.ref] = worktree(args.ref, scratch)
    rows = []
    try:
        for count in args.accounts:
            accounts_file = scratch / f"accounts-{count}.json"
            accounts_file.write_text(json.dumps(accounts_document(count)))
            for label, source in sources.items():
                row = {"accounts": count, **measure(label, source, accounts_file, args.runs, home)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if args.ref:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(scratch / "ref")],
                check=False,
                capture_output=True,
            )
    print("\n| accounts | code | DAGs | tasks | parse (s) | Variable reads | serialized (KB) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        over = " (over the 30 s import timeout)" if row["parse_seconds"] > DEFAULT_TIMEOUT else ""
        print(
            f"| {row['accounts']:,} | {row['code']} | {row['dags']:,} | {row['tasks']:,} "
            f"| {row['parse_seconds']:.2f}{over} | {row['variable_reads']} "
            f"| {row['serialized_bytes'] / 1024:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
