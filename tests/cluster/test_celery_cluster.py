"""The accounts DAG on a real Airflow CeleryExecutor: `scripts/cluster` with two workers, each in
its own network namespace with its own address, against the sandbox's real limits.

Three sandbox accounts (Growth with Rewards and two keys, a key limited to some venues, Rewards
off), stream groups core and members, the planner's lanes over the two workers' queues:

1. an uninterrupted run: every account's tables equal its truth; each key's requests leave from
   the address of the worker its lane's queue maps to; no address or key over its ceiling in any
   rolling window; no key in two running tasks at once; no 429;
2. `down` leaves nothing, and a second `up` works (deploying the Growth account's members
   group alone, for the next test);
3. a worker SIGKILLed in the middle of that member-ledger sync, once Meltano has stored the
   sync's state: the run still succeeds after one retry, the tables equal the truth, and the
   stream's requests stay within 1.10x of the uninterrupted run's.

Figures (up time, wall time beside the planner's forecast, requests per address, the kill's
costs) are printed and saved to `<tmp>/cluster-figures.json`; `pytest -s` shows them.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from celery_cluster import DAG_ID, Rest
from cluster_testing import (
    ACCOUNTS,
    HEARTBEAT_TIMEOUT,
    KILL_ACCOUNTS,
    NAME,
    PER_ADDRESS,
    PER_KEY,
    REDIS_DB,
    STREAMS,
    VARIABLES,
    WINDOW_SECONDS,
    LocalCluster,
    busiest_window,
    ledger_requests,
    requests_by,
    run_dag,
    save_figures,
    table_checks,
    when,
)
from guestdata_sandbox.testing import SandboxProcess
from plan_workers import planned_seconds
from support.sandbox import last_seq

pytestmark = pytest.mark.cluster

TASKS = [f"{account['name']}.{group}" for account in ACCOUNTS["accounts"] for group in STREAMS]
KILLED_TASK = "harbour.members"  # members, then a ledger request per member (201 requests)
MAX_RATIO = 1.10
SUPERVISOR_HEARTBEAT_SECONDS = 5  # Airflow's [workers] min_heartbeat_interval (default)
# The kill test's answers take this long, so the members sync outlasts target-postgres's first
# flush (the SDK drains, and so emits the state Meltano stores, every 5 minutes) and can be
# killed after it: 201 requests, 4 at a time (max_workers), about 6 minutes.
KILL_LATENCY_SECONDS = 7.0
FIGURES: dict[str, Any] = {}


def key_of(task_id: str, plan: dict[str, Any]) -> str:
    return VARIABLES[plan[task_id].key_variable]


def test_three_accounts_on_two_workers_load_their_truth_within_the_limits(
    cluster: LocalCluster, sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    FIGURES["up_seconds"] = round(cluster.up(), 1)
    state, plan = cluster.state, cluster.plan()
    assert sorted(plan) == sorted(TASKS)
    first = last_seq(sandbox)

    run = run_dag(cluster, timeout=900)

    assert run.state == "success", {task: ti["state"] for task, ti in run.tasks.items()}
    assert {task: (ti["state"], ti["try_number"]) for task, ti in run.tasks.items()} == {
        task: ("success", 1) for task in TASKS
    }
    assert table_checks(sandbox, cluster) == {}
    assert cluster.keys_in_logs() == [], "a key in clear in a log"
    log = sandbox.requests_log(after=first)
    assert log, "the sandbox saw no request"

    # Each key's requests leave from the address of the worker its lane's queue maps to.
    expected_address = {key_of(task, plan): state.queues[plan[task].lane.queue] for task in plan}
    addresses = {key: set() for key in expected_address}
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

    # No key in two running tasks at once; every request of a key inside one of its tasks.
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for task, ti in run.tasks.items():
        spans.setdefault(key_of(task, plan), []).append(
            (when(ti["start_date"]), when(ti["end_date"]), task)
        )
    for key, intervals in spans.items():
        intervals.sort()
        for (_, end, task), (start, _, following) in itertools.pairwise(intervals):
            assert start >= end, f"{key}: {following} started before {task} ended"
    outside = [
        e for e in log if not any(start <= e["time"] <= end for start, end, _ in spans[e["key"]])
    ]
    assert outside == [], outside[:3]

    # The planner's forecast for the same tasks (their measured requests) and addresses.
    weighted = []
    for task, spec in plan.items():
        start, end = when(run.tasks[task]["start_date"]), when(run.tasks[task]["end_date"])
        count = sum(1 for e in log if e["key"] == key_of(task, plan) and start <= e["time"] <= end)
        weighted.append(replace(spec, weight=count))
    forecast = planned_seconds(weighted, cooldown=WINDOW_SECONDS, minute=WINDOW_SECONDS)
    by_address = requests_by(log, "ip")
    active_minutes = {a: max((max(t) - min(t)) / 60, 1 / 60) for a, t in by_address.items()}
    FIGURES.update(
        run_seconds=round(run.seconds, 1),
        planner_forecast_seconds=round(forecast, 1),
        requests=len(log),
        requests_per_address={a: len(t) for a, t in by_address.items()},
        busiest_window_per_address=per_address,
        busiest_window_per_key=per_key,
        window_seconds=WINDOW_SECONDS,
        requests_per_minute_per_address_while_active={
            a: round(len(t) / active_minutes[a], 1) for a, t in by_address.items()
        },
        uninterrupted_ledger_requests=ledger_requests(log, key_of(KILLED_TASK, plan)),
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
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres") as connection:
        names = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{NAME}\\_%",)
        ).fetchall()
    found += [f"database {name}" for (name,) in names]
    keys = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).dbsize()
    found += [f"{keys} Redis keys"] if keys else []
    found += [f"folder {home}"] if cluster.home.exists() else []
    return found


def test_down_leaves_nothing_and_a_second_up_works(cluster: LocalCluster) -> None:
    if not cluster.is_up():
        cluster.up()
    FIGURES["down_seconds"] = round(cluster.down(), 1)

    assert leftovers(cluster) == []

    FIGURES["second_up_seconds"] = round(cluster.up(KILL_ACCOUNTS), 1)
    status = cluster.command("status", timeout=60).stdout
    assert "GONE" not in status and "'scheduler': 'healthy'" in status, status


def test_a_worker_killed_mid_ledger_sync_costs_one_retry(
    cluster: LocalCluster, sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    baseline = FIGURES.get("uninterrupted_ledger_requests")
    assert baseline, "needs the uninterrupted run of the first test (run the whole module)"
    if not cluster.is_up():
        cluster.up(KILL_ACCOUNTS)
    plan = cluster.plan()
    assert list(plan) == [KILLED_TASK]
    key = key_of(KILLED_TASK, plan)
    worker = int(plan[KILLED_TASK].lane.queue.removeprefix("worker_"))
    state_id = "prod:tap-guestdata--members-to-target-postgres:harbour"
    first = last_seq(sandbox)
    killed: dict[str, float] = {}

    def kill_once_state_is_stored(rest: Rest, run_id: str) -> None:
        if killed:
            return
        partial, completed = cluster.meltano_state(state_id)
        if "member_ledger" not in partial + completed:
            ti = rest.call("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{KILLED_TASK}")
            assert ti["state"] not in ("success", "failed"), "ended before Meltano stored a state"
            return
        killed["ledger_requests"] = ledger_requests(sandbox.requests_log(after=first), key)
        killed["at"] = time.time()
        cluster.command("kill-worker", str(worker), timeout=60)
        time.sleep(5)  # the machine's process manager brings the worker back
        cluster.command("start-worker", str(worker), timeout=300)
        killed["worker_back_at"] = time.time()

    sandbox.latency(KILL_LATENCY_SECONDS)
    try:
        run = run_dag(cluster, timeout=1500, during=kill_once_state_is_stored)
    finally:
        sandbox.latency(0)

    assert killed, "the worker was never killed"
    assert 0 < killed["ledger_requests"] < baseline, "killed mid-sync"
    assert run.state == "success", (
        {task: [t["state"] for t in tries] for task, tries in run.tries.items()},
        f"task logs: {cluster.logs}",
    )
    tries = run.tries[KILLED_TASK]
    assert [t["state"] for t in tries] == ["failed", "success"], tries
    assert table_checks(sandbox, cluster) == {}

    # The heartbeat timeout noticed the lost worker; the retry resumed from the stored state.
    noticed = when(tries[0]["end_date"]) - killed["at"]
    retried = when(tries[1]["start_date"]) - killed["at"]
    # The timeout runs from the try's last heartbeat, which the supervisor sends every
    # SUPERVISOR_HEARTBEAT_SECONDS, so up to that long before the kill.
    earliest = HEARTBEAT_TIMEOUT - SUPERVISOR_HEARTBEAT_SECONDS
    assert earliest <= noticed <= HEARTBEAT_TIMEOUT + 60, noticed
    log = sandbox.requests_log(after=first)
    total = ledger_requests(log, key)
    assert baseline <= total <= MAX_RATIO * baseline, (total, baseline)
    assert all(e["status"] != 429 for e in log)
    FIGURES.update(
        kill={
            "ledger_requests_before_kill": killed["ledger_requests"],
            "ledger_requests_both_tries": total,
            "uninterrupted": baseline,
            "ratio": round(total / baseline, 3),
            "seconds_kill_to_failed": round(noticed, 1),
            "seconds_kill_to_retry_start": round(retried, 1),
            "run_seconds": round(run.seconds, 1),
            "retried_tasks": sorted(t for t, ti in run.tasks.items() if ti["try_number"] > 1),
        }
    )
    save_figures(tmp_path_factory.getbasetemp() / "cluster-figures.json", FIGURES)
    cluster.down()
    assert leftovers(cluster) == []
