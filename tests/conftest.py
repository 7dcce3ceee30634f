"""Shared fixtures: one sandbox per test session (read-only use), fresh ones for mutations.

The PostgreSQL and Meltano fixtures of the suites that run the Meltano project (`pg_server`,
`e2e_database`, `meltano_installed`) are defined once, in support/pipeline.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from guestdata_sandbox.testing import SandboxProcess

pytest_plugins = ["support.pipeline"]


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
