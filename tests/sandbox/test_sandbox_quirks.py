"""The data quirks of spec parts 2 and 3, in the data of every size."""

from __future__ import annotations

import datetime as dt
import re

from support.sandbox_api import Get, client, read_all

ASTERISKS = re.compile(r"\*")


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def test_stored_issued_past_expiry_reads_expired_but_matches_status_issued(get: Get) -> None:
    """spec 3: reads as expired in the row; the filter matches the stored status."""
    issued = read_all(get, "/rewards/rewards", status="issued")
    stale = [row for row in issued if instant(row["expires_at"]) <= now()]
    assert stale, "some rewards stored as issued have passed expires_at"
    assert all(row["status"] == "expired" for row in stale)
    live = [row for row in issued if instant(row["expires_at"]) > now()]
    assert live and all(row["status"] == "issued" for row in live)
    expired = read_all(get, "/rewards/rewards", status="expired")
    assert expired and not {row["id"] for row in expired} & {row["id"] for row in stale}


def test_reward_states_and_redemption_fields(get: Get, truth: dict) -> None:
    rewards = truth["rewards"]
    statuses = {row["status"] for row in rewards}
    assert statuses == {"issued", "redeemed", "expired", "voided"}
    redemption_fields = (
        "redeemed_at",
        "redemption_id",
        "redeemed_at_site",
        "redeemed_via",
        "reference",
        "redeemed_by_initials",
    )
    for row in rewards:
        if row["status"] == "redeemed":  # spec 3: uses_remaining 0, redemption fields filled
            assert row["uses_remaining"] == 0
            assert all(row[name] is not None for name in redemption_fields[:5])
        else:
            assert row["uses_remaining"] == 1
            assert all(row[name] is None for name in redemption_fields)
    redemptions = {row["id"]: row for row in truth["redemptions"]}
    for row in rewards:
        if row["redemption_id"]:
            redemption = redemptions[row["redemption_id"]]
            assert redemption["member_reward_id"] == row["id"]
            assert redemption["reward_code"] == row["display_code"]
            assert redemption["reference"] == row["reference"]


def test_locked_rewards_lock_for_60_minutes_and_programme_wide_rewards(truth: dict) -> None:
    locked = [row for row in truth["rewards"] if row["is_locked"]]
    assert locked and all(row["locked_until"] for row in locked)
    wide = [row for row in truth["rewards"] if row["site_id"] is None]
    assert wide and all(isinstance(row["site_name"], str) for row in wide)


def test_programme_wide_rewards_are_left_out_when_filtering_by_venue(get: Get, truth: dict) -> None:
    for venue in truth["venues"]:
        rows = read_all(get, "/rewards/rewards", venue_id=venue["id"])
        assert all(row["site_id"] == venue["id"] for row in rows)


def test_voided_and_restored_redemptions(truth: dict) -> None:
    rows = truth["redemptions"]
    voided = [row for row in rows if row["status"] == "voided"]
    assert voided and all(row["voided_at"] and row["voided_by_user_id"] for row in voided)
    assert all(row["void_reason"] for row in voided)
    restored = [row for row in rows if row["restored_at"]]
    assert restored, "one or two voided-then-restored redemptions"
    assert all(row["status"] == "completed" and row["voided_at"] for row in restored)


def test_archived_offers_hidden_unless_asked_for_but_answer_by_id(get: Get, truth: dict) -> None:
    listed = read_all(get, "/rewards/offers")
    assert all(row["status"] != "archived" for row in listed)
    archived = read_all(get, "/rewards/offers", status="archived")
    assert len(archived) >= 2 and all(row["status"] == "archived" for row in archived)
    assert {row["status"] for row in listed} == {"draft", "active", "paused"}
    body = get(f"/rewards/offers/{archived[0]['id']}").json()
    assert body["data"]["status"] == "archived" and "stats" in body["data"]
    assert len(truth["offers"]) == len(listed) + len(archived)


def test_offer_stats_count_rewards_and_redemptions(get: Get, truth: dict) -> None:
    for stats in truth["offer_stats"]:
        body = get(f"/rewards/offers/{stats['offer_id']}").json()["data"]
        assert body["stats"] == {k: v for k, v in stats.items() if k != "offer_id"}
        rewards = [r for r in truth["rewards"] if r["offer_id"] == stats["offer_id"]]
        assert stats["issued"] == len(rewards) == body["issued_count"]
        assert stats["claimed"] == sum(1 for r in rewards if r["points_spent"] is not None)


def test_mirror_field_name_varies_with_the_partner(sandbox) -> None:
    owner = sandbox.truth("gd_owner_growth_1", resource="programme_venues")
    limited = sandbox.truth("gd_limited_access", resource="programme_venues")
    names = {
        tuple(name for name in row if name.startswith("mirror_to_")) for row in owner + limited
    }
    assert len(names) == 2, names  # one partner per account, and they differ here


def test_venues_on_non_utc_zones_and_one_on_the_default(get: Get) -> None:
    venues = get("/rewards/programme").json()["meta"]["venues"]
    zones = {venue["timezone"] for venue in venues}
    assert len(zones - {"UTC"}) >= 3
    defaults = [venue for venue in venues if venue["timezone_is_default"]]
    assert defaults and all(venue["timezone"] == "UTC" for venue in defaults)
    offsets = {
        row["visited_at"][-6:] for row in get("/guests", params={"per_page": 200}).json()["data"]
    }
    assert len(offsets) >= 3 and any(offset.startswith("+") for offset in offsets - {"+00:00"})


def test_points_expire_after_months_is_null_somewhere(sandbox) -> None:
    values = {
        sandbox.truth(key, resource="programme")["points_expire_after_months"]
        for key in ("gd_owner_growth_1", "gd_limited_access")
    }
    assert None in values


def masked(value: str | None) -> bool:
    return value is not None and "*" in value


def test_limited_access_account_masks_contacts(get: Get) -> None:
    """spec 2.8: asterisks in email, phone, first_name; last_name and date_of_birth null."""
    members = read_all(get, "/rewards/members", key="gd_limited_access")
    assert members
    for row in members:
        assert masked(row["email"]) and masked(row["phone_e164"]) and masked(row["first_name"])
        assert row["last_name"] is None and row["date_of_birth"] is None
        assert "@" in row["email"] and row["points_balance"] >= 0
    guests = read_all(get, "/guests", key="gd_limited_access")
    assert guests and all(masked(row["email"]) and row["last_name"] is None for row in guests)


def test_restricted_key_masks_members_who_joined_elsewhere(sandbox) -> None:
    key = "gd_team_some_venues"
    venues = {row["site_id"] for row in sandbox.truth(key, resource="programme_venues")}
    owner = {row["id"]: row for row in sandbox.truth("gd_owner_growth_1", resource="members")}
    rows = sandbox.truth(key, resource="members")
    inside = [row for row in rows if row["first_site_id"] in venues]
    outside = [row for row in rows if row["first_site_id"] not in venues]
    assert inside and outside
    assert all(row == owner[row["id"]] for row in inside)
    for row in outside:
        assert masked(row["email"]) and row["last_name"] is None and row["date_of_birth"] is None
        original = owner[row["id"]]
        for name in ("points_balance", "tier_key", "visits_count", "last_visit_at"):
            assert row[name] == original[name]  # spec 2.8: points, tier, visits unaffected
    guests = sandbox.truth(key, resource="guests")
    assert all(masked(g["email"]) == (g["venue_id"] not in venues) for g in guests)


def test_ledger_balance_after_follows_the_deltas(truth: dict) -> None:
    lines: dict[int, list[dict]] = {}
    for line in truth["member_ledger"]:
        lines.setdefault(line["member_id"], []).append(line)
    members = {row["id"]: row for row in truth["members"]}
    for member_id, rows in lines.items():
        rows.sort(key=lambda line: (instant(line["created_at"]), line["id"]))
        balance = 0
        for line in rows:
            balance += line["delta"]
            assert line["balance_after"] == balance >= 0
        assert members[member_id]["points_balance"] == balance


def test_ledger_references_have_the_spec_shapes(truth: dict) -> None:
    redemption_ids = {row["id"] for row in truth["redemptions"]}
    for line in truth["member_ledger"]:
        if line["reason"] == "redeem":
            assert int(line["reference"].split(":")[1]) in redemption_ids
        if line["reason"] == "earn_visit":
            assert re.fullmatch(r"visit:\d+:\d{4}-\d{2}-\d{2}", line["reference"])
        if line["reason"] == "earn_spend":
            assert re.fullmatch(r"spend:\w+:\w+", line["reference"])
            assert line["spend_minor"] and line["currency"]


def test_left_and_anonymised_members(get: Get, truth: dict) -> None:
    anonymised = read_all(get, "/rewards/members", status="anonymised")
    assert anonymised and all(row["anonymised_at"] for row in anonymised)
    assert all(row["first_name"] == "Anonymised" for row in anonymised)
    left = read_all(get, "/rewards/members", status="left")
    active = read_all(get, "/rewards/members", status="active")
    assert left and all(row["left_at"] and row["anonymised_at"] is None for row in left)
    assert all(row["left_at"] is None for row in active)
    assert len(left) + len(active) + len(anonymised) == len(truth["members"])


def test_members_rewards_available_counts_usable_rewards(truth: dict) -> None:
    usable: dict[int, int] = {}
    for row in truth["rewards"]:
        if row["status"] == "issued" and row["uses_remaining"] == 1:
            usable[row["member_id"]] = usable.get(row["member_id"], 0) + 1
    for member in truth["members"]:
        assert member["rewards_available"] == usable.get(member["id"], 0)


def test_updated_since_uses_the_internal_updated_at(fresh_sandbox) -> None:
    """spec 4.2: members changed on or after it; the record has no such field."""

    get = client(fresh_sandbox)
    members = fresh_sandbox.truth("gd_owner_growth_1", resource="members")
    assert all("updated_at" not in row for row in members)
    oldest = min(members, key=lambda row: row["created_at"])
    since = (now() - dt.timedelta(seconds=2)).isoformat()
    before = {row["id"] for row in read_all(get, "/rewards/members", updated_since=since)}
    assert oldest["id"] not in before
    fresh_sandbox.mutate("add_ledger_lines", member_id=oldest["id"], count=1)
    after = {row["id"] for row in read_all(get, "/rewards/members", updated_since=since)}
    assert after == before | {oldest["id"]}
    everyone = read_all(get, "/rewards/members", updated_since="2000-01-01")
    assert len(everyone) == len(members)


def test_nothing_generated_lies_in_the_future(truth: dict) -> None:
    moment = now()
    for name, field in [
        ("guests", "visited_at"),
        ("members", "created_at"),
        ("member_ledger", "created_at"),
        ("rewards", "issued_at"),
        ("redemptions", "created_at"),
        ("offers", "created_at"),
    ]:
        assert all(instant(row[field]) < moment for row in truth[name]), name
    today = moment.astimezone(dt.timezone(dt.timedelta(0))).date()
    assert any(
        instant(g["visited_at"]).date() >= today - dt.timedelta(days=1) for g in truth["guests"]
    )
