"""Spec 4.5, part 5 and part 7: every key's access, error bodies, codes and their casing."""

from __future__ import annotations

import pytest

from guestdata_sandbox.accounts import KEYS, OWNER_KEYS
from support.sandbox_api import Get

CORE = ["/me", "/venues", "/guests", "/stats"]
REWARDS = ["/rewards/programme", "/rewards/rewards", "/rewards/redemptions", "/rewards/offers"]
MEMBERS = ["/rewards/members"]


def test_every_documented_key_exists() -> None:
    documented = {
        *OWNER_KEYS,
        "gd_team_no_guest_data",
        "gd_team_some_venues",
        "gd_essentials",
        "gd_rewards_off",
        "gd_no_rewards_plan",
        "gd_limited_access",
        "gd_revoked",
        "session_not_an_api_key",
        "gd_owner_colliding",  # served with --colliding-account only
    }
    assert set(KEYS) == documented
    assert len(OWNER_KEYS) == 5  # spec 5.3: at most 5 keys at once


@pytest.mark.parametrize("key", OWNER_KEYS)
def test_owner_keys_read_everything(get: Get, key: str) -> None:
    for path in CORE + REWARDS + MEMBERS:
        assert get(path, key=key).status_code == 200, path


@pytest.mark.parametrize(
    ("authorization", "status", "code"),
    [
        (None, 401, "unauthenticated"),
        ("Bearer gd_not_a_key", 401, "unauthenticated"),
        ("Bearer gd_revoked", 401, "unauthenticated"),
        ("Basic Z2Q6b3duZXI=", 401, "unauthenticated"),
        ("Bearer session_not_an_api_key", 403, "customer_api_key_required"),
    ],
)
def test_authentication_errors(get: Get, authorization: str | None, status: int, code: str) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = get("/me", key=None, headers=headers)
    assert response.status_code == status
    body = response.json()
    assert body["error"] == code  # spec 7.2: these codes are lower case
    assert isinstance(body["message"], str) and body["message"]
    assert set(body) == {"message", "error"}


def test_essentials_plan_gets_plan_upgrade_required_for_customer_api(get: Get) -> None:
    for path in CORE + REWARDS + MEMBERS:
        response = get(path, key="gd_essentials")
        assert response.status_code == 403
        assert response.json()["error"] == "plan_upgrade_required"
        assert response.json()["meta"] == {"feature": "customer_api", "required_plan": "Growth"}


def test_rewards_switched_off_is_rewards_disabled_on_rewards_only(get: Get) -> None:
    for path in CORE:
        assert get(path, key="gd_rewards_off").status_code == 200
    for path in REWARDS + MEMBERS + ["/rewards/rewards/300001"]:
        response = get(path, key="gd_rewards_off")
        assert response.status_code == 403
        assert response.json()["error"] == "REWARDS_DISABLED"  # spec 7.2: upper case


def test_plan_without_rewards_is_plan_upgrade_required_for_rewards(get: Get) -> None:
    for path in CORE:
        assert get(path, key="gd_no_rewards_plan").status_code == 200
    for path in REWARDS + MEMBERS:
        response = get(path, key="gd_no_rewards_plan")
        assert response.status_code == 403
        body = response.json()
        assert body["error"] == "plan_upgrade_required"
        assert body["meta"]["feature"] == "rewards" and body["meta"]["required_plan"]


def test_team_member_without_permission_reads_all_but_members(get: Get, truth: dict) -> None:
    key = "gd_team_no_guest_data"
    for path in CORE + REWARDS:
        assert get(path, key=key).status_code == 200, path
    member = truth["members"][0]["id"]
    for path in [
        "/rewards/members",
        f"/rewards/members/{member}",
        f"/rewards/members/{member}/ledger",
    ]:
        response = get(path, key=key)
        assert response.status_code == 403
        body = response.json()
        assert body["error"] == "TEAM_PERMISSION_REQUIRED"
        assert body["meta"] == {"permission": "view_guest_data"}


def test_any_key_on_the_account_reads_reward_codes(get: Get, truth: dict) -> None:
    """spec 4.5.6: no per-key scopes; codes visible to every key of the account."""
    reward = truth["rewards"][0]
    for key in ("gd_team_no_guest_data", "gd_team_some_venues"):
        assert (
            get(f"/rewards/rewards/{reward['id']}", key=key).json()["data"]["code"]
            == reward["code"]
        )


def test_ids_not_on_the_account_are_reward_not_found(get: Get, sandbox) -> None:
    """spec 4.5.8: 404 REWARD_NOT_FOUND, never 403, for ids and Rewards venue_ids."""
    other = sandbox.truth("gd_limited_access")
    paths = [
        f"/rewards/members/{other['members'][0]['id']}",
        f"/rewards/members/{other['members'][0]['id']}/ledger",
        f"/rewards/rewards/{other['rewards'][0]['id']}",
        f"/rewards/redemptions/{other['redemptions'][0]['id']}",
        f"/rewards/offers/{other['offers'][0]['id']}",
        "/rewards/members/1",
    ]
    for path in paths:
        response = get(path)
        assert response.status_code == 404, path
        assert response.json()["error"] == "REWARD_NOT_FOUND"
    venue = other["venues"][0]["id"]
    for path in ("/rewards/rewards", "/rewards/redemptions"):
        response = get(path, params={"venue_id": venue})
        assert response.status_code == 404 and response.json()["error"] == "REWARD_NOT_FOUND"


def test_unknown_venue_on_guests_and_stats_is_404_with_message_only(get: Get, sandbox) -> None:
    venue = sandbox.truth("gd_limited_access")["venues"][0]["id"]
    for path in ("/guests", "/stats"):
        for venue_id in (venue, 987654):
            response = get(path, params={"venue_id": venue_id})
            assert response.status_code == 404
            assert set(response.json()) == {"message"}  # spec 4.5.9, 7.4


def test_path_not_exposed_is_endpoint_not_found(get: Get) -> None:
    for path in ("/rewards/terminals", "/webhooks", "/rewards/members/abc"):
        response = get(path)
        assert response.status_code == 404
        assert response.json()["error"] == "endpoint_not_found"


def test_only_get_is_served(sandbox) -> None:
    import requests

    response = requests.post(
        sandbox.base_url + "/me", headers={"Authorization": f"Bearer {OWNER_KEYS[0]}"}, timeout=10
    )
    assert response.status_code == 405 and "message" in response.json()


def test_restricted_key_sees_its_venues_in_programme_and_redemptions(get: Get, sandbox) -> None:
    """spec 4.5.5: only those venues in meta.venues and, by default, only their redemptions."""
    key = "gd_team_some_venues"
    owner_venues = get("/rewards/programme").json()["meta"]["venues"]
    venues = get("/rewards/programme", key=key).json()["meta"]["venues"]
    allowed = {venue["site_id"] for venue in venues}
    assert 0 < len(allowed) < len(owner_venues)
    rows = sandbox.truth(key, resource="redemptions")
    owner_rows = sandbox.truth(OWNER_KEYS[0], resource="redemptions")
    assert rows and {row["site_id"] for row in rows} <= allowed
    assert len(rows) == sum(1 for row in owner_rows if row["site_id"] in allowed) < len(owner_rows)
    listed = get("/rewards/redemptions", key=key, params={"per_page": 200}).json()["meta"]["total"]
    assert listed == len(rows)
    hidden = next(row for row in owner_rows if row["site_id"] not in allowed)
    response = get(f"/rewards/redemptions/{hidden['id']}", key=key)
    assert response.status_code == 404 and response.json()["error"] == "REWARD_NOT_FOUND"


def test_error_bodies_always_carry_a_message(get: Get) -> None:
    for path, key in [("/me", None), ("/me", "gd_essentials"), ("/nope", OWNER_KEYS[0])]:
        assert get(path, key=key).json()["message"]
