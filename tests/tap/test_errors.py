"""Issue #3, point 4: the errors of spec part 7, each as the tap must meet it."""

from __future__ import annotations

import itertools
import re
import time
from collections import Counter
from collections.abc import Callable

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import tap_config
from support.streams import CORE_STREAMS, MEMBER_STREAMS, REWARDS_STREAMS, truth_rows
from support.tap_process import discover, select_streams
from support.tap_suite import (
    PATH_GROUPS,
    Sync,
    assert_synced_as_truth,
    requests_for,
    stream_problems,
    summaries,
    sync,
    timestamp,
)

WARNING_LINE = re.compile(r"\bWARNING\b")

# key -> (streams it may not read, a word the skip must name)
FORBIDDEN: dict[str, tuple[tuple[str, ...], str]] = {
    "gd_rewards_off": (REWARDS_STREAMS, "REWARDS_DISABLED"),
    "gd_no_rewards_plan": (REWARDS_STREAMS, "plan_upgrade_required"),
    "gd_team_no_guest_data": (MEMBER_STREAMS, "view_guest_data"),
}


def no_path_requested_twice(result: Sync) -> None:
    counts = Counter((entry["path"], entry["query"]) for entry in result.log)
    assert counts, "the tap made no request"
    assert max(counts.values()) == 1, f"retried a request that cannot succeed: {counts}"


# ------------------------------------------------------------------------------ fatal keys


def test_revoked_key_fails_the_run_saying_what_to_do_without_printing_the_key(
    sandbox: SandboxProcess,
) -> None:
    result = sync(sandbox, tap_config(sandbox, "gd_revoked"), truth_key="gd_owner_growth_1")
    assert result.run.returncode != 0
    stderr = result.run.stderr
    assert "401" in stderr or "unauthenticated" in stderr
    assert re.search(r"revoked|replace|new key|API Keys page", stderr, re.IGNORECASE), stderr[
        -2000:
    ]
    assert "gd_revoked" not in stderr and "gd_revoked" not in result.run.stdout
    assert not result.run.records
    no_path_requested_twice(result)


def test_session_token_fails_with_customer_api_key_required(sandbox: SandboxProcess) -> None:
    token = "session_not_an_api_key"
    result = sync(sandbox, tap_config(sandbox, token), truth_key="gd_owner_growth_1")
    assert result.run.returncode != 0
    assert "customer_api_key_required" in result.run.stderr
    assert token not in result.run.stderr and token not in result.run.stdout
    no_path_requested_twice(result)


def test_plan_without_api_fails_naming_the_required_plan(sandbox: SandboxProcess) -> None:
    result = sync(sandbox, tap_config(sandbox, "gd_essentials"), truth_key="gd_owner_growth_1")
    assert result.run.returncode != 0
    assert "plan_upgrade_required" in result.run.stderr or "plan" in result.run.stderr.lower()
    assert "Growth" in result.run.stderr, result.run.stderr[-2000:]
    assert "gd_essentials" not in result.run.stderr
    no_path_requested_twice(result)


# ------------------------------------------------------------------------------ forbidden streams


@pytest.mark.parametrize("key", sorted(FORBIDDEN))
def test_forbidden_streams_are_skipped_with_one_warning(
    full_sync_for: Callable[[str], Sync], key: str
) -> None:
    result = full_sync_for(key)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    skipped, word = FORBIDDEN[key]
    for stream in skipped:
        assert not result.records(stream), f"{stream} emitted records"
    warnings = [
        line
        for line in result.run.stderr.splitlines()
        if WARNING_LINE.search(line)
        and word.lower() in line.lower()
        and "Stream summary" not in line
    ]
    assert len(warnings) == 1, warnings or result.run.stderr[-3000:]
    found = summaries(result.run)
    for stream in skipped:
        assert [set(entry) for entry in found.get(stream, [])] == [{"skipped"}], found.get(stream)


@pytest.mark.parametrize("key", sorted(FORBIDDEN))
def test_streams_not_forbidden_still_equal_truth(
    full_sync_for: Callable[[str], Sync], key: str
) -> None:
    result = full_sync_for(key)
    skipped = FORBIDDEN[key][0]
    problems: list[str] = []
    for stream in (*CORE_STREAMS, *REWARDS_STREAMS):
        if stream in skipped:
            continue
        expected = truth_rows(result.truth, stream)
        if stream in CORE_STREAMS:
            assert expected, f"truth has no {stream} rows for {key}"
        problems += stream_problems(stream, result.records(stream), expected)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", sorted(FORBIDDEN))
def test_forbidden_streams_fail_the_run_when_on_forbidden_is_fail(
    sandbox: SandboxProcess, owner_catalog: dict, key: str
) -> None:
    skipped, word = FORBIDDEN[key]
    catalog = select_streams(owner_catalog, ["account", *skipped])
    result = sync(sandbox, tap_config(sandbox, key, on_forbidden="fail"), catalog=catalog)
    assert result.run.returncode != 0
    assert word.lower() in result.run.stderr.lower(), result.run.stderr[-3000:]


# ------------------------------------------------------------------------------ 422


def test_422_fails_the_run_showing_the_errors_object(
    sandbox: SandboxProcess, owner_catalog: dict
) -> None:
    """No setting can reach the API with an invalid parameter (see the next test), and the
    sandbox has no 422 fault; a STATE whose guests bookmark lies in the future does: the window
    starts after it ends (from later than to)."""
    catalog = select_streams(owner_catalog, ["guests"])
    future = "2999-01-01T00:00:00+00:00"
    state = {
        "bookmarks": {"guests": {"replication_key": "visited_at", "replication_key_value": future}}
    }
    result = sync(sandbox, tap_config(sandbox), state=state, catalog=catalog)
    assert [entry["status"] for entry in result.log] == [422], "a 422 is not worth retrying"
    assert result.run.returncode != 0
    stderr = result.run.stderr
    assert re.search(r"""["']from["']\s*:\s*\[""", stderr), stderr[-3000:]
    assert "The from field must be a date before or equal to to." in stderr


def test_future_start_date_is_rejected_before_any_request(
    sandbox: SandboxProcess, owner_catalog: dict
) -> None:
    catalog = select_streams(owner_catalog, ["rewards"])
    config = tap_config(sandbox, start_date="2999-01-01T00:00:00+00:00")
    result = sync(sandbox, config, catalog=catalog)
    assert result.run.returncode != 0
    assert result.log == []
    assert "start_date" in result.run.stderr, result.run.stderr[-3000:]


# ------------------------------------------------------------------------------ transient faults


def venues_catalog(server: SandboxProcess) -> dict:
    return select_streams(discover(tap_config(server)), ["venues"])


def test_429_waits_retry_after_then_succeeds(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    catalog = venues_catalog(server)
    server.fault("rate_limit", 2, path="/venues", retry_after=2)
    result = sync(server, tap_config(server), catalog=catalog)
    assert_synced_as_truth(result, "venues")
    entries = requests_for(result.log, PATH_GROUPS[("venues",)])
    assert [entry["status"] for entry in entries] == [429, 429, 200]
    times = [timestamp(entry["time"]) for entry in entries]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(gap >= 2 - 0.05 for gap in gaps), gaps
    # The summary partitions requests: first tries + retries (errors) + rate-limited (429).
    assert summaries(result.run)["venues"] == [
        {"records": len(result.records("venues")), "requests": 3, "retries": 0, "limited": 2}
    ]


@pytest.mark.parametrize("kind", ["server_error", "bad_gateway_html", "drop", "truncated"])
def test_transient_failure_is_retried_then_succeeds(
    fresh_sandbox: SandboxProcess, kind: str
) -> None:
    server = fresh_sandbox
    catalog = select_streams(discover(tap_config(server)), ["offers"])
    server.fault(kind, 2, path="/rewards/offers")
    result = sync(server, tap_config(server), catalog=catalog)
    assert_synced_as_truth(result, "offers")
    entries = requests_for(result.log, PATH_GROUPS[("offers",)])
    expected_status = {"server_error": 500, "bad_gateway_html": 502, "drop": 0, "truncated": 200}
    assert [entry["status"] for entry in entries[:2]] == [expected_status[kind]] * 2
    (summary,) = summaries(result.run)["offers"]
    assert summary["retries"] == 2 and summary["limited"] == 0, summary
    assert summary["requests"] == len(entries), summary


def test_slow_answer_times_out_and_is_retried(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    catalog = venues_catalog(server)
    slow_seconds = 20  # far beyond the 1-s timeout and its retry, on a loaded machine too
    server.fault("slow", 1, path="/venues", seconds=slow_seconds)
    result = sync(server, tap_config(server, request_timeout_seconds=1), catalog=catalog)
    assert_synced_as_truth(result, "venues")
    # The sandbox logs each request when it answers, with the time it arrived: the slow one
    # appears once its answer is sent, after the run. The retry arrived before that answer was
    # due, so the tap gave up on it (not a wall-clock bound on the run, which includes start-up).
    deadline = time.monotonic() + 2 * slow_seconds
    while True:
        venues = requests_for(server.requests_log(), PATH_GROUPS[("venues",)])
        if len(venues) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    received = sorted(entry["time"] for entry in venues)
    assert len(received) >= 2, venues
    assert received[1] - received[0] < slow_seconds, "waited for the slow answer"
    (summary,) = summaries(result.run)["venues"]
    assert summary["retries"] >= 1, summary


def test_persistent_5xx_fails_after_max_retries(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    catalog = venues_catalog(server)
    server.fault("server_error", 50, path="/venues")
    result = sync(server, tap_config(server, max_retries=2), catalog=catalog)
    assert result.run.returncode != 0
    entries = requests_for(result.log, PATH_GROUPS[("venues",)])
    assert [entry["status"] for entry in entries] == [500] * 3, "1 try + max_retries=2 retries"


# ------------------------------------------------------------------------------ vanished parents


@pytest.mark.parametrize(
    ("parent", "child", "child_path", "parent_key"),
    [
        ("members", "member_ledger", "/rewards/members/{id}/ledger", "member_id"),
        ("offers", "offer_stats", "/rewards/offers/{id}", "offer_id"),
    ],
)
def test_child_of_a_vanished_parent_is_skipped_with_a_warning(
    fresh_sandbox: SandboxProcess, parent: str, child: str, child_path: str, parent_key: str
) -> None:
    """spec 4.5.8: REWARD_NOT_FOUND for a record gone since its parent was listed."""
    server = fresh_sandbox
    gone = next(
        row["id"]
        for row in truth_rows(server.truth("gd_owner_growth_1"), parent)
        if any(line[parent_key] == row["id"] for line in server.truth("gd_owner_growth_1")[child])
    )
    server.fault("not_found", 1, path=child_path.format(id=gone))
    catalog = select_streams(discover(tap_config(server)), [parent, child])
    result = sync(server, tap_config(server), catalog=catalog)

    assert result.run.returncode == 0, result.run.stderr[-3000:]
    warnings = [line for line in result.run.stderr.splitlines() if WARNING_LINE.search(line)]
    assert any("REWARD_NOT_FOUND" in line and str(gone) in line for line in warnings), warnings
    expected = [row for row in truth_rows(result.truth, child) if row[parent_key] != gone]
    assert not stream_problems(child, result.records(child), expected)
    assert not stream_problems(parent, result.records(parent), truth_rows(result.truth, parent))
