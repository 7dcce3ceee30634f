"""Fixtures of the dbt tests (helpers in support/dbt.py; the PostgreSQL server, the session's
database and the plugin install are support.pipeline's, registered in tests/conftest.py).

Each module gets its own sandbox, database and load (`loaded`: the job users run, ending with
dbt build) and a `dbt` runner on it; a module that needs more in the environment of both
overrides `run_env`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import RUN_ALL, Dbt, dbt_env, meltano_project
from support.pipeline import (
    MeltanoProject,
    create_database,
    drop_database,
    throwaway_database,
)
from support.sandbox import this_instant


@pytest.fixture(scope="module", autouse=True)
def one_dbt_thread() -> Iterator[None]:
    """dbt runs one model or test at a time in these modules (GUESTDATA_DBT_THREADS, which their
    dbt and Meltano processes inherit): a test's data is small, and four threads cost a build
    about 8% more CPU for no time (on CI's two cores, shared by five lanes). The e2e and Airflow
    suites build with the default four, as users do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GUESTDATA_DBT_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def e2e_database(pg_server: Any) -> Iterator[str]:
    """The models' load goes to a database of its own: the e2e suite's tables (other sandboxes,
    mutated rows) in the session database would break the reconciliations."""
    with throwaway_database(pg_server, "guestdata_dbt") as name:
        yield name


@pytest.fixture(scope="module")
def scratch_database(pg_server: Any) -> Iterator[Any]:
    """Creates further throwaway databases on demand; drops them all at the end."""
    created: list[str] = []

    def create(label: str) -> str:
        created.append(create_database(pg_server, f"guestdata_dbt_{label}_{os.getpid()}"))
        return created[-1]

    yield create
    for name in created:
        drop_database(pg_server, name)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    """The module's sandbox, serving its data as of the module's start: a London midnight
    passing between a load and the truth it is checked against moves neither (test_accounts'
    failed CI on it at 00:00, 2026-11-29)."""
    with SandboxProcess(size="small", seed=31, limits=False, as_of=this_instant()) as server:
        yield server


@pytest.fixture(scope="module")
def run_env() -> dict[str, str]:
    """Extra environment for the module's Meltano runs and dbt runs."""
    return {}


@pytest.fixture(scope="module")
def load_job() -> tuple[str, ...]:
    """The Meltano command of the module's load (`loaded`): by default the job users run."""
    return RUN_ALL


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dbt-target")


@pytest.fixture(scope="module")
def loaded(
    meltano_installed: None,
    sandbox: SandboxProcess,
    pg_server: Any,
    e2e_database: str,
    target_dir: Path,
    run_env: dict[str, str],
    load_job: tuple[str, ...],
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    """The job users run (`load_job`): every stream, the timestamptz step, then dbt build."""
    logs = tmp_path_factory.mktemp("logs")
    project = meltano_project(sandbox, pg_server, e2e_database, target_dir, logs, **run_env)
    project.run(*load_job)
    return project


@pytest.fixture(scope="module")
def dbt(pg_server: Any, e2e_database: str, target_dir: Path, run_env: dict[str, str]) -> Dbt:
    """dbt on the module's database; its logs beside run_results.json, not in transform/."""
    env = {**dbt_env(pg_server, e2e_database), **run_env}
    env["DBT_LOG_PATH"] = str(target_dir / "logs")
    return Dbt(env=env, target_dir=target_dir)


@pytest.fixture(scope="module")
def conninfo(pg_server: Any, e2e_database: str) -> str:
    return pg_server.conninfo(e2e_database)
