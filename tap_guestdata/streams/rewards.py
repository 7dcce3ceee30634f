"""Rewards streams (spec 4.2, path prefix /rewards). Every one is skipped, with one warning,
when Rewards is off or not in the plan (spec 4.5.2); the member streams also when the key's
creator lacks the View guest data permission (spec 4.5.4)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

import requests
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError
from singer_sdk.singerlib.catalog import REPLICATION_INCREMENTAL

from tap_guestdata import windows
from tap_guestdata.client import GuestDataStream
from tap_guestdata.http.errors import StreamForbidden
from tap_guestdata.http.paging import LastPagePaginator, body_of, listing_total
from tap_guestdata.progress import StreamPlan
from tap_guestdata.resume import MEMBERS_BOOKMARK_KEY, OLDEST_OPEN_KEY, RESUME_KEY, MemberWalk
from tap_guestdata.windows import TimeWindow

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
    follows_deletions = True  # the whole answer every run (deletions.py)
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
    return stream.sibling(Programme).answer()


class ProgrammeVenues(RewardsStream):
    """meta.venues of the programme answer. `mirror_to_<partner>` becomes two fixed columns,
    mirror_partner and mirror_to_partner, so the table's shape never depends on the partner."""

    name = "programme_venues"
    follows_deletions = True  # the whole answer every run (deletions.py)
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
    follows_deletions = True  # the whole answer every run (deletions.py)
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

    def partition_params(self, context: Context | None) -> dict[str, Any]:
        return {"status": context["status"]} if context else {}

    def first_pages(self) -> list[requests.Response]:
        """The first page of both listings (spec 4.2: archived ones apart)."""
        return [self.first_page(None), self.first_page({"status": "archived"})]

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
        return self.with_children_prefetched([dict(row) for row in self.all_offers()], context)

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
        offers = self.sibling(Offers)
        count = sum(listing_total(page) or 0 for page in offers.first_pages())
        return StreamPlan(self.name, count, f"one per offer: {count} offers")


class Members(RewardsStream):
    """Members (spec 2.8). A member has no updated-at field, so the bookmark is this sync's
    start (by the earlier of our clock and the API's) minus members_margin_seconds, sent as
    updated_since next time (members changed on or after it, spec 4.2). It is kept as
    {"replication_key": "updated_since", "replication_key_value": ...} in this stream's state,
    which the SDK leaves alone: for the SDK this stream has no replication key (no record
    field could serve as one)."""

    name = "members"
    path = "/rewards/members"
    primary_keys = ("id",)
    scopes = ("rewards", "members")
    newest_first = True
    bookmark_parameter = MEMBERS_BOOKMARK_KEY

    def window_params(self, context: Context | None) -> dict[str, Any]:
        state = self.stream_state
        since = state.get("replication_key_value")
        if state.get("replication_key") != self.bookmark_parameter or not since:
            return {}
        if self.ledger_needs_every_member():
            return {}
        return {self.bookmark_parameter: windows.instant_param(windows.parse_instant(since))}

    def ledger_needs_every_member(self) -> bool:
        """A ledger selected for the first time (no bookmark of its own) needs every member,
        not only those changed since a run that did not read ledgers."""
        ledger = self.ledger()
        return ledger.selected and ledger.bookmark(None) is None

    def get_child_context(self, record: dict[str, Any], context: Context | None) -> dict[str, Any]:
        return {"member_id": record["id"]}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The catalog says what the stream is: incremental (a target must never drop the
        # members a run did not re-read), with no replication key a record could carry.
        self.forced_replication_method = REPLICATION_INCREMENTAL
        self._walk: MemberWalk | None = None
        self._walked_member_ids: set[Any] = set()

    # ------------------------------------------------------------------ resuming (resume.py)

    @property
    def walk(self) -> MemberWalk:
        """This run's member walk, continuing an interrupted one found in state."""
        if self._walk is None:
            with_ledger = self.ledger().selected
            interrupted = MemberWalk.from_state(self.stream_state)
            if interrupted is not None and (interrupted.with_ledger or not with_ledger):
                self._walk = interrupted
            else:
                # the ledger window's end (windows.window_end), kept for a resumed walk
                started_at = windows.utc_text(self.runtime.window_end)
                self._walk = MemberWalk(started_at=started_at, with_ledger=with_ledger)
        return self._walk

    def members_bookmark(self) -> str:
        """Next run's updated_since: from the walk's start (the interrupted run's, if any)."""
        if self.walk.members_bookmark is None:
            margin = dt.timedelta(seconds=self.runtime.settings.members_margin_seconds)
            # never past the ledger window's end: members whose points moved after end_date
            # must be listed again, with their ledgers
            bookmark = min(self.runtime.members_bookmark(margin), self.runtime.window_end)
            self.walk.members_bookmark = windows.utc_text(bookmark)
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

    def resume_markers(self) -> None:
        self.members_bookmark()
        self.stream_state[RESUME_KEY] = self.walk.as_state()

    def listing_finished(self, context: Context | None) -> None:
        """Every page read and every ledger synced: the next run reads what changed since the
        walk began, and the ledger's bookmark covers the lines the interrupted run wrote."""
        self.stream_state.update(
            replication_key=self.bookmark_parameter, replication_key_value=self.members_bookmark()
        )
        ledger = self.ledger()
        if ledger.selected and self.walk.ledger_newest:
            ledger.state_manager.increment_state(
                {ledger.replication_key: self.walk.ledger_newest},
                context=None,
                replication_key=str(ledger.replication_key),
            )
        self.stream_state.pop(RESUME_KEY, None)
        self._walk = None
        self._walked_member_ids.clear()

    def ledger(self) -> MemberLedger:
        return self.sibling(MemberLedger)

    def _increment_stream_state(
        self, latest_record: dict[str, Any], *, context: Context | None = None
    ) -> None:
        """No per-record bookmark: read_records writes the members bookmark once, at the end."""

    @property
    def emit_activate_version_messages(self) -> bool:
        return False  # as above, whatever replication method a hand-made catalog gives


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
    window = TimeWindow(since="since", until="until")
    newest_first = True
    prefetched_by_parent = True
    skip_missing_partition = True

    def members(self) -> Members:
        return self.sibling(Members)

    def planned_requests(self) -> StreamPlan:
        count = listing_total(self.members().first_page(None)) or 0
        return StreamPlan(self.name, count, f"one per member listed: {count} members")

    def window_until(self, context: Context | None) -> dt.datetime:
        """The member walk's start: a resumed walk reads the interrupted run's window."""
        return windows.parse_instant(self.members().walk.started_at)

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        if self.members().ledger_already_read((context or {}).get("member_id")):
            return []  # written by the interrupted run this one resumes
        return super().read_records(context)

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        self.members().walk.ledger_line_written(row["created_at"])


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
    window = TimeWindow(since="since", until="until", lookback_setting="rewards_lookback_days")
    newest_first = True
    oldest_open_key = OLDEST_OPEN_KEY

    def window_start(self, context: Context | None) -> str | None:
        start = super().window_start(context)
        oldest_open = self.stream_state.get(self.oldest_open_key)
        if start is None or not oldest_open or self.uses_fixed_lookback():
            return start
        return str(min(start, oldest_open, key=windows.parse_boundary))

    def uses_fixed_lookback(self) -> bool:
        """A lookback in days: set by the user, or the fallback when state has no oldest open."""
        return self.runtime.settings.rewards_lookback_days is not None or not self.stream_state.get(
            self.oldest_open_key
        )

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        super().row_written(row, context)
        progress = self.listing_progress(context)
        if progress is not None and row.get("status") == "issued" and row.get("uses_remaining"):
            issued_at = windows.utc_text(row["issued_at"])
            oldest_open = progress.extra.get(self.oldest_open_key)
            if oldest_open is None or issued_at < oldest_open:
                progress.extra[self.oldest_open_key] = issued_at

    def listing_finished(self, context: Context | None) -> None:
        progress = self.listing_progress(context)
        oldest_open = progress.extra.get(self.oldest_open_key) if progress else None
        # every page read: none open means nothing older than this run's window can change
        # (after a resumed run the bookmark, the newest reward, still bounds the next window)
        self.stream_state[self.oldest_open_key] = oldest_open or windows.utc_text(
            self.runtime.window_end
        )
        super().listing_finished(context)

    def lookback_days(self) -> int:
        if self.runtime.settings.rewards_lookback_days is not None:
            return self.runtime.settings.rewards_lookback_days
        if self.bookmark(None) is None or not self.uses_fixed_lookback():
            return 0  # a first run reads everything; else the oldest open reward bounds it
        offers = self.sibling(Offers)
        try:
            days = [int(row["valid_days_after_issue"] or 0) for row in offers.all_offers()]
        except StreamForbidden:
            raise
        except (FatalAPIError, RetriableAPIError) as error:
            self.logger.warning("Offers unreadable (%s): rewards lookback 90 days", error)
            return REWARDS_LOOKBACK_FALLBACK_DAYS
        return max(days, default=REWARDS_LOOKBACK_FALLBACK_DAYS)


class Redemptions(RewardsStream):
    """Redemptions (spec 2.11). Voids and restores change old rows, so a lookback re-reads them."""

    name = "redemptions"
    path = "/rewards/redemptions"
    primary_keys = ("id",)
    replication_key = "created_at"
    window = TimeWindow(since="since", until="until", lookback_setting="redemptions_lookback_days")
    newest_first = True
