"""Helpers for the sandbox's own tests (tests/sandbox): an HTTP client bound to one sandbox,
spec field tables."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import requests

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import OWNER_KEY

Get = Callable[..., requests.Response]
OWNER = OWNER_KEY


def client(server: SandboxProcess) -> Get:
    """`get(path, key=owner, params=None, raw_query=None, headers=None)` against the API."""
    session = requests.Session()

    def get(
        path: str,
        key: str | None = OWNER,
        params: dict | None = None,
        raw_query: str | None = None,
        headers: dict | None = None,
    ) -> requests.Response:
        url = server.base_url + path + (f"?{raw_query}" if raw_query is not None else "")
        sent = {} if key is None else {"Authorization": f"Bearer {key}"}
        sent.update(headers or {})
        return session.get(url, params=params, headers=sent, timeout=60)

    return get


def read_all(get: Get, path: str, key: str = OWNER, **params: object) -> list[dict]:
    """Every row of a list endpoint, paging with per_page=200 until meta.last_page."""
    rows: list[dict] = []
    page = 1
    while True:
        response = get(path, key=key, params={**params, "per_page": 200, "page": page})
        assert response.status_code == 200, response.text
        body = response.json()
        rows += body["data"]
        if page >= body["meta"]["last_page"]:
            return rows
        page += 1


# ----------------------------------------------------------------------------- spec part 2

TIMESTAMP = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$"
)  # spec 1
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _table(text: str) -> dict[str, str]:
    pairs = (item.split(":") for item in text.split())
    return {name: kind for name, kind in pairs}


# Written from the spec's tables (2.1-2.12), "?" = may be null.
FIELDS: dict[str, dict[str, str]] = {
    "account": _table("account_id:int business_name:string plan:string venue_count:int"),
    "venue": _table("id:int name:string city:string country:string created_at:timestamp"),
    "guest": _table(
        "id:int venue_id:int name:string first_name:string last_name:string email:string "
        "phone:string marketing_consent:bool is_return_visit:bool visited_at:timestamp"
    ),
    "stats": _table("from:date to:date visits:int unique_guests:int marketing_opt_ins:int"),
    "paging": _table("current_page:int last_page:int per_page:int total:int"),
    "programme": _table(
        "id:int name:string mode:string default_currency:string point_values:object "
        "points_per_visit:int points_per_currency_unit:number signup_bonus_points:int "
        "birthday_bonus_points:int points_expire_after_months:int? signup_offer_id:int? "
        "birthday_offer_id:int? tiers:array reward_label:string welcome_text:string "
        "terms_url:string brand:object membership_optin_mode:string deliver_by_sms:bool "
        "self_redeem_cap_minor:int max_spend_per_earn_minor:int daily_earn_cap_points:int? "
        "service_hours:object? is_active:bool activated_at:timestamp created_at:timestamp "
        "updated_at:timestamp"
    ),
    "tier": _table("key:string name:string min_points_12m:int multiplier:number colour:string?"),
    "brand": _table(
        "programme_name:string background_colour:string foreground_colour:string "
        "logo_path:string? strip_path:string?"
    ),
    "programme_venue": _table(
        "site_id:int site_name:string currency:string earn_multiplier:number is_active:bool "
        "timezone:string timezone_is_default:bool"
    ),  # plus mirror_to_<partner>:bool
    "member": _table(
        "id:int member_number:string email:string phone_e164:string first_name:string "
        "last_name:string date_of_birth:date points_balance:int lifetime_points:int "
        "points_12m:int tier_key:string? tier_reached_at:timestamp? rewards_available:int "
        "visits_count:int last_visit_at:timestamp last_visit_site_id:int first_site_id:int "
        "joined_via:string membership_consent_at:timestamp left_at:timestamp? "
        "anonymised_at:timestamp? created_at:timestamp"
    ),
    "ledger": _table(
        "id:int member_id:int site_id:int delta:int balance_after:int reason:string "
        "reference:string spend_minor:int? currency:string? note:string? "
        "created_by_user_id:int? terminal_id:int? created_at:timestamp"
    ),
    "reward": _table(
        "id:int offer_id:int offer_name:string offer_headline:string member_id:int site_id:int? "
        "site_name:string code:string display_code:string kind:string percent:number? "
        "amount_minor:int? currency:string free_item_label:string? min_spend_minor:int? "
        "terms:string site_ids:int_array? status:string uses_remaining:int issued_at:timestamp "
        "expires_at:timestamp issued_via:string points_spent:int? is_locked:bool "
        "locked_until:timestamp? redeemed_at:timestamp? redemption_id:int? "
        "redeemed_at_site:string? redeemed_via:string? reference:string? "
        "redeemed_by_initials:string? delivered_email_at:timestamp? "
        "delivered_sms_at:timestamp? viewed_at:timestamp? view_count:int"
    ),
    "redemption": _table(
        "id:int reference:string offer_id:int offer_name:string member_reward_id:int "
        "reward_code:string member_id:int site_id:int site_name:string channel:string "
        "redeemed_by_user_id:int? redeemed_by_name:string? terminal_id:int? "
        "terminal_name:string? staff_initials:string? face_value_minor:int currency:string "
        "basket_total_minor:int discount_applied_minor:int points_spent:int points_awarded:int "
        "pos_reference:string? reason:string? status:string voided_at:timestamp? "
        "voided_by_user_id:int? void_reason:string? restored_at:timestamp? "
        "restored_by_user_id:int? created_at:timestamp"
    ),
    "offer": _table(
        "id:int programme_id:int name:string headline:string description:string terms:string "
        "kind:string percent:number? amount_minor:int? currency:string "
        "estimated_value_minor:int free_item_label:string? min_spend_minor:int? "
        "public_code:string? points_cost:int? show_in_catalogue:bool site_ids:int_array? "
        "issue_on_connect:bool connect_frequency:string? connect_every_days:int? "
        "valid_days_after_issue:int starts_at:timestamp? ends_at:timestamp? max_issues:int? "
        "issued_count:int max_redemptions_total:int? redemptions_count:int claims_count:int "
        "max_per_member:int? cooldown_days:int? self_redeem:bool channels:string_array "
        "promotion_id:int? sort_order:int status:string created_at:timestamp "
        "updated_at:timestamp"
    ),
    "offer_stats": _table(
        "issued:int outstanding:int redeemed:int voided:int expired:int claimed:int"
    ),
}


def type_ok(value: Any, kind: str) -> bool:
    if kind.endswith("?"):
        return value is None or type_ok(value, kind[:-1])
    checks: dict[str, Callable[[Any], bool]] = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "bool": lambda v: isinstance(v, bool),
        "timestamp": lambda v: isinstance(v, str) and bool(TIMESTAMP.match(v)),
        "date": lambda v: isinstance(v, str) and bool(DATE.match(v)),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "int_array": lambda v: isinstance(v, list) and all(type_ok(i, "int") for i in v),
        "string_array": lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
    }
    return checks[kind](value)


def field_problems(row: dict, table: str, extra: set[str] = frozenset()) -> list[str]:
    """Missing, unexpected or mistyped fields of one row against the spec's table."""
    spec = FIELDS[table]
    problems = [f"missing {name}" for name in spec if name not in row]
    problems += [f"unexpected {name}" for name in row if name not in spec and name not in extra]
    problems += [
        f"{name}={row[name]!r} is not {kind}"
        for name, kind in spec.items()
        if name in row and not type_ok(row[name], kind)
    ]
    return problems
