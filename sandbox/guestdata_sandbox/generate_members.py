"""Seeded members, their ledgers, rewards and redemptions (one simulated life per member)."""

from __future__ import annotations

import datetime as dt
import random

from guestdata_sandbox.dataset import AccountData, Dataset, Size
from guestdata_sandbox.generate_rewards import (
    CODE_ALPHABET,
    DAY,
    STAFF_USER_IDS,
    TIERS,
    MemberLife,
    make_offers,
    make_programme,
)
from guestdata_sandbox.rules import london_day_start
from guestdata_sandbox.seeded import pick, stream

VISIT_GAP_S = 4 * 3600  # visits at least this far apart, so each visit's lines stay in order
VOID_REASONS = ("Wrong reward scanned", "Guest changed their mind", "Till error")


def generate_rewards(dataset: Dataset, data: AccountData, shape: Size) -> None:
    account_id = data.account.account_id
    rng = stream(dataset.seed, dataset.size, account_id, "programme")
    make_programme(dataset, data, rng)
    make_offers(dataset, data, shape, rng)
    simulate_members(dataset, data, shape, stream(dataset.seed, dataset.size, account_id, "life"))
    settle(dataset, data, stream(dataset.seed, dataset.size, account_id, "settle"))
    assign_ids(dataset, data)


def new_member(rng: random.Random, person: int, created: float, home: dict) -> dict:
    birth = dt.date(rng.randint(1955, 2005), rng.randint(1, 12), rng.randint(1, 28))
    joined_via = rng.choices(("splash", "import", "staff", "api"), (80, 8, 8, 4))[0]
    return {
        "id": 0,
        "member_number": "".join(rng.choices(CODE_ALPHABET, k=10)),  # spec 2.8: ten characters
        "person": person,
        "date_of_birth": birth.isoformat(),
        "points_balance": 0,
        "lifetime_points": 0,
        "points_12m": 0,
        "tier_key": None,
        "tier_reached_at": None,
        "visits_count": 0,
        "last_visit_at": created,
        "last_visit_site_id": home["id"],
        "first_site_id": home["id"],
        "joined_via": joined_via,
        "membership_consent_at": created,
        "left_at": None,
        "anonymised_at": None,
        "created_at": created,
        "updated_at": created,  # internal only (spec 4.2 updated_since); never rendered
        "timezone": home["timezone"],
        "ledger": [],
        "rewards": [],
    }


def simulate_members(dataset: Dataset, data: AccountData, shape: Size, rng: random.Random) -> None:
    programme = data.programme
    assert programme is not None
    start, cutoff = programme["activated_at"], dataset.cutoff
    offers = {offer["id"]: offer for offer in data.offers}
    signup_offer = offers[programme["signup_offer_id"]]
    birthday_offer = offers[programme["birthday_offer_id"]]
    people = rng.sample(range(len(data.persons)), min(shape.members, len(data.persons)))
    for person in people:
        created = start + (cutoff - start) * rng.random() ** 0.8
        eligible = [venue for venue in data.venues if venue["created_at"] <= created]
        home = pick(rng, eligible or data.venues[:1])
        member = new_member(rng, person, created, home)
        end = cutoff
        status_roll = rng.random()
        if status_roll < 0.08:  # spec 3: members who left, some of them anonymised
            member["left_at"] = end = created + (cutoff - created) * rng.uniform(0.4, 0.95)
            if status_roll < 0.03:
                member["anonymised_at"] = min(end + rng.uniform(3600, 20 * DAY), cutoff - 1)
        life = MemberLife(dataset, data, rng, member)
        visits = [created]
        for _ in range(int(rng.expovariate(1 / 4.0))):
            visits.append(created + (end - created) * rng.random())
        visits.sort()
        for index in range(1, len(visits)):
            visits[index] = max(visits[index], visits[index - 1] + VISIT_GAP_S)
        visits = visits[:1] + [moment for moment in visits[1:] if moment < end - 2 * 3600]
        events = [(moment, "visit") for moment in visits]
        birth = dt.date.fromisoformat(member["date_of_birth"])
        for year in range(dt.date.fromtimestamp(created).year, dataset.anchor.year + 1):
            moment = london_day_start(dt.date(year, birth.month, birth.day)) + 10 * 3600
            if created + 3600 < moment < end - 3600:
                events.append((moment, "birthday"))
        events.sort()
        for moment, kind in events:
            site = home
            if kind == "birthday":
                life.line(
                    moment,
                    home,
                    "earn_birthday",
                    programme["birthday_bonus_points"],
                    f"birthday:{dt.date.fromtimestamp(moment).year}",
                )
                life.issue(moment + 5, None, birthday_offer, "automation")
                continue
            if rng.random() < 0.2:
                site = pick(rng, [v for v in data.venues if v["created_at"] <= moment] or [home])
            life.visit(moment, site)
            if moment == created:
                life.line(
                    created + 1,
                    home,
                    "earn_signup",
                    programme["signup_bonus_points"],
                    f"signup:{member['member_number']}",
                )
                life.issue(created + 2, home, signup_offer, "connect")
            member["visits_count"] += 1
            member["last_visit_at"], member["last_visit_site_id"] = moment, site["id"]
        finish_member(dataset, member, life.lifetime)
        data.members.append(member)
    ensure_status(dataset, data)


def finish_member(dataset: Dataset, member: dict, lifetime: int) -> None:
    """Balances from the time-ordered ledger; tier from the last 12 months' earnings (spec 2.8)."""
    ledger = member["ledger"]
    ledger.sort(key=lambda line: line["created_at"])
    balance = 0
    for line in ledger:
        balance += line["delta"]
        line["balance_after"] = balance  # spec 2.9: balance_after follows the deltas
    member["points_balance"], member["lifetime_points"] = balance, lifetime
    year_ago = dataset.cutoff - 365 * DAY
    earned, reached = 0, {}
    for line in ledger:
        if line["created_at"] >= year_ago and line["reason"].startswith("earn_"):
            earned += line["delta"]
            for tier in TIERS:
                if earned >= tier["min_points_12m"] and tier["key"] not in reached:
                    reached[tier["key"]] = line["created_at"]
    member["points_12m"] = earned
    tier = next((t for t in reversed(TIERS) if earned >= t["min_points_12m"]), None)
    if tier is not None:
        member["tier_key"], member["tier_reached_at"] = tier["key"], reached[tier["key"]]
    touch(member)


def touch(member: dict) -> None:
    """spec 4.2 updated_since: moves with points, tier, status or visits."""
    moments = [member["created_at"], member["last_visit_at"]]
    moments += [member[name] for name in ("tier_reached_at", "left_at", "anonymised_at")]
    if member["ledger"]:
        moments.append(member["ledger"][-1]["created_at"])
    member["updated_at"] = max(moment for moment in moments if moment is not None)


def ensure_status(dataset: Dataset, data: AccountData) -> None:
    """Every size has at least one member who left and one anonymised (spec 3)."""
    candidates = sorted(data.members, key=lambda member: member["updated_at"])
    if not any(member["left_at"] for member in data.members):
        member = candidates[0]
        member["left_at"] = member["updated_at"] + 600
        touch(member)
    if not any(member["anonymised_at"] for member in data.members):
        member = (
            next(m for m in candidates if m["left_at"] is None) if len(candidates) > 1 else None
        )
        if member is not None:
            member["left_at"] = member["updated_at"] + 600
            member["anonymised_at"] = member["left_at"] + 600
            touch(member)
    for member in data.members:
        if member["updated_at"] >= dataset.cutoff:
            member["updated_at"] = dataset.cutoff - 1


def settle(dataset: Dataset, data: AccountData, rng: random.Random) -> None:
    """Final states of rewards (expired, stored or not; voided; locked) and redemptions."""
    cutoff = dataset.cutoff
    unused = [reward for reward in data.rewards if reward["status"] == "issued"]
    for reward in unused:
        if reward["expires_at"] < cutoff:
            # spec 3: a reward stored as issued whose expires_at passed reads as expired
            reward["status"] = "expired" if rng.random() < 0.5 else "issued"
        elif rng.random() < 0.04:
            reward["status"] = "voided"
        elif rng.random() < 0.04 and reward["issued_at"] < cutoff - 3600:
            lock(reward, cutoff - rng.uniform(300, 3000))
    live = [r for r in unused if r["status"] == "issued" and r["expires_at"] > cutoff]
    if live and not any(reward["is_locked"] for reward in unused):
        lock(live[-1], max(live[-1]["issued_at"] + 1, cutoff - 600))
    if len(live) > 2 and not any(reward["status"] == "voided" for reward in unused):
        live[0]["status"] = "voided"
    stale = [r for r in unused if r["expires_at"] < cutoff]
    if stale and not any(reward["status"] == "issued" for reward in stale):
        stale[0]["status"] = "issued"
    if not any(reward["site_id"] is None for reward in data.rewards) and unused:
        unused[0]["site_id"], unused[0]["site_name"] = None, "All venues"
    for redemption in data.redemptions:
        if rng.random() < 0.08:
            void(redemption, rng, cutoff)
    voided = [r for r in data.redemptions if r["status"] == "voided"]
    if len(data.redemptions) > 3 and len(voided) < 3:
        for redemption in data.redemptions[: 3 - len(voided)]:
            void(redemption, rng, cutoff)
        voided = [r for r in data.redemptions if r["status"] == "voided"]
    for redemption in voided[:2]:  # voided then restored: status completed, restored_at set
        if redemption["voided_at"] < cutoff - 2:
            restored = min(redemption["voided_at"] + rng.uniform(3600, DAY), cutoff - 1)
            redemption["status"], redemption["restored_at"] = "completed", restored
            redemption["restored_by_user_id"] = pick(rng, STAFF_USER_IDS)


def lock(reward: dict, moment: float) -> None:
    """spec 3: five wrong PINs lock the reward for 60 minutes."""
    reward["is_locked"], reward["locked_until"] = True, moment + 3600


def void(redemption: dict, rng: random.Random, cutoff: float) -> None:
    created = redemption["created_at"]
    redemption["status"] = "voided"
    redemption["voided_at"] = min(created + rng.uniform(600, 2 * DAY), (created + cutoff) / 2)
    redemption["voided_by_user_id"] = pick(rng, STAFF_USER_IDS)
    redemption["void_reason"] = pick(rng, VOID_REASONS)


def assign_ids(dataset: Dataset, data: AccountData) -> None:
    """Ids follow time, so "newest first" is also highest id first."""
    data.members.sort(key=lambda member: member["created_at"])
    for member in data.members:
        member["id"] = dataset.new_id("members")
    lines = sorted(
        (line for member in data.members for line in member["ledger"]),
        key=lambda line: line["created_at"],
    )
    for line in lines:
        line["id"] = dataset.new_id("member_ledger")
    data.rewards.sort(key=lambda reward: reward["issued_at"])
    for reward in data.rewards:
        reward["id"] = dataset.new_id("rewards")
    data.redemptions.sort(key=lambda redemption: redemption["created_at"])
    for redemption in data.redemptions:
        redemption["id"] = dataset.new_id("redemptions")
        for line in redemption["lines"]:
            if line["reason"] == "redeem":
                line["reference"] = f"redeem:{redemption['id']}"  # spec 2.9 reference shape
