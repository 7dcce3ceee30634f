"""Core streams (spec 4.1): account, venues, guests and daily statistics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import requests

from tap_guestdata.http.paging import body_of
from tap_guestdata.run import time_rules
from tap_guestdata.run.concurrency import ordered_map
from tap_guestdata.run.progress import StreamPlan
from tap_guestdata.stream.base import GuestDataStream, sibling
from tap_guestdata.stream.deletions import FollowDeletions
from tap_guestdata.stream.resume import ListingResume
from tap_guestdata.stream.window import DayByDayWindow, ListingWindow

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context


class Account(GuestDataStream):
    """The account behind the key (spec 2.1)."""

    name = "account"
    path = "/me"
    primary_keys = ("account_id",)
    paged = False


class Venues(GuestDataStream):
    """Venues (spec 2.2). Paging of /venues is not shown (spec 4.1): meta is followed if given."""

    name = "venues"
    path = "/venues"
    primary_keys = ("id",)
    deletions = FollowDeletions()  # read whole every run: a venue gone from it is marked

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        return [dict(row) for row in all_venues(self)]

    def planned_requests(self) -> StreamPlan:
        return StreamPlan(self.name, 1, "one listing, shared with the statistics streams")


def all_venues(stream: GuestDataStream) -> list[dict[str, Any]]:
    """The account's venues, read once per run and shared with the statistics streams."""
    venues = sibling(stream, Venues)
    rows: list[dict[str, Any]] = stream.runtime.lookup(
        "venues", lambda: list(venues.request_records(None))
    )
    return rows


def first_venue_day(stream: GuestDataStream) -> dt.date:
    """No guest arrived before the account's first venue existed (spec 2.2 created_at)."""
    return min(time_rules.london_day(venue["created_at"]) for venue in all_venues(stream))


def venue_ids(stream: GuestDataStream) -> list[int]:
    """A listing without venue_id covers every venue the key may see (spec 4.1)."""
    return [venue["id"] for venue in all_venues(stream)]


class Guests(GuestDataStream):
    """Guest sign-ups (spec 2.3), newest first. from/to take London dates only (spec 4.1,
    4.4.2), so the bookmark's whole London day is read again."""

    name = "guests"
    path = "/guests"
    primary_keys = ("id",)
    replication_key = "visited_at"
    newest_first = True
    window = ListingWindow(since="from", until="to", dates=True)
    resume = ListingResume()
    # spec 1: a deleted guest leaves the API, not the warehouse
    deletions = FollowDeletions(first_day=first_venue_day, venues=venue_ids)


class ReadWindows(GuestDataStream):
    """No endpoint: the complete reads of windowed streams this run made, one row per venue, so
    the warehouse can flag rows of a window the API no longer returns (stream/deletions.py).
    Selected beside guests, not by default (a catalog without it behaves as before)."""

    name = "read_windows"
    primary_keys = ("stream", "venue_id", "read_version")
    paged = False
    selected_by_default = False

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        return list(self.runtime.completed_reads)  # streams sync in name order: guests is done

    def planned_requests(self) -> StreamPlan:
        return StreamPlan(self.name, 0, "no requests: what this run read in full")


class _DailyStatistics(GuestDataStream):
    """One /stats request per London day (spec 2.4, from = to = that day), run by the worker
    pool; days from max(first venue day, start_date, bookmark - stats_lookback_days) to the
    window's last day (today, or end_date). Late sign-ups change recent days, hence the
    lookback."""

    path = "/stats"
    replication_key = "date"
    paged = False
    # Days are written in ascending order, so the bookmark is a resume point (run/state_markers.py);
    # a lookback re-reads days before the old bookmark, hence no sort check.
    is_sorted = True
    check_sorted = False
    window: DayByDayWindow = DayByDayWindow(
        since="from", until="to", lookback_setting="stats_lookback_days"
    )

    def read_records(self, context: Context | None) -> Iterator[dict[str, Any]]:
        read_day = partial(self.read_day, context)
        window = 4 * self.runtime.workers
        for rows in ordered_map(self.runtime.executor, read_day, self.days(context), window):
            yield from rows

    def days(self, context: Context | None) -> list[dt.date]:
        return self.window.days(context, self.earliest_day(context))

    def days_to_read(self, context: Context | None) -> int:
        return len(self.days(context))

    def read_day(self, context: Context | None, day: dt.date) -> list[dict[str, Any]]:
        """One day's request (in a worker thread)."""
        return list(self.request_records({**(context or {}), "day": day.isoformat()}))

    def earliest_day(self, context: Context | None) -> dt.date:
        """The first London day the partition has data (its venues' opening)."""
        raise NotImplementedError

    def totals(self, response: requests.Response) -> dict[str, Any]:
        data = body_of(response)["data"]
        keys = ("visits", "unique_guests", "marketing_opt_ins")
        return {"date": data["from"], **{key: data[key] for key in keys}}


class DailyStats(_DailyStatistics):
    """Per venue per London day; one state partition (bookmark) per venue."""

    name = "daily_stats"
    primary_keys = ("venue_id", "date")
    query_from_partition = ("venue_id",)

    @property
    def partitions(self) -> list[dict[str, Any]]:
        return [{"venue_id": venue["id"]} for venue in all_venues(self)]

    def planned_requests(self) -> StreamPlan:
        days = sum(self.days_to_read(partition) for partition in self.partitions)
        return StreamPlan(self.name, days, f"one per venue and day: {days} venue-days")

    def earliest_day(self, context: Context | None) -> dt.date:
        venue_id = (context or {})["venue_id"]
        created = next(row["created_at"] for row in all_venues(self) if row["id"] == venue_id)
        return time_rules.london_day(created)

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        venue_id = body_of(response)["meta"]["venue_ids"][0]  # spec 2.4: the venues covered
        return [{"venue_id": venue_id, **self.totals(response)}]


class DailyAccountStats(_DailyStatistics):
    """All venues together per London day, with the venue ids the totals cover."""

    name = "daily_account_stats"
    primary_keys = ("date",)

    def earliest_day(self, context: Context | None) -> dt.date:
        return min(time_rules.london_day(row["created_at"]) for row in all_venues(self))

    def planned_requests(self) -> StreamPlan:
        days = self.days_to_read(None)
        return StreamPlan(self.name, days, f"one per day: {days} days")

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        totals = self.totals(response)
        venue_ids = body_of(response)["meta"]["venue_ids"]
        return [{"date": totals.pop("date"), "venue_ids": venue_ids, **totals}]
