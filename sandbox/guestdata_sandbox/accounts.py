"""Accounts, plans and API keys of the sandbox: constants covering every access rule.

Spec 4.5 (who may call what), part 5 (authentication) and part 7 (errors). The mutable parts
(revoked, permission granted, Rewards switched) live in the store, initialised from these.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    name: str
    api: bool  # spec 1: the API is on Growth and above
    rewards: bool  # spec 4.5.2: a plan may include the API but not Rewards


ESSENTIALS = Plan("Essentials", api=False, rewards=False)
GROWTH_LITE = Plan("Growth Lite", api=True, rewards=False)
GROWTH = Plan("Growth", api=True, rewards=True)
REQUIRED_PLAN = "Growth"  # meta.required_plan of plan_upgrade_required (spec 7)


@dataclass(frozen=True)
class Account:
    account_id: int
    business_name: str
    plan: Plan
    rewards_enabled: bool
    limited_access: bool  # spec 2.8: contacts masked for an account in limited access
    main: bool  # the big account: full size; the others get a small fixed share


ACCOUNTS: dict[int, Account] = {
    1001: Account(1001, "Harbour & Vine Hospitality", GROWTH, True, False, True),
    1002: Account(1002, "Little Fern Cafe", ESSENTIALS, False, False, False),
    1003: Account(1003, "Northgate Leisure Group", GROWTH, False, False, False),
    1004: Account(1004, "Copper Kettle Collective", GROWTH_LITE, True, False, False),
    1005: Account(1005, "Saltmarsh Inns", GROWTH, True, True, False),
    # Served only with `serve --colliding-account`: its own data under account 1001's ids (the API
    # promises ids unique within an account, not across accounts).
    1006: Account(1006, "Harbour Twin Taverns", GROWTH, True, False, False),
}
COLLIDING_ACCOUNT = 1006


@dataclass(frozen=True)
class ApiKey:
    key: str
    account_id: int
    description: str
    is_api_key: bool = True  # spec 5.6: a dashboard session token is not an API key
    owner: bool = True  # spec 4.5.4: the key's creator is the account owner ...
    view_guest_data: bool = True  # ... or holds the View guest data permission
    venue_count: int | None = None  # spec 4.5.5: creator restricted to the first N venues
    revoked: bool = False  # spec 5.4: revoked keys get 401


OWNER_KEYS: list[str] = [f"gd_owner_growth_{number}" for number in range(1, 6)]  # spec 5.3: max 5
TEAM_NO_GUEST_DATA = "gd_team_no_guest_data"
TEAM_SOME_VENUES = "gd_team_some_venues"
ESSENTIALS_KEY = "gd_essentials"
REWARDS_OFF_KEY = "gd_rewards_off"
NO_REWARDS_PLAN_KEY = "gd_no_rewards_plan"
LIMITED_ACCESS_KEY = "gd_limited_access"
REVOKED_KEY = "gd_revoked"
COLLIDING_KEY = "gd_owner_colliding"  # the owner's key of COLLIDING_ACCOUNT
SESSION_TOKEN = "session_not_an_api_key"
RESTRICTED_VENUE_COUNT = 2  # gd_team_some_venues sees the account's two lowest venue ids

_KEYS = [
    *(ApiKey(key, 1001, f"owner's key {n} of account 1001") for n, key in enumerate(OWNER_KEYS, 1)),
    ApiKey(
        TEAM_NO_GUEST_DATA,
        1001,
        "team member without View guest data",
        owner=False,
        view_guest_data=False,
    ),
    ApiKey(
        TEAM_SOME_VENUES,
        1001,
        "team member restricted to some venues",
        owner=False,
        venue_count=RESTRICTED_VENUE_COUNT,
    ),
    ApiKey(ESSENTIALS_KEY, 1002, "account on Essentials (no API)"),
    ApiKey(REWARDS_OFF_KEY, 1003, "Growth account with Rewards switched off"),
    ApiKey(NO_REWARDS_PLAN_KEY, 1004, "plan with the API but without Rewards"),
    ApiKey(LIMITED_ACCESS_KEY, 1005, "account in limited access (contacts masked)"),
    ApiKey(REVOKED_KEY, 1001, "revoked key", revoked=True),
    ApiKey(COLLIDING_KEY, COLLIDING_ACCOUNT, "account 1006, whose ids are account 1001's"),
    ApiKey(SESSION_TOKEN, 1001, "dashboard session token, not an API key", is_api_key=False),
]
KEYS: dict[str, ApiKey] = {api_key.key: api_key for api_key in _KEYS}

PERMISSION_VIEW_GUEST_DATA = "view_guest_data"  # meta.permission of TEAM_PERMISSION_REQUIRED
PARTNERS = ("loyaltylion", "squareup", "lightspeed", "mailchimp")  # mirror_to_<partner> (2.6)
