"""Resuming a killed sync from its last STATE (one home for the resume markers).

A stream that stops part-way (SIGKILL, OOM, a task timeout) leaves its bookmark where the last
*finished* run put it, plus a small `resume` marker in its state saying how far this run got.
The next run finishes the interrupted window instead of starting it again:

- A newest-first listing (guests, rewards, redemptions) has read everything from the window's
  top down to the oldest row written so far, so what is left is `[since, oldest written]`. The
  marker keeps that oldest cursor, the newest one (the bookmark the run would have ended with)
  and, for rewards, the oldest open reward seen.
- The member walk (members, each with its ledger) lists members newest first by created_at;
  the marker keeps where the walk got to and the interrupted run's window (its start), so the
  resumed run reads the same ledger window and skips the ledgers already written.
- Per-day statistics are read day by day in ascending order, so their ordinary bookmark is
  already a resume point (the streams are declared sorted).

Only rows the SDK has written before the marker moved count as done: markers move after the
SDK has written a row (and its children), and a STATE message carries them at most every
`state_interval_seconds`. A target keeps what came before the STATE it received, so a marker
never claims a row the target could lose. Markers are a few hundred bytes, whatever the size of
the account.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from tap_guestdata.run import time_rules

# The keys this tap adds to the SDK's state (replication_key, replication_key_value,
# partitions), named here once; run/settings.py checks their values in a given state file.
RESUME_KEY = "resume"  # stream or partition state: how far an interrupted run got
OLDEST_OPEN_KEY = "oldest_open_issued_at"  # rewards: the oldest reward still open (spec 3)
MEMBERS_BOOKMARK_KEY = "updated_since"  # members: the next run's updated_since (spec 2.8)
LISTING_TIME_KEYS = ("oldest", "newest")  # ListingMarker
WALK_TIME_KEYS = ("started_at", "boundary", "members_bookmark", "ledger_newest")  # MemberWalk
RESUME_TIME_KEYS = (*LISTING_TIME_KEYS, OLDEST_OPEN_KEY, *WALK_TIME_KEYS)
BOOKMARK_TIME_KEYS = ("replication_key_value", MEMBERS_BOOKMARK_KEY, OLDEST_OPEN_KEY)
UNTIL_MARGIN = dt.timedelta(seconds=1)  # re-read the boundary instant whatever `until` means


@dataclass
class ListingMarker:
    """How far a newest-first listing got: rows from the window's top down to `oldest`."""

    oldest: str | None = None  # UTC cursor of the oldest row written
    newest: str | None = None  # UTC cursor of the newest row written (the bookmark to keep)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the oldest open reward

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ListingMarker | None:
        marker = state.get(RESUME_KEY)
        if not isinstance(marker, dict):
            return None
        known = set(LISTING_TIME_KEYS)
        return cls(
            oldest=marker.get("oldest"),
            newest=marker.get("newest"),
            extra={key: value for key, value in marker.items() if key not in known},
        )

    def row_written(self, cursor: str) -> None:
        """`cursor` (UTC text, so strings compare in time order) of a row just written."""
        if self.oldest is None or cursor < self.oldest:
            self.oldest = cursor
        if self.newest is None or cursor > self.newest:
            self.newest = cursor

    def until(self) -> dt.datetime | None:
        """The upper bound of what is left to read (inclusive, with a second's margin)."""
        return time_rules.parse_instant(self.oldest) + UNTIL_MARGIN if self.oldest else None

    def as_state(self) -> dict[str, Any]:
        marker = {"oldest": self.oldest, "newest": self.newest, **self.extra}
        return {key: value for key, value in marker.items() if value is not None}


@dataclass
class MemberWalk:
    """How far the member walk (members newest first, each member's ledger) got.

    `started_at` is the interrupted run's window end (its sync start, or the end of its
    end_date's London day: time_rules.window_end): the resumed run reads the same ledger
    window (`until`) and ends with the same members bookmark, so nothing changed in between is
    claimed as read. Members created after that start have no ledger line in the window, so
    "done" is every member newer than the boundary, plus the ids written at the boundary.
    """

    started_at: str
    with_ledger: bool  # were ledgers read? if not, none of them counts as walked
    members_bookmark: str | None = None
    boundary: str | None = None  # created_at (UTC) of the oldest member written
    boundary_ids: list[Any] = field(default_factory=list)
    ledger_newest: str | None = None  # the newest ledger line written (its bookmark)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MemberWalk | None:
        marker = state.get(RESUME_KEY)
        if not isinstance(marker, dict) or not isinstance(marker.get("started_at"), str):
            return None
        return cls(
            started_at=marker["started_at"],
            with_ledger=bool(marker.get("with_ledger")),
            members_bookmark=marker.get("members_bookmark"),
            boundary=marker.get("boundary"),
            boundary_ids=list(marker.get("boundary_ids") or []),
            ledger_newest=marker.get("ledger_newest"),
        )

    def member_written(self, member: dict[str, Any]) -> None:
        created = time_rules.utc_text(member["created_at"])
        if self.boundary is None or created < self.boundary:
            self.boundary, self.boundary_ids = created, []
        if created == self.boundary:
            self.boundary_ids.append(member["id"])

    def ledger_line_written(self, created_at: str) -> None:
        if self.ledger_newest is None or created_at > self.ledger_newest:
            self.ledger_newest = created_at

    def already_walked(self, member: dict[str, Any]) -> bool:
        """True when this member's ledger was written by the interrupted run."""
        if self.boundary is None:
            return False
        created = time_rules.utc_text(member["created_at"])
        return created > self.boundary or (
            created == self.boundary and member["id"] in self.boundary_ids
        )

    def as_state(self) -> dict[str, Any]:
        marker = {
            "started_at": self.started_at,
            "with_ledger": self.with_ledger,
            "members_bookmark": self.members_bookmark,
            "boundary": self.boundary,
            "boundary_ids": self.boundary_ids or None,
            "ledger_newest": self.ledger_newest,
        }
        return {key: value for key, value in marker.items() if value is not None}


class Checkpoints:
    """When to send STATE: at most every `interval` seconds while a stream runs (0: after
    every row), so a kill loses at most that much work (plus requests in flight)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._last = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True
