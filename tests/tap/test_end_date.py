"""Issue #27: `end_date` bounds every windowed stream to [start_date, end_date], London days.

One run of every stream over a past period of ten London days: the sandbox's request log holds
exactly that period's requests, the records are exactly the truth's rows of the period, and no
bookmark passes the end of end_date. Bad values are refused before any request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from singer_sdk.exceptions import ConfigValidationError

from guestdata_sandbox.testing import SandboxProcess
from support.json_values import parse_instant
from support.sandbox import tap_config
from support.streams import rewards_read_from, truth_rows
from support.tap_process import discover, select_streams
from support.tap_suite import (
    LONDON,
    PATH_GROUPS,
    Sync,
    param,
    requests_for,
    stream_problems,
    sync,
)
from tap_guestdata.run import time_rules
from tap_guestdata.run.time_rules import TimeWindow
from tap_guestdata.tap import STREAM_TYPES, TapGuestData

DAYS = 10
# Streams read with an instant window (spec 4.4) and the field the window applies to.
INSTANT_WINDOWED = {
    "rewards": "issued_at",
    "redemptions": "created_at",
    "member_ledger": "created_at",
}
# Streams without a time window (members: listed whole on a first run, spec 4.2).
UNWINDOWED = [
    group
    for group in PATH_GROUPS
    if group[0] in ("account", "venues", "offers", "offer_stats", "programme", "members")
]
WINDOW_PARAMS = ("from", "to", "since", "until", "updated_since")


def london_midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day, tzinfo=LONDON)


def london_day_of(value: str) -> dt.date:
    instant = parse_instant(value)
    assert instant is not None, value
    return instant.astimezone(LONDON).date()


class Period:
    """Ten London days ending a week ago: start_date and end_date of the run."""

    def __init__(self) -> None:
        self.last = dt.datetime.now(LONDON).date() - dt.timedelta(days=7)
        self.first = self.last - dt.timedelta(days=DAYS - 1)
        self.days = [self.first + dt.timedelta(days=offset) for offset in range(DAYS)]
        self.start = london_midnight(self.first)
        self.end = london_midnight(self.last + dt.timedelta(days=1))  # end of end_date's day

    def holds(self, value: str) -> bool:
        return self.first <= london_day_of(value) <= self.last

    def read_from(self, stream: str, truth: dict[str, Any]) -> dt.datetime | None:
        """Where a stream's window starts (docs/tap.md, "What a start_date reads"): start_date,
        but member_ledger whole (None) and rewards from the longest offer validity before it,
        in days of 24 hours."""
        if stream == "member_ledger":
            return None
        if stream == "rewards":
            return rewards_read_from(truth, self.start)
        return self.start

    def read_holds(self, stream: str, truth: dict[str, Any], value: str) -> bool:
        """`value`, a row's time, is inside what the period's run reads of `stream`."""
        read_from = self.read_from(stream, truth)
        instant = parse_instant(value)
        assert instant is not None, value
        after_start = read_from is None or instant >= read_from
        return after_start and london_day_of(value) <= self.last


@pytest.fixture(scope="module")
def period() -> Period:
    return Period()


@pytest.fixture(scope="module")
def period_sync(sandbox: SandboxProcess, period: Period) -> Iterator[Sync]:
    """Every stream, read_windows too, with start_date and end_date set (no state)."""
    config = tap_config(
        sandbox, start_date=period.first.isoformat(), end_date=period.last.isoformat()
    )
    every_stream = [stream_type.name for stream_type in STREAM_TYPES]
    catalog = select_streams(discover(config), every_stream)
    result = sync(sandbox, config, catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    yield result


def test_stats_are_one_request_per_venue_and_day_of_the_period(
    period_sync: Sync, period: Period
) -> None:
    entries = requests_for(period_sync.log, PATH_GROUPS[("daily_stats", "daily_account_stats")])
    venues = sorted(row["id"] for row in truth_rows(period_sync.truth, "venues"))
    per_venue = sorted(
        (int(str(param(entry, "venue_id"))), str(param(entry, "from")))
        for entry in entries
        if param(entry, "venue_id") is not None
    )
    whole_account = sorted(str(param(e, "from")) for e in entries if param(e, "venue_id") is None)
    days = [day.isoformat() for day in period.days]
    assert per_venue == sorted((venue, day) for venue in venues for day in days)
    assert whole_account == days
    assert all(param(entry, "from") == param(entry, "to") for entry in entries)


def test_guests_are_read_from_start_date_to_end_date(period_sync: Sync, period: Period) -> None:
    entries = requests_for(period_sync.log, PATH_GROUPS[("guests",)])
    assert entries
    windows = {(param(entry, "from"), param(entry, "to")) for entry in entries}
    assert windows == {(period.first.isoformat(), period.last.isoformat())}


@pytest.mark.parametrize("stream", sorted(INSTANT_WINDOWED))
def test_instant_windows_run_from_start_date_to_the_end_of_end_date(
    period_sync: Sync, period: Period, stream: str
) -> None:
    """since: start_date's London midnight (none for a ledger; the longest offer validity
    before it for rewards); until: end_date, a bare date (spec 4.4.3: the end of that London
    day), so no row of the next day's first instant is read."""
    entries = requests_for(period_sync.log, PATH_GROUPS[(stream,)])
    assert entries
    since = {param(entry, "since") for entry in entries}
    expected = period.read_from(stream, period_sync.truth)
    assert {parse_instant(str(value)) if value else None for value in since} == {expected}
    assert {param(entry, "until") for entry in entries} == {period.last.isoformat()}


def test_every_dated_request_is_inside_the_period(period_sync: Sync, period: Period) -> None:
    """Streams without a window send no date; every date a request sends is in the period
    (but the rewards' since, test_instant_windows_run_from_start_date_to_the_end_of_end_date)."""
    outside = []
    rewards = PATH_GROUPS[("rewards",)]
    for entry in period_sync.log:
        for name in WINDOW_PARAMS:
            value = param(entry, name)
            if value is None or (name == "since" and rewards.match(entry["path"])):
                continue
            day = dt.date.fromisoformat(value) if len(value) == 10 else london_day_of(value)
            if not period.first <= day <= period.last:
                outside.append((entry["path"], name, value))
    assert not outside, outside[:10]
    for group in UNWINDOWED:
        entries = requests_for(period_sync.log, PATH_GROUPS[group])
        assert entries, group
        dated = [e["query"] for e in entries if any(param(e, name) for name in WINDOW_PARAMS)]
        assert not dated, (group, dated[:3])


def test_records_are_the_truth_of_the_period(period_sync: Sync, period: Period) -> None:
    truth = period_sync.truth
    fields = {"guests": "visited_at", **INSTANT_WINDOWED}
    problems: list[str] = []
    for stream, field in fields.items():
        rows = truth_rows(truth, stream)
        expected = [row for row in rows if period.read_holds(stream, truth, row[field])]
        assert expected, f"the sandbox has no {stream} in the period"
        problems += stream_problems(stream, period_sync.records(stream), expected)
    for stream in ("daily_stats", "daily_account_stats"):
        days = {day.isoformat() for day in period.days}
        expected = [row for row in truth_rows(truth, stream) if row["date"] in days]
        problems += stream_problems(stream, period_sync.records(stream), expected)
    assert not problems, "\n".join(problems)


def bookmark_times(state: dict[str, Any]) -> list[tuple[str, str]]:
    """Every time a state's bookmarks hold (per stream and partition)."""
    found = []
    for stream, bookmark in state["bookmarks"].items():
        for entry in [bookmark, *bookmark.get("partitions", [])]:
            for key in ("replication_key_value", "updated_since", "oldest_open_issued_at"):
                if isinstance(entry.get(key), str):
                    found.append((stream, entry[key]))
    return found


def test_no_bookmark_passes_the_end_of_end_date(period_sync: Sync, period: Period) -> None:
    state = period_sync.run.final_state
    assert state
    times = bookmark_times(state)
    streams = {stream for stream, _ in times}
    windowed = {"guests", "daily_stats", "daily_account_stats", "members", *INSTANT_WINDOWED}
    assert windowed <= streams, f"no bookmark for {sorted(windowed - streams)}"
    late = [
        (stream, value)
        for stream, value in times
        if (
            dt.date.fromisoformat(value) > period.last
            if len(value) == 10
            else parse_instant(value) > period.end
        )
    ]
    assert not late, late


def test_read_windows_cover_exactly_the_period(period_sync: Sync, period: Period) -> None:
    """covers_until is the end of end_date's London day, never the run's start."""
    rows = period_sync.records("read_windows")
    venues = {row["id"] for row in truth_rows(period_sync.truth, "venues")}
    assert {row["venue_id"] for row in rows} == venues
    assert {parse_instant(row["covers_from"]) for row in rows} == {period.start}
    assert {parse_instant(row["covers_until"]) for row in rows} == {period.end}
    guests = period_sync.records("guests")
    for row in rows:
        assert row["rows_read"] == sum(1 for g in guests if g["venue_id"] == row["venue_id"])


def test_a_read_up_to_end_date_from_the_first_day_deletes_nothing_after_it(
    sandbox: SandboxProcess, period: Period
) -> None:
    """No start_date: guests are read from the first day, but only to end_date, so no
    ACTIVATE_VERSION (it would mark every newer guest deleted); read_windows says what was read."""
    config = tap_config(sandbox, end_date=period.last.isoformat())
    catalog = select_streams(discover(config), ["guests", "read_windows"])
    result = sync(sandbox, config, catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    assert "guests" not in result.run.activated, result.run.activated
    end = period.end.astimezone(dt.timezone.utc).isoformat()
    assert f"Deletions: guests: every row from the first day to {end} was read" in (
        result.run.stderr
    )
    reads = result.records("read_windows")
    assert reads and {parse_instant(row["covers_until"]) for row in reads} == {period.end}
    expected = [
        row
        for row in truth_rows(result.truth, "guests")
        if london_day_of(row["visited_at"]) <= period.last
    ]
    assert stream_problems("guests", result.records("guests"), expected) == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"end_date": "2026-02-30"}, "end_date: '2026-02-30' is not a valid date"),
        ({"end_date": "yesterday"}, "end_date: 'yesterday' must be YYYY-MM-DD"),
        ({"end_date": "2026-01-31T00:00:00+00:00"}, "must be YYYY-MM-DD (a London day"),
        (
            {"start_date": "2026-01-10", "end_date": "2026-01-09"},
            "end_date: '2026-01-09' is before start_date's London day 2026-01-10",
        ),
        (
            # 23:30 UTC on 9 July is 10 July in London (summer time)
            {"start_date": "2026-07-09T23:30:00+00:00", "end_date": "2026-07-09"},
            "is before start_date's London day 2026-07-10",
        ),
    ],
)
def test_bad_end_dates_are_refused_naming_the_setting(
    sandbox: SandboxProcess, settings: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigValidationError) as refused:
        TapGuestData(config=tap_config(sandbox, **settings), validate_config=True)
    assert message in str(refused.value)


@pytest.mark.parametrize("days_ahead", [0, 30])
def test_an_end_date_of_today_or_later_is_accepted(
    sandbox: SandboxProcess, days_ahead: int
) -> None:
    day = dt.datetime.now(LONDON).date() + dt.timedelta(days=days_ahead)
    tap = TapGuestData(config=tap_config(sandbox, end_date=day.isoformat()), validate_config=True)
    assert tap.config["end_date"] == day.isoformat()


def test_an_end_date_today_reads_up_to_the_run_start(sandbox: SandboxProcess) -> None:
    """end_date today: the windows end where they would without it, at the run's start."""
    today = dt.datetime.now(LONDON).date()
    config = tap_config(sandbox, start_date=today.isoformat(), end_date=today.isoformat())
    catalog = select_streams(discover(config), ["rewards"])
    result = sync(sandbox, config, catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    untils = {param(e, "until") for e in requests_for(result.log, PATH_GROUPS[("rewards",)])}
    assert len(untils) == 1
    until = parse_instant(str(untils.pop()))
    assert until is not None and result.started - 1 <= until.timestamp() <= result.finished


@pytest.mark.parametrize(
    ("end_date", "hours"),
    [("2026-10-25", 25), ("2026-03-29", 23), ("2026-07-01", 24)],  # DST ends, starts, summer
)
def test_end_date_ends_at_the_next_london_midnight_on_any_day(end_date: str, hours: int) -> None:
    started = dt.datetime(2027, 1, 1, tzinfo=dt.timezone.utc)
    end = time_rules.window_end(started, end_date)
    day = dt.date.fromisoformat(end_date)
    assert end - london_midnight(day) == dt.timedelta(hours=hours)
    assert time_rules.last_day(end) == day
    assert TimeWindow(since="since", until="until").until_param(end) == end_date
    assert TimeWindow(since="from", until="to", dates=True).until_param(end) == end_date


def test_a_window_without_end_date_or_ending_later_ends_at_the_run_start() -> None:
    started = dt.datetime(2026, 11, 25, 10, 30, tzinfo=dt.timezone.utc)
    assert time_rules.window_end(started, None) == started
    assert time_rules.window_end(started, "2026-11-25") == started
    assert time_rules.window_end(started, "2027-01-01") == started
    assert TimeWindow(since="since", until="until").until_param(started) == started.isoformat()
