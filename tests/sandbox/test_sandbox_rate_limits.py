"""Spec 8: 120 per key and 600 per address per rolling minute, headers, 429 and Retry-After.

The sandbox runs with a shrunk minute (time_scale) so each test takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.sandbox_api import Get, client


@pytest.fixture()
def limited() -> Iterator[SandboxProcess]:
    with SandboxProcess(size="small", seed=3, limits=True, time_scale=0.1) as server:
        yield server


def spend(get: Get, key: str | None, count: int) -> list:
    return [get("/me", key=key) for _ in range(count)]


def test_headers_on_every_response(limited: SandboxProcess) -> None:
    get = client(limited)
    answers = [*spend(get, OWNER_KEYS[0], 3), get("/nope"), get("/me", key="gd_revoked")]
    answers.append(get("/guests", params={"per_page": 0}))
    remaining = []
    for response in answers:
        assert response.headers["X-RateLimit-Limit"] == "600"  # spec 8: the per-address ceiling
        remaining.append(int(response.headers["X-RateLimit-Remaining"]))
    assert remaining == list(range(599, 599 - len(answers), -1))


def test_per_key_quota_gives_429_with_retry_after_while_address_has_room(
    limited: SandboxProcess,
) -> None:
    # A 30-s minute: 121 requests fit in it on any machine (at 0.1, 6 s, a loaded one may not).
    limited.limits(True, time_scale=0.5)
    get = client(limited)
    started = time.monotonic()
    ok = spend(get, OWNER_KEYS[0], 120)
    assert all(response.status_code == 200 for response in ok)
    refused = get("/me", key=OWNER_KEYS[0])
    assert time.monotonic() - started < 30, "the test must run inside one scaled minute"
    assert refused.status_code == 429
    assert set(refused.json()) == {"message"}  # spec 7: message only
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 30  # scaled: the minute lasts 30 s here
    assert int(refused.headers["X-RateLimit-Remaining"]) > 0  # spec 8 rule 2
    assert get("/me", key=OWNER_KEYS[1]).status_code == 200  # spec 8 rule 3
    time.sleep(retry_after)
    assert get("/me", key=OWNER_KEYS[0]).status_code == 200  # spec 8 rule 4


def test_refused_requests_use_no_quota(limited: SandboxProcess) -> None:
    get = client(limited)
    spend(get, OWNER_KEYS[2], 120)
    refused = spend(get, OWNER_KEYS[2], 30)
    assert all(response.status_code == 429 for response in refused)
    time.sleep(6.1)  # one scaled minute after the 120
    assert all(response.status_code == 200 for response in spend(get, OWNER_KEYS[2], 120))


def test_per_address_quota_is_shared_by_every_key(limited: SandboxProcess) -> None:
    limited.limits(True, time_scale=0.3)  # 18 s: room for 600 requests
    get = client(limited)
    for key in OWNER_KEYS:
        assert all(response.status_code == 200 for response in spend(get, key, 120))
    refused = get("/me", key="gd_team_no_guest_data")  # its own key quota is untouched
    assert refused.status_code == 429
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert 1 <= int(refused.headers["Retry-After"]) <= 18


def test_unauthenticated_calls_get_429_after_a_small_number(limited: SandboxProcess) -> None:
    get = client(limited)
    statuses = [response.status_code for response in spend(get, None, 14)]
    assert statuses[0] == 401
    assert 429 in statuses and statuses.index(429) <= 10
    response = get("/me", key=None)
    assert response.status_code == 429 and "Retry-After" in response.headers
    assert get("/me").status_code == 200  # a keyed call is not affected


def test_retry_after_is_at_most_60_at_full_scale(limited: SandboxProcess) -> None:
    limited.limits(True, time_scale=1.0)
    get = client(limited)
    spend(get, OWNER_KEYS[3], 120)
    refused = get("/me", key=OWNER_KEYS[3])
    assert refused.status_code == 429
    assert 50 <= int(refused.headers["Retry-After"]) <= 60


def test_limits_switch_off_keeps_headers(limited: SandboxProcess) -> None:
    limited.limits(False)
    get = client(limited)
    answers = spend(get, OWNER_KEYS[4], 130)
    assert all(response.status_code == 200 for response in answers)
    assert answers[-1].headers["X-RateLimit-Limit"] == "600"
    assert int(answers[-1].headers["X-RateLimit-Remaining"]) == 600 - 130
