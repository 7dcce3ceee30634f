"""Issue #3, point 3: windows bounded at sync start, instants percent-encoded, London dates,
UTC bookmarks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.json_values import parse_instant
from support.sandbox import OWNER_KEY, tap_config
from support.streams import rewards_read_from, truth_rows
from support.tap_process import discover, select_streams
from support.tap_suite import (
    DATE,
    LONDON,
    PATH_GROUPS,
    IncrementalScenario,
    Sync,
    duplicate_keys,
    london_date,
    param,
    raw_params,
    requests_for,
    stream_problems,
    sync,
    timestamp,
)

WINDOW_PARAMS = ("since", "until", "updated_since")
# Streams read with an instant window (spec 4.4), and the field the window applies to.
INSTANT_WINDOWED = {
    "rewards": "issued_at",
    "redemptions": "created_at",
    "member_ledger": "created_at",
}


# ------------------------------------------------------------------------------ bounded windows


@pytest.mark.parametrize("stream", sorted(INSTANT_WINDOWED))
def test_instant_windows_are_bounded_at_sync_start(owner_full_sync: Sync, stream: str) -> None:
    entries = requests_for(owner_full_sync.log, PATH_GROUPS[(stream,)])
    assert entries
    untils = {param(entry, "until") for entry in entries}
    assert None not in untils, "a request without `until`"
    instants = {parse_instant(value) for value in untils}
    assert len(instants) == 1, f"`until` moved during the sync: {sorted(untils)[:5]}"
    until = instants.pop()
    assert until is not None
    first_request = min(timestamp(entry["time"]) for entry in entries)
    assert owner_full_sync.started - 1 <= until.timestamp() <= first_request + 1
    field = INSTANT_WINDOWED[stream]
    late = [
        row["id"] for row in owner_full_sync.records(stream) if parse_instant(row[field]) > until
    ]
    assert not late, f"records after the window's end: {late[:5]}"


def test_guests_window_ends_on_the_london_day_of_sync_start(owner_full_sync: Sync) -> None:
    entries = requests_for(owner_full_sync.log, PATH_GROUPS[("guests",)])
    assert entries
    days = {london_date(owner_full_sync.started), london_date(owner_full_sync.finished)}
    for entry in entries:
        assert param(entry, "to") in {day.isoformat() for day in days}, entry["query"]


@dataclass
class PagingRace:
    before: dict
    result: Sync


@pytest.fixture(scope="module")
def paging_race() -> Iterator[PagingRace]:
    """A sync while the sandbox inserts new newest rows before each list request."""
    resources = ("guests", "members", "member_ledger", "rewards", "redemptions")
    with SandboxProcess(size="small", seed=11, limits=False) as server:
        config = tap_config(server)
        catalog = select_streams(
            discover(config), ["guests", "members", "member_ledger", "rewards", "redemptions"]
        )
        before = server.truth(config["api_key"])
        for resource in resources:
            server.mutate("insert_while_paging", resource=resource, count=5, times=6)
        result = sync(server, config, catalog=catalog)
        assert result.run.returncode == 0, result.run.stderr[-3000:]
        yield PagingRace(before, result)


@pytest.mark.parametrize("stream", ["guests", "members", "member_ledger", "rewards", "redemptions"])
def test_inserts_while_paging_cause_no_miss(paging_race: PagingRace, stream: str) -> None:
    expected = {row["id"] for row in truth_rows(paging_race.before, stream)}
    got = set(paging_race.result.run.ids(stream))
    missing = expected - got
    assert not missing, f"{len(missing)} of {len(expected)} rows missed, e.g. {sorted(missing)[:5]}"
    inserted = {row["id"] for row in truth_rows(paging_race.result.truth, stream)} - expected
    assert inserted, "the sandbox inserted nothing: the race was not exercised"


@pytest.mark.parametrize("stream", sorted(INSTANT_WINDOWED))
def test_inserts_while_paging_cause_no_duplicate_in_bounded_windows(
    paging_race: PagingRace, stream: str
) -> None:
    assert duplicate_keys(stream, paging_race.result.records(stream)) == []


# ------------------------------------------------------------------------------ query encoding


def _logs(owner_full_sync: Sync, incremental_scenario: IncrementalScenario) -> list[dict]:
    return [
        *owner_full_sync.log,
        *incremental_scenario.full.log,
        *incremental_scenario.incremental.log,
    ]


def test_instants_are_sent_with_the_offset_percent_encoded(
    owner_full_sync: Sync, incremental_scenario: IncrementalScenario
) -> None:
    seen_offsets = 0
    for entry in _logs(owner_full_sync, incremental_scenario):
        for name, values in raw_params(entry).items():
            if name not in WINDOW_PARAMS:
                continue
            for raw in values:
                assert "+" not in raw and " " not in raw and "%20" not in raw, (name, raw)
                value = param(entry, name)
                assert DATE.match(value) or parse_instant(value), (name, raw)
                if "+" in value:
                    assert "%2B" in raw.upper(), raw
                    seen_offsets += 1
    assert seen_offsets, "no instant with a + offset was sent: nothing checked"


def test_guests_and_stats_windows_are_plain_dates(
    owner_full_sync: Sync, incremental_scenario: IncrementalScenario
) -> None:
    logs = _logs(owner_full_sync, incremental_scenario)
    entries = [
        *requests_for(logs, PATH_GROUPS[("guests",)]),
        *requests_for(logs, PATH_GROUPS[("daily_stats", "daily_account_stats")]),
    ]
    assert entries
    for entry in entries:
        # /stats needs both ends (it defaults to the last 30 days); /guests may leave out
        # `from` to read all history.
        for name in ("from", "to"):
            value = param(entry, name)
            if value is None and name == "from" and entry["path"] == "/guests":
                continue
            assert value is not None and DATE.match(value), (entry["path"], entry["query"])


NEW_YORK_SUMMER = dt.timezone(dt.timedelta(hours=-4))


def _start_instant(earliest: dt.date) -> dt.datetime:
    """19:30 at UTC-4 on a recent day: still that day in UTC, already the next day in London
    on a summer-time day (UTC+1); on a winter day London and UTC agree, and only the literal
    date part is told apart. A summer-time day within the data is preferred."""
    day = dt.date.today() - dt.timedelta(days=10)
    summer = day
    while summer >= earliest:
        if dt.datetime(summer.year, summer.month, summer.day, 12, tzinfo=LONDON).dst():
            day = summer
            break
        summer -= dt.timedelta(days=1)
    if not dt.datetime(day.year, day.month, day.day, 12, tzinfo=LONDON).dst():
        return dt.datetime(day.year, day.month, day.day, 22, 30, tzinfo=NEW_YORK_SUMMER)
    return dt.datetime(day.year, day.month, day.day, 19, 30, tzinfo=NEW_YORK_SUMMER)


@pytest.fixture(scope="module")
def start_instant_sync(sandbox: SandboxProcess, owner_catalog: dict) -> tuple[Sync, dt.datetime]:
    venues = truth_rows(sandbox.truth(OWNER_KEY), "venues")
    start = _start_instant(min(london_date(parse_instant(row["created_at"])) for row in venues))
    config = tap_config(sandbox, start_date=start.isoformat())
    catalog = select_streams(
        owner_catalog, ["guests", "daily_stats", "daily_account_stats", "rewards", "redemptions"]
    )
    result = sync(sandbox, config, catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    return result, start


def test_start_date_instant_is_read_as_its_london_day_for_guests_and_stats(
    start_instant_sync: tuple[Sync, dt.datetime],
) -> None:
    result, start = start_instant_sync
    london_day = start.astimezone(LONDON).date()
    assert london_day == start.date() + dt.timedelta(days=1)  # the literal date is the day before
    guests = requests_for(result.log, PATH_GROUPS[("guests",)])
    assert guests and {param(entry, "from") for entry in guests} == {london_day.isoformat()}
    stats = requests_for(result.log, PATH_GROUPS[("daily_stats", "daily_account_stats")])
    assert min(param(entry, "from") for entry in stats) == london_day.isoformat()

    def on_or_after(row: dict, field: str) -> bool:
        return parse_instant(row[field]).astimezone(LONDON).date() >= london_day

    problems = stream_problems(
        "guests",
        result.records("guests"),
        [row for row in truth_rows(result.truth, "guests") if on_or_after(row, "visited_at")],
    )
    for stream in ("daily_stats", "daily_account_stats"):
        expected = [
            row
            for row in truth_rows(result.truth, stream)
            if dt.date.fromisoformat(row["date"]) >= london_day
        ]
        problems += stream_problems(stream, result.records(stream), expected)
    assert not problems, "\n".join(problems)


def assert_rows_from(result: Sync, stream: str, field: str, start: dt.datetime) -> None:
    """The rows emitted are exactly the truth's rows whose `field` is at or after `start`
    (some)."""
    expected = [
        row for row in truth_rows(result.truth, stream) if parse_instant(row[field]) >= start
    ]
    assert expected
    problems = stream_problems(stream, result.records(stream), expected)
    assert not problems, "\n".join(problems)


def test_start_date_instant_is_the_exact_since_of_instant_windows(
    start_instant_sync: tuple[Sync, dt.datetime],
) -> None:
    result, start = start_instant_sync
    entries = requests_for(result.log, PATH_GROUPS[("redemptions",)])
    assert entries
    assert {parse_instant(param(entry, "since")) for entry in entries} == {start}
    assert_rows_from(result, "redemptions", "created_at", start)
    rewards = requests_for(result.log, PATH_GROUPS[("rewards",)])
    assert {parse_instant(param(entry, "since")) for entry in rewards} == {
        rewards_read_from(result.truth, start)
    }
    assert_rows_from(result, "rewards", "issued_at", rewards_read_from(result.truth, start))


def test_start_date_as_a_date_starts_windows_at_london_midnight(
    sandbox: SandboxProcess, owner_catalog: dict
) -> None:
    """A date start_date is a London day (spec 4.4.2): since = that day's London midnight,
    whether sent as the date or as an instant (rewards: the longest offer validity before)."""
    day = dt.date.today() - dt.timedelta(days=10)
    midnight = dt.datetime(day.year, day.month, day.day, tzinfo=LONDON)
    catalog = select_streams(owner_catalog, ["guests", "redemptions", "rewards"])
    result = sync(sandbox, tap_config(sandbox, start_date=day.isoformat()), catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    guests = requests_for(result.log, PATH_GROUPS[("guests",)])
    assert {param(entry, "from") for entry in guests} == {day.isoformat()}
    for entry in requests_for(result.log, PATH_GROUPS[("redemptions",)]):
        since = param(entry, "since")
        assert since == day.isoformat() or parse_instant(since) == midnight, entry["query"]
    assert_rows_from(result, "redemptions", "created_at", midnight)
    rewards = requests_for(result.log, PATH_GROUPS[("rewards",)])
    assert {parse_instant(param(entry, "since")) for entry in rewards} == {
        rewards_read_from(result.truth, midnight)
    }
    assert_rows_from(result, "rewards", "issued_at", rewards_read_from(result.truth, midnight))


# ------------------------------------------------------------------------------ state


def test_state_bookmarks_are_utc_normalised(
    owner_full_sync: Sync, incremental_scenario: IncrementalScenario
) -> None:
    checked = 0
    for result in (owner_full_sync, incremental_scenario.full, incremental_scenario.incremental):
        state = result.run.final_state
        assert state and state.get("bookmarks"), "no bookmarks in the final STATE"
        for stream, bookmark in state["bookmarks"].items():
            entries = [bookmark, *bookmark.get("partitions", [])]
            for entry in entries:
                value = entry.get("replication_key_value")
                if not isinstance(value, str) or DATE.match(value):
                    continue
                instant = parse_instant(value)
                assert instant is not None, (stream, value)
                assert instant.utcoffset() == dt.timedelta(0), (stream, value)
                assert value.endswith(("+00:00", "Z")), (stream, value)
                checked += 1
    assert checked >= 3, "fewer than three instant bookmarks checked"
