"""Resume parts: how a stream picks up a read an earlier run left half-done
(run/state_markers.py says what the markers in state are; here is what a stream does with them,
behind one protocol).

    resume = ListingResume()                      # guests, redemptions: narrow the window
    resume = MemberWalkResume(ledger=...)         # members: skip ledgers already written
    resume = WalkedLedgerResume(walk=...)         # member_ledger: the walk's own window

A stream without one (`Resume()`) has nothing to resume beyond its bookmark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tap_guestdata.run import time_rules
from tap_guestdata.run.state_markers import RESUME_KEY, ListingMarker, MemberWalk
from tap_guestdata.stream.host import Part, PartitionKey, StreamHost, state_key
from tap_guestdata.stream.reading import ReadEvents

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context


class Resume(ReadEvents, Part):
    """Nothing to resume: a read starts over, and the bookmark is the only progress kept.
    The read loop tells it each row written and the end of each partition (reading.py)."""

    def attach(self, host: StreamHost) -> None:
        self.host = host

    def window_until(self, context: Context | None, window_end: dt.datetime) -> dt.datetime:
        """Where this partition's window ends: the run's window end, unless a resumed read
        ends elsewhere."""
        return window_end

    def resumed_below(self, context: Context | None) -> str | None:
        """Why this read's window is not all its own (it resumes an interrupted read); None."""
        return None

    def already_read(self, context: Context | None) -> bool:
        """True when an interrupted run this one resumes wrote this whole partition."""
        return False

    def child_already_read(self, row: dict[str, Any]) -> bool:
        """True when an interrupted run this one resumes wrote this row's children."""
        return False

    def markers(self) -> None:
        """Put the resume markers into the stream's state (before a STATE message)."""


class ListingResume(Resume):
    """A newest-first listing bounded in time: an interrupted read left `[since, oldest row
    written]` unread, so the next run's window ends there (run/state_markers.py, ListingMarker).

    `open_row` (rewards, spec 3): rows that may still change; the oldest one written is kept
    under `oldest_open_key` in the marker, and in the stream's state once the read finished."""

    def __init__(
        self,
        *,
        open_row: Callable[[dict[str, Any]], bool] | None = None,
        oldest_open_key: str | None = None,
    ) -> None:
        self.open_row = open_row
        self.oldest_open_key = oldest_open_key

    def attach(self, host: StreamHost) -> None:
        super().attach(host)
        self._markers: dict[PartitionKey, ListingMarker] = {}

    def marker(self, context: Context | None) -> ListingMarker:
        """This partition's marker (picked up from an interrupted run's state, or new)."""
        key = state_key(self.host, context)
        if key not in self._markers:
            state = self.host.get_context_state(context)
            self._markers[key] = ListingMarker.from_state(state) or ListingMarker()
        return self._markers[key]

    def window_until(self, context: Context | None, window_end: dt.datetime) -> dt.datetime:
        resume_until = self.marker(context).until()
        return min(resume_until, window_end) if resume_until is not None else window_end

    def resumed_below(self, context: Context | None) -> str | None:
        marker = self.marker(context)
        if marker.until() is None:
            return None
        return (
            f"this run resumed an interrupted read below {marker.oldest}; the rows above it "
            "were read by the run that stopped"
        )

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        marker = self.marker(context)
        cursor_key = self.host.replication_key
        if cursor_key and row.get(cursor_key):
            marker.row_written(row[cursor_key])
        if self.open_row is not None and self.oldest_open_key and self.open_row(row):
            cursor = time_rules.utc_text(row[str(cursor_key)])
            oldest_open = marker.extra.get(self.oldest_open_key)
            if oldest_open is None or cursor < oldest_open:
                marker.extra[self.oldest_open_key] = cursor

    def markers(self) -> None:
        for key, marker in self._markers.items():
            self.host.get_context_state(dict(key) or None)[RESUME_KEY] = marker.as_state()

    def read_ended(self, context: Context | None) -> None:
        """Keep the newest row of an interrupted run as the bookmark candidate (the SDK keeps
        the max) and drop the marker; with open rows, keep the oldest one still open."""
        if self.oldest_open_key is not None:
            oldest_open = self.marker(context).extra.get(self.oldest_open_key)
            # every page read: none open means nothing older than this run's window can
            # change (after a resumed run the bookmark, the newest row, still bounds it)
            self.host.stream_state[self.oldest_open_key] = oldest_open or time_rules.utc_text(
                self.host.runtime.window_end
            )
        marker = self._markers.pop(state_key(self.host, context), None)
        cursor_key = self.host.replication_key
        if marker is not None and marker.newest and cursor_key:
            self.host.state_manager.increment_state(
                {cursor_key: marker.newest}, context=context, replication_key=cursor_key
            )
        self.host.get_context_state(context).pop(RESUME_KEY, None)


class MemberWalkResume(Resume):
    """The member walk (run/state_markers.py, MemberWalk): members newest first, each with its
    ledger. `ledger(host)` is the member ledger stream; the members bookmark (spec 2.8, no
    updated-at field) is the walk's start less members_margin_seconds, kept under
    `bookmark_key`."""

    def __init__(self, *, ledger: Callable[[Any], StreamHost], bookmark_key: str) -> None:
        self.ledger = ledger
        self.bookmark_key = bookmark_key

    def attach(self, host: StreamHost) -> None:
        super().attach(host)
        self._walk: MemberWalk | None = None
        self._walked_member_ids: set[Any] = set()

    @property
    def walk(self) -> MemberWalk:
        """This run's member walk, continuing an interrupted one found in state."""
        if self._walk is None:
            with_ledger = self.ledger(self.host).selected
            interrupted = MemberWalk.from_state(self.host.stream_state)
            if interrupted is not None and (interrupted.with_ledger or not with_ledger):
                self._walk = interrupted
            else:
                # the ledger window's end (time_rules.window_end), kept for a resumed walk
                started_at = time_rules.utc_text(self.host.runtime.window_end)
                self._walk = MemberWalk(started_at=started_at, with_ledger=with_ledger)
        return self._walk

    def members_bookmark(self) -> str:
        """Next run's updated_since: from the walk's start (the interrupted run's, if any)."""
        if self.walk.members_bookmark is None:
            runtime = self.host.runtime
            margin = dt.timedelta(seconds=runtime.settings.members_margin_seconds)
            # never past the ledger window's end: members whose points moved after end_date
            # must be listed again, with their ledgers
            bookmark = min(runtime.members_bookmark(margin), runtime.window_end)
            self.walk.members_bookmark = time_rules.utc_text(bookmark)
        return self.walk.members_bookmark

    def child_already_read(self, row: dict[str, Any]) -> bool:
        if self.walk.already_walked(row):
            self._walked_member_ids.add(row["id"])
            return True
        return False

    def ledger_already_read(self, member_id: Any) -> bool:
        return member_id in self._walked_member_ids

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        self.walk.member_written(row)

    def markers(self) -> None:
        self.members_bookmark()
        self.host.stream_state[RESUME_KEY] = self.walk.as_state()

    def read_ended(self, context: Context | None) -> None:
        """Every page read and every ledger synced: the next run reads what changed since the
        walk began, and the ledger's bookmark covers the lines the interrupted run wrote."""
        self.host.stream_state.update(
            replication_key=self.bookmark_key, replication_key_value=self.members_bookmark()
        )
        ledger = self.ledger(self.host)
        if ledger.selected and self.walk.ledger_newest:
            ledger.state_manager.increment_state(
                {ledger.replication_key: self.walk.ledger_newest},
                context=None,
                replication_key=str(ledger.replication_key),
            )
        self.host.stream_state.pop(RESUME_KEY, None)
        self._walk = None
        self._walked_member_ids.clear()


class WalkedLedgerResume(Resume):
    """A member's ledger inside the member walk (`walk(host)`: the members' resume part): the
    window ends at the walk's start, and ledgers the interrupted walk wrote are skipped."""

    def __init__(self, *, walk: Callable[[Any], MemberWalkResume]) -> None:
        self.walk = walk

    def window_until(self, context: Context | None, window_end: dt.datetime) -> dt.datetime:
        """The member walk's start: a resumed walk reads the interrupted run's window."""
        return time_rules.parse_instant(self.walk(self.host).walk.started_at)

    def already_read(self, context: Context | None) -> bool:
        return self.walk(self.host).ledger_already_read((context or {}).get("member_id"))

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        self.walk(self.host).walk.ledger_line_written(row["created_at"])
