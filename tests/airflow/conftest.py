"""Fixtures of the Airflow tests (helpers in dag_testing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway AIRFLOW_HOME (config, logs, SQLite metadata database) for this session."""
    return tmp_path_factory.mktemp("airflow-home")
