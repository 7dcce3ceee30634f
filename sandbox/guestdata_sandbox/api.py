"""The endpoints of spec part 4, after authentication: routing, filters, paging, envelopes."""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from guestdata_sandbox import mutations, render
from guestdata_sandbox.accounts import ACCOUNTS, ApiKey
from guestdata_sandbox.dataset import AccountData
from guestdata_sandbox.rules import (
    STATS_DEFAULT_DAYS,
    ValidationError,
    boolean,
    date_range,
    integer,
    london_date,
    london_day_end,
    london_day_start,
    paging,
)
from guestdata_sandbox.store import Store

LEDGER_REASONS = [
    "earn_visit",
    "earn_spend",
    "earn_signup",
    "earn_birthday",
    "earn_bonus",
    "earn_manual",
    "redeem",
    "expire",
    "adjust",
    "reverse",
]  # spec 2.9
REWARD_STATUSES = ("issued", "redeemed", "expired", "voided")  # spec 3
MEMBER_STATUSES = ("active", "left", "anonymised")
OFFER_STATUSES = ("draft", "active", "paused", "archived")


class ApiError(Exception):
    def __init__(self, status: int, body: dict) -> None:
        super().__init__(body.get("message"))
        self.status, self.body = status, body


def reward_not_found() -> ApiError:
    """spec 4.5.8: an id or Rewards venue_id not on the account: 404, never 403."""
    return ApiError(404, {"message": "Not found.", "error": "REWARD_NOT_FOUND"})


def endpoint_not_found() -> ApiError:
    return ApiError(404, {"message": "Endpoint not found.", "error": "endpoint_not_found"})


@dataclass
class Context:
    store: Store
    api_key: ApiKey
    now: float

    @property
    def data(self) -> AccountData:
        return self.store.account(self.api_key)


class Checker:
    """Collects every invalid parameter into one 422, as Laravel's validator does (spec 7)."""

    def __init__(self) -> None:
        self.errors: dict[str, list[str]] = {}

    def run(self, check: Callable[..., Any], *args: Any, default: Any = None) -> Any:
        try:
            return check(*args)
        except ValidationError as error:
            self.errors.update(error.errors)
            return default

    def done(self) -> None:
        if self.errors:
            raise ValidationError(self.errors)


def envelope(data: Any, meta: Any = None, with_meta: bool = False) -> bytes:
    body: dict[str, Any] = {"data": data}
    if with_meta or meta is not None:
        body["meta"] = meta
    return orjson.dumps(body)


def page(ctx: Context, kind: str, rows: list[dict], size: tuple[int, int], extra=None) -> bytes:
    """spec 2.5 paging meta; data rows are cached encodings joined as they are."""
    per_page, number = size
    total = len(rows)
    chunk = rows[(number - 1) * per_page : number * per_page]
    encoded = ctx.store.encode_rows(kind, ctx.api_key, chunk, ctx.now)
    meta = {
        "current_page": number,
        "last_page": max(1, math.ceil(total / per_page)),
        "per_page": per_page,
        "total": total,
    }
    meta.update(extra or {})
    return b'{"data":[' + b",".join(encoded) + b'],"meta":' + orjson.dumps(meta) + b"}"


# ----------------------------------------------------------------------------- core (4.1)


def me(ctx: Context, query: Mapping[str, str]) -> bytes:
    account = ACCOUNTS[ctx.api_key.account_id]
    return envelope(
        {
            "account_id": account.account_id,
            "business_name": account.business_name,
            "plan": account.plan.name,
            "venue_count": len(ctx.data.venues),
        }
    )


def venues(ctx: Context, query: Mapping[str, str]) -> bytes:
    """spec 4.1: alphabetical; paging meta given (its shape there is not shown)."""
    rows = sorted(ctx.data.venues, key=lambda venue: (venue["name"].lower(), venue["id"]))
    checker = Checker()
    per_page, number = checker.run(paging, query, default=(200, 1))
    checker.done()
    per_page = per_page if "per_page" in query else 200
    chunk = rows[(number - 1) * per_page : number * per_page]
    meta = {
        "current_page": number,
        "last_page": max(1, math.ceil(len(rows) / per_page)),
        "per_page": per_page,
        "total": len(rows),
    }
    return envelope([render.venue(row) for row in chunk], meta)


def account_venue(ctx: Context, venue_id: int | None) -> list[int]:
    ids = sorted(venue["id"] for venue in ctx.data.venues)
    if venue_id is None:
        return ids
    if venue_id not in ids:  # spec 4.5.9: message only, no error code
        raise ApiError(404, {"message": "Venue not found."})
    return [venue_id]


def guests(ctx: Context, query: Mapping[str, str]) -> bytes:
    checker = Checker()
    venue_id = checker.run(integer, query, "venue_id")
    first, last = checker.run(date_range, query, default=(None, None))
    consent = checker.run(boolean, query, "marketing_consent")
    size = checker.run(paging, query, default=(50, 1))
    checker.done()
    venue_ids = frozenset(account_venue(ctx, venue_id))
    mutations.before_list(ctx.store, ctx.api_key, "guests")
    data = ctx.data
    cache_key = ("guests", data.account.account_id, venue_ids, first, last, consent)

    def build() -> list[dict]:
        start = (
            0 if first is None else bisect.bisect_left(data.guest_times, london_day_start(first))
        )
        end = len(data.guests)
        if last is not None:
            end = bisect.bisect_right(data.guest_times, london_day_end(last))
        rows = data.guests[start:end]
        if len(venue_ids) != len(data.venues):
            rows = [row for row in rows if row["venue_id"] in venue_ids]
        if consent is not None:
            rows = [row for row in rows if data.consent[row["person"]] is consent]
        rows.reverse()  # spec 4.1: newest first
        return rows

    return page(ctx, "guests", ctx.store.cached_list(cache_key, build), size)


def stats(ctx: Context, query: Mapping[str, str]) -> bytes:
    checker = Checker()
    venue_id = checker.run(integer, query, "venue_id")
    first, last = checker.run(date_range, query, default=(None, None))
    checker.done()
    venue_ids = account_venue(ctx, venue_id)
    today = london_date(ctx.now)  # the store's clock (Store.now)
    if last is None:
        last = today if first is None or first <= today else first
    if first is None:  # spec 8: default period is the last 30 days
        first = last - dt.timedelta(days=STATS_DEFAULT_DAYS - 1)
    counts = ctx.store.stats(ctx.data, venue_ids, first, last)
    data = {"from": first.isoformat(), "to": last.isoformat(), **counts}
    return envelope(data, {"venue_ids": venue_ids})
