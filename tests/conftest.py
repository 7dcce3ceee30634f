"""Shared fixtures: one sandbox per test session (read-only use), fresh ones for mutations.

The PostgreSQL and Meltano fixtures of the suites that run the Meltano project (`pg_server`,
`e2e_database`, `meltano_installed`) are defined once, in support/pipeline.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import OWNER_KEY, module_sandbox_as_of, this_instant

pytest_plugins = ["support.pipeline", "support.release", "support.cpu_report"]


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxProcess]:
    """A small sandbox with limits off, shared by tests that only read (never mutate) it."""
    with SandboxProcess(size="small", seed=7, limits=False) as server:
        yield server


@pytest.fixture()
def fresh_sandbox() -> Iterator[SandboxProcess]:
    """A sandbox of its own for a test that mutates data, injects faults or turns limits on."""
    with SandboxProcess(size="small", seed=11, limits=False) as server:
        yield server


@pytest.fixture(scope="module")
def module_sandbox() -> Iterator[SandboxProcess]:
    """A sandbox of the test module's own: its tests may mutate it, in order (e2e; Snowflake's,
    tests/snowflake/conftest.py, is as of the instant of the load its modules share).
    It serves its data as of its start (`as_of`): a reward that expires or a London midnight
    that passes between a load and the truth it is checked against changes neither (a reward
    read as issued by the load and as expired by a later truth failed CI). Mutations stamp the
    real clock, after every run before them (support/sandbox.py, module_sandbox_as_of)."""
    with module_sandbox_as_of(this_instant()) as server:
        yield server


@pytest.fixture(scope="module")
def module_truth(module_sandbox: SandboxProcess) -> Callable[[], dict]:
    """The module sandbox's ground truth now, for the owner's key (call again after mutations)."""
    return lambda: module_sandbox.truth(OWNER_KEY)
