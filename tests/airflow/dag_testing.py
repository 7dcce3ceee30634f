"""Helpers of the Airflow tests: every Airflow process is a subprocess with a throwaway home.

Importing Airflow in the pytest process would install its logging handlers for the whole test
session, so the DagBag checks (`dag_inspector.py`), `airflow db migrate` and `dag.test()`
(`run_dag.py`) each run in a child process with an environment built by `airflow_env`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

import demo_pipeline  # the demo's checks are reused (scripts/ is on pytest's pythonpath)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = PROJECT_ROOT / "dags"
HERE = Path(__file__).resolve().parent
MELTANO = PROJECT_ROOT / ".venv" / "bin" / "meltano"
# `dag.test()` runs every task in one process, one after another: a DAG of many accounts' loads
# took 600 s and more in CI, where six test processes share two cores.
DAG_TEST_TIMEOUT = 1800
# A module that runs `dag.test()`: the suite's pytest-timeout (900 s) would stop it first.
DAG_TEST_PYTEST_TIMEOUT = pytest.mark.timeout(DAG_TEST_TIMEOUT + 300)
PLUGINS = ("tap-guestdata", "target-postgres", "guestdata-pg-types", "dbt-postgres")

__all__ = [
    "DAG_TEST_PYTEST_TIMEOUT",
    "MELTANO",
    "PLUGINS",
    "PROJECT_ROOT",
    "Airflow",
    "airflow_env",
    "demo_pipeline",
]

# A developer's own settings must not leak into the DAG under test.
SCRUBBED_PREFIXES = ("AIRFLOW", "GUESTDATA_", "TAP_GUESTDATA", "TARGET_POSTGRES", "MELTANO_")


def airflow_env(airflow_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for an Airflow child process: scratch home, SQLite metadata, our DAGs only."""
    env = {
        name: value for name, value in os.environ.items() if not name.startswith(SCRUBBED_PREFIXES)
    }
    env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
            "NO_COLOR": "1",
        }
    )
    env.update(extra or {})
    return env


def inspect_dags(
    airflow_home: Path, scenarios: list[dict[str, Any]], python: str = sys.executable
) -> list[dict[str, Any]]:
    """Run `dag_inspector.py` on the scenarios (one `python` subprocess for all of them)."""
    descriptor, name = tempfile.mkstemp(prefix="dag_inspector-", suffix=".json", dir=airflow_home)
    os.close(descriptor)
    results = Path(name)
    result = subprocess.run(
        [python, str(HERE / "dag_inspector.py"), str(results)],
        input=json.dumps(scenarios),
        env=airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(results.read_text())


def log_tail(log: Path) -> str:
    """A failed run's message: the log's path and its last 60 lines."""
    tail = "\n".join(log.read_text().splitlines()[-60:])
    return f"log {log}:\n{tail}"


class Airflow:
    """Runs `airflow db migrate` and `run_dag.py` in one throwaway AIRFLOW_HOME."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env
        self.logs: list[Path] = []

    def run(
        self, *args: str, timeout: float, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        log = self.home / f"{Path(args[0]).stem}-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("w") as output:
            result = subprocess.run(
                [sys.executable, *args],
                cwd=PROJECT_ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
                check=False,
            )
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {result.returncode}; {log_tail(log)}")
        return result

    def dag_test(
        self, dag_id: str, *, check: bool = True, run: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """`dag.test()` of `dag_id` (`run`: its logical_date and conf, see run_dag.py); unless
        `check` is False, a failed run fails the test."""
        arguments = [json.dumps(dict(run))] if run else []
        outcome = self.home / f"run_dag-{len(self.logs)}.json"
        outcome.unlink(missing_ok=True)
        self.run(
            str(HERE / "run_dag.py"),
            dag_id,
            str(outcome),
            *arguments,
            timeout=DAG_TEST_TIMEOUT,
            check=check,
        )
        if not outcome.exists():
            pytest.fail(f"run_dag.py {dag_id} wrote no outcome; {log_tail(self.logs[-1])}")
        return json.loads(outcome.read_text())

    def output(self) -> str:
        return "\n".join(log.read_text() for log in self.logs)


AirflowFactory = Callable[[str, Mapping[str, str]], "Airflow"]  # (base_url, DAG settings)


def pipeline_airflow(
    tmp_path_factory: pytest.TempPathFactory,
    base_url: str,
    postgres: demo_pipeline.Destination,
    database: str,
    settings: Mapping[str, str],
) -> Airflow:
    """A migrated Airflow home whose DAGs run this repository's Meltano project against the
    sandbox at `base_url`, into `database`, with the DAG `settings` on top."""
    home = tmp_path_factory.mktemp("airflow-home")
    state_dir = tmp_path_factory.mktemp("meltano-state")
    meltano = demo_pipeline.meltano_env(base_url, postgres, database, state_dir)
    pipeline = {
        name: value
        for name, value in meltano.items()
        if name.startswith(("TAP_GUESTDATA", "TARGET_POSTGRES", "MELTANO_"))
    }
    env = airflow_env(
        home,
        {
            **pipeline,
            # The sandbox's limits are off; the tap's own limiter need not slow the test.
            "TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000",
            "GUESTDATA_PROJECT_ROOT": str(PROJECT_ROOT),
            "GUESTDATA_MELTANO_BIN": str(MELTANO),
            "GUESTDATA_MELTANO_ENVIRONMENT": "dev",
            "GUESTDATA_RETRIES": "0",  # dag.test() would wait out retry_delay
            **settings,
        },
    )
    runner = Airflow(home, env)
    runner.run("-m", "airflow", "db", "migrate", timeout=300)
    return runner


def meltano_state_command(airflow: Airflow, *args: str) -> str:
    """`meltano --environment=dev state ARGS` in the DAGs' environment: its output."""
    result = subprocess.run(
        [str(MELTANO), "--environment=dev", "state", *args],
        cwd=PROJECT_ROOT,
        env=airflow.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def state_ids(airflow: Airflow) -> list[str]:
    """Meltano's state ids of the dev environment, after the DAGs ran."""
    output = meltano_state_command(airflow, "list")
    return sorted(line.strip() for line in output.splitlines() if line.startswith("dev:"))


def meltano_state(airflow: Airflow, state_id: str) -> str:
    """`meltano state get` of a state id (what the next run of it would start from)."""
    return meltano_state_command(airflow, "get", state_id).strip()
