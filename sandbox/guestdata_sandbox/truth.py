"""Ground truth for a key: every record of every resource as the API would render it now
(`Store.now()`), unpaged.

Names are the tap's stream names. A resource the key may not read is absent.
"""

from __future__ import annotations

from typing import Any

import orjson

from guestdata_sandbox import render
from guestdata_sandbox.accounts import ACCOUNTS, KEYS
from guestdata_sandbox.api import ApiError
from guestdata_sandbox.routes import MEMBERS, REWARDS, authenticate, authorise
from guestdata_sandbox.store import Store

RESOURCES = [
    "account",
    "venues",
    "guests",
    "daily_stats",
    "daily_account_stats",
    "programme",
    "programme_venues",
    "tiers",
    "members",
    "member_ledger",
    "rewards",
    "redemptions",
    "offers",
    "offer_stats",
]


def readable(store: Store, key: str, area: str) -> bool:
    try:
        authorise(store, KEYS[key], area)
    except ApiError:
        return False
    return True


def truth(store: Store, key: str, resource: str | None = None) -> bytes:
    with store.lock:
        try:
            api_key = authenticate(store, f"Bearer {key}")
        except ApiError:
            return b"null" if resource else b"{}"
        now, data = store.now(), store.account(api_key)
        parts: dict[str, Any] = {}
        wanted = {resource} if resource else set(RESOURCES)

        def want(name: str) -> bool:
            return name in wanted

        if want("account"):
            account = ACCOUNTS[api_key.account_id]
            parts["account"] = {
                "account_id": account.account_id,
                "business_name": account.business_name,
                "plan": account.plan.name,
                "venue_count": len(data.venues),
            }
        if want("venues"):
            rows = sorted(data.venues, key=lambda venue: (venue["name"].lower(), venue["id"]))
            parts["venues"] = [render.venue(row) for row in rows]
        if want("guests"):
            parts["guests"] = store.encode_rows("guests", api_key, reversed(data.guests), now)
        if want("daily_stats") or want("daily_account_stats"):
            cache_key = ("daily", api_key.account_id, store.today())
            daily = store.list_cache.get(cache_key) or list(store.daily_stats(data))
            store.list_cache[cache_key] = daily
            parts["daily_stats"], parts["daily_account_stats"] = daily
        if readable(store, key, REWARDS):
            rewards_parts(store, api_key, data, now, parts, want)
        if readable(store, key, MEMBERS):
            if want("members"):
                rows = reversed(data.members)
                parts["members"] = store.encode_rows("members", api_key, rows, now)
            if want("member_ledger"):
                lines = [line for member in data.members for line in member["ledger"]]
                lines.sort(key=lambda line: (line["created_at"], line["id"]), reverse=True)
                parts["member_ledger"] = store.encode_rows("member_ledger", api_key, lines, now)
        if resource:
            if resource not in parts:
                return b"null"
            return encode(parts[resource])
        fields = [
            orjson.dumps(name) + b":" + encode(parts[name]) for name in RESOURCES if name in parts
        ]
        return b"{" + b",".join(fields) + b"}"


def rewards_parts(store: Store, api_key, data, now: float, parts: dict, want) -> None:
    programme = render.programme(data)
    scope = store.scope(api_key)
    parts["programme"] = programme
    parts["programme_venues"] = [
        render.programme_venue(data, venue)
        for venue in data.venues
        if programme is not None and (scope is None or venue["id"] in scope)
    ]
    parts["tiers"] = [
        {**tier, "programme_id": programme["id"]} for tier in (programme or {}).get("tiers", [])
    ]
    if want("rewards"):
        parts["rewards"] = store.encode_rows("rewards", api_key, reversed(data.rewards), now)
    if want("redemptions"):
        rows = store.visible_redemptions(api_key)
        parts["redemptions"] = store.encode_rows("redemptions", api_key, rows, now)
    offers = list(reversed(data.offers))
    parts["offers"] = [render.offer(data, row, now, with_stats=False) for row in offers]
    parts["offer_stats"] = [
        {"offer_id": row["id"], **render.offer_stats(data, row, now)} for row in offers
    ]


def encode(value: Any) -> bytes:
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return b"[" + b",".join(value) + b"]"
    return orjson.dumps(value)
