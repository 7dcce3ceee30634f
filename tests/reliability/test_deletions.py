"""Issue #17: deletions are followed only after a read that covered the whole history.

ACTIVATE_VERSION is what makes a target mark (or hard-delete) rows a read did not return, so
these tests check the tap's own output: the message goes out after a complete read, with a
version no row of that read is older than, and never after a narrower window, a killed or
resumed run, a failed page or a 403; each time one log line says why. The rows in PostgreSQL
are checked by tests/e2e/test_deletions_postgres.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from guestdata_sandbox.accounts import REWARDS_OFF_KEY
from guestdata_sandbox.testing import SandboxProcess
from support.kill_resume import kill_and_resume, uninterrupted
from support.reliability import (
    assert_matches_truth,
    catalog_for,
    reliability_config,
    run,
    wait_for,
)
from support.sandbox import OWNER_KEY, last_seq
from support.streams import truth_rows
from support.tap_process import TapRun
from tap_guestdata.run import time_rules

FOLLOWED = ("guests", "venues", "programme", "programme_venues", "tiers")


def deletion_lines(tap_run: TapRun, stream: str) -> list[str]:
    return [line for line in tap_run.stderr.splitlines() if f"Deletions: {stream}:" in line]


def assert_not_checked(tap_run: TapRun, stream: str, *words: str) -> None:
    """No ACTIVATE_VERSION for `stream`, and one line saying why, with `words` in it."""
    assert stream not in tap_run.activated, tap_run.activated
    lines = deletion_lines(tap_run, stream)
    assert len(lines) == 1, lines
    assert "not checked" in lines[0] and all(word in lines[0] for word in words), lines[0]


def run_failing_after(
    server: SandboxProcess, pages: int, config: dict[str, Any], **what: Any
) -> TapRun:
    """A sync during which /guests answers `pages` pages, then fails every request."""
    seq = last_seq(server)

    def fail_after_pages() -> None:
        def pages_read() -> bool:
            log = server.requests_log(after=seq)
            return sum("/guests" in entry["path"] for entry in log) >= pages

        if wait_for(pages_read, timeout=60, interval=0.01):
            server.fault("server_error", count=50, path="/guests")

    injector = threading.Thread(target=fail_after_pages, daemon=True)
    injector.start()
    try:
        return run(config, **what)
    finally:
        injector.join(timeout=60)
        server.clear_faults()


def test_complete_read_activates_a_version_older_than_every_row_it_wrote(
    sandbox: SandboxProcess,
) -> None:
    config = reliability_config(sandbox)
    result = run(config, streams=[*FOLLOWED, "account", "offers"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert_matches_truth(result, sandbox, OWNER_KEY, [*FOLLOWED, "account"])
    for stream in FOLLOWED:
        (version,) = result.activated[stream]
        versions = result.versions[stream]
        assert versions and all(row_version >= version for row_version in versions), stream
        assert "the whole history was read" in deletion_lines(result, stream)[0]
    # Streams whose rows the API never drops keep the SDK's default: no version at all.
    assert "account" not in result.activated and "offers" not in result.activated
    assert set(result.versions["offers"]) == {None}


def test_incremental_run_and_later_start_date_mark_nothing(sandbox: SandboxProcess) -> None:
    config = reliability_config(sandbox)
    first = run(config, streams=["guests"])
    assert first.returncode == 0 and first.activated.get("guests"), first.stderr[-3000:]

    incremental = run(config, streams=["guests"], state=first.final_state)
    assert incremental.returncode == 0, incremental.stderr[-3000:]
    assert_not_checked(incremental, "guests", "an incremental run", "older rows were not read")

    first_day = min(row["created_at"] for row in truth_rows(sandbox.truth(OWNER_KEY), "venues"))
    later = run({**config, "start_date": "2026-11-01"}, streams=["guests"])
    assert later.returncode == 0, later.stderr[-3000:]
    assert_not_checked(later, "guests", "start_date", "2026-11-01")
    assert first_day[:10] < "2026-11-01"

    # A start_date on or before the first venue's day still covers every possible guest.
    earlier = run({**config, "start_date": first_day[:10]}, streams=["guests"])
    assert earlier.returncode == 0 and earlier.activated.get("guests"), earlier.stderr[-3000:]


def test_killed_run_and_its_resumed_run_mark_nothing(
    fresh_sandbox: SandboxProcess, tmp_path: Path
) -> None:
    fresh_sandbox.latency(0.05)
    total, whole = uninterrupted(fresh_sandbox, "guests")
    assert whole.activated.get("guests")
    _, (killed, resumed) = kill_and_resume(fresh_sandbox, "guests", 0.5, total, tmp_path)
    assert killed.records.get("guests") and "guests" not in killed.activated
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_not_checked(resumed, "guests", "resumed an interrupted read")


def test_failed_page_marks_nothing(fresh_sandbox: SandboxProcess) -> None:
    """Pages 1-3 answer, then every request fails: the run stops with rows already written."""
    server = fresh_sandbox
    server.latency(0.05)
    config = reliability_config(server, max_retries=1, state_interval_seconds=0)
    result = run_failing_after(server, 3, config, catalog=catalog_for(config, ["guests"]))
    assert result.returncode != 0 and result.records.get("guests"), result.stderr[-3000:]
    assert_not_checked(result, "guests", "the read did not finish")


@pytest.mark.parametrize("stream", ["tiers", "programme_venues", "programme"])
def test_403_on_the_group_marks_nothing(sandbox: SandboxProcess, stream: str) -> None:
    config = reliability_config(sandbox, key=REWARDS_OFF_KEY)
    result = run(config, streams=["venues", stream])
    assert result.returncode == 0, result.stderr[-3000:]
    assert_not_checked(result, stream, "REWARDS_DISABLED")
    assert result.activated.get("venues"), "the core streams still follow deletions"


# ---------------------------------------------------------------- inside a window (issue #25)


def test_a_complete_read_inside_a_window_records_it_per_venue_with_the_rows_it_returned(
    sandbox: SandboxProcess,
) -> None:
    truth = sandbox.truth(OWNER_KEY)
    guests = sorted(truth_rows(truth, "guests"), key=lambda row: row["visited_at"])
    start_day = time_rules.london_day(guests[len(guests) // 2]["visited_at"])  # from the data
    config = {**reliability_config(sandbox), "start_date": start_day.isoformat()}
    result = run(config, streams=["guests", "read_windows"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "guests" not in result.activated  # older rows were not read: no whole-table version
    (line,) = deletion_lines(result, "guests")
    assert f"every row from {start_day.isoformat()}" in line, line

    recorded = result.records["read_windows"]
    venues = {row["id"] for row in truth_rows(truth, "venues")}
    assert sorted(row["venue_id"] for row in recorded) == sorted(venues)
    covers_from = time_rules.start_of_london_day(start_day)
    for row in recorded:
        assert row["stream"] == "guests"
        assert time_rules.parse_instant(row["covers_from"]) == covers_from
        started = time_rules.parse_instant(row["read_started_at"])
        assert row["covers_until"] == row["read_started_at"]
        assert row["read_version"] == int(started.timestamp() * 1000)
        in_window = {
            guest["id"]
            for guest in guests
            if guest["venue_id"] == row["venue_id"]
            and covers_from <= time_rules.parse_instant(guest["visited_at"]) < started
        }
        assert row["rows_read"] == len(in_window) > 0, row
    # Every row the read wrote is newer than the read: the warehouse tells them from older ones.
    (read_version,) = {row["read_version"] for row in recorded}
    assert all(version >= read_version for version in result.versions["guests"])


def test_a_read_that_did_not_finish_or_resumed_records_no_window(
    fresh_sandbox: SandboxProcess, tmp_path: Path
) -> None:
    """A failed page: no window (its rows were not all read). A resumed read: none either (the
    rows above its resume point were read by the run that stopped, with older versions)."""
    server = fresh_sandbox
    server.latency(0.05)
    config = reliability_config(server, max_retries=1, state_interval_seconds=0)
    failed = run_failing_after(server, 2, config, streams=["guests", "read_windows"])
    assert failed.returncode != 0 and failed.records.get("guests"), failed.stderr[-3000:]
    assert not failed.records.get("read_windows")

    resumed = run(
        reliability_config(server), streams=["guests", "read_windows"], state=failed.final_state
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not resumed.records.get("read_windows")
    assert_not_checked(resumed, "guests", "resumed an interrupted read", "a resumed read")
