"""The accounts DAG on a real Airflow CeleryExecutor: `scripts/cluster` with two workers, each in
its own network namespace with its own address, against the sandbox's real limits.

Three sandbox accounts (Growth with Rewards and two keys, a key limited to some venues, Rewards
off), stream groups core, members and offers (the Growth account every group), the planner's
queues for the accounts (one task each):

1. an uninterrupted run (one task per small account, every key of the account in it, the
   shared rate budget in the broker's Redis), then the run's one `dbt_build` of every account's
   models: every account's tables equal its truth, and so do its rows of the models (its
   account row, fct_venue_daily, marketing_audience, dim_members); each account's requests
   leave from the address of its queue's worker; no address or key over its ceiling in any
   rolling window; no 429;
2. `down` leaves nothing, and a second `up` works (deploying the Growth account's members
   group alone, `--no-models`, for the next test);
3. a worker SIGKILLed in the middle of that member-ledger sync, once Meltano has stored the
   sync's state: the killed task's slots in the shared budget free within one window, the run
   still succeeds after one retry, the tables equal the truth, and the stream's requests stay
   within 1.15x (aim 1.10x) of the uninterrupted run's; the key the kill left on disk (the run's
   Meltano configuration) is gone once the retry has run: no file of the project holds a key.

Figures (up time, wall time beside the planner's forecast, requests per address, the kill's
costs) are printed and saved to `<tmp>/cluster-figures.json`; `pytest -s` shows them.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from cluster_testing import (
    ACCOUNTS,
    HEARTBEAT_TIMEOUT,
    KILL_ACCOUNTS,
    NAME,
    PER_ADDRESS,
    PER_KEY,
    POSTGRES_URL,
    REDIS_URL,
    VARIABLES,
    WINDOW_SECONDS,
    LocalCluster,
    ledger_requests,
    model_checks,
    requests_by,
    run_dag,
    save_figures,
    table_checks,
    when,
)
from guestdata_cluster import DAG_ID, ClusterError, Rest
from guestdata_cluster.state import SUPERVISOR_HEARTBEAT_SECONDS
from guestdata_sandbox.testing import SandboxProcess, busiest_window
from plan_workers import planned_seconds
from support.sandbox import last_seq
from tap_guestdata.http.budget import REDIS_PREFIX, api_origin, key_id

pytestmark = pytest.mark.cluster

# Small accounts: one mapped task each, labelled with the account; a plan task per queue.
TASKS = [f"{account['name']}.load" for account in ACCOUNTS["accounts"]]
KILLED_TASK = "harbour.load"  # members alone: members, then a ledger request per member
# The retry's requests over an uninterrupted run's. 1.10 is the aim (#34); under a CI run's load
# (five suites on two cores) 1.115 and 1.135 were measured with the kill sent through
# `scripts/cluster`, whose start-up let the task run on past its stored state. The kill is
# now sent in-process; the ceiling keeps a margin until a quiet run shows the 1.10 again.
MAX_RATIO = 1.15
# The kill test's answers take this long, so the members sync outlasts target-postgres's first
# flush (the SDK drains, and so emits the state Meltano stores, every 5 minutes) and can be
# killed after it: 201 requests, 4 at a time (max_workers, one key), about 6 minutes.
KILL_LATENCY_SECONDS = 7.0
FIGURES: dict[str, Any] = {}


def keys_of(account: str) -> set[str]:
    """The keys (values) of an account's key variables."""
    entry = next(a for a in ACCOUNTS["accounts"] if a["name"] == account)
    return {VARIABLES[name] for name in entry["keys"]}


def test_three_accounts_on_two_workers_load_their_truth_within_the_limits(
    cluster: LocalCluster, sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    FIGURES["up_seconds"] = round(cluster.up(), 1)
    state, plan = cluster.state, cluster.plan()
    assert sorted(plan) == sorted(TASKS)
    first = last_seq(sandbox)

    run = run_dag(cluster, timeout=900)

    assert run.state == "success", {task: ti["state"] for task, ti in run.tasks.items()}
    loads = {task: ti for task, ti in run.tasks.items() if task.endswith(".load")}
    assert {task: (ti["state"], ti["try_number"]) for task, ti in loads.items()} == {
        task: ("success", 1) for task in TASKS
    }
    plans = {task: ti["state"] for task, ti in run.tasks.items() if task.endswith(".plan")}
    assert plans and set(plans.values()) == {"success"}, plans
    build = run.tasks["dbt_build"]
    assert (build["state"], build["try_number"]) == ("success", 1), f"task logs: {cluster.logs}"
    assert table_checks(sandbox, cluster) == {}
    assert model_checks(sandbox, cluster) == {}
    assert cluster.keys_in_logs() == [], "a key in clear in a log"
    assert cluster.keys_at_rest() == [], "a key left in a file of the workers' project"
    # Keys and the warehouse came from Airflow connections (no Variable holds a key, no worker's
    # environment a credential), and no file of a worker holds a key or the warehouse password.
    logs = cluster.task_logs()
    for name in (account["name"] for account in ACCOUNTS["accounts"]):
        keys = len(keys_of(name))
        assert f"{name}: {keys} key(s) from connection guestdata_{name}" in logs, name
    assert logs.count("warehouse: credentials from connection guestdata_warehouse") >= 4
    variables = Rest(state).login().call("GET", "/variables")["variables"]
    assert [v["key"] for v in variables if v["key"] in VARIABLES] == []
    assert cluster.secrets_on_workers() == [], "a key or the warehouse password in a file"
    log = sandbox.requests_log(after=first)
    assert log, "the sandbox saw no request"

    # Each account's requests leave from the address of its queue's worker.
    expected_address = {
        key: state.queues[spec.queue] for spec in plan.values() for key in keys_of(spec.account)
    }
    addresses: dict[str, set[str]] = {key: set() for key in expected_address}
    for entry in log:
        addresses[entry["key"]].add(entry["ip"])
    assert addresses == {key: {address} for key, address in expected_address.items()}
    assert len({entry["ip"] for entry in log}) >= 2, "one address: the workers were not spread"

    # Limits: no 429 (none injected here), no ceiling passed in any rolling window.
    assert [e for e in log if e["status"] == 429] == []
    per_address = {a: busiest_window(t, WINDOW_SECONDS) for a, t in requests_by(log, "ip").items()}
    per_key = {k: busiest_window(t, WINDOW_SECONDS) for k, t in requests_by(log, "key").items()}
    assert max(per_address.values()) <= PER_ADDRESS, per_address
    assert max(per_key.values()) <= PER_KEY, per_key

    # Every request of an account falls inside its task; each task used all its account's keys.
    spans = {
        spec.account: (when(run.tasks[task]["start_date"]), when(run.tasks[task]["end_date"]))
        for task, spec in plan.items()
    }
    account_of_key = {key: spec.account for spec in plan.values() for key in keys_of(spec.account)}
    outside = [
        e
        for e in log
        if not spans[account_of_key[e["key"]]][0] <= e["time"] <= spans[account_of_key[e["key"]]][1]
    ]
    assert outside == [], outside[:3]
    assert {e["key"] for e in log} == set(account_of_key), "every key at work"

    # The planner's forecast for the same tasks (their measured requests); each task's fixed
    # cost: its time in Airflow less the span of its requests.
    weighted, fixed = [], {}
    for task, spec in plan.items():
        times = [e["time"] for e in log if account_of_key[e["key"]] == spec.account]
        weighted.append(replace(spec, weight=len(times)))
        start, end = spans[spec.account]
        fixed[task] = round((end - start) - (max(times) - min(times)), 1)
    keys = {spec.account: len(keys_of(spec.account)) for spec in plan.values()}
    # The planner with this run's own mean cost per task (it varies with the machine's load:
    # CI runs three suites at once); the sandbox answers in milliseconds, four at a time per
    # key (the tap's max_workers). Printed, not asserted: bench/cluster_budget.py holds the
    # planner to a quiet cluster within 10%.
    task_start = sum(fixed.values()) / len(fixed)
    forecast = planned_seconds(
        weighted, keys, latency=0.01, minute=WINDOW_SECONDS, start=task_start
    )
    by_address = requests_by(log, "ip")
    active_minutes = {a: max((max(t) - min(t)) / 60, 1 / 60) for a, t in by_address.items()}
    FIGURES.update(
        run_seconds=round(run.seconds, 1),
        models_build_seconds=round(when(build["end_date"]) - when(build["start_date"]), 1),
        planner_forecast_seconds=round(forecast, 1),
        task_fixed_seconds=fixed,
        requests=len(log),
        requests_per_address={a: len(t) for a, t in by_address.items()},
        busiest_window_per_address=per_address,
        busiest_window_per_key=per_key,
        window_seconds=WINDOW_SECONDS,
        requests_per_minute_per_address_while_active={
            a: round(len(t) / active_minutes[a], 1) for a, t in by_address.items()
        },
        uninterrupted_ledger_requests=ledger_requests(log, keys_of("harbour")),
    )
    save_figures(tmp_path_factory.getbasetemp() / "cluster-figures.json", FIGURES)


def leftovers(cluster: LocalCluster) -> list[str]:
    """What the system still holds of the cluster, read from the system itself."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [f"namespace {n}" for n in netns.split() if n.startswith(f"{NAME}-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [
        f"link {line.split(':')[1].strip()}"
        for line in links.splitlines()
        if line.split(":")[1].strip().startswith(f"{NAME}-")
    ]
    home = str(cluster.home)
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if home in command or f"GUESTDATA_CLUSTER={NAME}\0".encode() in environ:
                found.append(f"process {proc.name}: {command[:80]}")
    with psycopg.connect(f"{POSTGRES_URL}/postgres") as connection:
        names = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{NAME}\\_%",)
        ).fetchall()
    found += [f"database {name}" for (name,) in names]
    keys = redis.Redis.from_url(REDIS_URL).dbsize()
    found += [f"{keys} Redis keys"] if keys else []
    found += [f"folder {home}"] if cluster.home.exists() else []
    return found


def test_down_leaves_nothing_and_a_second_up_works(cluster: LocalCluster) -> None:
    if not cluster.is_up():
        cluster.up()
    FIGURES["down_seconds"] = round(cluster.down(), 1)

    assert leftovers(cluster) == []

    FIGURES["second_up_seconds"] = round(cluster.up(KILL_ACCOUNTS, models=False), 1)
    status = cluster.command("status", timeout=60).stdout
    assert "GONE" not in status and "'scheduler': 'healthy'" in status, status


def test_a_worker_killed_mid_ledger_sync_costs_one_retry(
    cluster: LocalCluster, sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    baseline = FIGURES.get("uninterrupted_ledger_requests")
    assert baseline, "needs the uninterrupted run of the first test (run the whole module)"
    if not cluster.is_up():
        cluster.up(KILL_ACCOUNTS, models=False)
    plan = cluster.plan()
    assert list(plan) == [KILLED_TASK]
    keys = keys_of("harbour")  # the kill deployment gives it its first key alone
    worker = int(plan[KILLED_TASK].queue.removeprefix("worker_"))
    state_id = "prod:tap-guestdata-to-target-postgres:harbour"
    budget = redis.Redis.from_url(REDIS_URL)
    origin = api_origin(cluster.api_url)
    key_sets = [f"{REDIS_PREFIX}:key:{key_id(origin, key)}" for key in keys]

    def slots_in_window() -> int:
        """The killed task's keys' slots the shared budget still counts (spec 8 window)."""
        seconds, micros = budget.time()
        horizon = (seconds + micros / 1e6 - WINDOW_SECONDS - 0.1) * 1000
        return slots_since(horizon / 1000)

    def slots_since(instant: float) -> int:
        """The killed task's keys' slots dated (taken, or re-dated at their answer) after it."""
        return sum(int(budget.zcount(name, f"({instant * 1000}", "+inf")) for name in key_sets)

    def newest_slot() -> float:
        """When the newest slot of the killed task's keys was dated (epoch seconds; 0 once the
        budget has dropped them all, two windows after the last)."""
        newest = [budget.zrange(name, -1, -1, withscores=True) for name in key_sets]
        return max((score for slots in newest for _, score in slots), default=0.0) / 1000

    first = last_seq(sandbox)
    killed: dict[str, float] = {}

    def kill_once_state_is_stored(rest: Rest, run_id: str) -> None:
        if killed:
            return
        partial, completed = cluster.meltano_state(state_id)
        if "member_ledger" not in partial + completed:
            try:
                ti = rest.task_instance(DAG_ID, run_id, KILLED_TASK)
            except ClusterError:
                return  # not expanded yet: its queue's plan task is still running
            assert ti["state"] not in ("success", "failed"), "ended before Meltano stored a state"
            return
        # Just before the kill: the task is mid-sync, its slots in the window (read after the
        # kill, the count raced the kill command and the counts below on a loaded machine).
        killed["slots_at_kill"] = slots_in_window()
        killed["at"] = time.time()
        assert cluster.kill_worker(worker) > 0, "worker processes killed"
        dead = time.time()  # the command can take seconds on a loaded machine
        # Counted after the kill (nothing is sent until the retry, a heartbeat timeout later),
        # so the count does not stand between the stored state and the kill.
        killed["ledger_requests"] = ledger_requests(sandbox.requests_log(after=first), keys)
        # A SIGKILL runs no cleanup: the killed run's configuration (its key) is on disk,
        # readable by the worker's user alone, until the retry's hook sweeps it.
        killed["key_files_after_kill"] = len(cluster.keys_at_rest())
        # A dead process takes no slot and re-dates none at an answer: no slot of its keys is
        # dated after its death, so what it held is free one window after its newest slot.
        # Read from the budget's own dates, not timed: the counts above take seconds here.
        time.sleep(1)
        killed["slots_dated_after_death"] = slots_since(dead)
        killed["slots_free_after"] = max(0.0, newest_slot() + WINDOW_SECONDS - dead)
        time.sleep(1)  # the machine's process manager brings the worker back
        cluster.command("start-worker", str(worker), timeout=300)
        killed["worker_back_at"] = time.time()

    sandbox.latency(KILL_LATENCY_SECONDS)
    try:
        run = run_dag(cluster, timeout=1500, during=kill_once_state_is_stored)
    finally:
        sandbox.latency(0)

    assert killed, "the worker was never killed"
    assert 0 < killed["ledger_requests"] < baseline, "killed mid-sync"
    assert killed["slots_at_kill"] > 0, "the killed task held slots in the shared budget"
    assert killed["slots_dated_after_death"] == 0, killed
    assert killed["slots_free_after"] <= WINDOW_SECONDS, killed
    assert run.state == "success", (
        {task: [t["state"] for t in tries] for task, tries in run.tries.items()},
        f"task logs: {cluster.logs}",
    )
    tries = run.tries[KILLED_TASK]
    assert [t["state"] for t in tries] == ["failed", "success"], tries
    assert table_checks(sandbox, cluster) == {}
    assert killed["key_files_after_kill"] > 0, "the kill left the run's configuration"
    assert cluster.keys_at_rest() == [], "the retry swept it; its own run removed its own"

    # The heartbeat timeout noticed the lost worker; the retry resumed from the stored state.
    noticed = when(tries[0]["end_date"]) - killed["at"]
    retried = when(tries[1]["start_date"]) - killed["at"]
    # The timeout runs from the try's last heartbeat, which the supervisor sends every
    # SUPERVISOR_HEARTBEAT_SECONDS, so up to that long before the kill.
    earliest = HEARTBEAT_TIMEOUT - SUPERVISOR_HEARTBEAT_SECONDS
    assert earliest <= noticed <= HEARTBEAT_TIMEOUT + 60, noticed
    log = sandbox.requests_log(after=first)
    total = ledger_requests(log, keys)
    assert baseline <= total <= MAX_RATIO * baseline, (total, baseline)
    assert all(e["status"] != 429 for e in log)
    FIGURES.update(
        kill={
            "ledger_requests_before_kill": killed["ledger_requests"],
            "ledger_requests_both_tries": total,
            "uninterrupted": baseline,
            "ratio": round(total / baseline, 3),
            "seconds_kill_to_failed": round(noticed, 1),
            "seconds_dead_to_slots_free": round(killed["slots_free_after"], 1),
            "seconds_kill_to_retry_start": round(retried, 1),
            "key_files_after_kill": killed["key_files_after_kill"],
            "run_seconds": round(run.seconds, 1),
            "retried_tasks": sorted(t for t, ti in run.tasks.items() if ti["try_number"] > 1),
        }
    )
    save_figures(tmp_path_factory.getbasetemp() / "cluster-figures.json", FIGURES)
    cluster.down()
    assert leftovers(cluster) == []
