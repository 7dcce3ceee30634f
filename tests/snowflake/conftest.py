"""Snowflake fixtures: the real target-snowflake 0.20.4, run by Meltano against fakesnow.

No account exists here. `target-snowflake--fakesnow` (meltano.yml) is the MeltanoLabs target in
its own plugin venv with fakesnow (Snowflake emulated on DuckDB) and the user stage fakesnow
lacks (guestdata_fakesnow/). `FakesnowWarehouse` reads the databases back through fakesnow, so
queries are Snowflake SQL and types are Snowflake's.

One load for the session. `loaded_folder` starts a sandbox as of an instant (`data_instant`)
and runs the fakesnow job once into a folder: fakesnow's databases, Meltano's system database
with the state, the target's statement log (support/snowflake_pipeline.py). `built_folder` is
a copy of it with the dbt models built on it (the job with dbt; run_results.json and the
compiled SQL in its dbt target dir). Each module gets a copy of one of the two folders and a
sandbox of its own as of the same instant, so the module's sandbox serves exactly the data the
shared load read, whatever the wall time, and the module's tests mutate both, in order.

Reuse (e.g. dbt-snowflake models): `snowflake_pipeline` is the module's loaded databases,
`built` the same with the models built (its dbt target dir in `dbt_target`),
`pipeline.run()` loads again, `pipeline.warehouse.query(sql)` reads them, and in any venv that
has `tests/snowflake/guestdata_fakesnow` installed beside a Snowflake client,
`guestdata-fakesnow run --db-path <pipeline.warehouse.db_path> dbt build ...` runs that client
on the same databases.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import module_sandbox_as_of, this_instant
from support.snowflake_pipeline import DBT_BUILD, SnowflakePipeline, installed_fakesnow_venv

pytestmark = pytest.mark.snowflake


@pytest.fixture(scope="session")
def fakesnow_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loader's plugin venv (target-snowflake, fakesnow, guestdata-fakesnow), installed or
    found up to date once per session, with the tap and the dbt utility (dbt-snowflake)."""
    return installed_fakesnow_venv(tmp_path_factory.mktemp("snowflake-install"))


@pytest.fixture(scope="session")
def data_instant() -> str:
    """The instant every Snowflake sandbox serves its data as of (`SandboxProcess(as_of=)`):
    the session's start, to the second."""
    return this_instant().isoformat()


@pytest.fixture(scope="session")
def loaded_folder(
    fakesnow_venv: Path, data_instant: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The fakesnow job run once, on a sandbox as of `data_instant`: the folder it left."""
    folder = tmp_path_factory.mktemp("snowflake-loaded")
    with module_sandbox_as_of(data_instant) as sandbox:
        SnowflakePipeline.in_folder(folder, fakesnow_venv, sandbox.base_url).run()
    return folder


@pytest.fixture(scope="session")
def built_folder(
    fakesnow_venv: Path, loaded_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A copy of `loaded_folder` with the dbt models built and tested on it: the folder the
    job with dbt (DBT_JOB) leaves."""
    folder = copy_of(loaded_folder, tmp_path_factory.mktemp("snowflake-built"))
    pipeline = SnowflakePipeline.in_folder(folder, fakesnow_venv, base_url=None)
    pipeline.run(*DBT_BUILD)
    return folder


def copy_of(folder: Path, parent: Path) -> Path:
    """`folder` copied into `parent`: a pipeline in the copy carries on where it left off."""
    return Path(shutil.copytree(folder, parent / "pipeline"))


@pytest.fixture(scope="module")
def module_sandbox(data_instant: str) -> Iterator[SandboxProcess]:
    """The module's own sandbox, as of the shared load's instant: it serves what that load
    read, whatever the wall time (tests/sandbox/test_sandbox_as_of.py); its tests may mutate
    it, in order. Mutations stamp the real clock, after every run before them."""
    with module_sandbox_as_of(data_instant) as server:
        yield server


@pytest.fixture(scope="module")
def snowflake_pipeline(
    fakesnow_venv: Path,
    loaded_folder: Path,
    module_sandbox: SandboxProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> SnowflakePipeline:
    """The module's copy of the shared load, run against the module's sandbox."""
    folder = copy_of(loaded_folder, tmp_path_factory.mktemp("snowflake"))
    return SnowflakePipeline.in_folder(folder, fakesnow_venv, module_sandbox.base_url)


@pytest.fixture(scope="module")
def built(
    fakesnow_venv: Path,
    built_folder: Path,
    module_sandbox: SandboxProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> SnowflakePipeline:
    """The module's copy of the shared load and dbt build, run against the module's sandbox."""
    folder = copy_of(built_folder, tmp_path_factory.mktemp("snowflake-dbt"))
    return SnowflakePipeline.in_folder(folder, fakesnow_venv, module_sandbox.base_url)


@pytest.fixture(scope="module")
def dbt_target(built: SnowflakePipeline) -> Path:
    """The module's dbt target dir: run_results.json and compiled SQL of its last build."""
    assert built.dbt_target is not None
    return built.dbt_target
