"""Seeded Rewards data: programme, offers, and members simulated visit by visit.

Each member's life is simulated in time order, so the ledger's balance_after follows the deltas
(spec 2.9), rewards are issued and redeemed at visits, and the member's internal updated-at is
the time of its last points, tier, status or visit change.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from guestdata_sandbox import names
from guestdata_sandbox.accounts import ACCOUNTS, PARTNERS
from guestdata_sandbox.dataset import AccountData, Dataset, Size
from guestdata_sandbox.rules import zone
from guestdata_sandbox.seeded import pick

DAY = 86400.0
TIERS = (
    {"key": "bronze", "name": "Bronze", "min_points_12m": 100, "multiplier": 1.0, "colour": None},
    {
        "key": "silver",
        "name": "Silver",
        "min_points_12m": 600,
        "multiplier": 1.25,
        "colour": "#C0C0C0",
    },
    {"key": "gold", "name": "Gold", "min_points_12m": 1500, "multiplier": 1.5, "colour": "#D4AF37"},
)
CHANNELS = ("staff_scan", "staff_code", "terminal_pin", "pos_api", "self_serve", "manager_manual")
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
STAFF_USER_IDS = (71, 72, 73, 74, 75, 76)


def partner_for(dataset: Dataset, account_id: int) -> str:
    """spec 2.6: mirror_to_<partner>; the partner differs by seed and account."""
    rank = sorted(ACCOUNTS).index(account_id)  # 0 for the main account, 1.. for the others
    shift = 0 if ACCOUNTS[account_id].main else 1 + rank % (len(PARTNERS) - 1)
    return PARTNERS[(dataset.seed + shift) % len(PARTNERS)]


def make_programme(dataset: Dataset, data: AccountData, rng: random.Random) -> None:
    created = data.venues[0]["created_at"] + 2 * 3600
    currencies = sorted({venue["currency"] for venue in data.venues})
    rates = {"GBP": 0.01, "EUR": 0.012, "USD": 0.013, "AUD": 0.02}
    data.partner = partner_for(dataset, data.account.account_id)
    data.programme = {
        "id": dataset.new_id("programme"),
        "name": f"{data.account.business_name.split()[0]} Rewards",
        "mode": "points",
        "default_currency": data.venues[0]["currency"],
        "point_values": {currency: rates[currency] for currency in currencies},
        "points_per_visit": 10,
        "points_per_currency_unit": 1.0,
        "signup_bonus_points": 50,
        "birthday_bonus_points": 100,
        # spec 2.6: null means 12 months; the main account leaves it blank
        "points_expire_after_months": None if data.account.main else 24,
        "signup_offer_id": None,
        "birthday_offer_id": None,
        "tiers": [dict(tier) for tier in TIERS],
        "reward_label": "treat",
        "welcome_text": "Welcome! Collect points every visit and swap them for treats.",
        "terms_url": "https://example.com/rewards/terms",
        "brand": {
            "programme_name": f"{data.account.business_name.split()[0]} Club",
            "background_colour": "#1F3A5F",
            "foreground_colour": "#FFFFFF",
            "logo_path": "brand/logo.png",
            "strip_path": None,
        },
        "membership_optin_mode": "checkbox" if data.account.main else "auto",
        "deliver_by_sms": True,
        "self_redeem_cap_minor": 1500,
        "max_spend_per_earn_minor": 20000,
        "daily_earn_cap_points": None if data.account.main else 500,
        "service_hours": {"open": "08:00", "close": "23:00"} if data.account.main else None,
        "is_active": True,
        "activated_at": created + DAY,
        "created_at": created,
        "updated_at": created + 3 * DAY,
    }


def make_offers(dataset: Dataset, data: AccountData, shape: Size, rng: random.Random) -> None:
    programme = data.programme
    assert programme is not None
    start, span = programme["created_at"], dataset.cutoff - programme["created_at"]
    # spec 2.12: at least one of each status and two archived
    statuses = ["active", "active", "archived", "paused", "draft", "archived"]
    statuses += ["active"] * (shape.offers - len(statuses))
    for index in range(shape.offers):
        name, headline, kind, percent, amount, item = names.OFFERS[index % len(names.OFFERS)]
        status = statuses[index]
        created = start + 3600 * (index + 1) if index < 2 else start + span * rng.uniform(0.05, 0.6)
        updated = created + (span * 0.3 if status in ("archived", "paused") else 600)
        catalogue = index in (3, 4, 7) and status != "draft"
        every_n = index % 5 == 1
        data.offers.append(
            {
                "id": dataset.new_id("offers"),
                "programme_id": programme["id"],
                "name": name,
                "headline": headline,
                "description": f"{headline}. Show your reward to a member of staff.",
                "terms": "One per visit. Not with any other offer. Subject to availability.",
                "kind": kind,
                "percent": percent,
                "amount_minor": amount,
                "currency": programme["default_currency"],
                "estimated_value_minor": amount or rng.choice((350, 450, 600, 900)),
                "free_item_label": item,
                "min_spend_minor": 2500 if amount == 500 else None,
                "public_code": f"SAVE{index:02d}" if index % 4 == 2 else None,
                "points_cost": (index + 2) * 50 if catalogue else None,
                "show_in_catalogue": catalogue,
                "site_ids": [data.venues[0]["id"]] if index == 6 else None,
                "issue_on_connect": index in (0, 5),
                "connect_frequency": ("once", "every_n_days")[every_n] if index in (0, 5) else None,
                "connect_every_days": 30 if every_n and index == 5 else None,
                "valid_days_after_issue": (14, 30, 60)[index % 3],
                "starts_at": created if index % 3 == 0 else None,
                "ends_at": updated if status == "archived" else None,
                "max_issues": 10000 if index % 4 == 3 else None,
                "max_redemptions_total": None,
                "max_per_member": 1 if index < 2 else None,
                "cooldown_days": 7 if index % 6 == 4 else None,
                "self_redeem": index % 2 == 0,
                "channels": list(CHANNELS[: 3 + index % 4]),
                "promotion_id": 300 + index if index % 5 == 3 else None,
                "sort_order": index,
                "status": status,
                "created_at": created,
                "updated_at": updated,
            }
        )
    programme["signup_offer_id"] = data.offers[0]["id"]
    programme["birthday_offer_id"] = data.offers[1]["id"]
    data.offers.sort(key=lambda offer: offer["created_at"])


def issuable(offer: dict, moment: float) -> bool:
    if offer["status"] == "draft" or offer["created_at"] > moment:
        return False
    return offer["status"] == "active" or moment < offer["updated_at"]


def code(rng: random.Random, length: int) -> str:
    return "".join(rng.choices(CODE_ALPHABET, k=length))


class MemberLife:
    """One member's simulated life: visits, ledger lines, rewards and redemptions."""

    def __init__(self, dataset: Dataset, data: AccountData, rng: random.Random, member: dict):
        self.dataset, self.data, self.rng, self.member = dataset, data, rng, member
        self.balance = self.lifetime = 0
        self.open: list[dict] = []
        self.programme: dict = data.programme or {}
        offers = data.offers
        self.catalogue = [offer for offer in offers if offer["show_in_catalogue"]]
        self.general = [offer for offer in offers if offer["id"] not in self.special_ids()]

    def special_ids(self) -> tuple[int, int]:
        return self.programme["signup_offer_id"], self.programme["birthday_offer_id"]

    def line(
        self, moment: float, site: dict, reason: str, delta: int, reference: str, **extra: Any
    ):
        self.balance += delta
        if delta > 0 and reason.startswith("earn_"):
            self.lifetime += delta
        row = {
            "id": 0,
            "member": self.member,
            "site_id": site["id"],
            "delta": delta,
            "balance_after": self.balance,
            "reason": reason,
            "reference": reference,
            "spend_minor": None,
            "currency": None,
            "note": None,
            "created_by_user_id": None,
            "terminal_id": None,
            "created_at": moment,
        }
        row.update(extra)
        self.member["ledger"].append(row)
        return row

    def issue(self, moment: float, site: dict | None, offer: dict, via: str) -> None:
        rng = self.rng
        points = offer["points_cost"] if via == "points" else None
        delivered = moment + rng.randint(2, 40)
        reward = {
            "id": 0,
            "offer": offer,
            "member": self.member,
            "site_id": site["id"] if site else None,
            "site_name": site["name"] if site else "All venues",
            "code": code(rng, 8),
            "currency": site["currency"] if site else offer["currency"],
            "status": "issued",
            "issued_at": moment,
            "expires_at": moment + offer["valid_days_after_issue"] * DAY,
            "issued_via": via,
            "points_spent": points,
            "is_locked": False,
            "locked_until": None,
            "redemption": None,
            "delivered_email_at": delivered if rng.random() < 0.7 else None,
            "delivered_sms_at": delivered if rng.random() < 0.2 else None,
            "viewed_at": None,
            "view_count": 0,
        }
        viewed = moment + rng.randint(60, 86400)
        if rng.random() < 0.6 and viewed < self.dataset.cutoff:
            reward["viewed_at"], reward["view_count"] = viewed, rng.randint(1, 5)
        self.data.rewards.append(reward)
        self.member["rewards"].append(reward)
        self.open.append(reward)

    def redeem(self, moment: float, site: dict) -> None:
        rng = self.rng
        for reward in self.open:
            valid = reward["offer"]["site_ids"] is None or site["id"] in reward["offer"]["site_ids"]
            spent = reward["points_spent"] or 0
            if valid and reward["expires_at"] > moment and self.balance >= spent:
                break
        else:
            return
        self.open.remove(reward)
        moment = min(moment + rng.randint(1200, 5400), self.dataset.cutoff - 1)
        channel = pick(rng, CHANNELS)
        staff = channel in ("staff_scan", "staff_code", "manager_manual")
        basket = rng.randint(800, 9000)
        offer = reward["offer"]
        discount = offer["amount_minor"] or int(basket * (offer["percent"] or 0) / 100) or 450
        awarded = max(
            1, int((basket - discount) / 100 * self.programme["points_per_currency_unit"])
        )
        staff_name = pick(rng, names.STAFF_NAMES)
        redemption = {
            "id": 0,
            "reference": "RDM-" + code(rng, 6),
            "reward": reward,
            "site": site,
            "channel": channel,
            "redeemed_by_user_id": pick(rng, STAFF_USER_IDS) if staff else None,
            "redeemed_by_name": staff_name if staff else None,
            "terminal_id": 400 + site["id"] if channel == "terminal_pin" else None,
            "terminal_name": f"Till {site['id']}" if channel == "terminal_pin" else None,
            "staff_initials": "".join(part[0] for part in staff_name.split()) if staff else None,
            "face_value_minor": offer["estimated_value_minor"],
            "currency": site["currency"],
            "basket_total_minor": basket,
            "discount_applied_minor": min(discount, basket),
            "points_spent": reward["points_spent"] or 0,
            "points_awarded": awarded,
            "pos_reference": f"POS-{rng.randint(100000, 999999)}" if channel == "pos_api" else None,
            "reason": "Birthday visit" if offer["id"] == self.special_ids()[1] else None,
            "status": "completed",
            "voided_at": None,
            "voided_by_user_id": None,
            "void_reason": None,
            "restored_at": None,
            "restored_by_user_id": None,
            "created_at": moment,
            "lines": [],
        }
        reward["status"], reward["redemption"] = "redeemed", redemption
        self.data.redemptions.append(redemption)
        if redemption["points_spent"]:
            line = self.line(moment, site, "redeem", -redemption["points_spent"], "")
            redemption["lines"].append(line)  # reference redeem:<redemption_id> once ids exist
        order = rng.randint(10000000, 99999999)
        line = self.line(
            moment + 1,
            site,
            "earn_spend",
            awarded,
            f"spend:pos:{order}",
            spend_minor=basket,
            currency=site["currency"],
        )
        redemption["lines"].append(line)

    def visit(self, moment: float, site: dict) -> None:
        rng, programme = self.rng, self.programme
        local_day = dt.datetime.fromtimestamp(moment, zone(site["timezone"])).date().isoformat()
        self.line(
            moment,
            site,
            "earn_visit",
            programme["points_per_visit"],
            f"visit:{site['id']}:{local_day}",
        )
        roll = rng.random()
        if roll < 0.4:
            spend = rng.randint(500, 8000)
            earned = max(1, int(spend / 100 * site["earn_multiplier"]))
            source = pick(rng, ("pos", "till", "shopify"))
            reference = f"spend:{source}:{rng.randint(10000000, 99999999)}"
            extra = {"spend_minor": spend, "currency": site["currency"]}
            if source == "till":
                extra["terminal_id"] = 400 + site["id"]
            self.line(moment + 60, site, "earn_spend", earned, reference, **extra)
            if rng.random() < 0.03:  # a refunded sale
                self.line(moment + 900, site, "reverse", -earned, f"reverse:{reference}")
        elif roll < 0.45:
            self.line(moment + 30, site, "earn_bonus", 50, "bonus:double-points", note="Bonus week")
        elif roll < 0.48:
            user = pick(rng, STAFF_USER_IDS)
            self.line(
                moment + 30,
                site,
                "earn_manual",
                25,
                f"manual:{user}",
                created_by_user_id=user,
                note="Goodwill gesture",
            )
        elif roll < 0.5 and self.balance > 20:
            user = pick(rng, STAFF_USER_IDS)
            self.line(
                moment + 30,
                site,
                "adjust",
                -rng.randint(5, 20),
                f"adjust:{user}",
                created_by_user_id=user,
                note="Correction",
            )
        elif roll < 0.515 and self.balance > 0:
            self.line(moment + 45, site, "expire", -min(self.balance, 40), f"expire:{local_day}")
        if self.open and rng.random() < 0.45:
            self.redeem(moment, site)
        elif rng.random() < 0.16:
            offers = [offer for offer in self.general if issuable(offer, moment)]
            if offers:
                via = pick(rng, ("connect", "automation", "campaign", "sms", "manual", "bulk"))
                wide = via in ("campaign", "bulk") and rng.random() < 0.6
                self.issue(moment + 120, None if wide else site, pick(rng, offers), via)
        elif rng.random() < 0.15:
            offers = [o for o in self.catalogue if issuable(o, moment) and o["points_cost"]]
            affordable = [offer for offer in offers if offer["points_cost"] <= self.balance]
            if affordable:
                self.issue(moment + 180, site, pick(rng, affordable), "points")
