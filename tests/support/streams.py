"""The stream contract, read from the tap itself: each stream's primary key, the stream groups,
a comparable key of a row, and the rows the sandbox's ground truth says a stream must hold."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from demo_pipeline import StreamCheck, compare_stream, report, truth_tables
from tap_guestdata.run.catalog import streams_of_group
from tap_guestdata.tap import STREAM_TYPES


def stream_keys() -> dict[str, tuple[str, ...]]:
    """Stream -> primary key of the API's streams (the tap's order): the data a sync reads and
    the sandbox's truth holds, not the tap's own bookkeeping (BOOKKEEPING_STREAMS)."""
    return {
        stream.name: tuple(stream.primary_keys or ())
        for stream in STREAM_TYPES
        if stream.selected_by_default
    }


STREAM_KEYS = stream_keys()
# Streams of no endpoint, selected by name (meltano.yml), never by default: read_windows.
BOOKKEEPING_STREAMS = tuple(
    stream.name for stream in STREAM_TYPES if not stream.selected_by_default
)
ALL_STREAMS = tuple(STREAM_KEYS)
CORE_STREAMS = ("account", "venues", "guests", "daily_stats", "daily_account_stats")
REWARDS_STREAMS = tuple(stream for stream in ALL_STREAMS if stream not in CORE_STREAMS)
MEMBER_STREAMS = ("members", "member_ledger")
STATS_STREAMS = streams_of_group("stats")  # the catalog's stats group, the days of spec 2.4


def key_of(stream: str, row: Mapping[str, Any]) -> tuple:
    """A comparable primary key of a record, a truth row or a loaded row: dates become ISO
    strings (so database and JSON keys meet), lists JSON text (so they hash)."""
    parts = []
    for name in STREAM_KEYS[stream]:
        value = row.get(name)
        if isinstance(value, dt.date):
            value = value.isoformat()
        elif isinstance(value, list):
            value = json.dumps(value)
        parts.append(value)
    return tuple(parts)


def rows_by_key(stream: str, rows: Iterable[Mapping[str, Any]]) -> dict[tuple, Mapping[str, Any]]:
    """The rows of one stream by primary key (a later row with the same key wins)."""
    return {key_of(stream, row): row for row in rows}


def truth_rows(truth: Mapping[str, Any], stream: str) -> list[dict[str, Any]]:
    """The rows the tap must emit for `stream`, from a `/_sandbox/truth` answer (the demo's
    reading of it: single objects as one row, `mirror_to_<partner>` as fixed columns)."""
    return truth_tables({stream: truth.get(stream)})[stream]


def rewards_read_from(truth: Mapping[str, Any], start: dt.datetime) -> dt.datetime:
    """Where a run whose window starts at `start` (start_date) reads rewards from: the longest
    offer validity before it, in days of 24 hours (docs/tap.md, "What a start_date reads")."""
    longest = max(row["valid_days_after_issue"] for row in truth_rows(truth, "offers"))
    return start.astimezone(dt.timezone.utc) - dt.timedelta(days=longest)


def keyed_tables(tables: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, dict[tuple, dict]]:
    """Each stream's rows (records, truth rows or a loaded table) by primary key, without a
    target's `_sdc_*` bookkeeping columns."""
    return {
        stream: {
            key_of(stream, row): {
                name: value for name, value in row.items() if not name.startswith("_sdc_")
            }
            for row in rows
        }
        for stream, rows in tables.items()
    }


def changed_keys(before: Mapping[str, dict], after: Mapping[str, dict]) -> dict[str, set]:
    """Per stream, the keys added, removed or whose row differs between two `keyed_tables`."""
    changes = {}
    for stream in STREAM_KEYS:
        old, new = before.get(stream, {}), after.get(stream, {})
        keys = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
        if keys:
            changes[stream] = keys
    return changes


def truth_today(truth: Mapping[str, Any]) -> str:
    """The sandbox's London today (ISO) in its truth: the newest day of the account's stats."""
    return max(row["date"] for row in truth["daily_account_stats"])


def as_of_the_truth(
    tables: Mapping[str, list[dict[str, Any]]], truth: Mapping[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """The tables without the stats of days after the truth's today. The sandbox's day is that
    of the instant it serves its data as of; a run whose own clock has passed a London
    midnight since also read the day after (days from the venues' first to the run's today,
    spec 2.4), which that sandbox has not reached."""
    today = truth_today(truth)
    return {
        stream: [row for row in rows if str(row["date"]) <= today]
        if stream in STATS_STREAMS
        else list(rows)
        for stream, rows in tables.items()
    }


def assert_tables_equal_truth(
    tables: Mapping[str, list[dict[str, Any]]], truth: Mapping[str, Any], label: str = ""
) -> list[StreamCheck]:
    """Each loaded table (stream -> rows) against the truth, as of the truth's today: row
    count, primary keys, duplicates and every field's value (the demo's check), in order."""
    loaded = as_of_the_truth(tables, truth)
    checks = [
        compare_stream(stream, rows, truth_rows(truth, stream)) for stream, rows in loaded.items()
    ]
    failing = [check for check in checks if not check.matches]
    assert not failing, f"{label}\n" + report(checks)
    return checks
