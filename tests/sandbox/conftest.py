"""Fixtures of the sandbox's own tests (the `sandbox` and `fresh_sandbox` ones are in tests/)."""

from __future__ import annotations

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox_api import OWNER, Get, client


@pytest.fixture(scope="session")
def get(sandbox: SandboxProcess) -> Get:
    """A client of the shared, read-only sandbox."""
    return client(sandbox)


@pytest.fixture(scope="session")
def truth(sandbox: SandboxProcess) -> dict:
    """The owner's ground truth of the shared sandbox (never mutated)."""
    return sandbox.truth(OWNER)
