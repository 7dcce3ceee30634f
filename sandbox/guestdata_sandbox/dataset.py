"""The dataset's shapes, shared by generation, mutations, the store, rendering and the API.

A `Dataset` is one seeded world: an `AccountData` per account, each holding its rows (plain
dicts, as the API's JSON) and the indexes the endpoints read them through.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from guestdata_sandbox.accounts import Account


@dataclass(frozen=True)
class Size:
    venues: int
    venue_age_days: tuple[int, int]  # venues created this many days before the anchor
    guests: int
    members: int
    offers: int


SIZES: dict[str, Size] = {
    "small": Size(venues=5, venue_age_days=(30, 120), guests=1500, members=200, offers=12),
    "medium": Size(venues=10, venue_age_days=(60, 365), guests=15000, members=2000, offers=16),
    "large": Size(venues=20, venue_age_days=(120, 365), guests=640000, members=40000, offers=20),
}
SECONDARY = Size(venues=2, venue_age_days=(20, 60), guests=150, members=30, offers=8)
ID_BASES = {
    "venues": 11,
    "guests": 100001,
    "members": 20001,
    "member_ledger": 500001,
    "rewards": 300001,
    "redemptions": 700001,
    "offers": 901,
    "programme": 41,
}


@dataclass
class AccountData:
    account: Account
    venues: list[dict] = field(default_factory=list)
    persons: list[tuple[str, str, str, str]] = field(default_factory=list)  # first, last, email,
    consent: list[bool] = field(default_factory=list)  # phone; consent is per person, now
    guests: list[dict] = field(default_factory=list)  # oldest first
    programme: dict | None = None
    partner: str = ""
    offers: list[dict] = field(default_factory=list)
    members: list[dict] = field(default_factory=list)  # oldest first; each holds its ledger
    rewards: list[dict] = field(default_factory=list)
    redemptions: list[dict] = field(default_factory=list)

    # indexes, rebuilt by build_indexes() and kept up to date by mutations
    zones: dict[int, str] = field(default_factory=dict)
    guest_times: list[float] = field(default_factory=list)
    guests_by_id: dict[int, dict] = field(default_factory=dict)
    members_by_id: dict[int, dict] = field(default_factory=dict)
    rewards_by_id: dict[int, dict] = field(default_factory=dict)
    rewards_by_offer: dict[int, list[dict]] = field(default_factory=dict)
    redemptions_by_id: dict[int, dict] = field(default_factory=dict)
    offers_by_id: dict[int, dict] = field(default_factory=dict)

    def build_indexes(self) -> None:
        self.zones = {venue["id"]: venue["timezone"] for venue in self.venues}
        self.guest_times = [row["visited_at"] for row in self.guests]
        self.guests_by_id = {row["id"]: row for row in self.guests}
        self.members_by_id = {row["id"]: row for row in self.members}
        self.rewards_by_id = {row["id"]: row for row in self.rewards}
        self.rewards_by_offer = {}
        for row in self.rewards:
            self.rewards_by_offer.setdefault(row["offer"]["id"], []).append(row)
        self.redemptions_by_id = {row["id"]: row for row in self.redemptions}
        self.offers_by_id = {row["id"]: row for row in self.offers}

    def venue(self, venue_id: int | None) -> dict | None:
        return next((venue for venue in self.venues if venue["id"] == venue_id), None)


@dataclass
class Dataset:
    seed: int
    size: str
    anchor: dt.date
    cutoff: float
    accounts: dict[int, AccountData]
    next_ids: dict[str, int]
    generation_seconds: float = 0.0

    def new_id(self, resource: str) -> int:
        self.next_ids[resource] += 1
        return self.next_ids[resource] - 1
