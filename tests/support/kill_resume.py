"""Kill a sync with SIGKILL when it has sent a given share of its requests, resume it from the
last STATE it wrote, and count what that cost (the sandbox's request log) and whether a row
was lost. Used by tests/reliability/test_resume_anywhere.py and by `bench/resume.py`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    assert_union_matches_truth,
    catalog_for,
    collect,
    reliability_config,
    run,
    start,
    wait_for,
)
from support.sandbox import OWNER_KEY, last_seq
from support.tap_process import TapRun, kill

# Where a sync is killed: shares of the uninterrupted run's requests.
KILL_POINTS = [0.25, 0.6, 0.9]
# The account each stream is measured on: big enough that one page (or one in-flight request),
# the most a kill can waste, is a small share of the sync, as on a real account.
STREAM_SIZES = {
    "guests": "medium",
    "member_ledger": "small",
    "daily_stats": "small",
    "daily_account_stats": "small",
    "rewards": "medium",
    "redemptions": "large",
}

# One request at a time, so "60% of the requests" is a point in the sync, and STATE after
# every row: a test measures what the resume logic keeps, not the STATE interval.
RESUME_SETTINGS: dict[str, Any] = {"max_workers": 1, "state_interval_seconds": 0}


@dataclass
class KillAndResume:
    """One kill at `fraction` of the uninterrupted run's requests, then a resumed run."""

    stream: str
    fraction: float
    uninterrupted_requests: int
    killed_requests: int
    resumed_requests: int

    @property
    def ratio(self) -> float:
        return (self.killed_requests + self.resumed_requests) / self.uninterrupted_requests


class RequestCounter:
    """API requests the sandbox logged since it was created (the control surface is not logged)."""

    def __init__(self, server: SandboxProcess) -> None:
        self.server = server
        self.seq = last_seq(server)
        self.count = 0

    def poll(self) -> int:
        entries = self.server.requests_log(after=self.seq)
        if entries:
            self.seq = max(entry["seq"] for entry in entries)
            self.count += len(entries)
        return self.count


def uninterrupted(server: SandboxProcess, stream: str, **settings: Any) -> tuple[int, TapRun]:
    config = reliability_config(server, **{**RESUME_SETTINGS, **settings})
    counter = RequestCounter(server)
    result = run(config, catalog=catalog_for(config, [stream]), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return counter.poll(), result


def kill_and_resume(
    server: SandboxProcess,
    stream: str,
    fraction: float,
    uninterrupted_requests: int,
    directory: Path,
    **settings: Any,
) -> tuple[KillAndResume, list[TapRun]]:
    """Kill at `fraction` of the requests, resume from the last STATE; both runs' output."""
    config = reliability_config(server, **{**RESUME_SETTINGS, **settings})
    catalog = catalog_for(config, [stream])
    counter = RequestCounter(server)
    process = start(config, directory, catalog=catalog)
    kill_at = max(1, int(uninterrupted_requests * fraction))
    reached = wait_for(lambda: counter.poll() >= kill_at or process.poll() is not None, timeout=600)
    assert reached and process.poll() is None, f"{stream}: the run ended before {fraction:.0%}"
    kill(process)
    killed = collect(directory, -9)
    killed_requests = counter.poll()
    counter = RequestCounter(server)
    resumed = run(config, catalog=catalog, state=killed.final_state, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = KillAndResume(
        stream, fraction, uninterrupted_requests, killed_requests, counter.poll()
    )
    return result, [killed, resumed]


def measure(
    server: SandboxProcess, stream: str, fractions: list[float], **settings: Any
) -> list[KillAndResume]:
    """Kill at each fraction and resume; fails if the two runs together lost a row."""
    total, _ = uninterrupted(server, stream, **settings)
    results = []
    with tempfile.TemporaryDirectory(prefix=f"kill-resume-{stream}-") as scratch:
        for number, fraction in enumerate(fractions):
            result, runs = kill_and_resume(
                server, stream, fraction, total, Path(scratch) / str(number), **settings
            )
            assert_union_matches_truth(runs, server, OWNER_KEY, [stream])
            results.append(result)
    return results
