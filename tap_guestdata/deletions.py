"""Deletions followed from the source: Singer's ACTIVATE_VERSION, sent only after a complete read.

Deleting a guest in the service does not delete an exported copy (spec 1): the warehouse's copy
is its owner's to follow. A stream that declares `follows_deletions` does so with the table
version every SQL target of the SDK understands:

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
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from singer_sdk.exceptions import FatalAPIError, RetriableAPIError

from tap_guestdata import windows

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.client import GuestDataStream


def row_version() -> int:
    """The version a row is written with: now, in milliseconds (after its page was read)."""
    return time.time_ns() // 1_000_000


def run_version(stream: GuestDataStream) -> int:
    """The version activated after a complete read: the run's start, before any of its pages."""
    return int(stream.sync_started_at.timestamp() * 1000)


@dataclass(frozen=True)
class ReadScope:
    """What a read about to start covers, decided before it: its window is fixed for the run,
    and a resume marker is dropped when the listing finishes."""

    unread: str | None  # why it does not cover the whole history; None: it does
    resumed: str | None  # why its window is not all its own (a resumed read); None: it is


def before_read(stream: GuestDataStream, context: Context | None) -> ReadScope:
    return ReadScope(unread_history(stream, context), resumed_read(stream, context))


def resumed_read(stream: GuestDataStream, context: Context | None) -> str | None:
    progress = stream.listing_progress(context) if stream.window is not None else None
    if progress is None or progress.until() is None:
        return None
    return (
        f"this run resumed an interrupted read below {progress.oldest}; the rows above it "
        "were read by the run that stopped"
    )


def unread_history(stream: GuestDataStream, context: Context | None) -> str | None:
    """Why this partition's read did not cover the stream's whole history; None when it did."""
    if stream.window is None:
        return None
    if resumed := resumed_read(stream, context):
        return resumed
    if stream.runtime.window_end < stream.sync_started_at:
        last_day = windows.last_day(stream.runtime.window_end).isoformat()
        return f"the window ends on {last_day} (end_date), newer rows were not read"
    since = stream.window_params(context).get(stream.window.since)
    if since is None:
        return None
    if stream.bookmark(context):
        return f"an incremental run: the window starts on {since}, older rows were not read"
    try:  # the venues listing, shared with the other streams that read it
        first_day = stream.earliest_possible_day()
    except (FatalAPIError, RetriableAPIError) as error:
        return f"the account's first day is not known ({error})"
    if first_day is not None and windows.london_day(since) <= first_day:
        return None
    after = f", after {first_day.isoformat()}, the first day a row can have" if first_day else ""
    return (
        f"the window starts on {since} (start_date){after}, so older rows were not read (a "
        "--full-refresh run without a later start_date checks them)"
    )


def note_row_read(stream: GuestDataStream, row: dict[str, Any]) -> None:
    """Count the distinct rows of each venue this read returned inside its recorded window,
    which ends at the run's window end (the window's integrity check in the warehouse). The
    cursor is already UTC text here (post_process), so it compares as a string."""
    cursor = row.get(stream.replication_key or "")
    if isinstance(cursor, str) and cursor < stream.runtime.window_end_utc:
        stream.rows_read_by_venue.setdefault(row.get("venue_id"), set()).add(row.get("id"))


def record_window(stream: GuestDataStream, context: Context | None, scope: ReadScope) -> str | None:
    """After a finished read of a windowed stream: a `read_windows` row per venue it covered.
    Returns why it recorded nothing; None when it did."""
    if stream.window is None:
        return "the stream has no window"
    if scope.resumed is not None:
        return "a resumed read: the rows above its resume point were read by the run that stopped"
    if not stream.sibling_selected("read_windows"):
        return (
            "read_windows is not selected: select read_windows.* beside it so that rows of the "
            "window the API no longer returns are flagged"
        )
    try:  # the venues listing, shared with the other streams that read it
        venue_ids = stream.venues_covered()
    except (FatalAPIError, RetriableAPIError) as error:
        return f"the venues it covered are not known ({error})"
    if venue_ids is None:
        return "its reads are not recorded (no venues it covers)"
    since = stream.window_params(context).get(stream.window.since)
    covers_from = windows.parse_boundary(since) if since else EPOCH
    started = stream.sync_started_at.isoformat()
    covers_until = stream.runtime.window_end.isoformat()  # never wider than was read (end_date)
    read = {
        "stream": stream.name,
        "read_version": run_version(stream),
        "read_started_at": started,
        "covers_from": covers_from.isoformat(),
        "covers_until": covers_until,
        "completed_at": dt.datetime.now(windows.UTC).isoformat(),
    }
    for venue_id in venue_ids:
        rows_read = len(stream.rows_read_by_venue.get(venue_id, ()))
        stream.runtime.completed_reads.append(
            {**read, "venue_id": venue_id, "rows_read": rows_read}
        )
    stream.logger.info(
        "Deletions: %s: every row from %s to %s was read for %d venues (read_windows): rows "
        "of that window the warehouse holds from earlier reads and this read did not return are "
        "flagged deleted by the dbt project",
        stream.name,
        since or "the first day",
        covers_until,
        len(venue_ids),
    )
    return None


EPOCH = dt.datetime(1970, 1, 1, tzinfo=windows.UTC)  # a window with no lower bound


def not_checked(stream: GuestDataStream, why: str) -> None:
    stream.logger.info("Deletions: %s: not checked: %s", stream.name, why)


def follow(stream: GuestDataStream, context: Context | None, scope: ReadScope) -> None:
    """After a finished read: ACTIVATE_VERSION if it covered the whole history (as
    `before_read` said), and the window it read (read_windows); one line saying why when
    neither was possible."""
    if scope.unread is None:
        activate(stream)
    not_recorded = record_window(stream, context, scope)
    if scope.unread is not None and not_recorded is not None:
        not_checked(stream, f"{scope.unread}; inside the window: {not_recorded}")


def activate(stream: GuestDataStream) -> None:
    version = run_version(stream)
    stream.write_activate_version(version)
    stream.logger.info(
        "Deletions: %s: the whole history was read; ACTIVATE_VERSION %d: rows the target holds "
        "from earlier reads that this one did not return are marked deleted",
        stream.name,
        version,
    )
