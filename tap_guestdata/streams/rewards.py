"""Rewards streams (spec 4.2, path prefix /rewards). Every one is skipped, with one warning,
when Rewards is off or not in the plan (spec 4.5.2); the member streams also when the key's
creator lacks the View guest data permission (spec 4.5.4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import requests
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError
from singer_sdk.singerlib.catalog import REPLICATION_INCREMENTAL

from tap_guestdata.http.errors import StreamForbidden
from tap_guestdata.http.paging import LastPagePaginator, body_of, listing_total
from tap_guestdata.run.progress import StreamPlan
from tap_guestdata.run.state_markers import MEMBERS_BOOKMARK_KEY, OLDEST_OPEN_KEY
from tap_guestdata.stream import planning
from tap_guestdata.stream.base import GuestDataStream, sibling
from tap_guestdata.stream.deletions import FollowDeletions
from tap_guestdata.stream.resume import ListingResume, MemberWalkResume, WalkedLedgerResume
from tap_guestdata.stream.window import (
    ListingWindow,
    OpenRowsWindow,
    UpdatedSinceWindow,
    WholeHistoryWindow,
    bookmark,
)

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

REWARDS_LOOKBACK_FALLBACK_DAYS = 90  # when offers cannot be read
MIRROR_PREFIX = "mirror_to_"  # spec 2.6: the flag is named after the partner system


class RewardsStream(GuestDataStream):
    scopes: ClassVar[tuple[str, ...]] = ("rewards",)


class Programme(RewardsStream):
    """The programme (spec 2.6); no row while data is null. Its one answer also gives
    programme_venues (meta.venues) and tiers, so it is read once per run."""

    name = "programme"
    deletions = FollowDeletions()  # the whole answer every run (stream/deletions.py)
    path = "/rewards/programme"
    primary_keys = ("id",)
    paged = False

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        return [body_of(response)]  # the whole envelope: data and meta.venues

    def answer(self) -> dict[str, Any]:
        return self.runtime.lookup(  # type: ignore[no-any-return]
            "programme", lambda: next(iter(self.request_records(None)), {})
        )

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        data = self.answer().get("data")
        return [dict(data)] if data else []


def programme_answer(stream: GuestDataStream) -> dict[str, Any]:
    return sibling(stream, Programme).answer()


class ProgrammeVenues(RewardsStream):
    """meta.venues of the programme answer. `mirror_to_<partner>` becomes two fixed columns,
    mirror_partner and mirror_to_partner, so the table's shape never depends on the partner."""

    name = "programme_venues"
    deletions = FollowDeletions()  # the whole answer every run (stream/deletions.py)
    primary_keys = ("site_id",)

    def planned_requests(self) -> StreamPlan:
        return StreamPlan(self.name, 0, "from the programme's answer")

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        meta = programme_answer(self).get("meta") or {}
        return [fixed_mirror_columns(venue) for venue in meta.get("venues") or []]


def fixed_mirror_columns(venue: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    partner: str | None = None
    flag: bool | None = None
    for key, value in venue.items():
        if key.startswith(MIRROR_PREFIX):
            partner, flag = key[len(MIRROR_PREFIX) :], value
        else:
            row[key] = value
    return {**row, "mirror_partner": partner, "mirror_to_partner": flag}


class Tiers(RewardsStream):
    """The programme's tiers (spec 2.7), each with its programme_id."""

    name = "tiers"
    deletions = FollowDeletions()  # the whole answer every run (stream/deletions.py)
    primary_keys = ("programme_id", "key")

    def planned_requests(self) -> StreamPlan:
        return StreamPlan(self.name, 0, "from the programme's answer")

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        data = programme_answer(self).get("data") or {}
        return [{**tier, "programme_id": data["id"]} for tier in data.get("tiers") or []]


class Offers(RewardsStream):
    """Offers of every status (spec 2.12): archived ones only come with status=archived
    (spec 4.2), so there are two listings. Read once per run (the rewards lookback uses it)."""

    name = "offers"
    path = "/rewards/offers"
    primary_keys = ("id",)
    query_from_partition = ("status",)

    def first_pages(self) -> list[requests.Response]:
        """The first page of both listings (spec 4.2: archived ones apart)."""
        return [planning.first_page(self, None), planning.first_page(self, {"status": "archived"})]

    def planned_requests(self) -> StreamPlan:
        pages = sum(LastPagePaginator.last_page(page) or 1 for page in self.first_pages())
        return StreamPlan(self.name, pages, "meta.last_page of the listing and of archived")

    def all_offers(self) -> list[dict[str, Any]]:
        def read() -> list[dict[str, Any]]:
            by_id = {row["id"]: row for row in self.request_records(None)}
            # an offer archived between the two listings is in both: keep the later answer
            by_id.update((row["id"], row) for row in self.request_records({"status": "archived"}))
            return list(by_id.values())

        return self.runtime.lookup("offers", read)  # type: ignore[no-any-return]

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        return self.prefetcher.with_children([dict(row) for row in self.all_offers()], context)

    def get_child_context(self, record: dict[str, Any], context: Context | None) -> dict[str, Any]:
        return {"offer_id": record["id"]}


class OfferStats(RewardsStream):
    """data.stats of /rewards/offers/{id} (spec 2.12), archived offers included; fetched by
    the worker pool while offers are written. An offer gone since listing is skipped."""

    name = "offer_stats"
    path = "/rewards/offers/{offer_id}"
    primary_keys = ("offer_id",)
    parent_stream_type = Offers
    state_partitioning_keys: ClassVar[list[str]] = []  # full table: no state per offer
    paged = False
    prefetched_by_parent = True
    skip_missing_partition = True

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        data = body_of(response)["data"]
        return [{"offer_id": data["id"], **data["stats"]}]

    def planned_requests(self) -> StreamPlan:
        offers = sibling(self, Offers)
        count = sum(listing_total(page) or 0 for page in offers.first_pages())
        return StreamPlan(self.name, count, f"one per offer: {count} offers")


def ledger_stream(stream: GuestDataStream) -> MemberLedger:
    return sibling(stream, MemberLedger)


def ledger_needs_every_member(members: GuestDataStream) -> bool:
    """A ledger selected for the first time (no bookmark of its own) needs every member,
    not only those changed since a run that did not read ledgers."""
    ledger = ledger_stream(members)
    return ledger.selected and bookmark(ledger, None) is None


class Members(RewardsStream):
    """Members (spec 2.8). A member has no updated-at field, so the bookmark is this sync's
    start (by the earlier of our clock and the API's) minus members_margin_seconds, sent as
    updated_since next time (members changed on or after it, spec 4.2). It is kept as
    {"replication_key": "updated_since", "replication_key_value": ...} in this stream's state,
    which the SDK leaves alone: for the SDK this stream has no replication key (no record
    field could serve as one). Each member's ledger is read with it (the member walk)."""

    name = "members"
    path = "/rewards/members"
    primary_keys = ("id",)
    scopes = ("rewards", "members")
    newest_first = True
    window = UpdatedSinceWindow(MEMBERS_BOOKMARK_KEY, read_all=ledger_needs_every_member)
    resume: MemberWalkResume = MemberWalkResume(
        ledger=ledger_stream, bookmark_key=MEMBERS_BOOKMARK_KEY
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The catalog says what the stream is: incremental (a target must never drop the
        # members a run did not re-read), with no replication key a record could carry.
        self.forced_replication_method = REPLICATION_INCREMENTAL

    def get_child_context(self, record: dict[str, Any], context: Context | None) -> dict[str, Any]:
        return {"member_id": record["id"]}

    def _increment_stream_state(
        self, latest_record: dict[str, Any], *, context: Context | None = None
    ) -> None:
        """No per-record bookmark: the resume part writes the members bookmark at the end."""

    @property
    def emit_activate_version_messages(self) -> bool:
        return False  # as above, whatever replication method a hand-made catalog gives


def member_walk(ledger: GuestDataStream) -> MemberWalkResume:
    return sibling(ledger, Members).resume


class MemberLedger(RewardsStream):
    """Each emitted member's ledger (spec 2.9), fetched by the worker pool. One bookmark for
    the stream (not one per member); since = that bookmark, until = the walk's window end (the
    sync start, or the end of end_date's London day)."""

    name = "member_ledger"
    path = "/rewards/members/{member_id}/ledger"
    primary_keys = ("id",)
    replication_key = "created_at"
    scopes = ("rewards", "members")
    parent_stream_type = Members
    state_partitioning_keys: ClassVar[list[str]] = []
    newest_first = True
    prefetched_by_parent = True
    skip_missing_partition = True
    window = WholeHistoryWindow(since="since", until="until")  # spec 2.9: balance = sum
    resume = WalkedLedgerResume(walk=member_walk)

    def planned_requests(self) -> StreamPlan:
        count = listing_total(planning.first_page(sibling(self, Members), None)) or 0
        return StreamPlan(self.name, count, f"one per member listed: {count} members")


def longest_offer_validity(rewards: GuestDataStream) -> int:
    """The rewards lookback without an oldest open reward in state: the longest
    valid_days_after_issue of any offer (spec 2.12), or 90 days when offers cannot be read."""
    offers = sibling(rewards, Offers)
    try:
        days = [int(row["valid_days_after_issue"] or 0) for row in offers.all_offers()]
    except StreamForbidden:
        raise
    except (FatalAPIError, RetriableAPIError) as error:
        rewards.logger.warning("Offers unreadable (%s): rewards lookback 90 days", error)
        return REWARDS_LOOKBACK_FALLBACK_DAYS
    return max(days, default=REWARDS_LOOKBACK_FALLBACK_DAYS)


def open_reward(row: dict[str, Any]) -> bool:
    """Issued, with a use left: it can still be redeemed, voided or expire (spec 3)."""
    return row.get("status") == "issued" and bool(row.get("uses_remaining"))


class Rewards(RewardsStream):
    """Issued rewards (spec 2.10). Only an open reward (issued, a use left, not expired) can
    still change (spec 3: redeemed, voided, or read as expired once expires_at passes), so the
    next run re-reads from the oldest reward open at this read, kept in state beside the
    bookmark. Without that (state from an older version) the lookback is the longest
    valid_days_after_issue of any offer. rewards_lookback_days, when set, overrides both."""

    name = "rewards"
    path = "/rewards/rewards"
    primary_keys = ("id",)
    replication_key = "issued_at"
    newest_first = True
    window = OpenRowsWindow(
        since="since",
        until="until",
        lookback_setting="rewards_lookback_days",
        oldest_open_key=OLDEST_OPEN_KEY,
        longest_open=longest_offer_validity,
    )
    resume = ListingResume(open_row=open_reward, oldest_open_key=OLDEST_OPEN_KEY)


class Redemptions(RewardsStream):
    """Redemptions (spec 2.11). Voids and restores change old rows, so a lookback re-reads them."""

    name = "redemptions"
    path = "/rewards/redemptions"
    primary_keys = ("id",)
    replication_key = "created_at"
    newest_first = True
    window = ListingWindow(
        since="since", until="until", lookback_setting="redemptions_lookback_days"
    )
    resume = ListingResume()
