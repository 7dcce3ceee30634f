"""Fixtures of the dbt tests (helpers in dbt_support.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dbt_support import e2e

# The e2e suite's fixtures, one definition: PostgreSQL server, session database, plugins.
pg_server = e2e.pg_server
e2e_database = e2e.e2e_database
meltano_installed = e2e.meltano_installed


@pytest.fixture(scope="module")
def scratch_database(pg_server: Any) -> Iterator[Any]:
    """Creates further throwaway databases on demand; drops them all at the end."""
    created: list[str] = []

    def create(label: str) -> str:
        name = f"guestdata_dbt_{label}_{os.getpid()}"
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created.append(name)
        return name

    yield create
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as connection:
        for name in created:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
