"""How long each of the pipeline's processes takes to start, from compiled bytecode against
compiling its modules again (docs/bench-tap.md, "Process start").

    PYTHONPATH=tests:scripts .venv/bin/python bench/process_start.py [--runs 5]

Every task of a run starts processes: Meltano, the tap, the loader, dbt. uv writes no bytecode
unless asked (meltano.yml sets UV_COMPILE_BYTECODE for the plugin venvs, scripts/bootstrap
passes --compile-bytecode), and where PYTHONDONTWRITEBYTECODE is set, as in many images and on
this machine, Python never caches it either: each start compiles every module it imports.

Side by side in one run, per process: the import of its command-line entry point with the
venv's bytecode, and with an empty PYTHONPYCACHEPREFIX and PYTHONDONTWRITEBYTECODE (Python then
reads no .pyc and writes none: what a venv without bytecode costs at every start). The median
of --runs; each run a fresh interpreter. Also the share of the venv's modules that have bytecode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from support.pipeline import bytecode_share, plugin_venv

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
# process -> (its venv, the module its command-line entry point imports)
PROCESSES = {
    "meltano": (ROOT / ".venv", "meltano.cli"),
    "tap-guestdata": (plugin_venv("extractors", "tap-guestdata"), "tap_guestdata.tap"),
    "target-postgres": (plugin_venv("loaders", "target-postgres"), "target_postgres.target"),
    "dbt": (plugin_venv("utilities", "dbt-postgres"), "dbt.cli.main"),
}


def import_seconds(python: Path, module: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run([str(python), "-c", f"import {module}"], env=env, check=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    base = {key: value for key, value in os.environ.items() if not key.startswith("PYTHONPYCACHE")}
    results = {}
    with tempfile.TemporaryDirectory(prefix="no-bytecode-") as empty:
        without = {**base, "PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}
        for name, (venv, module) in PROCESSES.items():
            python = venv / "bin" / "python"
            if not python.exists():
                print(f"{name}: {venv} not installed (.venv/bin/meltano install)", file=sys.stderr)
                continue
            import_seconds(python, module, base)  # the page cache warm for both
            compiled, source = [], []
            for _ in range(arguments.runs):
                compiled.append(import_seconds(python, module, base))
                source.append(import_seconds(python, module, without))
            results[name] = {
                "bytecode_share": round(bytecode_share(venv), 3),
                "with_bytecode_s": round(statistics.median(compiled), 3),
                "without_bytecode_s": round(statistics.median(source), 3),
            }
            print(name, results[name], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "process_start-latest.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
