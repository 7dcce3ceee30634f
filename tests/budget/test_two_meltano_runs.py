"""Two `meltano run`s of one account, started at the same moment, share its one key through
the embedded store (the SQLite default): the sandbox, with spec 8's limits on in a 3-second
minute, answers no 429, its request log shows the key within 120 in every rolling window,
and each run's tables equal the truth. Then the store made unusable: the run finishes on its
own per-process limits and says so in one warning.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import demo_pipeline
from demo_pipeline import Destination
from guestdata_sandbox.testing import SandboxProcess, busiest_window
from support.pipeline import MELTANO, PROJECT_ROOT, install_plugins, throwaway_database
from support.sandbox import OWNER_KEY
from support.tap_suite import timestamp

TIME_SCALE = 0.05  # the sandbox's minute lasts 3 s
WINDOW_SECONDS = 60 * TIME_SCALE
PER_KEY = 120  # spec 8
# The load, then this project's step that turns target-postgres's naive timestamps into
# timestamptz (as the DAG runs it), so the tables compare with the truth's instants.
RUN = (
    "--environment=dev",
    *("run", "--no-install", "tap-guestdata", "target-postgres"),
    "guestdata-pg-types:timestamptz",
)
FALLBACK_WARNING = "Shared rate budget unavailable"


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> None:
    install_plugins(
        ("tap-guestdata", "target-postgres", "guestdata-pg-types"),
        tmp_path_factory.mktemp("install"),
    )


@pytest.fixture(scope="module")
def database(pg_server: Destination) -> Iterator[str]:
    with throwaway_database(pg_server, "guestdata_budget") as name:
        yield name


@pytest.fixture()
def limited_sandbox() -> Iterator[SandboxProcess]:
    with SandboxProcess(size="small", seed=13, limits=True, time_scale=TIME_SCALE) as server:
        yield server


def own_system_directory(run_dir: Path) -> Path:
    """A Meltano system directory per run (as the DAG gives each account): Meltano 4.4 writes
    a run's catalog and state to fixed names under `.meltano/run/`; plugins are linked back."""
    shared = PROJECT_ROOT / ".meltano"
    run_dir.mkdir(parents=True)
    for entry in shared.iterdir():
        if entry.name not in ("run", "logs"):
            (run_dir / entry.name).symlink_to(entry)
    return run_dir


def start_run(
    sandbox: SandboxProcess,
    server: Destination,
    database: str,
    schema: str,
    scratch: Path,
    **settings: str,
) -> subprocess.Popen[str]:
    env = demo_pipeline.meltano_env(sandbox.base_url, server, database, scratch)
    env.update(server.target_env(database, schema))
    env.update(
        {
            "TAP_GUESTDATA_API_KEY": OWNER_KEY,
            "TAP_GUESTDATA_REQUESTS_PER_MINUTE": str(PER_KEY),
            "TAP_GUESTDATA_RATE_LIMIT_WINDOW_SECONDS": f"{WINDOW_SECONDS:g}",
            "MELTANO_SYS_DIR_ROOT": str(own_system_directory(scratch / "meltano")),
            **settings,
        }
    )
    return subprocess.Popen(
        [str(MELTANO), *RUN],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(run: subprocess.Popen[str]) -> str:
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, output[-4000:]
    return output


def assert_equal_to_truth(database: str, server: Destination, schema: str, truth: dict) -> None:
    checks = demo_pipeline.check_database(server.conninfo(database), truth, schema)
    assert all(check.matches for check in checks), demo_pipeline.report(checks)
    assert sum(check.rows_in_truth for check in checks) > 0


def test_two_runs_sharing_a_key_keep_it_within_its_window_and_both_load_the_truth(
    plugins: None,
    pg_server: Destination,
    database: str,
    limited_sandbox: SandboxProcess,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    runs = [
        start_run(limited_sandbox, pg_server, database, schema, tmp_path / schema)
        for schema in ("first_run", "second_run")
    ]
    outputs = [finish(run) for run in runs]
    elapsed = time.monotonic() - started
    log = limited_sandbox.requests_log()
    statuses = Counter(entry["status"] for entry in log)
    times = [timestamp(entry["time"]) for entry in log if entry["key"] == OWNER_KEY]
    busiest = busiest_window(times, WINDOW_SECONDS)
    print(f"\n{len(log)} requests in {elapsed:.1f} s; busiest window {busiest}; {statuses}")
    assert statuses[429] == 0, statuses
    assert len(times) > 2 * PER_KEY, "too few requests to reach the key's limit"
    assert busiest <= PER_KEY, busiest
    assert busiest >= PER_KEY * 0.9, f"the key was not used to its limit: {busiest}"
    for output in outputs:
        assert FALLBACK_WARNING not in output
        assert "Rate budget shared through SQLite file" in output
    truth = limited_sandbox.truth(OWNER_KEY)
    for schema in ("first_run", "second_run"):
        assert_equal_to_truth(database, pg_server, schema, truth)


def test_an_unusable_store_falls_back_to_per_process_limits_with_one_warning(
    plugins: None,
    pg_server: Destination,
    database: str,
    limited_sandbox: SandboxProcess,
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "a-file-not-a-directory"
    blocked.write_text("")
    run = start_run(
        limited_sandbox,
        pg_server,
        database,
        "fallback_run",
        tmp_path / "fallback",
        TAP_GUESTDATA_RATE_BUDGET_STORE=f"sqlite:///{blocked}/budget.sqlite",
    )
    output = finish(run)
    assert output.count(FALLBACK_WARNING) == 1, output[-4000:]
    statuses = Counter(entry["status"] for entry in limited_sandbox.requests_log())
    assert statuses[429] == 0, statuses
    assert_equal_to_truth(database, pg_server, "fallback_run", limited_sandbox.truth(OWNER_KEY))
