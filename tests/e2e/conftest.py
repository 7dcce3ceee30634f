"""End-to-end fixtures: a PostgreSQL database per test session and the repo's Meltano project.

The server (`pg_server`), the session's database (`e2e_database`) and the plugin install
(`meltano_installed`) are `support.pipeline`'s fixtures, registered in tests/conftest.py and
shared with the dbt tests; the sandbox (`module_sandbox`, `module_truth`) is tests/conftest.py's.
This module adds the Meltano runner and the database's connection string (`meltano_database`
chooses the database).
"""

from __future__ import annotations

import pytest

from demo_pipeline import Destination
from guestdata_sandbox.testing import SandboxProcess
from support.pipeline import MeltanoProject, sandbox_project

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def meltano_database(e2e_database: str) -> str:
    """The database `meltano` loads into: the session's. A module whose tests change rows other
    modules check overrides it with a throwaway database of its own."""
    return e2e_database


@pytest.fixture(scope="module")
def meltano(
    meltano_installed: None,
    module_sandbox: SandboxProcess,
    pg_server: Destination,
    meltano_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    log_dir = tmp_path_factory.mktemp("meltano-logs")
    return sandbox_project(module_sandbox.base_url, pg_server, meltano_database, log_dir)


@pytest.fixture(scope="module")
def database(pg_server: Destination, meltano_database: str) -> str:
    """Connection string of the database `meltano` loads into."""
    return pg_server.conninfo(meltano_database)
