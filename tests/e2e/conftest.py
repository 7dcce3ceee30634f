"""End-to-end fixtures: a PostgreSQL database per test session and the repo's Meltano project.

The server (`pg_server`), the session's database (`e2e_database`) and the plugin install
(`meltano_installed`) are `support.pipeline`'s fixtures, registered in tests/conftest.py and
shared with the dbt tests; this module adds the e2e modules' sandbox and Meltano runner.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from demo_pipeline import Destination, meltano_env
from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.pipeline import FAST_TAP, MeltanoProject

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def e2e_sandbox() -> Iterator[SandboxProcess]:
    """The e2e module's own sandbox: the tests mutate it, in order."""
    with SandboxProcess(size="small", seed=11, limits=False) as server:
        yield server


@pytest.fixture(scope="module")
def meltano(
    meltano_installed: None,
    e2e_sandbox: SandboxProcess,
    pg_server: Destination,
    e2e_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    state_dir = tmp_path_factory.mktemp("meltano-state")
    env = meltano_env(e2e_sandbox.base_url, pg_server, e2e_database, state_dir)
    env.update(FAST_TAP)
    return MeltanoProject(env=env, log_dir=tmp_path_factory.mktemp("meltano-logs"))


@pytest.fixture(scope="module")
def database(pg_server: Destination, e2e_database: str) -> str:
    """Connection string of this session's database."""
    return pg_server.conninfo(e2e_database)


@pytest.fixture(scope="module")
def owner_truth(e2e_sandbox: SandboxProcess):
    """Ground truth now, for the owner's key (call it again after mutations)."""
    return lambda: e2e_sandbox.truth(OWNER_KEYS[0])
