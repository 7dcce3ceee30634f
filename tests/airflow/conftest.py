"""Fixtures of the Airflow tests (helpers in dag_testing.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import demo_pipeline
from dag_testing import PLUGINS, Airflow, AirflowFactory, pipeline_airflow
from support.pipeline import install_plugins, postgres_server, throwaway_database


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway AIRFLOW_HOME (config, logs, SQLite metadata database) for this session."""
    return tmp_path_factory.mktemp("airflow-home")


@pytest.fixture(scope="module")
def postgres() -> Iterator[demo_pipeline.Destination]:
    """127.0.0.1:5432 (user postgres, trust) if it answers, else the embedded pgserver."""
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="module")
def database(postgres: demo_pipeline.Destination) -> Iterator[str]:
    """A throwaway database, dropped at the end whatever happened."""
    with throwaway_database(postgres, "guestdata_airflow") as name:
        yield name


@pytest.fixture(scope="module")
def database_url(postgres: demo_pipeline.Destination, database: str) -> str:
    return postgres.conninfo(database)


@pytest.fixture(scope="module")
def meltano_installed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`meltano install` of the plugins the DAG runs (idempotent; the group extractors share
    tap-guestdata's virtualenv)."""
    install_plugins(PLUGINS, tmp_path_factory.mktemp("install"))


@pytest.fixture(scope="module")
def airflow_for(
    meltano_installed: None,
    postgres: demo_pipeline.Destination,
    database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AirflowFactory:
    """Makes the module's Airflow home: the sandbox's base_url and the DAG settings in."""

    def make(base_url: str, settings: Mapping[str, str]) -> Airflow:
        return pipeline_airflow(tmp_path_factory, base_url, postgres, database, settings)

    return make
