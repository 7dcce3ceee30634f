"""Issue #7.1: injected faults are retried and the sync ends with exactly the ground truth; past
the retry budget the run fails naming the request and the cause, with the last good state
emitted, and that state resumes without loss.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    assert_clean_failure,
    assert_matches_truth,
    assert_resumed,
    catalog_for,
    reliability_config,
    run,
)
from support.sandbox import OWNER_KEY, last_seq, this_instant

TIMEOUT_SECONDS = 1  # request_timeout_seconds for these tests: a `slow` fault outlasts it
SLOW_SECONDS = 2.5

# kind -> (extra fault arguments, status the sandbox logs for it, words naming the cause)
FAULTS: dict[str, tuple[dict[str, Any], set[int], tuple[str, ...]]] = {
    "rate_limit": ({"retry_after": 1}, {429}, ("429",)),
    "server_error": ({}, {500}, ("500",)),
    "bad_gateway_html": ({}, {502}, ("502",)),
    "slow": ({"seconds": SLOW_SECONDS}, {200, 0}, ("timed out", "timeout")),
    "drop": ({}, {0}, ("connection", "closed", "aborted", "reset", "disconnected")),
    "truncated": ({}, {200}, ("json", "truncated", "decode", "parse")),
}


@pytest.fixture(scope="module")
def fault_sandbox() -> Iterator[SandboxProcess]:
    """One sandbox for this module: faults are consumed by the run that meets them and the data
    is never mutated here (so it is read as of its start); every test starts from a cleared
    fault queue."""
    with SandboxProcess(size="small", seed=11, limits=False, as_of=this_instant()) as server:
        yield server


def settled_log(server: SandboxProcess, after: int, kind: str, path: str = "/guests") -> list[dict]:
    """The request log for `path`. A `slow` answer is logged when the sandbox finally sends it,
    after the tap gave up waiting: wait for those before reading."""
    if kind == "slow":
        time.sleep(SLOW_SECONDS + 0.5)
    return [entry for entry in server.requests_log(after=after) if entry["path"] == path]


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_sync_survives_faults_and_matches_truth(kind: str, fault_sandbox: SandboxProcess) -> None:
    server = fault_sandbox
    server.reset()
    extra, statuses, _ = FAULTS[kind]
    config = reliability_config(server, request_timeout_seconds=TIMEOUT_SECONDS, max_retries=4)
    catalog = catalog_for(config, ["guests"])
    seq = last_seq(server)
    server.fault(kind, 2, path="/guests", **extra)

    tap_run = run(config, catalog=catalog)

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, server, OWNER_KEY, ["guests"])
    log = settled_log(server, seq, kind)
    assert {entry["status"] for entry in log if entry["status"] != 200} <= statuses
    # Both faults were met by the first request (page 1), which was retried twice; every other
    # page was asked for once.
    pages = Counter(entry["query"] for entry in log)
    first_page = next(query for query in pages if query.endswith("&page=1"))
    assert pages[first_page] == 3, pages
    assert all(count == 1 for query, count in pages.items() if query != first_page), pages
    counted = "0 retries, 2 rate-limited" if kind == "rate_limit" else "2 retries, 0 rate-limited"
    assert f"{len(pages) + 2} requests, {counted}" in "\n".join(tap_run.summary_lines())


def test_faults_on_every_kind_of_endpoint_in_one_run(fault_sandbox: SandboxProcess) -> None:
    """A fault on a single-object read, a list, a child list and a per-offer read: all retried."""
    server = fault_sandbox
    server.reset()
    streams = ["account", "venues", "members", "member_ledger", "offers", "offer_stats"]
    config = reliability_config(server, request_timeout_seconds=TIMEOUT_SECONDS, max_retries=4)
    catalog = catalog_for(config, streams)
    server.fault("server_error", 1, path="/me")
    server.fault("drop", 1, path="/venues")
    server.fault("rate_limit", 1, path="/rewards/members", retry_after=1)
    server.fault("truncated", 2, path="/rewards/members/")
    server.fault("bad_gateway_html", 1, path="/rewards/offers")
    server.fault("slow", 1, path="/rewards/offers/", seconds=3)

    tap_run = run(config, catalog=catalog)

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, server, OWNER_KEY, streams)


@pytest.mark.parametrize("kind", ["server_error", "bad_gateway_html", "drop", "truncated", "slow"])
def test_exhausted_retries_fail_naming_request_and_cause_and_state_resumes(
    kind: str, fault_sandbox: SandboxProcess
) -> None:
    server = fault_sandbox
    server.reset()
    extra, _, cause_words = FAULTS[kind]
    streams = ["guests", "members"]
    config = reliability_config(server, request_timeout_seconds=TIMEOUT_SECONDS, max_retries=2)
    catalog = catalog_for(config, streams)
    seq = last_seq(server)
    server.fault(kind, 10, path="/rewards/members", **extra)

    failed = run(config, catalog=catalog)

    assert_clean_failure(failed, "/rewards/members")
    lowered = failed.stderr.lower()
    assert any(word in lowered for word in cause_words), (cause_words, failed.stderr[-3000:])
    attempts = settled_log(server, seq, kind, path="/rewards/members")
    # One attempt while planning (its first page, kept for the sync), then max_retries=2
    # means 3 attempts in the sync itself.
    assert len(attempts) == 4, f"expected 1 + 3 attempts, saw {len(attempts)}"
    # The last good state was emitted: guests (synced before members) are bookmarked.
    assert failed.final_state is not None, "no STATE emitted before the failure"
    guests_bookmark = failed.final_state.get("bookmarks", {}).get("guests", {})
    assert guests_bookmark.get("replication_key_value"), failed.final_state

    server.reset()  # clears the faults left over (same seed: same data)
    resumed = run(config, catalog=catalog, state=failed.final_state)

    # Resumed, not restarted: guests came again only from the bookmark on.
    assert_resumed(failed, resumed, server, OWNER_KEY, streams, guests_share=0.5)


def test_retry_after_is_waited_before_retrying(fault_sandbox: SandboxProcess) -> None:
    """429 with Retry-After: 2 -> the retry comes no sooner than ~2 s later."""
    server = fault_sandbox
    server.reset()
    config = reliability_config(server, max_retries=3)
    catalog = catalog_for(config, ["account"])
    seq = last_seq(server)
    server.fault("rate_limit", 1, path="/me", retry_after=2)

    tap_run = run(config, catalog=catalog)

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    assert_matches_truth(tap_run, server, OWNER_KEY, ["account"])
    log = [entry for entry in server.requests_log(after=seq) if entry["path"] == "/me"]
    assert [entry["status"] for entry in log] == [429, 200]
    assert log[1]["time"] - log[0]["time"] >= 1.9, log
