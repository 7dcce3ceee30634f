"""The error-code policy of spec part 7: what each answer means for the run.

`classify` turns a non-2xx answer into one exception; the stream base class raises it.
Retriable ones (429, 5xx, bad bodies) go back to the SDK's backoff; the rest stop the
request. No message here ever contains a key: requests carry it only in a header, and
messages are built from the method, the path and the query string.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import requests
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError

API_KEYS_PAGE_HINT = (
    "Create a key (or rotate the revoked one) on the dashboard's API Keys page and set it as "
    "api_key / api_keys; a dashboard session token is not an API key (spec 5)."
)
BASE_PATH = "/api/v1/customer"  # spec 9: base_url ends in this path segment
RETRY_AFTER_CAP_SECONDS = 60.0  # spec 8: Retry-After is at most 60 s


class RateLimited(RetriableAPIError):
    """429 (spec 7, 8): wait Retry-After on that key, then retry; not a failure."""

    def __init__(self, message: str, response: requests.Response, retry_after: float) -> None:
        super().__init__(message, response)
        self.retry_after = retry_after


class TransientError(RetriableAPIError):
    """5xx, timeout, dropped connection or unreadable body: retried with backoff."""


class StreamForbidden(FatalAPIError):
    """403 that closes a group of streams (Rewards off or not in plan, missing permission)."""

    def __init__(self, message: str, *, scope: str, reason: str) -> None:
        super().__init__(message)
        self.scope = scope  # "rewards" or "members"
        self.reason = reason  # short, for the summary line


class ResourceNotFound(FatalAPIError):
    """404: an id that is not (or no longer) on the account (spec 4.5.8, 4.5.9)."""


class StreamSkipped(Exception):
    """A request was not sent: its stream group is already known to be forbidden."""


def describe_request(request: requests.PreparedRequest | None, base_path: str) -> str:
    """`GET /rewards/members?per_page=200&page=3`: method, path under base_url and query."""
    if request is None or request.url is None:
        return "request"
    parts = urlsplit(request.url)
    path = parts.path[len(base_path) :] if parts.path.startswith(base_path) else parts.path
    query = f"?{parts.query}" if parts.query else ""
    return f"{request.method} {path or '/'}{query}"


def error_body(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def retry_after_seconds(response: requests.Response) -> float:
    """Retry-After in seconds, capped at 60 (spec 8); 1 s when missing or unreadable."""
    raw = response.headers.get("Retry-After", "")
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def classify(response: requests.Response, request_text: str) -> Exception:
    """The exception for a non-2xx answer (spec 7)."""
    status = response.status_code
    body = error_body(response)
    message = str(body.get("message") or response.reason or "")
    code = str(body.get("error") or "")
    meta: dict[str, Any] = body["meta"] if isinstance(body.get("meta"), dict) else {}
    if status == HTTPStatus.TOO_MANY_REQUESTS:
        wait = retry_after_seconds(response)
        return RateLimited(
            f"{request_text}: 429 rate limited, retry after {wait:g}s", response, wait
        )
    if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
        kind = "JSON" if body else "non-JSON"
        return TransientError(f"{request_text}: HTTP {status} ({kind} body) {message}", response)
    if status == HTTPStatus.UNAUTHORIZED:  # spec 5.4, 7: missing, wrong or revoked key
        return FatalAPIError(
            f"{request_text}: 401 unauthenticated: the API key is missing, wrong or revoked. "
            + API_KEYS_PAGE_HINT
        )
    if status == HTTPStatus.FORBIDDEN:
        return _forbidden(request_text, code, message, meta)
    if status == HTTPStatus.NOT_FOUND:  # spec 4.5.8/4.5.9: not (or no longer) on the account
        return ResourceNotFound(f"{request_text}: 404 {code or 'not found'}: {message}")
    if status == HTTPStatus.UNPROCESSABLE_ENTITY:  # spec 7: Laravel `errors` object
        errors = json.dumps(body.get("errors", {}), sort_keys=True)
        return FatalAPIError(f"{request_text}: 422 invalid parameter: {message} errors={errors}")
    return FatalAPIError(f"{request_text}: HTTP {status} {code} {message}".rstrip())


def _forbidden(request_text: str, code: str, message: str, meta: dict[str, Any]) -> Exception:
    feature = meta.get("feature")
    plan = meta.get("required_plan") or "a higher plan"
    if code == "customer_api_key_required":  # spec 5.6: not an API key
        return FatalAPIError(
            f"{request_text}: 403 customer_api_key_required: the credential is not an API "
            "key. " + API_KEYS_PAGE_HINT
        )
    if code == "plan_upgrade_required" and feature == "rewards":  # spec 4.5.2
        reason = f"plan_upgrade_required: Rewards needs the {plan} plan"
        return StreamForbidden(f"{request_text}: 403 {reason}", scope="rewards", reason=reason)
    if code == "plan_upgrade_required":  # spec 1, 8: the API itself needs Growth or above
        return FatalAPIError(
            f"{request_text}: 403 plan_upgrade_required: the account's plan has no API access; "
            f"upgrade to the {plan} plan to use the Guest Data Read API."
        )
    if code == "REWARDS_DISABLED":  # spec 4.5.2: Rewards switched off for the account
        reason = "REWARDS_DISABLED: Rewards is switched off for this account"
        return StreamForbidden(f"{request_text}: 403 {reason}", scope="rewards", reason=reason)
    if code == "TEAM_PERMISSION_REQUIRED":  # spec 4.5.4: member endpoints need a permission
        permission = meta.get("permission") or "view_guest_data"
        reason = f"TEAM_PERMISSION_REQUIRED: the key's creator lacks the '{permission}' permission"
        return StreamForbidden(f"{request_text}: 403 {reason}", scope="members", reason=reason)
    return FatalAPIError(f"{request_text}: 403 {code}: {message}".rstrip(": "))
