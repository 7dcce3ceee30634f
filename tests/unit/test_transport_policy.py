"""The transport's policies without a server: the error policy (spec 7), the key pool and its
two limits (each key's window, the address's ceiling, spec 8) and the shared budget's store,
and the retry waits (stream/transport.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from singer_sdk.exceptions import FatalAPIError

from tap_guestdata.http.budget import Limits, SqliteBudget
from tap_guestdata.http.errors import (
    RateLimited,
    ResourceNotFound,
    StreamForbidden,
    TransientError,
    classify,
)
from tap_guestdata.http.limiter import AddressCeiling, KeyPool, PoolClosed
from tap_guestdata.stream.transport import BACKOFF_CAP_SECONDS, RATE_LIMITED_RETRY_CAP, Transport


def answer(status: int, body: dict[str, Any] | None = None, **headers: str) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps(body).encode() if body is not None else b"<html>oops</html>"
    response.headers.update(headers)
    return response


@pytest.mark.parametrize(
    ("status", "body", "kind", "words"),
    [
        (429, {"message": "slow down"}, RateLimited, "retry after 7s"),
        (503, None, TransientError, "HTTP 503 (non-JSON body)"),
        (401, {"message": "no"}, FatalAPIError, "401 unauthenticated"),
        (404, {"error": "not_found", "message": "gone"}, ResourceNotFound, "404 not_found"),
        (422, {"message": "bad", "errors": {"since": ["x"]}}, FatalAPIError, 'errors={"since"'),
        (403, {"error": "REWARDS_DISABLED"}, StreamForbidden, "Rewards is switched off"),
        (403, {"error": "customer_api_key_required"}, FatalAPIError, "not an API key"),
    ],
)
def test_error_policy_names_the_answer(
    status: int, body: dict[str, Any] | None, kind: type[Exception], words: str
) -> None:
    error = classify(answer(status, body, **{"Retry-After": "7"}), "GET /guests")
    assert type(error) is kind
    assert words in str(error)
    assert str(error).startswith("GET /guests")


def test_a_forbidden_group_says_which_streams_it_closes() -> None:
    rewards = classify(
        answer(403, {"error": "plan_upgrade_required", "meta": {"feature": "rewards"}}), "x"
    )
    members = classify(answer(403, {"error": "TEAM_PERMISSION_REQUIRED"}), "x")
    assert isinstance(rewards, StreamForbidden) and rewards.scope == "rewards"
    assert isinstance(members, StreamForbidden) and members.scope == "members"
    api_itself = classify(answer(403, {"error": "plan_upgrade_required"}), "x")
    assert type(api_itself) is FatalAPIError  # spec 1, 8: no API access at all


def test_key_pool_spreads_requests_and_moves_off_a_paused_key() -> None:
    pool = KeyPool(["key-a", "key-b"], limit=3, window=60)
    first = [pool.acquire() for _ in range(4)]
    assert sorted(lease.key for lease in first) == ["key-a", "key-a", "key-b", "key-b"]
    for lease in first:
        lease.release(None)
    paused = next(lease for lease in first if lease.key == "key-a")
    paused.pause(30)  # a 429 on key-a (spec 8.3): its Retry-After
    lease = pool.acquire()
    assert lease.key == "key-b"


def test_key_pool_waits_for_a_slot_and_gives_up_when_the_run_ends() -> None:
    pool = KeyPool(["key-a"], limit=1, window=60)
    pool.acquire()
    outcome: list[str] = []

    def wait_for_slot() -> None:
        try:
            pool.acquire()
            outcome.append("granted")
        except PoolClosed:
            outcome.append("closed")

    waiter = threading.Thread(target=wait_for_slot)
    waiter.start()
    time.sleep(0.05)
    assert outcome == []  # the key's one slot in the window is taken
    pool.close()
    waiter.join(timeout=2)
    assert outcome == ["closed"]


def test_address_ceiling_counts_what_other_clients_sent() -> None:
    ceiling = AddressCeiling(window=60, configured=4)
    now = time.monotonic()
    assert ceiling.free_slots(now) == 600  # spec 8: 600 per address by default
    ceiling.observe(
        answer(200, {}, **{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "2"}), now
    )
    assert ceiling.free_slots(now) == 2  # 8 of 10 were other clients'
    assert ceiling.free_slots(now + 7) == 10  # trusted for a tenth of the window only


def test_shared_budget_keeps_the_key_and_address_limits(tmp_path: Path) -> None:
    store = SqliteBudget(tmp_path / "budget.sqlite", Limits(2, 3, 60.0, address="here"))
    try:
        granted = [store.take("key-a"), store.take("key-a")]
        assert all(grant.slot for grant in granted)
        key_full = store.take("key-a")
        assert key_full.slot is None and key_full.wait_seconds > 50
        assert store.take("key-b").slot is not None
        address_full = store.take("key-b")
        assert address_full.slot is None  # three in the window from this address
    finally:
        store.close()


class RetryHost:
    """What the retry waits ask of a stream: max_retries."""

    name = "guests"

    def __init__(self, max_retries: int) -> None:
        self.runtime = type(
            "Runtime", (), {"settings": type("S", (), {"max_retries": max_retries})}
        )


def test_retry_waits_back_off_and_429s_do_not_count_as_failures() -> None:
    transport = Transport().bound(RetryHost(max_retries=3))
    waits = transport.waits()
    assert next(waits) == 0.0
    rate_limited = RateLimited("429", answer(429, {}), 1.0)
    assert [waits.send(rate_limited) for _ in range(5)] == [0.0] * 5
    failures = [waits.send(TransientError("503")) for _ in range(3)]
    bases = (0.5, 1.0, 2.0)  # doubling from BACKOFF_FIRST_SECONDS, with +-20% jitter
    assert all(0.8 * base <= wait <= 1.2 * base for wait, base in zip(failures, bases, strict=True))
    assert BACKOFF_CAP_SECONDS == 60.0
    error = TransientError("503 again")
    with pytest.raises(StopIteration):
        waits.send(error)
    assert "gave up after 3 retries" in str(error)
    assert transport.max_tries() == 3 + 1 + RATE_LIMITED_RETRY_CAP
