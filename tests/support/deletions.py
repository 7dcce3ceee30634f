"""Guests to delete, and the windows that see them, picked from the sandbox's data (issue #25):
the deletions tests (PostgreSQL and fakesnow) mean the same on every day and at every hour."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from support.streams import truth_rows
from tap_guestdata.run import time_rules

PLACEHOLDER = "********"  # what an erased or deleted guest's contact becomes (erasure_sql.sql)


@dataclass(frozen=True)
class DeletionCase:
    """Two guests to delete: `recent`, on the newest London day that has ended and has
    arrivals, and `older`, in the middle of the history; `first_day`, the first London day a
    guest can have (the first venue's)."""

    recent: dict[str, Any]
    older: dict[str, Any]
    first_day: dt.date

    @property
    def ids(self) -> set[int]:
        return {self.recent["id"], self.older["id"]}

    @property
    def recent_day(self) -> dt.date:
        return time_rules.london_day(self.recent["visited_at"])

    @property
    def older_day(self) -> dt.date:
        return time_rules.london_day(self.older["visited_at"])

    @property
    def refresh_start(self) -> dt.date:
        """A start_date after the account's first day (the case users meet) covering `older`."""
        return self.older_day - dt.timedelta(days=1)

    @classmethod
    def pick(cls, truth: dict) -> DeletionCase:
        today = time_rules.london_day(dt.datetime.now(time_rules.UTC))
        guests = sorted(truth_rows(truth, "guests"), key=lambda row: row["visited_at"])
        venues = truth_rows(truth, "venues")
        first_day = min(time_rules.london_day(row["created_at"]) for row in venues)
        ended = [row for row in guests if time_rules.london_day(row["visited_at"]) < today]
        recent = ended[-1]
        middle_day = first_day + (time_rules.london_day(recent["visited_at"]) - first_day) / 2
        older = next(
            row for row in guests if time_rules.london_day(row["visited_at"]) >= middle_day
        )
        case = cls(recent, older, first_day)
        assert case.first_day < case.refresh_start < case.older_day < case.recent_day, case
        return case


def assert_contact_removed(row: dict[str, Any]) -> None:
    """A raw guest row flagged deleted in the source keeps its arrival, not its person."""
    contact = (row["email"], row["phone"], row["name"], row["last_name"])
    assert contact == (PLACEHOLDER, PLACEHOLDER, PLACEHOLDER, None), row
    assert row["_sdc_deleted_at"] is not None, row
