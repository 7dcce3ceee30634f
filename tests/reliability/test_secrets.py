"""Issue #7.8: the key goes only to base_url's host. A redirect, or a `next` link in a page, that
points at another host (or another port) never receives the Authorization header; keys given in
the environment work; and (conftest.py) no key appears in any output of any reliability test.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    LEAK_WATCH,
    Recorded,
    assert_clean_failure,
    assert_matches_truth,
    catalog_for,
    json_body,
    recording_server,
    reliability_config,
    run,
)
from support.sandbox import OWNER_KEY, last_seq
from support.tap_process import TapRun, parse_singer, tap_command, write_json

BASE_PATH = "/api/v1/customer"
ACCOUNT = {"account_id": 1, "business_name": "Elsewhere Ltd", "plan": "Growth", "venue_count": 1}
VENUE = {
    "id": 1,
    "name": "Quay",
    "city": "Bristol",
    "country": "GB",
    "created_at": "2025-01-01T09:00:00+00:00",
}


def guest(number: int) -> dict:
    return {
        "id": number,
        "venue_id": 1,
        "name": f"Guest {number}",
        "first_name": "Guest",
        "last_name": str(number),
        "email": f"guest{number}@example.com",
        "phone": "+447700900000",
        "marketing_consent": True,
        "is_return_visit": False,
        "visited_at": f"2026-01-0{number}T10:00:00+00:00",
    }


def authorized(requests: list[Recorded]) -> list[Recorded]:
    return [r for r in requests if any(name.lower() == "authorization" for name in r.headers)]


@pytest.mark.parametrize(
    "foreign_host", ["127.0.0.2", "127.0.0.1"], ids=["other-host", "other-port"]
)
@pytest.mark.parametrize("status", [302, 307])
def test_redirect_to_another_origin_never_carries_the_key(foreign_host: str, status: int) -> None:
    with recording_server(
        lambda path: (200, {}, json_body({"data": ACCOUNT})), host=foreign_host
    ) as foreign:

        def respond(path: str) -> tuple[int, dict[str, str], bytes]:
            location = foreign.origin + path
            return status, {"Location": location}, json_body({"message": "moved"})

        with recording_server(respond) as origin:
            config = {
                "api_key": OWNER_KEY,
                "base_url": origin.origin + BASE_PATH,
                "max_retries": 0,
                "requests_per_minute": 1000,
            }
            catalog = catalog_for(config, ["account"])
            tap_run = run(config, catalog=catalog, timeout=60)

    assert origin.requests, "the tap sent nothing to base_url"
    assert origin.requests[0].headers.get("Authorization") == f"Bearer {OWNER_KEY}"
    leaked = authorized(foreign.requests)
    assert not leaked, [(r.path, r.headers.get("Authorization", "")[:6]) for r in leaked]
    # The tap's design: a redirect is not followed at all; the run stops and says why.
    assert not foreign.requests, "the redirect was followed"
    assert_clean_failure(tap_run, "redirect", "/me")


def test_next_links_to_another_host_are_not_followed_with_the_key() -> None:
    """Laravel-style `links.next` / `meta.next_page_url` pointing elsewhere: the tap pages by
    number at base_url, and the other host sees no key (ideally no request at all)."""
    with recording_server(
        lambda path: (200, {}, json_body({"data": [guest(9)], "meta": {}})), host="127.0.0.2"
    ) as foreign:
        elsewhere = foreign.origin + BASE_PATH

        def respond(path: str) -> tuple[int, dict[str, str], bytes]:
            url = urlsplit(path)
            page = int(parse_qs(url.query).get("page", ["1"])[0])
            if url.path == BASE_PATH + "/venues":
                meta = {"current_page": 1, "last_page": 1, "per_page": 50, "total": 1}
                return 200, {}, json_body({"data": [VENUE], "meta": meta})
            if url.path != BASE_PATH + "/guests":
                return 404, {}, json_body({"message": "Not found"})
            meta = {
                "current_page": page,
                "last_page": 2,
                "per_page": 1,
                "total": 2,
                "next_page_url": f"{elsewhere}/guests?page={page + 1}" if page == 1 else None,
                "path": f"{elsewhere}/guests",
            }
            links = {"next": meta["next_page_url"], "first": f"{elsewhere}/guests?page=1"}
            body = {"data": [guest(3 - page)], "meta": meta, "links": links}
            return 200, {}, json_body(body)

        with recording_server(respond) as origin:
            config = {
                "api_key": OWNER_KEY,
                "base_url": origin.origin + BASE_PATH,
                "start_date": "2025-06-01",
                "max_retries": 0,
                "requests_per_minute": 1000,
            }
            catalog = catalog_for(config, ["guests"])
            tap_run = run(config, catalog=catalog, timeout=60)

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert sorted(tap_run.ids("guests")) == [1, 2]
    assert not authorized(foreign.requests)
    assert not foreign.requests, "the tap followed a link to another host"
    guest_pages = [r for r in origin.requests if urlsplit(r.path).path == BASE_PATH + "/guests"]
    assert all(r.headers.get("Authorization") == f"Bearer {OWNER_KEY}" for r in guest_pages)


def run_with_env_config(sandbox: SandboxProcess, streams: list[str], **env: str) -> TapRun:
    """The tap with `--config ENV`: settings from TAP_GUESTDATA_* variables only."""
    catalog = catalog_for(reliability_config(sandbox), streams)
    variables = {
        **os.environ,
        "TAP_GUESTDATA_BASE_URL": sandbox.base_url,
        "TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000",
        **env,
    }
    with tempfile.TemporaryDirectory() as scratch:
        command = tap_command(
            "--config", "ENV", "--catalog", str(write_json(Path(scratch), "catalog.json", catalog))
        )
        result = subprocess.run(
            command, capture_output=True, text=True, env=variables, timeout=60, check=False
        )
    tap_run = TapRun(result.returncode, result.stdout, result.stderr)
    parse_singer(result.stdout, tap_run)
    LEAK_WATCH.add("env run stdout", result.stdout)
    LEAK_WATCH.add("env run stderr", result.stderr)
    return tap_run


def test_key_from_the_environment_is_used_and_never_printed(sandbox: SandboxProcess) -> None:
    """TAP_GUESTDATA_API_KEY (what Meltano sets from a secret) with `--config ENV`."""
    seq = last_seq(sandbox)
    key = OWNER_KEYS[2]
    LEAK_WATCH.watch(key)

    tap_run = run_with_env_config(sandbox, ["account"], TAP_GUESTDATA_API_KEY=key)

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, sandbox, key, ["account"])
    assert {entry["key"] for entry in sandbox.requests_log(after=seq)} == {key}


def test_key_pool_from_the_environment_as_a_json_list(sandbox: SandboxProcess) -> None:
    """TAP_GUESTDATA_API_KEYS='["k1", "k2"]': both keys are used, neither is printed."""
    seq = last_seq(sandbox)
    keys = OWNER_KEYS[3:5]
    LEAK_WATCH.watch(*keys)

    tap_run = run_with_env_config(
        sandbox, ["venues", "guests"], TAP_GUESTDATA_API_KEYS=json.dumps(keys)
    )

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, sandbox, keys[0], ["guests"])
    assert {entry["key"] for entry in sandbox.requests_log(after=seq)} == set(keys)


def test_key_pool_spreads_requests_and_prints_no_key(sandbox: SandboxProcess) -> None:
    keys = OWNER_KEYS[3:5]
    seq = last_seq(sandbox)
    config = reliability_config(sandbox)
    config.pop("api_key")
    config["api_keys"] = keys

    tap_run = run(config, catalog=catalog_for(reliability_config(sandbox), ["venues", "guests"]))

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, sandbox, keys[0], ["guests"])
    assert {entry["key"] for entry in sandbox.requests_log(after=seq)} == set(keys)


def test_catalog_and_state_hold_no_secret_settings(sandbox: SandboxProcess) -> None:
    config = reliability_config(sandbox)
    catalog = catalog_for(config, ["account", "guests"])
    tap_run = run(config, catalog=catalog)
    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    text = json.dumps(catalog) + json.dumps(tap_run.states)
    assert OWNER_KEY not in text
    assert "api_key" not in json.dumps(tap_run.states)
