"""The stream contract, read from the tap itself: each stream's primary key, the stream groups,
a comparable key of a row, and the rows the sandbox's ground truth says a stream must hold."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from demo_pipeline import truth_tables
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
