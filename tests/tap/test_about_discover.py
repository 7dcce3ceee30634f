"""Issue #3, point 7: offline discovery, `--about` and the settings' contract."""

from __future__ import annotations

import json
import re
import socket

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from support.sandbox import OWNER_KEY
from support.streams import STREAM_KEYS
from support.tap_process import run_tap

# The tap's contract as written (docs/tap.md): stream -> primary key. The tests elsewhere read
# it from the tap (support.streams); this is the one place it is written down to be checked.
CONTRACT_KEYS: dict[str, tuple[str, ...]] = {
    "account": ("account_id",),
    "venues": ("id",),
    "guests": ("id",),
    "daily_stats": ("venue_id", "date"),
    "daily_account_stats": ("date",),
    "programme": ("id",),
    "programme_venues": ("site_id",),
    "tiers": ("programme_id", "key"),
    "members": ("id",),
    "member_ledger": ("id",),
    "rewards": ("id",),
    "redemptions": ("id",),
    "offers": ("id",),
    "offer_stats": ("offer_id",),
}
SETTINGS = (
    "api_key",
    "api_keys",
    "base_url",
    "start_date",
    "requests_per_minute",
    "rate_limit_window_seconds",
    "rewards_lookback_days",
    "redemptions_lookback_days",
    "stats_lookback_days",
    "members_margin_seconds",
    "on_forbidden",
    "max_workers",
    "request_timeout_seconds",
    "max_retries",
)
DEFAULTS = {
    "requests_per_minute": 120,
    "rate_limit_window_seconds": 60,
    "redemptions_lookback_days": 30,
    "stats_lookback_days": 0,  # docs/tap.md (the brief said 3)
    "members_margin_seconds": 60,  # docs/tap.md (the brief said 300)
    "on_forbidden": "warn",
    "max_workers": 4,
}
CAPABILITIES = (
    "catalog",
    "discover",
    "state",
    "about",
    "stream-maps",
    "schema-flattening",
    "batch",
)


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/v1/customer"


@pytest.fixture(scope="module")
def about() -> dict:
    run = run_tap({}, args=("--about", "--format=json"), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def test_discover_works_offline() -> None:
    # The process itself (discover() reuses a catalog): no server answers at that port.
    run = run_tap({"api_key": OWNER_KEY, "base_url": closed_port_url()}, args=("--discover",))
    assert run.returncode == 0, run.stderr[-3000:]
    catalog = json.loads(run.stdout)
    streams = {entry["tap_stream_id"]: entry for entry in catalog["streams"]}
    assert set(streams) == set(CONTRACT_KEYS) | {"read_windows"}
    assert STREAM_KEYS == CONTRACT_KEYS  # what the other tests read from the tap
    # The tap's record of complete reads (stream/deletions.py): discovered, selected only by name.
    windows = streams["read_windows"]
    assert tuple(windows["key_properties"]) == ("stream", "venue_id", "read_version")
    root = next(entry for entry in windows["metadata"] if entry["breadcrumb"] == [])
    assert root["metadata"]["selected-by-default"] is False
    for stream, key in CONTRACT_KEYS.items():
        assert tuple(streams[stream]["key_properties"]) == key
        assert streams[stream]["schema"]["properties"], stream


def test_about_markdown_lists_every_setting() -> None:
    run = run_tap({}, args=("--about", "--format=markdown"), timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    missing = [name for name in SETTINGS if f"{name}" not in run.stdout]
    assert not missing, missing


def test_about_lists_every_capability(about: dict) -> None:
    assert set(CAPABILITIES) <= set(about["capabilities"]), about["capabilities"]


def test_settings_have_the_contract_defaults_and_secrets(about: dict) -> None:
    properties = about["settings"]["properties"]
    assert set(SETTINGS) <= set(properties), set(SETTINGS) - set(properties)
    for name, default in DEFAULTS.items():
        assert properties[name].get("default") == default, (name, properties[name])
    for name in ("api_key", "api_keys"):
        assert properties[name].get("secret") is True, (name, properties[name])
    assert properties["api_keys"].get("maxItems") in (None, 5)


def run_with(config_overrides: dict) -> str:
    config = {"api_key": OWNER_KEY, "base_url": closed_port_url(), **config_overrides}
    config = {name: value for name, value in config.items() if value is not None}
    run = run_tap(config, timeout=120)
    assert run.returncode != 0, "the tap accepted an invalid config"
    return run.stderr


def test_base_url_must_end_with_the_api_path() -> None:
    stderr = run_with({"base_url": closed_port_url().replace("/v1/", "/v2/")})
    assert "/api/v1/customer" in stderr, stderr[-2000:]


def test_base_url_must_be_https_unless_loopback() -> None:
    stderr = run_with({"base_url": "http://api.example.invalid/api/v1/customer"})
    assert "https" in stderr.lower(), stderr[-2000:]


def test_at_most_five_api_keys() -> None:
    keys = [*OWNER_KEYS, "gd_owner_growth_6"]
    stderr = run_with({"api_key": None, "api_keys": keys})
    assert re.search(r"at most 5|maximum of 5|up to 5|5 keys|too long", stderr, re.I), stderr[
        -2000:
    ]
    assert not any(key in stderr for key in keys), "a key was printed"
