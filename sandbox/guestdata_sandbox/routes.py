"""Authentication (spec 5), access rules (spec 4.5) and routing to the endpoints of part 4."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Mapping

import orjson

from guestdata_sandbox import api, api_rewards
from guestdata_sandbox.accounts import (
    ACCOUNTS,
    KEYS,
    PERMISSION_VIEW_GUEST_DATA,
    REQUIRED_PLAN,
    ApiKey,
)
from guestdata_sandbox.api import ApiError, Context, endpoint_not_found
from guestdata_sandbox.rules import ValidationError
from guestdata_sandbox.store import Store

CORE, REWARDS, MEMBERS = "core", "rewards", "members"
ROUTES: list[tuple[re.Pattern[str], Callable[..., bytes], str]] = [
    (re.compile(pattern), handler, area)
    for pattern, handler, area in (
        (r"/me", api.me, CORE),
        (r"/venues", api.venues, CORE),
        (r"/guests", api.guests, CORE),
        (r"/stats", api.stats, CORE),
        (r"/rewards/programme", api_rewards.programme, REWARDS),
        (r"/rewards/members", api_rewards.members, MEMBERS),
        (r"/rewards/members/(\d+)", api_rewards.member, MEMBERS),
        (r"/rewards/members/(\d+)/ledger", api_rewards.ledger, MEMBERS),
        (r"/rewards/rewards", api_rewards.rewards, REWARDS),
        (r"/rewards/rewards/(\d+)", api_rewards.reward, REWARDS),
        (r"/rewards/redemptions", api_rewards.redemptions, REWARDS),
        (r"/rewards/redemptions/(\d+)", api_rewards.redemption, REWARDS),
        (r"/rewards/offers", api_rewards.offers, REWARDS),
        (r"/rewards/offers/(\d+)", api_rewards.offer, REWARDS),
    )
]


def error(status: int, message: str, code: str, **meta: object) -> ApiError:
    """spec 7.3: message, error, and meta where stated."""
    body: dict = {"message": message, "error": code}
    if meta:
        body["meta"] = meta
    return ApiError(status, body)


def authenticate(store: Store, authorization: str | None) -> ApiKey:
    if not authorization:
        raise error(401, "Unauthenticated.", "unauthenticated")
    scheme, _, token = authorization.strip().partition(" ")
    api_key = KEYS.get(token.strip()) if scheme.lower() == "bearer" else None
    if api_key is not None and api_key.account_id not in store.dataset.accounts:
        api_key = None  # the colliding account's key, served only with --colliding-account
    if api_key is None or api_key.key in store.revoked:  # spec 5.4 and 7: missing, wrong, revoked
        raise error(401, "Unauthenticated.", "unauthenticated")
    if not api_key.is_api_key:  # spec 5.6
        raise error(
            403,
            "This API needs a customer API key; dashboard sessions cannot call it.",
            "customer_api_key_required",
        )
    if not ACCOUNTS[api_key.account_id].plan.api:  # spec 1: Growth and above
        raise error(
            403,
            "Your plan does not include API access. Upgrade to use the API.",
            "plan_upgrade_required",
            feature="customer_api",
            required_plan=REQUIRED_PLAN,
        )
    return api_key


def authorise(store: Store, api_key: ApiKey, area: str) -> None:
    """spec 4.5.2 and 4.5.4: Rewards plan and switch, then the member permission."""
    if area == CORE:
        return
    account = ACCOUNTS[api_key.account_id]
    if not account.plan.rewards:
        raise error(
            403,
            "Your plan does not include Rewards. Upgrade to use Rewards.",
            "plan_upgrade_required",
            feature="rewards",
            required_plan=REQUIRED_PLAN,
        )
    if not store.rewards_enabled[api_key.account_id]:
        raise error(403, "Rewards is switched off for this account.", "REWARDS_DISABLED")
    if area == MEMBERS and not store.may_read_members(api_key):
        raise error(
            403,
            "The person who created this key needs the View guest data permission.",
            "TEAM_PERMISSION_REQUIRED",
            permission=PERMISSION_VIEW_GUEST_DATA,
        )


def route(path: str) -> tuple[Callable[..., bytes], str, re.Match[str]]:
    for pattern, handler, area in ROUTES:
        match = pattern.fullmatch(path)
        if match:
            return handler, area, match
    raise endpoint_not_found()  # spec 7: a path the API does not expose


def dispatch(
    store: Store, method: str, authorization: str | None, path: str, query: Mapping[str, str]
) -> tuple[int, bytes]:
    """One API request after the rate limiter: (status, JSON body)."""
    try:
        with store.lock:
            api_key = authenticate(store, authorization)
            path = path.rstrip("/") or "/"
            handler, area, match = route(path)
            if method not in ("GET", "HEAD"):  # spec 1: every endpoint is GET
                raise ApiError(405, {"message": f"The {method} method is not supported."})
            authorise(store, api_key, area)
            context = Context(store, api_key, store.now())
            return 200, handler(context, query, *match.groups())
    except ValidationError as invalid:  # spec 7: 422, Laravel validation shape
        return 422, orjson.dumps(invalid.body())
    except ApiError as failure:
        return failure.status, orjson.dumps(failure.body)
    except Exception:  # a sandbox bug: still a JSON answer (spec 7.1), and a trace on stderr
        traceback.print_exc()
        return 500, b'{"message":"Server Error"}'
