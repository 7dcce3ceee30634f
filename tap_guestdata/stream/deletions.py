"""Deletions followed from the source: Singer's ACTIVATE_VERSION, sent only after a complete read.

Deleting a guest in the service does not delete an exported copy (spec 1): the warehouse's copy
is its owner's to follow. A stream that declares the part `deletions = FollowDeletions()` does
so with the table version every SQL target of the SDK understands:

- each row it writes carries a version, the moment it was written (epoch milliseconds, always
  after its page was read), so a row read before a run started has an older version than that
  run, and a row read by an overlapping run after it started has a newer one;
- once a read has provably covered the stream's whole history, the stream sends ACTIVATE_VERSION
  with the run's start: the target marks every row it holds with an older version
  (`_sdc_deleted_at`) or, with its `hard_delete`, removes it. Rows of this read, and rows of
  any run that read after it started, are newer and stay.

The SDK's own ACTIVATE_VERSION (`emit_activate_version_messages`) goes out *before* a full-table
sync, so a run that dies half-way would leave every row not yet re-read marked (or, with
hard_delete, gone). Here it goes out at the end, and only when the read was complete:

- the read finished: every page up to meta.last_page answered (a page that fails after its
  retries ends the run; an empty page does not end the listing, `LastPagePaginator`), and no
  403 closed the stream's group (spec 4.5);
- a windowed stream (guests) read from the beginning: no `from`, or a `from` on or before the
  London day the account's first venue opened (no guest can be older), up to the run's start
  (no `end_date` before it), and did not resume an interrupted read (whose newer rows the
  killed run read).

Otherwise one line says why deletions were not checked, and nothing is marked.

Inside any window (a `start_date`, an incremental run): Singer has no ACTIVATE_VERSION scoped to
a window, so the warehouse is told what was read instead. A complete, not resumed read of a
windowed stream records one `read_windows` row per venue it covered: the window
`[covers_from, covers_until)`, the run's version and how many distinct rows it returned. The dbt
project (macros/source_deletions.sql) flags a raw row of that venue and window whose version is
older than the read's as deleted in the source, once the warehouse holds at least `rows_read`
rows of the read (a load that lost part of the read flags nothing). A row outside every recorded
window is never flagged.

The distinct rows of a read are counted exactly while holding only the ids of the last few
pages (`DistinctRows`): a newest-first listing gives a row twice only when rows added at its
head push it across a page boundary (http/paging.py, NewestFirstPages), so memory stays flat
whatever the size of the account.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from singer_sdk.exceptions import FatalAPIError, RetriableAPIError

from tap_guestdata.http.paging import PAGES_REMEMBERED, PER_PAGE
from tap_guestdata.run import time_rules
from tap_guestdata.stream.host import Part, PartitionKey, StreamHost, state_key
from tap_guestdata.stream.window import bookmark

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.stream.resume import Resume
    from tap_guestdata.stream.window import WindowPolicy

EPOCH = dt.datetime(1970, 1, 1, tzinfo=time_rules.UTC)  # a window with no lower bound
READ_WINDOWS = "read_windows"  # the stream that carries the windows read (streams/core.py)


def row_version() -> int:
    """The version a row is written with: now, in milliseconds (after its page was read)."""
    return time.time_ns() // 1_000_000


class DeletionsHost(StreamHost, Protocol):
    """A stream as its deletions part sees it: its window, its resume, its ACTIVATE_VERSION."""

    @property
    def window(self) -> WindowPolicy: ...
    @property
    def resume(self) -> Resume: ...

    def write_activate_version(self, version: int) -> None: ...


class DistinctRows:
    """Distinct rows per venue of one read, counted exactly, holding only the last
    `remembered` (venue, id) pairs: a row given twice by a newest-first listing sits across a
    page boundary, within the few pages NewestFirstPages remembers (http/paging.py)."""

    def __init__(self, remembered: int = PAGES_REMEMBERED * PER_PAGE) -> None:
        self.remembered = remembered
        self.by_venue: dict[Any, int] = {}
        self._recent: deque[tuple[Any, Any]] = deque()
        self._recent_set: set[tuple[Any, Any]] = set()

    def add(self, venue_id: Any, row_id: Any) -> None:
        pair = (venue_id, row_id)
        if pair in self._recent_set:
            return
        self._recent.append(pair)
        self._recent_set.add(pair)
        if len(self._recent) > self.remembered:
            self._recent_set.discard(self._recent.popleft())
        self.by_venue[venue_id] = self.by_venue.get(venue_id, 0) + 1

    def held(self) -> int:
        """How many ids are held now (at most `remembered`)."""
        return len(self._recent_set)


@dataclass(frozen=True)
class ReadScope:
    """What a read about to start covers, decided before it: its window is fixed for the run,
    and a resume marker is dropped when the listing finishes."""

    unread: str | None  # why it does not cover the whole history; None: it does
    resumed: str | None  # why its window is not all its own (a resumed read); None: it is


class FollowDeletions(Part):
    """Follows the rows the API drops (this module's docstring), told by the stream's read
    loop what happened: before the read, each row written, the end, or a failure and why.

    For a windowed stream, `first_day(host)` is the first London day a row can have (None: not
    known, so only a window with no lower bound reads the whole history) and `venues(host)`
    the venues a complete read covers (None: its reads are not recorded)."""

    def __init__(
        self,
        *,
        first_day: Callable[[Any], dt.date | None] | None = None,
        venues: Callable[[Any], list[int] | None] | None = None,
    ) -> None:
        self.first_day = first_day
        self.venues = venues

    def attach(self, host: DeletionsHost) -> None:
        self.host = host
        self._scopes: dict[PartitionKey, ReadScope] = {}
        self.rows_read = DistinctRows()

    # ------------------------------------------------------------------ the read loop's events

    def before_read(self, context: Context | None) -> None:
        """Decided before reading: the window is fixed for the run, and a resume marker is
        dropped when the listing finishes."""
        if self.host.selected:
            scope = ReadScope(self.unread_history(context), self.host.resume.resumed_below(context))
            self._scopes[state_key(self.host, context)] = scope

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        """Count the distinct rows of each venue this read returned inside its recorded window,
        which ends at the run's window end (the window's integrity check in the warehouse).
        The cursor is already UTC text here (post_process), so it compares as a string."""
        if not self.host.window.windowed:
            return
        cursor = row.get(self.host.replication_key or "")
        if isinstance(cursor, str) and cursor < self.host.runtime.window_end_utc:
            self.rows_read.add(row.get("venue_id"), row.get("id"))

    def read_ended(self, context: Context | None) -> None:
        """After a finished read: ACTIVATE_VERSION if it covered the whole history (as
        `before_read` said), and the window it read (read_windows); one line saying why when
        neither was possible."""
        scope = self._scopes.pop(state_key(self.host, context), None)
        if scope is None:
            return
        if scope.unread is None:
            self.activate()
        not_recorded = self.record_window(context, scope)
        if scope.unread is not None and not_recorded is not None:
            self.not_checked(f"{scope.unread}; inside the window: {not_recorded}")

    def read_failed(self, context: Context | None, why: str) -> None:
        if self.host.selected:
            self._scopes.pop(state_key(self.host, context), None)
            self.not_checked(why)

    # ------------------------------------------------------------------ what a read covered

    def unread_history(self, context: Context | None) -> str | None:
        """Why this partition's read did not cover the stream's whole history; None if it did."""
        window, runtime = self.host.window, self.host.runtime
        if not window.windowed:
            return None
        if resumed := self.host.resume.resumed_below(context):
            return resumed
        if runtime.window_end < runtime.sync_started_at:
            last_day = time_rules.last_day(runtime.window_end).isoformat()
            return f"the window ends on {last_day} (end_date), newer rows were not read"
        since = window.since_value(context)
        if since is None:
            return None
        if bookmark(self.host, context):
            return f"an incremental run: the window starts on {since}, older rows were not read"
        try:  # the venues listing, shared with the other streams that read it
            first_day = self.first_day(self.host) if self.first_day is not None else None
        except (FatalAPIError, RetriableAPIError) as error:
            return f"the account's first day is not known ({error})"
        if first_day is not None and time_rules.london_day(since) <= first_day:
            return None
        after = (
            f", after {first_day.isoformat()}, the first day a row can have" if first_day else ""
        )
        return (
            f"the window starts on {since} (start_date){after}, so older rows were not read (a "
            "--full-refresh run without a later start_date checks them)"
        )

    def run_version(self) -> int:
        """The version activated after a complete read: the run's start, before any page."""
        return int(self.host.runtime.sync_started_at.timestamp() * 1000)

    def record_window(self, context: Context | None, scope: ReadScope) -> str | None:
        """After a finished read of a windowed stream: a `read_windows` row per venue it
        covered. Returns why it recorded nothing; None when it did."""
        host, runtime = self.host, self.host.runtime
        if not host.window.windowed:
            return "the stream has no window"
        if scope.resumed is not None:
            return (
                "a resumed read: the rows above its resume point were read by the run that stopped"
            )
        read_windows = host.streams_of_tap.get(READ_WINDOWS)
        if read_windows is None or not read_windows.selected:
            return (
                "read_windows is not selected: select read_windows.* beside it so that rows of "
                "the window the API no longer returns are flagged"
            )
        try:  # the venues listing, shared with the other streams that read it
            venue_ids = self.venues(host) if self.venues is not None else None
        except (FatalAPIError, RetriableAPIError) as error:
            return f"the venues it covered are not known ({error})"
        if venue_ids is None:
            return "its reads are not recorded (no venues it covers)"
        since = host.window.since_value(context)
        covers_from = time_rules.parse_boundary(since) if since else EPOCH
        covers_until = runtime.window_end.isoformat()  # never wider than was read (end_date)
        read = {
            "stream": host.name,
            "read_version": self.run_version(),
            "read_started_at": runtime.sync_started_at.isoformat(),
            "covers_from": covers_from.isoformat(),
            "covers_until": covers_until,
            "completed_at": dt.datetime.now(time_rules.UTC).isoformat(),
        }
        for venue_id in venue_ids:
            rows_read = self.rows_read.by_venue.get(venue_id, 0)
            runtime.completed_reads.append({**read, "venue_id": venue_id, "rows_read": rows_read})
        host.logger.info(
            "Deletions: %s: every row from %s to %s was read for %d venues (read_windows): rows "
            "of that window the warehouse holds from earlier reads and this read did not return "
            "are flagged deleted by the dbt project",
            host.name,
            since or "the first day",
            covers_until,
            len(venue_ids),
        )
        return None

    def not_checked(self, why: str) -> None:
        self.host.logger.info("Deletions: %s: not checked: %s", self.host.name, why)

    def activate(self) -> None:
        version = self.run_version()
        self.host.write_activate_version(version)
        self.host.logger.info(
            "Deletions: %s: the whole history was read; ACTIVATE_VERSION %d: rows the target "
            "holds from earlier reads that this one did not return are marked deleted",
            self.host.name,
            version,
        )
