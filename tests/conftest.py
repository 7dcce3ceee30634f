"""Shared fixtures: one sandbox per test session (read-only use), fresh ones for mutations."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess

OWNER_KEY = OWNER_KEYS[0]
# scripts/ is not a package: its demo's checks (STREAM_KEYS, truth tables) serve the tests too.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))


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


@pytest.fixture()
def owner_key() -> str:
    return OWNER_KEY


def tap_config(server: SandboxProcess, **overrides: object) -> dict:
    """A tap config pointing at a sandbox with the owner's key."""
    config: dict = {"api_key": OWNER_KEY, "base_url": server.base_url}
    config.update(overrides)
    return config
