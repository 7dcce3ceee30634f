"""Stored rows -> the JSON objects of spec part 2, with masking and read-time rules.

Each function returns the row as the API renders it now, and the moment until which that
rendering stays true (for the cache): rewards read as expired once expires_at passes (spec 3).
"""

from __future__ import annotations

from typing import Any

from guestdata_sandbox.dataset import AccountData
from guestdata_sandbox.rules import iso, mask_email, mask_phone, mask_text

FOREVER = float("inf")
PROGRAMME_ZONE = "Europe/London"
ANONYMISED_PHONE = "+447700900000"  # Ofcom drama range: erased members keep a non-null phone


def venue(row: dict) -> dict:
    return {
        "id": row["id"],
        "name": row["name"],
        "city": row["city"],
        "country": row["country"],
        "created_at": iso(row["created_at"], row["timezone"]),
    }


def guest(data: AccountData, row: dict, masked: bool) -> dict:
    """spec 2.3; masking follows the member rule (spec 2.3 points to 2.8)."""
    first, last, email, phone = data.persons[row["person"]]
    if masked:
        first, last, email, phone = mask_text(first), None, mask_email(email), mask_phone(phone)
    return {
        "id": row["id"],
        "venue_id": row["venue_id"],
        "name": first if last is None else f"{first} {last}",
        "first_name": first,
        "last_name": last,
        "email": email,
        "phone": phone,
        # spec 2.3: consent as it stands now, per person
        "marketing_consent": data.consent[row["person"]],
        "is_return_visit": row["is_return_visit"],
        "visited_at": iso(row["visited_at"], data.zones[row["venue_id"]]),
    }


def member(data: AccountData, row: dict, masked: bool, now: float) -> tuple[dict, float]:
    first, last, email, phone = data.persons[row["person"]]
    birth: str | None = row["date_of_birth"]
    if row["anonymised_at"] is not None:  # erased under GDPR: placeholders keep the types
        first, last, birth, phone = "Anonymised", "Member", "1900-01-01", ANONYMISED_PHONE
        email = f"anonymised-{row['member_number'].lower()}@example.invalid"
    if masked:  # spec 2.8: asterisks in email, phone, first_name; last_name and birth null
        first, last, email, phone, birth = (
            mask_text(first),
            None,
            mask_email(email),
            mask_phone(phone),
            None,
        )
    available, valid_until = 0, FOREVER
    for reward in row["rewards"]:  # spec 2.8: issued, not expired, with a use left
        usable = reward["status"] == "issued" and reward["redemption"] is None
        if usable and reward["expires_at"] > now:
            available += 1
            valid_until = min(valid_until, reward["expires_at"])
    zone = row["timezone"]
    rendered = {
        "id": row["id"],
        "member_number": row["member_number"],
        "email": email,
        "phone_e164": phone,
        "first_name": first,
        "last_name": last,
        "date_of_birth": birth,
        "points_balance": row["points_balance"],
        "lifetime_points": row["lifetime_points"],
        "points_12m": row["points_12m"],
        "tier_key": row["tier_key"],
        "tier_reached_at": iso(row["tier_reached_at"], zone),
        "rewards_available": available,
        "visits_count": row["visits_count"],
        "last_visit_at": iso(row["last_visit_at"], zone),
        "last_visit_site_id": row["last_visit_site_id"],
        "first_site_id": row["first_site_id"],
        "joined_via": row["joined_via"],
        "membership_consent_at": iso(row["membership_consent_at"], zone),
        "left_at": iso(row["left_at"], zone),
        "anonymised_at": iso(row["anonymised_at"], zone),
        "created_at": iso(row["created_at"], zone),
    }
    return rendered, valid_until


def member_status(row: dict) -> str:
    if row["anonymised_at"] is not None:
        return "anonymised"
    return "left" if row["left_at"] is not None else "active"


def ledger_line(data: AccountData, row: dict) -> dict:
    zone = data.zones[row["site_id"]]
    return {
        "id": row["id"],
        "member_id": row["member"]["id"],
        "site_id": row["site_id"],
        "delta": row["delta"],
        "balance_after": row["balance_after"],
        "reason": row["reason"],
        "reference": row["reference"],
        "spend_minor": row["spend_minor"],
        "currency": row["currency"],
        "note": row["note"],
        "created_by_user_id": row["created_by_user_id"],
        "terminal_id": row["terminal_id"],
        "created_at": iso(row["created_at"], zone),
    }


def display_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"  # spec 2.10: hyphen after four characters


def reward(data: AccountData, row: dict, now: float) -> tuple[dict, float]:
    offer, redemption = row["offer"], row["redemption"]
    zone = data.zones.get(row["site_id"], PROGRAMME_ZONE)
    status, valid_until = row["status"], FOREVER
    if status == "issued":  # spec 3: stored issued + expires_at passed -> reads as expired
        if row["expires_at"] <= now:
            status = "expired"
        else:
            valid_until = row["expires_at"]
    redeemed = redemption is not None
    rendered = {
        "id": row["id"],
        "offer_id": offer["id"],
        "offer_name": offer["name"],
        "offer_headline": offer["headline"],
        "member_id": row["member"]["id"],
        "site_id": row["site_id"],
        "site_name": row["site_name"],
        "code": row["code"],
        "display_code": display_code(row["code"]),
        "kind": offer["kind"],
        "percent": offer["percent"],
        "amount_minor": offer["amount_minor"],
        "currency": row["currency"],
        "free_item_label": offer["free_item_label"],
        "min_spend_minor": offer["min_spend_minor"],
        "terms": offer["terms"],
        "site_ids": offer["site_ids"],
        "status": status,
        "uses_remaining": 0 if redeemed else 1,
        "issued_at": iso(row["issued_at"], zone),
        "expires_at": iso(row["expires_at"], zone),
        "issued_via": row["issued_via"],
        "points_spent": row["points_spent"],
        "is_locked": row["is_locked"],
        "locked_until": iso(row["locked_until"], zone),
        "redeemed_at": iso(redemption["created_at"], zone) if redeemed else None,
        "redemption_id": redemption["id"] if redeemed else None,
        "redeemed_at_site": redemption["site"]["name"] if redeemed else None,
        "redeemed_via": redemption["channel"] if redeemed else None,
        "reference": redemption["reference"] if redeemed else None,
        "redeemed_by_initials": redemption["staff_initials"] if redeemed else None,
        "delivered_email_at": iso(row["delivered_email_at"], zone),
        "delivered_sms_at": iso(row["delivered_sms_at"], zone),
        "viewed_at": iso(row["viewed_at"], zone),
        "view_count": row["view_count"],
    }
    return rendered, valid_until


def redemption(row: dict) -> dict:
    reward_row, site = row["reward"], row["site"]
    zone = site["timezone"]
    fields: dict[str, Any] = {
        "id": row["id"],
        "reference": row["reference"],
        "offer_id": reward_row["offer"]["id"],
        "offer_name": reward_row["offer"]["name"],
        "member_reward_id": reward_row["id"],
        "reward_code": display_code(reward_row["code"]),
        "member_id": reward_row["member"]["id"],
        "site_id": site["id"],
        "site_name": site["name"],
    }
    for name in [
        "channel",
        "redeemed_by_user_id",
        "redeemed_by_name",
        "terminal_id",
        "terminal_name",
        "staff_initials",
        "face_value_minor",
        "currency",
        "basket_total_minor",
        "discount_applied_minor",
        "points_spent",
        "points_awarded",
        "pos_reference",
        "reason",
        "status",
    ]:
        fields[name] = row[name]
    fields["voided_at"] = iso(row["voided_at"], zone)
    fields["voided_by_user_id"] = row["voided_by_user_id"]
    fields["void_reason"] = row["void_reason"]
    fields["restored_at"] = iso(row["restored_at"], zone)
    fields["restored_by_user_id"] = row["restored_by_user_id"]
    fields["created_at"] = iso(row["created_at"], zone)
    return fields


def offer_stats(data: AccountData, row: dict, now: float) -> dict:
    """spec 2.12 data.stats of the single-offer read."""
    stats = dict.fromkeys(("issued", "outstanding", "redeemed", "voided", "expired", "claimed"), 0)
    for reward_row in data.rewards_by_offer.get(row["id"], ()):
        stats["issued"] += 1
        status = reward_row["status"]
        if status == "issued" and reward_row["redemption"] is None:
            stats["outstanding" if reward_row["expires_at"] > now else "expired"] += 1
        elif status == "expired":
            stats["expired"] += 1
        if reward_row["issued_via"] == "points":
            stats["claimed"] += 1
        redemption_row = reward_row["redemption"]
        if redemption_row is not None:
            stats["voided" if redemption_row["status"] == "voided" else "redeemed"] += 1
    return stats


def offer(data: AccountData, row: dict, now: float, with_stats: bool) -> dict:
    rendered = {name: value for name, value in row.items()}
    for name in ("starts_at", "ends_at", "created_at", "updated_at"):
        rendered[name] = iso(row[name], PROGRAMME_ZONE)
    stats = offer_stats(data, row, now)
    rendered["issued_count"] = stats["issued"]
    rendered["redemptions_count"] = stats["redeemed"]
    rendered["claims_count"] = stats["claimed"]
    ordered = {name: rendered[name] for name in OFFER_FIELDS}
    if with_stats:
        ordered["stats"] = stats
    return ordered


OFFER_FIELDS = [
    "id",
    "programme_id",
    "name",
    "headline",
    "description",
    "terms",
    "kind",
    "percent",
    "amount_minor",
    "currency",
    "estimated_value_minor",
    "free_item_label",
    "min_spend_minor",
    "public_code",
    "points_cost",
    "show_in_catalogue",
    "site_ids",
    "issue_on_connect",
    "connect_frequency",
    "connect_every_days",
    "valid_days_after_issue",
    "starts_at",
    "ends_at",
    "max_issues",
    "issued_count",
    "max_redemptions_total",
    "redemptions_count",
    "claims_count",
    "max_per_member",
    "cooldown_days",
    "self_redeem",
    "channels",
    "promotion_id",
    "sort_order",
    "status",
    "created_at",
    "updated_at",
]


def programme(data: AccountData) -> dict | None:
    row = data.programme
    if row is None:
        return None  # spec 2.6: data is null until a programme exists
    rendered = dict(row)
    for name in ("activated_at", "created_at", "updated_at"):
        rendered[name] = iso(row[name], PROGRAMME_ZONE)
    rendered["tiers"] = [dict(tier) for tier in row["tiers"]]
    rendered["brand"] = dict(row["brand"])
    return rendered


def programme_venue(data: AccountData, row: dict) -> dict:
    """spec 2.6 meta.venues[]: the mirror flag is named after the account's partner system."""
    return {
        "site_id": row["id"],
        "site_name": row["name"],
        "currency": row["currency"],
        "earn_multiplier": row["earn_multiplier"],
        "is_active": row["is_active"],
        f"mirror_to_{data.partner}": row["id"] % 2 == 1,
        "timezone": row["timezone"],
        "timezone_is_default": row["timezone_is_default"],
    }
