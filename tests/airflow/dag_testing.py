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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = PROJECT_ROOT / "dags"
HERE = Path(__file__).resolve().parent
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


def inspect_dags(airflow_home: Path, scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run `dag_inspector.py` on the scenarios (one subprocess for all of them)."""
    result = subprocess.run(
        [sys.executable, str(HERE / "dag_inspector.py")],
        input=json.dumps(scenarios),
        env=airflow_env(airflow_home),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
