"""Fixtures of the Airflow tests (helpers in dag_testing.py)."""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from dag_testing import MELTANO, PLUGINS, PROJECT_ROOT, demo_pipeline


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway AIRFLOW_HOME (config, logs, SQLite metadata database) for this session."""
    return tmp_path_factory.mktemp("airflow-home")


@pytest.fixture(scope="module")
def postgres() -> Iterator[demo_pipeline.Destination]:
    """127.0.0.1:5432 (user postgres, trust) if it answers, else the embedded pgserver."""
    server = demo_pipeline.server_from_url(demo_pipeline.DEFAULT_SERVER_URL, "local")
    if demo_pipeline.server_answers(server):
        yield server
        return
    with (
        tempfile.TemporaryDirectory(prefix="guestdata-airflow-pg-") as pgdata,
        demo_pipeline.embedded_server(Path(pgdata) / "data") as embedded,
    ):
        yield embedded


@pytest.fixture(scope="module")
def database(postgres: demo_pipeline.Destination) -> Iterator[str]:
    """A throwaway database, dropped at the end whatever happened."""
    name = f"guestdata_airflow_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(postgres.conninfo("postgres"), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(postgres.conninfo("postgres"), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="module")
def meltano_installed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`meltano install` of the plugins the DAG runs (idempotent; the group extractors share
    tap-guestdata's virtualenv)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MELTANO_")}
    env["MELTANO_DATABASE_URI"] = f"sqlite:///{tmp_path_factory.mktemp('install')}/meltano.db"
    result = subprocess.run(
        [str(MELTANO), "install", *PLUGINS],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
