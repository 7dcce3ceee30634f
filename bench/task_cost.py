"""The fixed cost of one DAG task without Airflow: `meltano run tap-guestdata target-postgres`
of one stream that takes a single request (`account`), against a sandbox, into a throwaway
PostgreSQL database; the median of --runs. Meltano's start, the tap's (settings, discovery,
plan) and the target's (connection, table, final flush) are in it; the requests are not.

    .venv/bin/python bench/task_cost.py [--runs 5]

A task on the cluster costs this plus Airflow's part (the worker starting the task process,
its supervisor, the BashOperator): `tests/cluster` prints each task's time in Airflow less the
span of its requests (`task_fixed_seconds`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

import demo_pipeline  # noqa: E402
from guestdata_sandbox.testing import SandboxProcess  # noqa: E402
from support.pipeline import MELTANO, install_plugins, postgres_server, throwaway_database  # noqa: E402
from support.sandbox import OWNER_KEY  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="task-cost-"))
    install_plugins(("tap-guestdata", "target-postgres"), scratch)
    seconds = []
    with (
        SandboxProcess(size="small", seed=7, limits=False) as sandbox,
        postgres_server() as server,
        throwaway_database(server, "guestdata_task_cost") as database,
    ):
        for run in range(args.runs):
            state_dir = scratch / str(run)
            state_dir.mkdir()
            env = demo_pipeline.meltano_env(sandbox.base_url, server, database, state_dir)
            env.update(server.target_env(database, "task_cost"))
            env.update(
                {"TAP_GUESTDATA_API_KEY": OWNER_KEY, "TAP_GUESTDATA__SELECT": '["account.*"]'}
            )
            started = time.monotonic()
            command = [
                "--environment=dev",
                "run",
                "--no-install",
                "tap-guestdata",
                "target-postgres",
            ]
            subprocess.run(
                [str(MELTANO), *command], cwd=ROOT, env=env, check=True, capture_output=True
            )
            seconds.append(time.monotonic() - started)
        requests = len(sandbox.requests_log())
    print(
        f"meltano run of one stream: median {statistics.median(seconds):.1f} s "
        f"(runs: {', '.join(f'{s:.1f}' for s in seconds)}); {requests} requests in all"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
