"""The Rewards endpoints of spec 4.2 (path prefix /rewards)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from guestdata_sandbox import mutations, render
from guestdata_sandbox.api import (
    LEDGER_REASONS,
    MEMBER_STATUSES,
    OFFER_STATUSES,
    REWARD_STATUSES,
    Checker,
    Context,
    envelope,
    page,
    reward_not_found,
)
from guestdata_sandbox.generate_rewards import CHANNELS
from guestdata_sandbox.names import CITIES
from guestdata_sandbox.rules import choice, integer, iso, moment, paging, window

PHONE_PREFIXES = {city[1]: city[4] for city in CITIES}


def programme(ctx: Context, query: Mapping[str, str]) -> bytes:
    """spec 2.6: meta.venues lists the programme venues the key may see (4.5.5)."""
    data, scope = ctx.data, ctx.store.scope(ctx.api_key)
    visible = [v for v in data.venues if scope is None or v["id"] in scope]
    rows = [render.programme_venue(data, venue) for venue in visible] if data.programme else []
    return envelope(render.programme(data), {"venues": rows})


def phone_readings(raw: str, countries: set[str]) -> set[str]:
    """spec 4.2: with a country code as given; a national number read in each venue's country."""
    compact = re.sub(r"[\s().-]", "", raw)
    if raw.startswith("+"):
        return {compact}
    digits = compact.lstrip("0") if compact.startswith("0") else compact
    return {PHONE_PREFIXES[country] + digits for country in countries if country in PHONE_PREFIXES}


def members(ctx: Context, query: Mapping[str, str]) -> bytes:
    data = ctx.data
    tiers = tuple(tier["key"] for tier in (data.programme or {}).get("tiers", []))
    checker = Checker()
    tier = checker.run(choice, query, "tier", tiers)
    status = checker.run(choice, query, "status", MEMBER_STATUSES)
    updated_since = checker.run(moment, query, "updated_since", False)
    size = checker.run(paging, query, default=(50, 1))
    checker.done()
    email = (query.get("email") or "").strip().lower() or None
    phone = query.get("phone") or None
    mutations.before_list(ctx.store, ctx.api_key, "members")
    cache_key = ("members", data.account.account_id, tier, status, updated_since, email, phone)

    def build() -> list[dict]:
        readings = None
        if phone is not None:
            readings = phone_readings(phone, {venue["country"] for venue in data.venues})
        rows = []
        for row in reversed(data.members):  # spec 4.2: newest first; every status by default
            person = data.persons[row["person"]]
            if tier is not None and row["tier_key"] != tier:
                continue
            if status is not None and render.member_status(row) != status:
                continue
            # spec 4.2 updated_since: the internal updated-at, on or after the moment
            if updated_since is not None and row["updated_at"] < updated_since:
                continue
            if row["anonymised_at"] is not None and (email or readings):
                continue  # erased contacts no longer match
            if email is not None and person[2].lower() != email:
                continue
            if readings is not None and person[3] not in readings:
                continue
            rows.append(row)
        return rows

    return page(ctx, "members", ctx.store.cached_list(cache_key, build), size)


def member_row(ctx: Context, member_id: str) -> dict:
    row = ctx.data.members_by_id.get(int(member_id))
    if row is None:
        raise reward_not_found()
    return row


def member(ctx: Context, query: Mapping[str, str], member_id: str) -> bytes:
    row = member_row(ctx, member_id)
    encoded = ctx.store.encode_rows("members", ctx.api_key, [row], ctx.now)[0]
    return b'{"data":' + encoded + b"}"


def ledger(ctx: Context, query: Mapping[str, str], member_id: str) -> bytes:
    row = member_row(ctx, member_id)
    checker = Checker()
    reason = checker.run(choice, query, "reason", tuple(LEDGER_REASONS))
    since, until = checker.run(window, query, default=(None, None))
    size = checker.run(paging, query, default=(50, 1))
    checker.done()
    mutations.before_list(ctx.store, ctx.api_key, "member_ledger", member_id=row["id"])
    lines = [
        line
        for line in reversed(row["ledger"])
        if (reason is None or line["reason"] == reason)
        and (since is None or line["created_at"] >= since)
        and (until is None or line["created_at"] <= until)
    ]
    extra = {  # spec 2.9: list meta carries the member's balances
        "points_balance": row["points_balance"],
        "lifetime_points": row["lifetime_points"],
        "points_12m": row["points_12m"],
        "tier_key": row["tier_key"],
        "tier_reached_at": iso(row["tier_reached_at"], row["timezone"]),
    }
    return page(ctx, "member_ledger", lines, size, extra)


def rewards_venue(ctx: Context, venue_id: int | None) -> None:
    if venue_id is not None and ctx.data.venue(venue_id) is None:
        raise reward_not_found()  # spec 4.5.8: a Rewards venue_id not on the account


def rewards(ctx: Context, query: Mapping[str, str]) -> bytes:
    data = ctx.data
    checker = Checker()
    status = checker.run(choice, query, "status", REWARD_STATUSES)
    offer_id = checker.run(integer, query, "offer_id")
    member_id = checker.run(integer, query, "member_id")
    venue_id = checker.run(integer, query, "venue_id")
    since, until = checker.run(window, query, default=(None, None))
    size = checker.run(paging, query, default=(50, 1))
    checker.done()
    rewards_venue(ctx, venue_id)
    mutations.before_list(ctx.store, ctx.api_key, "rewards")
    filters = (status, offer_id, member_id, venue_id, since, until)
    cache_key = ("rewards", data.account.account_id, *filters)

    def build() -> list[dict]:
        return [
            row
            for row in reversed(data.rewards)
            # spec 3: the status filter matches the stored status
            if (status is None or row["status"] == status)
            and (offer_id is None or row["offer"]["id"] == offer_id)
            and (member_id is None or row["member"]["id"] == member_id)
            # spec 4.2: a programme-wide reward has no venue and is left out
            and (venue_id is None or row["site_id"] == venue_id)
            and (since is None or row["issued_at"] >= since)
            and (until is None or row["issued_at"] <= until)
        ]

    return page(ctx, "rewards", ctx.store.cached_list(cache_key, build), size)


def reward(ctx: Context, query: Mapping[str, str], reward_id: str) -> bytes:
    row = ctx.data.rewards_by_id.get(int(reward_id))
    if row is None:
        raise reward_not_found()
    encoded = ctx.store.encode_rows("rewards", ctx.api_key, [row], ctx.now)[0]
    return b'{"data":' + encoded + b"}"


def redemptions(ctx: Context, query: Mapping[str, str]) -> bytes:
    checker = Checker()
    venue_id = checker.run(integer, query, "venue_id")
    since, until = checker.run(window, query, default=(None, None))
    status = checker.run(choice, query, "status", ("completed", "voided"))
    channel = checker.run(choice, query, "channel", CHANNELS)
    size = checker.run(paging, query, default=(50, 1))
    checker.done()
    rewards_venue(ctx, venue_id)
    mutations.before_list(ctx.store, ctx.api_key, "redemptions")
    scope = ctx.store.scope(ctx.api_key)
    cache_key = ("redemptions", ctx.api_key.account_id, scope, venue_id, since, until, status)
    cache_key += (channel,)

    def build() -> list[dict]:
        return [
            row
            for row in ctx.store.visible_redemptions(ctx.api_key)
            if (venue_id is None or row["site"]["id"] == venue_id)
            and (since is None or row["created_at"] >= since)
            and (until is None or row["created_at"] <= until)
            and (status is None or row["status"] == status)
            and (channel is None or row["channel"] == channel)
        ]

    return page(ctx, "redemptions", ctx.store.cached_list(cache_key, build), size)


def redemption(ctx: Context, query: Mapping[str, str], redemption_id: str) -> bytes:
    row = ctx.data.redemptions_by_id.get(int(redemption_id))
    scope = ctx.store.scope(ctx.api_key)
    if row is None or (scope is not None and row["site"]["id"] not in scope):
        raise reward_not_found()
    encoded = ctx.store.encode_rows("redemptions", ctx.api_key, [row], ctx.now)[0]
    return b'{"data":' + encoded + b"}"


def offers(ctx: Context, query: Mapping[str, str]) -> bytes:
    checker = Checker()
    status = checker.run(choice, query, "status", OFFER_STATUSES)
    per_page, number = checker.run(paging, query, default=(50, 1))
    checker.done()
    rows = [  # spec 4.2: archived offers are left out unless status=archived
        row
        for row in reversed(ctx.data.offers)
        if (row["status"] == status if status else row["status"] != "archived")
    ]
    chunk = rows[(number - 1) * per_page : number * per_page]
    data = [render.offer(ctx.data, row, ctx.now, with_stats=False) for row in chunk]
    meta = {
        "current_page": number,
        "last_page": max(1, -(-len(rows) // per_page)),
        "per_page": per_page,
        "total": len(rows),
    }
    return envelope(data, meta)


def offer(ctx: Context, query: Mapping[str, str], offer_id: str) -> bytes:
    row = ctx.data.offers_by_id.get(int(offer_id))
    if row is None:
        raise reward_not_found()
    # spec 4.2: an archived offer still answers by id; spec 2.12: the single read adds stats
    return envelope(render.offer(ctx.data, row, ctx.now, with_stats=True))
