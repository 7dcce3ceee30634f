"""Issue #11, point 6: `stats_history_days` bounds the per-day statistics of a first run."""

from __future__ import annotations

import datetime as dt
from typing import Any

from guestdata_sandbox.rules import london_today
from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import tap_config
from support.tap_process import discover, select_streams
from support.tap_suite import PATH_GROUPS, Sync, param, requests_for, stream_problems, sync

STATS_STREAMS = ["daily_stats", "daily_account_stats"]
STATS_PATH = PATH_GROUPS[("daily_stats", "daily_account_stats")]


def stats_sync(server: SandboxProcess, state: dict | None = None, **settings: Any) -> Sync:
    config = tap_config(server, **settings)
    catalog = select_streams(discover(config), STATS_STREAMS)
    result = sync(server, config, catalog=catalog, state=state)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    return result


def days_requested(result: Sync, per_venue: bool) -> list[str]:
    entries = requests_for(result.log, STATS_PATH)
    return sorted(
        str(param(entry, "from"))
        for entry in entries
        if (param(entry, "venue_id") is not None) is per_venue
    )


def test_a_first_run_reads_only_the_last_days_and_every_row_of_them(
    fresh_sandbox: SandboxProcess,
) -> None:
    result = stats_sync(fresh_sandbox, stats_history_days=3)
    today = london_today()
    wanted = [(today - dt.timedelta(days=back)).isoformat() for back in (2, 1, 0)]
    venues = len(result.truth["venues"])
    assert days_requested(result, per_venue=False) == wanted
    assert days_requested(result, per_venue=True) == sorted(wanted * venues)
    for stream in STATS_STREAMS:
        expected = [row for row in result.truth[stream] if row["date"] >= wanted[0]]
        assert len(expected) == len(wanted) * (venues if stream == "daily_stats" else 1)
        assert stream_problems(stream, result.records(stream), expected) == []


def test_the_later_start_date_wins_and_a_bookmark_is_not_bounded(
    fresh_sandbox: SandboxProcess,
) -> None:
    today = london_today()
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    bounded = stats_sync(fresh_sandbox, stats_history_days=30, start_date=yesterday)
    assert days_requested(bounded, per_venue=False) == [yesterday, today.isoformat()]

    ten_days_ago = today - dt.timedelta(days=10)
    bookmark = {"replication_key": "date", "replication_key_value": ten_days_ago.isoformat()}
    state = {"bookmarks": {"daily_account_stats": bookmark}}
    resumed = stats_sync(fresh_sandbox, state=state, stats_history_days=3)
    # the bookmark's day is read again (docs: Incremental state), then every day to today
    assert days_requested(resumed, per_venue=False) == [
        (ten_days_ago + dt.timedelta(days=day)).isoformat() for day in range(11)
    ]
