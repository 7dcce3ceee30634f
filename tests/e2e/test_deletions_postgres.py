"""Issues #17 and #25: a guest deleted in the service leaves the warehouse, whatever start_date.

In order, on one sandbox and a database of this module's own (deletions change rows other
modules would check). The guests and windows are picked from the data (`DeletionCase`), so the
test means the same on every day and at every hour (GUESTDATA_TEST_SANDBOX_ANCHOR moves the
sandbox's last day):
- a full load; two guests deleted in the sandbox: `recent`, on the newest final London day with
  arrivals, and `older`, in the middle of the history;
- the stats group re-read over `recent`'s day: the API's counts fell, the guest rows did not, so
  the reconciliation warns (it is a deletion not yet followed, not a loss) and the job is green;
- a refresh whose start_date is `recent`'s day: `recent` is flagged, nothing else is touched;
- the weekly refresh with a start_date after the account's first day (the case of #25): `older`
  is flagged too, both lose their contact in raw and models, the job and dbt are green;
- a daily run keeps them flagged; a refresh of the whole history with the target's
  `hard_delete` removes the rows.
Tap-side proofs for killed runs, failed pages and 403s: tests/reliability/test_deletions.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from demo_pipeline import TARGET_SCHEMA, Destination
from guestdata_sandbox.testing import SandboxProcess
from support.deletions import DeletionCase, assert_contact_removed
from support.pipeline import MeltanoProject, business, throwaway_database
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
STATS_REREAD = ("--environment=dev", "run", "--full-refresh", "guestdata-stats-to-postgres")
DAILY_CORE = ("--environment=dev", "run", "guestdata-core-to-postgres")
STAGING_GUESTS = "stg_guestdata__guests"
AWAITING = "RECONCILIATION WARN reconcile_venue_daily_visits_awaiting_source_deletions"


@pytest.fixture(scope="module")
def meltano_database(pg_server: Destination) -> Iterator[str]:
    with throwaway_database(pg_server, "guestdata_deletions") as name:
        yield name


@pytest.fixture(scope="module")
def conninfo(database: str) -> str:
    return database


def query(conninfo: str, statement: sql.Composable) -> list[dict[str, Any]]:
    with psycopg.connect(conninfo) as connection:
        return connection.cursor(row_factory=dict_row).execute(statement).fetchall()


def raw_guests(conninfo: str) -> dict[int, dict[str, Any]]:
    rows = query(
        conninfo, sql.SQL("SELECT * FROM {}").format(sql.Identifier(TARGET_SCHEMA, "guests"))
    )
    return {row["id"]: row for row in rows}


def flagged(rows: dict[int, dict[str, Any]]) -> set[int]:
    return {guest_id for guest_id, row in rows.items() if row["_sdc_deleted_at"] is not None}


def model_rows(conninfo: str, model: str) -> list[dict[str, Any]]:
    with psycopg.connect(conninfo) as connection:
        (schema,) = connection.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = %s", (model,)
        ).fetchone()
    return query(conninfo, sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, model)))


def staged_guest_ids(conninfo: str) -> set[int]:
    return {row["guest_visit_id"] for row in model_rows(conninfo, STAGING_GUESTS)}


def truth_guests(truth: Callable[[], dict]) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in truth_rows(truth(), "guests")}


def output(result: Any) -> str:
    return str(result.stdout) + str(result.stderr)


@pytest.fixture(scope="module")
def case(module_truth: Callable[[], dict]) -> DeletionCase:
    return DeletionCase.pick(module_truth())


def test_a_refresh_with_start_date_flags_guests_deleted_inside_its_window_and_nothing_else(
    meltano: MeltanoProject,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    conninfo: str,
    case: DeletionCase,
) -> None:
    meltano.run(*FULL_LOAD)
    before = raw_guests(conninfo)
    assert set(before) == set(truth_guests(module_truth))
    deleted = case.ids
    for guest_id in deleted:
        module_sandbox.mutate("delete_guest", guest_id=guest_id)
    assert not deleted & set(truth_guests(module_truth))

    # The API's stats of `recent`'s day fell, its guest rows were not re-read: a deletion not
    # yet followed warns (and says which run follows it); the job stays green.
    stats = meltano.run(
        *STATS_REREAD, extra_env={"TAP_GUESTDATA_START_DATE": case.recent_day.isoformat()}
    )
    assert AWAITING in output(stats), output(stats)[-3000:]
    assert "RECONCILIATION ERROR" not in output(stats)
    assert not flagged(raw_guests(conninfo))

    # A refresh narrower than the warehouse: only what its window covers changes.
    narrow = meltano.run(
        *WEEKLY_REFRESH, extra_env={"TAP_GUESTDATA_START_DATE": case.recent_day.isoformat()}
    )
    assert "Deletions: guests: every row from " + case.recent_day.isoformat() in output(narrow)
    assert "RECONCILIATION" not in output(narrow), output(narrow)[-3000:]
    after_narrow = raw_guests(conninfo)
    assert flagged(after_narrow) == {case.recent["id"]}
    unchanged = set(before) - {case.recent["id"]}
    assert [gid for gid in unchanged if business(after_narrow[gid]) != business(before[gid])] == []

    # The weekly refresh as most users run it: start_date set, after the account's first day.
    refresh = meltano.run(
        *WEEKLY_REFRESH, extra_env={"TAP_GUESTDATA_START_DATE": case.refresh_start.isoformat()}
    )
    assert "ACTIVATE_VERSION" not in output(refresh).split("Deletions: venues")[0]
    assert "Deletions: guests: every row from " + case.refresh_start.isoformat() in output(refresh)
    assert "RECONCILIATION" not in output(refresh), output(refresh)[-3000:]
    after = raw_guests(conninfo)
    assert flagged(after) == deleted
    assert set(after) == set(before), "soft delete: the rows stay, flagged"
    kept = set(before) - deleted
    changed = [gid for gid in kept if business(after[gid]) != business(before[gid])]
    assert not changed, f"rows the refresh changed: {changed[:10]}"
    for guest_id in deleted:  # the person is gone from raw, the arrival's facts stay
        row = after[guest_id]
        assert_contact_removed(row)
        assert row["visited_at"] == before[guest_id]["visited_at"]
    # The job's dbt build ran on the flagged tables: no model holds them or their contact.
    assert staged_guest_ids(conninfo) == set(truth_guests(module_truth))
    # A person whose only arrivals were deleted leaves the audience (another arrival keeps them).
    live_emails = {row["email"] for gid, row in after.items() if gid not in deleted}
    gone = {before[guest_id]["email"] for guest_id in deleted} - live_emails
    audience = {row["email"] for row in model_rows(conninfo, "marketing_audience")}
    assert not gone & audience

    # The daily incremental run does not read them again, and leaves them flagged.
    meltano.run(*DAILY_CORE)
    assert flagged(raw_guests(conninfo)) == deleted


def test_hard_delete_removes_the_rows_of_guests_deleted_in_the_source(
    meltano: MeltanoProject,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    conninfo: str,
    case: DeletionCase,
) -> None:
    before = raw_guests(conninfo)
    deleted = next(gid for gid in sorted(truth_guests(module_truth)) if gid not in flagged(before))
    module_sandbox.mutate("delete_guest", guest_id=deleted)
    whole = meltano.run(*WEEKLY_REFRESH, extra_env={"TARGET_POSTGRES_HARD_DELETE": "true"})
    assert "Deletions: guests: the whole history was read" in output(whole)
    after = raw_guests(conninfo)
    assert deleted in before and deleted not in after
    assert set(after) == set(truth_guests(module_truth)), "rows flagged earlier are removed too"
    assert not flagged(after)
    unchanged = {gid for gid in after if business(after[gid]) == business(before[gid])}
    assert unchanged == set(after)
