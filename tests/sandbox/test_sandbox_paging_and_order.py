"""Spec 4.1-4.3: newest first, venues alphabetical, paging meta, 422 naming the parameter."""

from __future__ import annotations

import datetime as dt

import pytest

from support.sandbox_api import Get, read_all

TIME_FIELD = {
    "/guests": "visited_at",
    "/rewards/members": "created_at",
    "/rewards/rewards": "issued_at",
    "/rewards/redemptions": "created_at",
    "/rewards/offers": "created_at",
}


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("path", sorted(TIME_FIELD))
def test_lists_are_newest_first(get: Get, path: str) -> None:
    rows = read_all(get, path)
    moments = [instant(row[TIME_FIELD[path]]) for row in rows]
    assert len(rows) > 5
    assert moments == sorted(moments, reverse=True)


def test_ledger_is_newest_first(get: Get, truth: dict) -> None:
    member = max(truth["members"], key=lambda row: row["visits_count"])
    lines = read_all(get, f"/rewards/members/{member['id']}/ledger")
    moments = [(instant(line["created_at"]), line["id"]) for line in lines]
    assert len(lines) > 3 and moments == sorted(moments, reverse=True)


def test_venues_are_alphabetical(get: Get) -> None:
    names = [venue["name"] for venue in get("/venues").json()["data"]]
    assert len(names) >= 4 and names == sorted(names, key=str.lower)


def test_paging_meta_and_pages_partition_the_list(get: Get, truth: dict) -> None:
    first = get("/guests", params={"per_page": 7}).json()
    total = len(truth["guests"])
    assert first["meta"] == {
        "current_page": 1,
        "last_page": -(-total // 7),
        "per_page": 7,
        "total": total,
    }
    default = get("/guests").json()["meta"]
    assert default["per_page"] == 50  # spec 4.3 default
    ids = [row["id"] for row in read_all(get, "/guests")]
    assert ids == [row["id"] for row in truth["guests"]] and len(set(ids)) == total
    beyond = get("/guests", params={"per_page": 200, "page": 10_000}).json()
    assert beyond["data"] == [] and beyond["meta"]["current_page"] == 10_000


@pytest.mark.parametrize(
    ("params", "name", "message"),
    [
        ({"per_page": 0}, "per_page", "The per page field must be between 1 and 200."),
        ({"per_page": 201}, "per_page", "The per page field must be between 1 and 200."),
        ({"per_page": "ten"}, "per_page", "The per page field must be an integer."),
        ({"page": 0}, "page", "The page field must be at least 1."),
        ({"page": -3}, "page", "The page field must be at least 1."),
    ],
)
@pytest.mark.parametrize("path", ["/guests", "/rewards/members", "/rewards/offers"])
def test_out_of_range_paging_is_422_naming_the_parameter(
    get: Get, path: str, params: dict, name: str, message: str
) -> None:
    response = get(path, params=params)
    assert response.status_code == 422
    body = response.json()
    assert body == {"message": message, "errors": {name: [message]}}


def test_several_invalid_parameters_are_reported_together(get: Get) -> None:
    body = get("/rewards/rewards", params={"per_page": 0, "page": 0, "status": "x"}).json()
    assert set(body["errors"]) == {"per_page", "page", "status"}
    assert body["message"].endswith("(and 2 more errors)")


def test_foreign_member_or_offer_filter_is_an_empty_page(get: Get, sandbox) -> None:
    """spec 4.3: member_id or offer_id not on the account: empty page, not an error."""
    limited = sandbox.truth("gd_limited_access")
    for name, value in [
        ("member_id", limited["members"][0]["id"]),
        ("offer_id", limited["offers"][0]["id"]),
        ("member_id", 999_999_999),
    ]:
        response = get("/rewards/rewards", params={name: value})
        assert response.status_code == 200
        assert response.json()["data"] == [] and response.json()["meta"]["total"] == 0


def test_filters_of_rewards_and_redemptions(get: Get, truth: dict) -> None:
    offer_id = truth["rewards"][0]["offer_id"]
    rows = read_all(get, "/rewards/rewards", offer_id=offer_id)
    assert rows and all(row["offer_id"] == offer_id for row in rows)
    assert len(rows) == sum(1 for row in truth["rewards"] if row["offer_id"] == offer_id)
    member_id = truth["rewards"][0]["member_id"]
    rows = read_all(get, "/rewards/rewards", member_id=member_id)
    assert rows and all(row["member_id"] == member_id for row in rows)
    for channel in ("staff_scan", "pos_api"):
        rows = read_all(get, "/rewards/redemptions", channel=channel)
        assert all(row["channel"] == channel for row in rows)
    voided = read_all(get, "/rewards/redemptions", status="voided")
    assert voided and all(row["status"] == "voided" for row in voided)
    venue_id = truth["redemptions"][0]["site_id"]
    rows = read_all(get, "/rewards/redemptions", venue_id=venue_id)
    assert rows and all(row["site_id"] == venue_id for row in rows)


def test_guests_filters_venue_and_marketing_consent(get: Get, truth: dict) -> None:
    venue_id = truth["venues"][0]["id"]
    rows = read_all(get, "/guests", venue_id=venue_id)
    assert rows and all(row["venue_id"] == venue_id for row in rows)
    for flag, value in (("1", True), ("0", False)):
        rows = read_all(get, "/guests", marketing_consent=flag)
        assert rows and all(row["marketing_consent"] is value for row in rows)
    assert get("/guests", params={"marketing_consent": "maybe"}).status_code == 422


def test_members_filters(get: Get, truth: dict) -> None:
    member = next(m for m in truth["members"] if m["anonymised_at"] is None and m["tier_key"])
    found = get("/rewards/members", params={"email": member["email"].upper()}).json()["data"]
    assert [row["id"] for row in found] == [member["id"]]  # spec 4.2: case-insensitive
    found = get("/rewards/members", params={"phone": member["phone_e164"]}).json()["data"]
    assert member["id"] in [row["id"] for row in found]
    rows = read_all(get, "/rewards/members", tier=member["tier_key"])
    assert rows and all(row["tier_key"] == member["tier_key"] for row in rows)
    left = read_all(get, "/rewards/members", status="left")
    assert left and all(row["left_at"] and not row["anonymised_at"] for row in left)
    assert len(read_all(get, "/rewards/members")) == len(truth["members"])  # every status


def test_members_phone_national_number_reads_in_each_venue_country(get: Get, truth: dict) -> None:
    member = next(
        m for m in truth["members"] if m["phone_e164"].startswith("+447") and not m["anonymised_at"]
    )
    national = "0" + member["phone_e164"][3:]
    found = get("/rewards/members", params={"phone": national}).json()["data"]
    assert member["id"] in [row["id"] for row in found]
