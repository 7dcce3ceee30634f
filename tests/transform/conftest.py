"""Fixtures of the dbt tests (helpers in support/dbt.py; the PostgreSQL server, the session's
database and the plugin install are support.pipeline's, registered in tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from support.pipeline import create_database, drop_database, throwaway_database


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
