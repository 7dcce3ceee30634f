"""The sandbox's state: the dataset, mutable key/account switches, and render/list caches.

One lock guards everything; handlers hold it while they read or mutate. Encoded rows are cached
per (resource, account, id, masked) until a mutation or until the rendering's read-time rule
changes. Read-time rules read `Store.now()`: the real clock, or `as_of` when the sandbox serves
its data as of a fixed instant (then two sandboxes of one instant serve the same data at any
wall time).
"""

from __future__ import annotations

import bisect
import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from guestdata_sandbox import render, row_fields
from guestdata_sandbox.accounts import ACCOUNTS, KEYS, ApiKey
from guestdata_sandbox.dataset import AccountData, Dataset
from guestdata_sandbox.generate import generate
from guestdata_sandbox.rules import london_date, london_day_end, london_day_start

LIST_CACHE_LIMIT = 512


class Store:
    def __init__(
        self,
        seed: int,
        size: str,
        anchor: dt.date | None = None,
        colliding_account: bool = False,
        as_of: float | None = None,
    ) -> None:
        """`as_of` (epoch seconds): the data as of that instant, generated as if the server
        started then and read at it however long the server runs (mutations stamp the real
        clock still); the anchor defaults to its London day."""
        self.seed, self.size, self.colliding_account = seed, size, colliding_account
        self.as_of = as_of
        self.anchor = anchor or self.today()
        self.lock = threading.RLock()
        self.load()

    def now(self) -> float:
        """The instant every read-time rule reads: rewards past expires_at read as expired,
        members' rewards_available, offer stats, the stats' today (spec 2.4, 3)."""
        return time.time() if self.as_of is None else self.as_of

    def today(self) -> dt.date:
        """The London day of `now()`: where /stats' default period and the truth's stats end."""
        return london_date(self.now())

    def as_of_text(self) -> str | None:
        """`as_of` in ISO 8601 (UTC), None on the real clock (GET /_sandbox/health)."""
        if self.as_of is None:
            return None
        return dt.datetime.fromtimestamp(self.as_of, dt.timezone.utc).isoformat()

    def load(self) -> None:
        """(Re)generate the data and reset every switch (POST /_sandbox/reset)."""
        with self.lock:
            self.dataset: Dataset = generate(
                self.seed,
                self.size,
                self.anchor,
                started_at=self.as_of,
                colliding_account=self.colliding_account,
            )
            self.revoked = {key for key, api_key in KEYS.items() if api_key.revoked}
            self.granted: set[str] = set()
            self.rewards_enabled = {aid: acc.rewards_enabled for aid, acc in ACCOUNTS.items()}
            self.inserts: dict[str, list[int]] = {}  # resource -> [count, times left]
            # resource -> field -> rule: fields added to or removed from its rows (row_fields.py)
            self.field_changes: dict[str, dict[str, row_fields.FieldRule]] = {}
            self.invalidate()

    def invalidate(self) -> None:
        self.encoded_cache: dict[tuple, tuple[bytes, float]] = {}
        self.list_cache: dict[tuple, list[dict]] = {}

    # ------------------------------------------------------------------ keys and scope

    def account(self, api_key: ApiKey) -> AccountData:
        return self.dataset.accounts[api_key.account_id]

    def scope(self, api_key: ApiKey) -> frozenset[int] | None:
        """spec 4.5.5: venue ids a restricted team member's key may see; None = all."""
        if api_key.venue_count is None:
            return None
        venues = sorted(venue["id"] for venue in self.account(api_key).venues)
        return frozenset(venues[: api_key.venue_count])

    def may_read_members(self, api_key: ApiKey) -> bool:
        """spec 4.5.4: owner, or creator holding View guest data (granted takes effect now)."""
        return api_key.owner or api_key.view_guest_data or api_key.key in self.granted

    def masked_venue(self, api_key: ApiKey, venue_id: int) -> bool:
        """spec 2.3/2.8: limited-access account, or a venue the key holder is limited at."""
        if ACCOUNTS[api_key.account_id].limited_access:
            return True
        scope = self.scope(api_key)
        return scope is not None and venue_id not in scope

    # ------------------------------------------------------------------ encoding

    def encoded(self, kind: str, data: AccountData, row: dict, masked: bool, now: float) -> bytes:
        cache_key = (
            kind,
            data.account.account_id,
            row["id"],
            masked,
        )  # ids collide across accounts
        hit = self.encoded_cache.get(cache_key)
        if hit is not None and now < hit[1]:
            return hit[0]
        valid_until = render.FOREVER
        if kind == "guests":
            rendered: Any = render.guest(data, row, masked)
        elif kind == "members":
            rendered, valid_until = render.member(data, row, masked, now)
        elif kind == "member_ledger":
            rendered = render.ledger_line(data, row)
        elif kind == "rewards":
            rendered, valid_until = render.reward(data, row, now)
        elif kind == "redemptions":
            rendered = render.redemption(row)
        else:
            raise KeyError(kind)
        if kind in self.field_changes:
            rendered = row_fields.apply(rendered, self.field_changes[kind])
        # a copy: orjson's own result keeps a 4 KB buffer, too much for a million cached rows
        encoded = bytes(memoryview(orjson.dumps(rendered)))
        self.encoded_cache[cache_key] = (encoded, valid_until)
        return encoded

    def encode_rows(
        self, kind: str, api_key: ApiKey, rows: Iterable[dict], now: float
    ) -> list[bytes]:
        data = self.account(api_key)
        if kind == "guests":
            return [
                self.encoded(kind, data, row, self.masked_venue(api_key, row["venue_id"]), now)
                for row in rows
            ]
        if kind == "members":
            return [
                self.encoded(kind, data, row, self.masked_venue(api_key, row["first_site_id"]), now)
                for row in rows
            ]
        return [self.encoded(kind, data, row, False, now) for row in rows]

    # ------------------------------------------------------------------ lists

    def cached_list(self, cache_key: tuple, build: Callable[[], list[dict]]) -> list[dict]:
        rows = self.list_cache.get(cache_key)
        if rows is None:
            if len(self.list_cache) > LIST_CACHE_LIMIT:
                self.list_cache.clear()
            rows = self.list_cache[cache_key] = build()
        return rows

    def visible_redemptions(self, api_key: ApiKey) -> list[dict]:
        """spec 4.5.5 and 4.2: redemptions cover the venues the key may see; newest first."""
        scope = self.scope(api_key)
        rows = self.account(api_key).redemptions
        return [row for row in reversed(rows) if scope is None or row["site"]["id"] in scope]

    # ------------------------------------------------------------------ stats

    def stats(
        self, data: AccountData, venue_ids: Iterable[int], first: dt.date, last: dt.date
    ) -> dict[str, int]:
        """spec 2.4: visits, distinct emails, arrivals whose person may be marketed to now."""
        wanted = set(venue_ids)
        start = bisect.bisect_left(data.guest_times, london_day_start(first))
        end = bisect.bisect_right(data.guest_times, london_day_end(last))
        visits = opt_ins = 0
        emails: set[str] = set()
        persons, consent = data.persons, data.consent
        for row in data.guests[start:end]:
            if row["venue_id"] in wanted:
                visits += 1
                emails.add(persons[row["person"]][2])
                opt_ins += consent[row["person"]]
        return {"visits": visits, "unique_guests": len(emails), "marketing_opt_ins": opt_ins}

    def daily_stats(self, data: AccountData) -> tuple[list[dict], list[dict]]:
        """Per venue and per account, every London day from creation to today (truth)."""
        today = self.today()
        per_venue: dict[tuple[int, str], list[Any]] = {}
        per_day: dict[str, list[Any]] = {}
        persons, consent = data.persons, data.consent
        for row in data.guests:
            email = persons[row["person"]][2]
            for bucket in (
                per_venue.setdefault((row["venue_id"], row["date"]), [0, set(), 0]),
                per_day.setdefault(row["date"], [0, set(), 0]),
            ):
                bucket[0] += 1
                bucket[1].add(email)
                bucket[2] += consent[row["person"]]

        def counts(bucket: list[Any] | None) -> dict[str, int]:
            visits, emails, opt_ins = bucket or (0, (), 0)
            return {"visits": visits, "unique_guests": len(emails), "marketing_opt_ins": opt_ins}

        venue_rows, account_rows = [], []
        venue_ids = sorted(venue["id"] for venue in data.venues)
        for venue in sorted(data.venues, key=lambda venue: venue["id"]):
            for day in days(london_date(venue["created_at"]), today):
                label = day.isoformat()
                row = {"venue_id": venue["id"], "date": label}
                venue_rows.append(row | counts(per_venue.get((venue["id"], label))))
        earliest = min(london_date(venue["created_at"]) for venue in data.venues)
        for day in days(earliest, today):
            label = day.isoformat()
            row = {"date": label, "venue_ids": venue_ids}
            account_rows.append(row | counts(per_day.get(label)))
        return venue_rows, account_rows


def days(first: dt.date, last: dt.date) -> Iterable[dt.date]:
    day = first
    while day <= last:
        yield day
        day += dt.timedelta(days=1)
