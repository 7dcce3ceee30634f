"""Issue #3, point 5: the tap stays under the per-key limit (spec 8), with one key or five."""

from __future__ import annotations

from collections import Counter

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess, busiest_window
from support.sandbox import tap_config
from support.streams import MEMBER_STREAMS, truth_rows
from support.tap_process import discover, select_streams
from support.tap_suite import Sync, stream_problems, sync, timestamp

TIME_SCALE = 0.05  # the sandbox's minute lasts 3 s
WINDOW_SECONDS = 60 * TIME_SCALE
PER_KEY = 120  # spec 8
PER_ADDRESS = 600  # spec 8


def limited_sync(server: SandboxProcess, **keys: object) -> Sync:
    catalog = select_streams(discover(tap_config(server)), MEMBER_STREAMS)
    server.limits(True, TIME_SCALE)
    config = tap_config(
        server, requests_per_minute=PER_KEY, rate_limit_window_seconds=int(WINDOW_SECONDS)
    )
    config.update(keys)
    if "api_keys" in keys:
        del config["api_key"]
    result = sync(server, config, catalog=catalog, truth_key=OWNER_KEYS[0])
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    problems: list[str] = []
    for stream in MEMBER_STREAMS:
        problems += stream_problems(
            stream, result.records(stream), truth_rows(result.truth, stream)
        )
    assert not problems, "\n".join(problems)
    return result


def busiest_windows(result: Sync) -> dict[str, int]:
    times: dict[str, list[float]] = {}
    for entry in result.log:
        times.setdefault(entry["key"], []).append(timestamp(entry["time"]))
    return {key: busiest_window(moments, WINDOW_SECONDS) for key, moments in times.items()}


def test_one_key_never_exceeds_its_limit_and_draws_no_429(fresh_sandbox: SandboxProcess) -> None:
    result = limited_sync(fresh_sandbox)
    assert len(result.log) > PER_KEY, "too few requests to reach the limit"
    statuses = Counter(entry["status"] for entry in result.log)
    assert statuses[429] == 0, statuses
    windows = busiest_windows(result)
    assert set(windows) == {OWNER_KEYS[0]}, windows
    assert windows[OWNER_KEYS[0]] <= PER_KEY, windows


def test_five_keys_each_stay_under_their_limit_and_share_the_work(
    fresh_sandbox: SandboxProcess,
) -> None:
    result = limited_sync(fresh_sandbox, api_keys=list(OWNER_KEYS))
    statuses = Counter(entry["status"] for entry in result.log)
    assert statuses[429] == 0, statuses
    windows = busiest_windows(result)
    assert set(windows) == set(OWNER_KEYS), windows
    assert all(count <= PER_KEY for count in windows.values()), windows
    all_times = [timestamp(entry["time"]) for entry in result.log]
    assert busiest_window(all_times, WINDOW_SECONDS) <= PER_ADDRESS
    shares = Counter(entry["key"] for entry in result.log)
    assert min(shares.values()) >= len(result.log) / 10, shares
