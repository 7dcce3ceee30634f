"""Issue #17: a guest deleted in the service leaves the warehouse at the next weekly refresh.

In order, on one sandbox and a database of this module's own (ACTIVATE_VERSION changes rows
other modules would check): a full load, two guests deleted in the sandbox, a refresh with a
narrower window (marks nothing), the weekly refresh (`--full-refresh`, as scheduled: marks both,
changes nothing else, and the models drop them), a daily run (keeps them marked), then the same
with the target's `hard_delete` (the row is gone). Tap-side proofs for killed runs, failed pages
and 403s: tests/reliability/test_deletions.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from demo_pipeline import TARGET_SCHEMA, Destination
from guestdata_sandbox.testing import SandboxProcess
from support.pipeline import MeltanoProject, sandbox_project, throwaway_database
from support.streams import truth_rows

pytestmark = pytest.mark.e2e

FULL_LOAD = (
    "--environment=dev",
    "run",
    "tap-guestdata",
    "target-postgres",
    "guestdata-pg-types:timestamptz",
)
WEEKLY_REFRESH = ("--environment=dev", "run", "--full-refresh", "guestdata-refresh-to-postgres")
DAILY_CORE = ("--environment=dev", "run", "guestdata-core-to-postgres")
STAGING_GUESTS = "stg_guestdata__guests"


@pytest.fixture(scope="module")
def database(pg_server: Destination) -> Iterator[str]:
    with throwaway_database(pg_server, "guestdata_deletions") as name:
        yield name


@pytest.fixture(scope="module")
def meltano(
    meltano_installed: None,
    module_sandbox: SandboxProcess,
    pg_server: Destination,
    database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    log_dir = tmp_path_factory.mktemp("meltano-logs")
    return sandbox_project(module_sandbox.base_url, pg_server, database, log_dir)


@pytest.fixture(scope="module")
def conninfo(pg_server: Destination, database: str) -> str:
    return pg_server.conninfo(database)


def raw_guests(conninfo: str) -> dict[int, dict[str, Any]]:
    query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(TARGET_SCHEMA, "guests"))
    with psycopg.connect(conninfo) as connection:
        rows = connection.cursor(row_factory=dict_row).execute(query).fetchall()
    return {row["id"]: row for row in rows}


def business(row: dict[str, Any]) -> dict[str, Any]:
    """A row without the target's bookkeeping (_sdc_*), which every load rewrites."""
    return {name: value for name, value in row.items() if not name.startswith("_sdc_")}


def staged_guest_ids(conninfo: str) -> set[int]:
    with psycopg.connect(conninfo) as connection:
        (schema,) = connection.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = %s",
            (STAGING_GUESTS,),
        ).fetchone()
        query = sql.SQL("SELECT guest_visit_id FROM {}").format(
            sql.Identifier(schema, STAGING_GUESTS)
        )
        return {guest_id for (guest_id,) in connection.execute(query)}


def truth_guest_ids(truth: Callable[[], dict]) -> set[int]:
    return {row["id"] for row in truth_rows(truth(), "guests")}


def two_guests_to_delete(truth: Callable[[], dict]) -> list[int]:
    """The newest guest and one from the middle of the history."""
    ids = sorted(truth_guest_ids(truth))
    return [ids[-1], ids[len(ids) // 2]]


def test_weekly_refresh_marks_guests_deleted_in_the_source_and_nothing_else(
    meltano: MeltanoProject,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    conninfo: str,
) -> None:
    meltano.run(*FULL_LOAD)
    before = raw_guests(conninfo)
    assert set(before) == truth_guest_ids(module_truth)
    deleted = two_guests_to_delete(module_truth)
    for guest_id in deleted:
        module_sandbox.mutate("delete_guest", guest_id=guest_id)
    assert not set(deleted) & truth_guest_ids(module_truth)

    # A refresh that did not read the whole history marks nothing, and says why.
    two_days_ago = (dt.date.today() - dt.timedelta(days=2)).isoformat()
    narrow = meltano.run(*WEEKLY_REFRESH, extra_env={"TAP_GUESTDATA_START_DATE": two_days_ago})
    assert "Deletions: guests: not checked" in narrow.stdout + narrow.stderr
    assert all(row["_sdc_deleted_at"] is None for row in raw_guests(conninfo).values())

    refresh = meltano.run(*WEEKLY_REFRESH)
    assert "Deletions: guests: the whole history was read" in refresh.stdout + refresh.stderr
    after = raw_guests(conninfo)
    marked = {guest_id for guest_id, row in after.items() if row["_sdc_deleted_at"] is not None}
    assert marked == set(deleted)
    assert set(after) == set(before), "soft delete: the rows stay, dated"
    kept = set(before) - set(deleted)
    changed = [gid for gid in kept if business(after[gid]) != business(before[gid])]
    assert not changed, f"rows the refresh changed: {changed[:10]}"
    # The job's dbt build ran on the refreshed tables: staging drops the deleted guests.
    staged = staged_guest_ids(conninfo)
    assert not staged & set(deleted)
    assert staged == truth_guest_ids(module_truth)

    # The daily incremental run does not read them again, and leaves them marked.
    meltano.run(*DAILY_CORE)
    still = raw_guests(conninfo)
    assert {gid for gid, row in still.items() if row["_sdc_deleted_at"] is not None} == marked


def test_hard_delete_removes_the_rows_of_guests_deleted_in_the_source(
    meltano: MeltanoProject,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    conninfo: str,
) -> None:
    before = raw_guests(conninfo)
    (deleted, _) = two_guests_to_delete(module_truth)
    module_sandbox.mutate("delete_guest", guest_id=deleted)
    meltano.run(*WEEKLY_REFRESH, extra_env={"TARGET_POSTGRES_HARD_DELETE": "true"})
    after = raw_guests(conninfo)
    assert deleted in before and deleted not in after
    assert set(after) == truth_guest_ids(module_truth), "rows marked earlier are removed too"
    assert all(row["_sdc_deleted_at"] is None for row in after.values())
    unchanged = {gid for gid in after if business(after[gid]) == business(before[gid])}
    assert unchanged == set(after)
