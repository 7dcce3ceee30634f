"""Window policies (stream/window.py) on a stand-in stream: bookmark, start_date, lookback, the
window's end, resumed reads, and the London days around the clock changes (spec 4.4)."""

from __future__ import annotations

import datetime as dt

from support.parts import UTC, FakeHost, FakeSettings
from tap_guestdata.run import time_rules
from tap_guestdata.run.state_markers import RESUME_KEY
from tap_guestdata.stream.resume import ListingResume
from tap_guestdata.stream.window import (
    DayByDayWindow,
    ListingWindow,
    OpenRowsWindow,
    WholeHistoryWindow,
)

SPRING_FORWARD = dt.date(2026, 3, 29)  # London: 23 hours
FALL_BACK = dt.date(2026, 10, 25)  # London: 25 hours


def test_first_run_reads_from_start_date_to_the_run_start() -> None:
    host = FakeHost(settings=FakeSettings(start_date="2026-01-01"))
    host.with_parts(window=ListingWindow(since="since", until="until"))
    assert host.window.params(None) == {
        "since": "2026-01-01T00:00:00+00:00",
        "until": "2026-03-30T12:00:00+00:00",
    }


def test_bookmark_less_lookback_never_reaches_before_start_date() -> None:
    settings = FakeSettings(start_date="2026-03-20", redemptions_lookback_days=30)
    host = FakeHost(settings=settings)
    host.stream_state.update(
        replication_key="created_at", replication_key_value="2026-03-25T10:00:00+00:00"
    )
    window = ListingWindow(
        since="since", until="until", lookback_setting="redemptions_lookback_days"
    )
    host.with_parts(window=window)
    assert host.window.params(None)["since"] == "2026-03-20T00:00:00+00:00"


def test_a_bookmark_of_another_replication_key_is_ignored() -> None:
    host = FakeHost()
    host.stream_state.update(replication_key="other", replication_key_value="2026-03-25T10:00:00Z")
    host.with_parts(window=ListingWindow(since="since", until="until"))
    assert "since" not in host.window.params(None)


def test_dates_window_sends_london_days() -> None:
    host = FakeHost(started=dt.datetime(2026, 3, 29, 23, 30, tzinfo=UTC))
    host.stream_state.update(
        replication_key="created_at", replication_key_value="2026-03-28T23:30:00+00:00"
    )
    host.with_parts(window=ListingWindow(since="from", until="to", dates=True))
    # 23:30 UTC on 28 March is still 28 March in London (GMT); 23:30 UTC on 29 March is
    # 00:30 BST on the 30th: the dates follow London, not UTC (spec 4.4.2).
    assert host.window.params(None) == {"from": "2026-03-28", "to": "2026-03-30"}


def test_a_london_midnight_end_is_sent_as_the_day_before() -> None:
    midnight = time_rules.start_of_london_day(SPRING_FORWARD + dt.timedelta(days=1))
    host = FakeHost(started=midnight).with_parts(window=ListingWindow(since="since", until="until"))
    assert host.window.params(None) == {"until": "2026-03-29"}  # spec 4.4.3: the whole day


def test_london_days_around_the_clock_changes_are_23_and_25_hours() -> None:
    def hours(day: dt.date) -> float:
        length = time_rules.end_of_london_day(day) - time_rules.start_of_london_day(day)
        return length.total_seconds() / 3600

    assert (hours(SPRING_FORWARD), hours(FALL_BACK)) == (23.0, 25.0)
    assert time_rules.start_of_london_day(FALL_BACK).isoformat() == "2026-10-24T23:00:00+00:00"


def test_day_by_day_window_reads_each_day_from_bookmark_less_lookback() -> None:
    host = FakeHost(started=dt.datetime(2026, 3, 30, 0, 30, tzinfo=UTC))  # 01:30 BST, 30 March
    host.stream_state.update(replication_key="date", replication_key_value="2026-03-29")
    host.replication_key = "date"
    window = DayByDayWindow(since="from", until="to", lookback_setting="stats_lookback_days")
    host.with_parts(window=window)
    days = host.window.days(None, earliest=dt.date(2026, 1, 1))
    assert [day.isoformat() for day in days] == [
        "2026-03-27",
        "2026-03-28",
        "2026-03-29",
        "2026-03-30",
    ]
    assert host.window.params({"day": "2026-03-29"}) == {"from": "2026-03-29", "to": "2026-03-29"}


def test_day_by_day_window_first_run_keeps_the_last_history_days() -> None:
    host = FakeHost(settings=FakeSettings(stats_history_days=2))
    window = DayByDayWindow(since="from", until="to", lookback_setting="stats_lookback_days")
    host.with_parts(window=window)
    days = host.window.days(None, earliest=dt.date(2025, 1, 1))
    assert [day.isoformat() for day in days] == ["2026-03-29", "2026-03-30"]


def test_a_resumed_read_ends_where_the_interrupted_run_got_to() -> None:
    host = FakeHost()
    host.stream_state[RESUME_KEY] = {"oldest": "2026-03-10T08:00:00+00:00"}
    host.with_parts(window=ListingWindow(since="since", until="until"), resume=ListingResume())
    assert host.window.params(None) == {"until": "2026-03-10T08:00:01+00:00"}  # a second's margin


def test_a_ledger_is_read_whole_whatever_start_date_then_from_its_bookmark() -> None:
    host = FakeHost(settings=FakeSettings(start_date="2026-03-01"))
    host.with_parts(window=WholeHistoryWindow(since="since", until="until"))
    assert host.window.params(None) == {"until": "2026-03-30T12:00:00+00:00"}
    host = FakeHost(settings=FakeSettings(start_date="2026-03-01"))
    host.stream_state.update(
        replication_key="created_at", replication_key_value="2026-02-10T10:00:00+00:00"
    )
    host.with_parts(window=WholeHistoryWindow(since="since", until="until"))
    assert host.window.params(None)["since"] == "2026-02-10T10:00:00+00:00"


def rewards_like(
    state: dict[str, str], fallback_days: int, settings: FakeSettings | None = None
) -> FakeHost:
    """A stream declared as rewards is, with `state` and offers valid `fallback_days`."""
    host = FakeHost(replication_key="issued_at", settings=settings or FakeSettings())
    host.stream_state.update(replication_key="issued_at", **state)
    window = OpenRowsWindow(
        since="since",
        until="until",
        lookback_setting="rewards_lookback_days",
        oldest_open_key="oldest_open_issued_at",
        longest_open=lambda host: fallback_days,
    )
    return host.with_parts(window=window)


def test_rewards_reach_back_before_start_date_by_the_longest_validity() -> None:
    # a redemption from start_date can be of a reward issued up to that long before it
    host = rewards_like({}, fallback_days=30, settings=FakeSettings(start_date="2026-03-20"))
    assert host.window.params(None)["since"] == "2026-02-18T00:00:00+00:00"
    host = rewards_like(
        {"replication_key_value": "2026-03-25T10:00:00+00:00"},
        fallback_days=30,
        settings=FakeSettings(start_date="2026-03-20"),
    )
    assert host.window.params(None)["since"] == "2026-02-23T10:00:00+00:00"  # the lookback


def test_open_rows_window_starts_at_the_oldest_open_row() -> None:
    host = rewards_like(
        {
            "replication_key_value": "2026-03-25T10:00:00+00:00",
            "oldest_open_issued_at": "2026-02-01T09:00:00+00:00",
        },
        fallback_days=90,
    )
    assert host.window.params(None)["since"] == "2026-02-01T09:00:00+00:00"


def test_open_rows_window_without_oldest_open_falls_back_to_a_lookback() -> None:
    host = rewards_like({"replication_key_value": "2026-03-25T10:00:00+00:00"}, fallback_days=10)
    assert host.window.params(None)["since"] == "2026-03-15T10:00:00+00:00"


def test_a_lookback_set_by_the_user_wins_over_the_oldest_open_row() -> None:
    host = rewards_like(
        {
            "replication_key_value": "2026-03-25T10:00:00+00:00",
            "oldest_open_issued_at": "2026-02-01T09:00:00+00:00",
        },
        fallback_days=90,
    )
    host.settings.rewards_lookback_days = 1
    assert host.window.params(None)["since"] == "2026-03-24T10:00:00+00:00"
