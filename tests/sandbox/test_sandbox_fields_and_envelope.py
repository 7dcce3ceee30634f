"""Spec parts 1 and 2: the envelope, JSON whatever Accept says, every field with its type."""

from __future__ import annotations

import pytest

from support.sandbox_api import Get, field_problems, read_all

LISTS = {
    "/guests": "guest",
    "/rewards/members": "member",
    "/rewards/rewards": "reward",
    "/rewards/redemptions": "redemption",
}


@pytest.mark.parametrize("accept", [None, "text/html", "application/xml", "*/*"])
def test_every_answer_is_json_whatever_accept_says(get: Get, accept: str | None) -> None:
    headers = {"Accept": accept} if accept else {}
    for path, key in [("/me", "gd_owner_growth_1"), ("/me", "gd_revoked"), ("/nope", None)]:
        response = get(path, key=key, headers=headers)
        assert response.headers["Content-Type"].startswith("application/json")
        assert isinstance(response.json(), dict)
    assert get("/guests", params={"per_page": 0}, headers=headers).json()["errors"]


def test_single_reads_have_data_object_and_no_meta(get: Get, truth: dict) -> None:
    body = get("/me").json()
    assert set(body) == {"data"}
    assert field_problems(body["data"], "account") == []
    for path, row in [
        ("/rewards/members/{}", truth["members"][0]),
        ("/rewards/rewards/{}", truth["rewards"][0]),
        ("/rewards/redemptions/{}", truth["redemptions"][0]),
    ]:
        body = get(path.format(row["id"])).json()
        assert set(body) == {"data"} and body["data"] == row


@pytest.mark.parametrize("path", sorted(LISTS))
def test_list_rows_have_every_spec_field_with_its_type(get: Get, path: str) -> None:
    body = get(path, params={"per_page": 200}).json()
    assert set(body) == {"data", "meta"}
    assert field_problems(body["meta"], "paging") == []
    rows = read_all(get, path)
    assert rows
    problems = {problem for row in rows for problem in field_problems(row, LISTS[path])}
    assert problems == set()


def test_venues_and_stats_fields(get: Get) -> None:
    venues = get("/venues").json()["data"]
    assert venues and all(field_problems(venue, "venue") == [] for venue in venues)
    body = get("/stats").json()
    assert field_problems(body["data"], "stats") == []
    assert all(isinstance(venue_id, int) for venue_id in body["meta"]["venue_ids"])


def test_programme_fields_tiers_brand_and_meta_venues(get: Get) -> None:
    body = get("/rewards/programme").json()
    programme = body["data"]
    assert field_problems(programme, "programme") == []
    assert programme["mode"] in ("points", "stamps")
    assert programme["membership_optin_mode"] in ("checkbox", "auto")
    assert all(isinstance(value, int | float) for value in programme["point_values"].values())
    assert all(code == code.upper() and len(code) == 3 for code in programme["point_values"])
    assert all(field_problems(tier, "tier") == [] for tier in programme["tiers"])
    assert field_problems(programme["brand"], "brand") == []
    for venue in body["meta"]["venues"]:
        mirror = [name for name in venue if name.startswith("mirror_to_")]
        assert len(mirror) == 1 and isinstance(venue[mirror[0]], bool)
        assert field_problems(venue, "programme_venue", extra=set(mirror)) == []


def test_ledger_fields_and_meta_balances(get: Get, truth: dict) -> None:
    member = max(truth["members"], key=lambda row: row["visits_count"])
    body = get(f"/rewards/members/{member['id']}/ledger", params={"per_page": 200}).json()
    assert body["data"]
    assert all(field_problems(line, "ledger") == [] for line in body["data"])
    meta = body["meta"]
    for name in ("points_balance", "lifetime_points", "points_12m", "tier_key", "tier_reached_at"):
        assert meta[name] == member[name]
    assert (
        field_problems(
            {k: meta[k] for k in ("current_page", "last_page", "per_page", "total")}, "paging"
        )
        == []
    )


def test_offer_fields_and_single_read_stats(get: Get) -> None:
    offers = get("/rewards/offers", params={"per_page": 200}).json()["data"]
    assert offers and all(field_problems(offer, "offer") == [] for offer in offers)
    body = get(f"/rewards/offers/{offers[0]['id']}").json()
    assert field_problems(body["data"], "offer", extra={"stats"}) == []
    assert field_problems(body["data"]["stats"], "offer_stats") == []


def test_value_shapes_of_part_2(get: Get, truth: dict) -> None:
    for member in truth["members"]:
        assert len(member["member_number"]) == 10  # spec 2.8
        assert member["phone_e164"].startswith("+") and member["phone_e164"][1:].isdigit()
        assert member["joined_via"] in ("splash", "import", "staff", "api")
    for reward in truth["rewards"]:
        assert len(reward["code"]) == 8  # spec 2.10
        assert reward["display_code"] == f"{reward['code'][:4]}-{reward['code'][4:]}"
        assert reward["kind"] in ("percent", "fixed", "free_item", "custom")
        assert reward["currency"] == reward["currency"].upper()
        assert reward["issued_via"] in (
            [
                "connect",
                "automation",
                "campaign",
                "sms",
                "manual",
                "bulk",
                "points",
                "api",
                "import",
            ]
        )
    for redemption in truth["redemptions"]:
        assert redemption["reference"].startswith("RDM-") and len(redemption["reference"]) == 10
        assert redemption["status"] in ("completed", "voided")
    for guest in truth["guests"]:
        assert guest["phone"].startswith("+") and guest["phone"][1:].isdigit()
        assert guest["name"] == f"{guest['first_name']} {guest['last_name']}"
    reasons = {line["reason"] for line in truth["member_ledger"]}
    assert reasons <= set(
        [
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
        ]
    )


def test_no_secret_appears_in_any_answer(truth: dict) -> None:
    """spec 4.5.7: no token, PIN, key or reward link in any response."""
    text = str(truth).lower()
    for needle in ("gd_owner", "pin", "token", "http://", "/r/"):
        assert needle not in text.replace("terminal_pin", "").replace("https://example.com", "")
