"""Issue #7.5: bad configuration and corrupt state are refused before any request.

Every run here goes through a recording HTTP proxy (HTTP_PROXY/HTTPS_PROXY point at it, so a
request to any host, the sandbox included, would be recorded) and the sandbox's own log is read
too: both must stay empty. The run must exit non-zero with a message naming the setting, print no
traceback and never echo the key.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.rules import london_today
from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    LEAK_WATCH,
    RecordingServer,
    assert_clean_failure,
    assert_no_traceback,
    catalog_for,
    recording_server,
    reliability_config,
    run_raw,
)
from support.sandbox import OWNER_KEY, last_seq
from support.tap_process import TapRun

# Secrets of the malformed-key cases: none may be echoed.
SPACED_KEY = "gd_owner growth_1 with spaces"
NEWLINE_KEY = "gd_owner_growth_1\r\nX-Injected: 1"
SIXTH_KEY = "gd_sixth_key_of_account"
NUMERIC_KEY = 918273645546372819


def bad_configs(base_url: str) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """(case id, config, words the error must contain)."""
    good: dict[str, Any] = {"api_key": OWNER_KEY, "base_url": base_url}
    future = london_today() + dt.timedelta(days=30)
    origin = base_url.removesuffix("/api/v1/customer")
    cases: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("missing-key", {"base_url": base_url}, ("api_key",)),
        ("empty-key", {**good, "api_key": ""}, ("api_key",)),
        ("whitespace-key", {**good, "api_key": "   "}, ("api_key",)),
        ("key-with-spaces", {**good, "api_key": SPACED_KEY}, ("api_key",)),
        ("key-with-newline", {**good, "api_key": NEWLINE_KEY}, ("api_key",)),
        ("numeric-key", {**good, "api_key": NUMERIC_KEY}, ("api_key",)),
        ("list-as-key", {**good, "api_key": [OWNER_KEY]}, ("api_key",)),
        ("six-keys", {"base_url": base_url, "api_keys": [*OWNER_KEYS, SIXTH_KEY]}, ("api_keys",)),
        (
            "key-plus-five-pool-keys",
            {**good, "api_keys": [*OWNER_KEYS[1:], SIXTH_KEY]},
            ("api_keys",),
        ),
        (
            "duplicate-pool-keys",
            {"base_url": base_url, "api_keys": [OWNER_KEY, OWNER_KEY]},
            ("api_keys",),
        ),
        ("empty-key-in-pool", {"base_url": base_url, "api_keys": [OWNER_KEY, ""]}, ("api_keys",)),
        ("missing-base-url", {"api_key": OWNER_KEY}, ("base_url",)),
        ("base-url-v2", {**good, "base_url": origin + "/api/v2/customer"}, ("base_url",)),
        ("base-url-endpoint", {**good, "base_url": base_url + "/venues"}, ("base_url",)),
        ("base-url-no-path", {**good, "base_url": origin}, ("base_url",)),
        (
            "plain-http-off-loopback",
            {**good, "base_url": "http://api.guestdata.test/api/v1/customer"},
            ("base_url", "https"),
        ),
        ("base-url-not-a-url", {**good, "base_url": "api/v1/customer"}, ("base_url",)),
        ("start-date-words", {**good, "start_date": "last tuesday"}, ("start_date",)),
        ("start-date-impossible", {**good, "start_date": "2025-02-30"}, ("start_date",)),
        ("start-date-future", {**good, "start_date": future.isoformat()}, ("start_date",)),
        (
            "start-instant-future",
            {**good, "start_date": f"{future.isoformat()}T00:00:00+00:00"},
            ("start_date",),
        ),
        ("start-instant-no-offset", {**good, "start_date": "2025-01-01T00:00:00"}, ("start_date",)),
        ("requests-per-minute-0", {**good, "requests_per_minute": 0}, ("requests_per_minute",)),
        (
            "requests-per-minute-str",
            {**good, "requests_per_minute": "lots"},
            ("requests_per_minute",),
        ),
        ("rate-window-0", {**good, "rate_limit_window_seconds": 0}, ("rate_limit_window",)),
        ("max-workers-0", {**good, "max_workers": 0}, ("max_workers",)),
        ("max-workers-100", {**good, "max_workers": 100}, ("max_workers",)),
        ("rewards-lookback-negative", {**good, "rewards_lookback_days": -1}, ("rewards_lookback",)),
        (
            "redemptions-lookback-negative",
            {**good, "redemptions_lookback_days": -3},
            ("redemptions_lookback",),
        ),
        ("stats-lookback-negative", {**good, "stats_lookback_days": -1}, ("stats_lookback",)),
        ("members-margin-negative", {**good, "members_margin_seconds": -5}, ("members_margin",)),
        ("on-forbidden-unknown", {**good, "on_forbidden": "ignore"}, ("on_forbidden",)),
        ("max-retries-negative", {**good, "max_retries": -1}, ("max_retries",)),
        ("timeout-zero", {**good, "request_timeout_seconds": 0}, ("request_timeout",)),
    ]
    return cases


CASE_IDS = [case for case, _, _ in bad_configs("http://127.0.0.1:1/api/v1/customer")]


@pytest.fixture(scope="module")
def proxy() -> Iterator[RecordingServer]:
    with recording_server() as server:
        yield server


def proxied(proxy: RecordingServer) -> dict[str, str]:
    """Environment that sends every HTTP(S) request of the tap to the recording proxy."""
    return {
        name: proxy.origin
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")
    } | {"NO_PROXY": "", "no_proxy": ""}


def assert_refused_without_request(
    tap_run: TapRun,
    words: tuple[str, ...],
    sandbox: SandboxProcess,
    seq_before: int,
    proxy: RecordingServer,
) -> None:
    assert_clean_failure(tap_run, *words)
    assert_no_traceback(tap_run)
    assert not tap_run.records, "records were emitted by a refused run"
    assert not proxy.requests, [request.path for request in proxy.requests]
    assert not sandbox.requests_log(after=seq_before)
    # The refusal is short: one clear message, not a dump of the config.
    assert len(tap_run.stderr) < 4000, tap_run.stderr


@pytest.mark.parametrize("case", CASE_IDS)
def test_bad_config_is_refused_before_any_request(
    case: str, sandbox: SandboxProcess, proxy: RecordingServer
) -> None:
    proxy.requests.clear()
    _, config, words = next(item for item in bad_configs(sandbox.base_url) if item[0] == case)
    LEAK_WATCH.watch(SPACED_KEY, NEWLINE_KEY, SIXTH_KEY, str(NUMERIC_KEY), OWNER_KEY)
    seq_before = last_seq(sandbox)
    catalog = catalog_for(reliability_config(sandbox), ["account", "guests"])
    tap_run = run_raw(json.dumps(config), catalog=catalog, env=proxied(proxy))
    assert_refused_without_request(tap_run, words, sandbox, seq_before, proxy)


def test_config_file_that_is_not_json_is_refused(
    sandbox: SandboxProcess, proxy: RecordingServer
) -> None:
    proxy.requests.clear()
    seq_before = last_seq(sandbox)
    text = '{"api_key": "' + OWNER_KEY + '", "base_url": '
    tap_run = run_raw(text, env=proxied(proxy))
    assert tap_run.returncode != 0
    assert not proxy.requests
    assert not sandbox.requests_log(after=seq_before)


CORRUPT_STATES = {
    "invalid-json": ('{"bookmarks": {"guests": ', ("state",)),
    "not-an-object": ("[1, 2, 3]", ("state",)),
    "bookmark-not-a-date": (
        json.dumps(
            {
                "bookmarks": {
                    "guests": {
                        "replication_key": "visited_at",
                        "replication_key_value": "not-a-date",
                    }
                }
            }
        ),
        ("guests",),
    ),
    "bookmark-a-number": (
        json.dumps(
            {"bookmarks": {"guests": {"replication_key": "visited_at", "replication_key_value": 7}}}
        ),
        ("guests",),
    ),
    "resume-marker-not-an-instant": (
        json.dumps({"bookmarks": {"guests": {"resume": {"oldest": "halfway", "newest": 3}}}}),
        ("guests",),
    ),
    "resume-marker-not-an-object": (
        json.dumps({"bookmarks": {"members": {"resume": ["started_at"]}}}),
        ("members",),
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPT_STATES))
def test_corrupt_state_file_is_refused_before_any_request(
    case: str, sandbox: SandboxProcess, proxy: RecordingServer
) -> None:
    proxy.requests.clear()
    state_text, words = CORRUPT_STATES[case]
    seq_before = last_seq(sandbox)
    config = reliability_config(sandbox)
    catalog = catalog_for(config, ["account", "guests"])
    tap_run = run_raw(
        json.dumps(config), state_text=state_text, catalog=catalog, env=proxied(proxy)
    )
    assert_refused_without_request(tap_run, words, sandbox, seq_before, proxy)


def test_proxy_check_sees_requests_of_a_good_config(
    sandbox: SandboxProcess, proxy: RecordingServer
) -> None:
    """The harness can fail: a good config through the proxy does reach it."""
    proxy.requests.clear()
    config = reliability_config(sandbox, max_retries=0)
    catalog = catalog_for(config, ["account"])
    run_raw(json.dumps(config), catalog=catalog, env=proxied(proxy))
    assert proxy.requests, "the recording proxy saw nothing: the no-request checks prove nothing"
    authorizations = [request.headers.get("Authorization") for request in proxy.requests]
    assert f"Bearer {OWNER_KEY}" in authorizations
