"""Issue #10.2: a plan at the start, progress lines while a stream runs, and a log that grows
with minutes and streams, not with requests."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Iterator

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import tap_config
from support.tap_process import discover, select_streams
from support.tap_suite import Sync, sync

PLAN = re.compile(r"Plan: (?P<stream>\w+): about (?P<requests>\d+) requests \((?P<source>.*?)\)")
PLAN_TOTAL = re.compile(r"Plan: (?P<requests>\d+) requests in all, about (?P<time>\S+) at ")
PROGRESS = re.compile(
    r"^(?P<at>\S+ \S+) .*Progress: (?P<stream>\w+): (?P<done>\d+) of about (?P<total>\d+) "
    r"requests \((?P<percent>\d+)%\), (?P<rate>[\d.]+) requests/s, about (?P<left>\S+) left"
)
LEDGER_PATH = re.compile(r"^/rewards/members/\d+/ledger$")


@pytest.fixture(scope="module")
def medium_sandbox() -> Iterator[SandboxProcess]:
    with SandboxProcess(size="medium", seed=5, limits=False) as server:
        yield server


def member_walk(server: SandboxProcess, **settings: object) -> Sync:
    config = tap_config(server, **settings)
    catalog = select_streams(discover(config), ["members", "member_ledger"])
    result = sync(server, config, catalog=catalog)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    return result


def test_plan_and_progress_lines_of_a_run_over_a_minute(sandbox: SandboxProcess) -> None:
    # 50 requests per 20 s: the small account's 200-odd member requests take over a minute.
    result = member_walk(
        sandbox,
        requests_per_minute=50,
        rate_limit_window_seconds=20,
        progress_interval_seconds=10,
    )
    elapsed = result.finished - result.started
    assert elapsed > 60, f"the run took {elapsed:.0f}s; it must last over a minute"
    ledger_requests = sum(1 for entry in result.log if LEDGER_PATH.match(entry["path"]))
    member_pages = sum(1 for entry in result.log if entry["path"] == "/rewards/members")

    plans = {match["stream"]: match for match in PLAN.finditer(result.run.stderr)}
    assert set(plans) == {"members", "member_ledger"}, result.run.stderr[-3000:]
    assert int(plans["member_ledger"]["requests"]) == ledger_requests  # one per member
    assert int(plans["members"]["requests"]) == member_pages  # meta.last_page
    total = PLAN_TOTAL.search(result.run.stderr)
    assert total is not None and int(total["requests"]) == ledger_requests + member_pages
    assert total["time"] in {"1m20s", "1m21s"}, total.group(0)  # 201 requests at 2.5/s

    lines = [match for line in result.run.stderr.splitlines() if (match := PROGRESS.match(line))]
    ledger_lines = [line for line in lines if line["stream"] == "member_ledger"]
    assert len(ledger_lines) >= 5, result.run.stderr[-3000:]  # one per 10 s over a minute
    times = [dt.datetime.strptime(line["at"], "%Y-%m-%d %H:%M:%S,%f") for line in ledger_lines]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 9.5, gaps  # one line per interval and stream
    done = [int(line["done"]) for line in ledger_lines]
    # <= : a line may fall between the last request's slot and the stream's end (same instant)
    assert done == sorted(done) and done[-1] <= ledger_requests, done
    for line in ledger_lines:
        assert int(line["total"]) == ledger_requests
        assert int(line["percent"]) == round(100 * int(line["done"]) / ledger_requests)
        assert 0 < float(line["rate"]) <= 50, line.group(0)  # never above one window's budget


def test_log_lines_do_not_grow_with_requests(
    sandbox: SandboxProcess, medium_sandbox: SandboxProcess
) -> None:
    # Progress lines come by the clock: an hour apart, neither run has one but the first, so
    # the count does not depend on how long a loaded machine takes.
    hourly = {"requests_per_minute": 100_000, "progress_interval_seconds": 3600}
    small = member_walk(sandbox, **hourly)
    medium = member_walk(medium_sandbox, **hourly)
    assert len(medium.log) >= 5 * len(small.log), (len(small.log), len(medium.log))
    small_lines = small.run.stderr.count("\n")
    medium_lines = medium.run.stderr.count("\n")
    # never a line per request: the same lines, whatever the number of requests
    assert medium_lines <= small_lines + 2, (small_lines, medium_lines)
    assert medium_lines < 60, medium.run.stderr[-3000:]


def test_request_metrics_stay_available_by_setting(sandbox: SandboxProcess) -> None:
    result = member_walk(sandbox, requests_per_minute=100_000, log_request_metrics=True)
    durations = result.run.stderr.count('"metric":"http_request_duration"')
    assert durations == len(result.log)  # one per request, as the SDK logs them
