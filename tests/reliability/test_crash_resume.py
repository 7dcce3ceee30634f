"""Issue #7.2: a sync killed (SIGKILL) at several points and restarted from the last STATE it
emitted loses nothing: the union of records over all attempts covers the ground truth, and the
only duplicates are repeated primary keys carrying the same values.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    assert_matches_truth,
    assert_union_matches_truth,
    catalog_for,
    collect,
    count_lines,
    reliability_config,
    start,
    wait_for,
)
from support.sandbox import OWNER_KEY
from support.streams import truth_rows
from support.tap_process import TapRun, kill

STREAMS = ["guests", "members", "member_ledger", "rewards", "redemptions"]
INCREMENTAL = ["guests", "members", "rewards", "redemptions"]


def states_at_least(count: int) -> Callable[[Path], bool]:
    return lambda directory: count_lines(directory / "out.jsonl", '"STATE"') >= count


def records_at_least(count: int) -> Callable[[Path], bool]:
    return lambda directory: count_lines(directory / "out.jsonl", '"RECORD"') >= count


def seconds_passed(seconds: float) -> Callable[[Path], bool]:
    started = time.monotonic()

    def condition(directory: Path) -> bool:
        nonlocal started
        if not (directory / "out.jsonl").exists():
            started = time.monotonic()
        return time.monotonic() - started >= seconds

    return condition


def test_sync_killed_at_several_points_resumes_without_loss(
    fresh_sandbox: SandboxProcess, tmp_path: Path
) -> None:
    server = fresh_sandbox
    server.latency(0.1)  # a full sync takes several seconds: kills land mid-sync
    config = reliability_config(server)
    catalog = catalog_for(config, STREAMS)
    kill_points: list[tuple[str, Callable[[Path], bool]]] = [
        ("mid-stream, after 200 records", records_at_least(200)),
        ("after the first STATE message", states_at_least(1)),
        ("after 1.5 seconds", seconds_passed(1.5)),
        ("after 1 second", seconds_passed(1.0)),
    ]
    attempts: list[TapRun] = []
    state: dict | None = None
    for number, (label, condition) in enumerate(kill_points):
        directory = tmp_path / f"attempt-{number}"
        directory.mkdir()
        process = start(config, directory, catalog=catalog, state=state)
        met = wait_for(
            lambda c=condition, d=directory, p=process: c(d) or p.poll() is not None,
            timeout=120,
        )
        assert met, f"attempt {number} ({label}): neither the kill point nor the end came"
        assert process.poll() is None, f"attempt {number} ended before the kill point ({label})"
        kill(process)
        attempt = collect(directory, -9)
        attempts.append(attempt)
        state = attempt.final_state or state

    assert state is not None and state.get("bookmarks"), "no bookmark survived the kills"
    final_directory = tmp_path / "final"
    process = start(config, final_directory, catalog=catalog, state=state)
    returncode = process.wait(timeout=300)
    final = collect(final_directory, returncode)
    assert returncode == 0, final.stderr[-3000:]
    attempts.append(final)

    assert_union_matches_truth(attempts, server, OWNER_KEY, STREAMS)
    # The last attempt resumed: a stream bookmarked before it was not read again in full.
    for stream in INCREMENTAL:
        if bookmarked(state, stream):
            emitted = len(final.records.get(stream, []))
            assert emitted < len(truth_rows(server.truth(OWNER_KEY), stream)), stream
    assert final.final_state is not None
    for stream in INCREMENTAL:
        assert bookmarked(final.final_state, stream), stream


def bookmarked(state: dict, stream: str) -> bool:
    """Whether `state` holds a usable bookmark for `stream` (members keep `updated_since`)."""
    bookmark = state.get("bookmarks", {}).get(stream, {})
    return bool(bookmark.get("replication_key_value") or bookmark.get("updated_since"))


def test_kill_during_first_page_then_rerun_without_state_is_complete(
    fresh_sandbox: SandboxProcess, tmp_path: Path
) -> None:
    """Killed before any STATE: the rerun starts from scratch and nothing is missing."""
    server = fresh_sandbox
    server.latency(0.5)
    config = reliability_config(server)
    catalog = catalog_for(config, ["guests"])
    directory = tmp_path / "killed"
    process = start(config, directory, catalog=catalog)
    assert wait_for(lambda: bool(server.requests_log()) or process.poll() is not None, timeout=60)
    assert process.poll() is None
    kill(process)
    killed = collect(directory, -9)
    assert killed.final_state is None or not killed.final_state.get("bookmarks", {}).get(
        "guests", {}
    ).get("replication_key_value")

    server.latency(0)
    rerun_directory = tmp_path / "rerun"
    process = start(config, rerun_directory, catalog=catalog, state=killed.final_state)
    returncode = process.wait(timeout=120)
    rerun = collect(rerun_directory, returncode)
    assert returncode == 0, rerun.stderr[-3000:]
    assert_matches_truth(rerun, server, OWNER_KEY, ["guests"])
