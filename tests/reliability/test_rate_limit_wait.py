"""Issue #10.4: a per-address 429 waits its Retry-After and carries on; a stale
X-RateLimit-Remaining never holds the tap back for a whole rate-limit window (spec 8)."""

from __future__ import annotations

import time

from support.reliability import json_body, recording_server, run
from support.sandbox import OWNER_KEY

ACCOUNT = {"account_id": 1, "business_name": "Test", "plan": "growth", "venue_count": 0}


def answers_with(first: tuple[int, dict[str, str]]) -> tuple[list[float], object]:
    """A /me that answers `first` (status, headers) once, then 200s; the times it was asked."""
    asked: list[float] = []

    def respond(path: str) -> tuple[int, dict[str, str], bytes]:
        asked.append(time.monotonic())
        data: object = [] if "/venues" in path else ACCOUNT
        if len(asked) == 1:
            status, headers = first
            body = {"message": "Too Many Attempts."} if status == 429 else {"data": data}
            return status, {"X-RateLimit-Limit": "600", **headers}, json_body(body)
        ok_headers = {"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "598"}
        return 200, ok_headers, json_body({"data": data})

    return asked, respond


def account_sync(origin: str) -> None:
    config = {"api_key": OWNER_KEY, "base_url": f"{origin}/api/v1/customer"}
    result = run(config, streams=["account"], timeout=50)
    assert result.returncode == 0, result.stderr[-3000:]


def test_address_429_waits_retry_after_not_a_window() -> None:
    asked, respond = answers_with((429, {"Retry-After": "2", "X-RateLimit-Remaining": "0"}))
    with recording_server(respond) as server:  # type: ignore[arg-type]
        account_sync(server.origin)
    assert len(asked) == 2, f"expected the 429 and one retry, got {len(asked)} requests"
    waited = asked[1] - asked[0]
    assert 1.9 <= waited < 6, f"waited {waited:.1f}s after Retry-After: 2 (a window is 60s)"


def test_stale_remaining_zero_on_success_holds_back_a_tenth_of_the_window_at_most() -> None:
    # The run's first request (the plan reads /venues' first page) answers 200 with 0 left;
    # the next one (/me) may wait for a fresh reading, never for the whole window.
    asked, respond = answers_with((200, {"X-RateLimit-Remaining": "0"}))
    with recording_server(respond) as server:  # type: ignore[arg-type]
        config = {
            "api_key": OWNER_KEY,
            "base_url": f"{server.origin}/api/v1/customer",
            "rate_limit_window_seconds": 30,
        }
        result = run(config, streams=["account", "venues"], timeout=50)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(asked) >= 2, asked
    waited = asked[1] - asked[0]
    assert waited < 3.5, f"waited {waited:.1f}s after a stale Remaining: 0 (window 30s)"
