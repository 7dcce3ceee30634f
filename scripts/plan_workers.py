"""How many workers: first-sync and nightly durations of many accounts on W worker addresses.

    .venv/bin/python scripts/plan_workers.py --accounts 10 --size medium --keys 2 --workers 1
    .venv/bin/python scripts/plan_workers.py --table      # the table of docs/airflow-accounts.md
    .venv/bin/python scripts/plan_workers.py ... --simulate   # also a simulated run

The plan is the DAG's own (`tap_guestdata/airflow/accounts.py`): every account on one queue
(an address), one task per account (a task per group for a large one), a queue running up to
`TASKS_PER_QUEUE` tasks at once, each task using every key of its account, and the shared rate
budget keeping every key to 120 and every address to 600 requests per rolling minute (spec 8).
A task costs `TASK_START_SECONDS` before its first request (Airflow, Meltano, the tap and the
target starting; measured on the cluster, docs/bench-airflow.md) and then sends its requests at its
account's keys' rate. A queue's time is the longest of: its tasks laid onto its slots; its
requests at 600 a minute; any one account's requests at 120 a minute per key (plus a start).
Requests per group: `SIZE_REQUESTS`; `--first-requests` and `--nightly-requests` take an
account's own totals (the tap's `Plan: N requests in all` line).

`--simulate` checks the closed form with a discrete-event run against the sandbox's own rate
limiter (`RateLimiter`, on a virtual clock): each task, after its start cost, sends one
request at a time per key through the shared budget (per key and per address); the sandbox's
limiter answers (a 429 would be counted). A plan that broke spec 8 would show 429s.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
import types
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tap_guestdata.airflow.accounts import (
    PER_ADDRESS_PER_MINUTE,
    PER_KEY_PER_MINUTE,
    SIZE_REQUESTS,
    TASKS_PER_QUEUE,
    Account,
    AccountsConfig,
    TaskSpec,
    plan_tasks,
)

PHASES = ("first", "incremental")
WINDOWS_HOURS = {"first": 8.0, "incremental": 1.0}  # the README table's windows
# One task's fixed cost: Airflow starting it on a worker, Meltano, the tap and the target
# starting and ending: 15.5 to 18.7 s, mean 17.3, measured on scripts/cluster (2 workers, this
# 2-core machine; tests/cluster's figures, docs/bench-airflow.md "A task's fixed cost").
TASK_START_SECONDS = 17.0
LATENCY_SECONDS = 0.05  # one answer, one key, in the simulation and the plan


@dataclass(frozen=True)
class Workload:
    """`count` accounts of one size, each with `keys` keys."""

    count: int
    size: str
    keys: int


def accounts_config(workloads: Sequence[Workload], workers: int) -> AccountsConfig:
    accounts = []
    for index, workload in enumerate(workloads):
        for n in range(workload.count):
            name = f"{workload.size}_{index}_{n}"
            keys = tuple(f"{name}_key_{k}" for k in range(1, workload.keys + 1))
            accounts.append(Account(name, keys, size=workload.size))
    return AccountsConfig(tuple(accounts), tuple(f"worker_{w}" for w in range(1, workers + 1)))


def planned_tasks(
    workloads: Sequence[Workload],
    workers: int,
    phase: str,
    requests: dict[str, dict[str, int]] | None = None,
) -> tuple[list[TaskSpec], dict[str, int]]:
    """The DAG's tasks for this configuration, each weighted by its requests in this phase,
    and every account's number of keys."""
    config = accounts_config(workloads, workers)
    figures = requests or {size: SIZE_REQUESTS[size][phase] for size in SIZE_REQUESTS}
    sizes = {account.name: account.size or "small" for account in config.accounts}
    tasks = [
        replace(task, weight=sum(figures[sizes[task.account]][group] for group in task.groups))
        for task in plan_tasks(config, refresh=False)
    ]
    return tasks, {account.name: len(account.key_variables) for account in config.accounts}


def account_rate(keys: int) -> int:
    """Requests a minute an account's task can send: its keys' budget, within one address."""
    return min(PER_KEY_PER_MINUTE * keys, PER_ADDRESS_PER_MINUTE)


def task_seconds(
    requests: int,
    keys: int = 1,
    latency: float = LATENCY_SECONDS,
    minute: float = 60.0,
    start: float = TASK_START_SECONDS,
) -> float:
    """One task alone: its start, then its keys' rolling minute lets it send a minute's budget
    at once (one answer after another per key), then the next a minute after the first..."""
    if requests <= 0:
        return start
    budget = account_rate(keys)
    full_minutes, last = divmod(requests - 1, budget)
    return start + full_minutes * minute + (last // keys + 1) * latency


def planned_seconds(
    tasks: Sequence[TaskSpec],
    keys: dict[str, int],
    latency: float = LATENCY_SECONDS,
    minute: float = 60.0,
    start: float = TASK_START_SECONDS,
) -> float:
    """The busiest queue: the longest of its tasks laid onto its slots in DAG order, its
    requests at 600 a minute, and any one account's requests at its keys' rate (each plus a
    start). An account's tasks start together and share its keys fairly: a task is done once
    the account has sent, for each of its tasks, up to this task's requests."""
    by_queue: dict[str, list[TaskSpec]] = {}
    for task in tasks:
        by_queue.setdefault(task.queue, []).append(task)
    longest = 0.0
    for queued in by_queue.values():
        weights: dict[str, list[int]] = {}
        for task in queued:
            weights.setdefault(task.account, []).append(task.weight)
        slots = [0.0] * TASKS_PER_QUEUE
        for task in queued:
            shared = sum(min(other, task.weight) for other in weights[task.account])
            free = slots.index(min(slots))
            slots[free] += task_seconds(shared, keys[task.account], latency, minute, start)
        # The rolling minute: a minute's budget goes at once, the next a minute later.
        address_keys = PER_ADDRESS_PER_MINUTE // PER_KEY_PER_MINUTE
        total = sum(task.weight for task in queued)
        floors = [task_seconds(total, address_keys, latency, minute, start)]
        floors += [
            task_seconds(sum(counts), keys[account], latency, minute, start)
            for account, counts in weights.items()
        ]
        longest = max(longest, *slots, *floors)
    return longest


def rate_limiter_class() -> tuple[type, types.ModuleType]:
    try:
        from guestdata_sandbox import ratelimit
    except ImportError:  # the sandbox's package may move to sandbox/
        from sandbox import ratelimit  # type: ignore[no-redef]
    return ratelimit.RateLimiter, ratelimit


@dataclass
class Simulation:
    seconds: float
    requests: int
    refused: int  # 429s from the sandbox's limiter


def simulate(
    tasks: Sequence[TaskSpec],
    keys: dict[str, int],
    latency: float = LATENCY_SECONDS,
    seed: int = 1,
    start: float = TASK_START_SECONDS,
    minute: float = 60.0,
) -> Simulation:
    """Every request of `tasks` through the sandbox's RateLimiter in virtual time.

    Each queue starts its tasks in order as its `TASKS_PER_QUEUE` slots free; a task waits its
    start cost, then sends one request at a time per key of its account, each taking a slot in
    the shared budget (the key's and the address's rolling minute, dated at the answer, as the
    tap does) before it goes; answers take `latency` on average (0.2x to 1.8x, seeded)."""
    rng = random.Random(seed)
    limiter_class, module = rate_limiter_class()
    clock = {"now": 0.0}
    saved_time = module.time
    module.time = types.SimpleNamespace(monotonic=lambda: clock["now"])
    try:
        limiter = limiter_class(enabled=True, time_scale=minute / 60.0)
        waiting: dict[str, deque[TaskSpec]] = {}
        for task in tasks:
            waiting.setdefault(task.queue, deque()).append(task)
        left = {task.task_id: task.weight for task in tasks}
        senders_busy = {task.task_id: 0 for task in tasks}
        budget: dict[str, deque[float]] = {}  # key or address -> answer times in the window
        # events: (time, sequence, kind, queue, task id, key index)
        events: list[tuple[float, int, str, str, str, int]] = []
        sequence = 0

        def push(at: float, kind: str, queue: str, task_id: str = "", key: int = 0) -> None:
            nonlocal sequence
            sequence += 1
            heapq.heappush(events, (at, sequence, kind, queue, task_id, key))

        def in_window(name: str, now: float) -> deque[float]:
            times = budget.setdefault(name, deque())
            while times and times[0] <= now - minute:
                times.popleft()
            return times

        by_id = {task.task_id: task for task in tasks}
        for queue in waiting:
            for _ in range(TASKS_PER_QUEUE):
                push(0.0, "slot", queue)
        end = requests = refused = 0.0
        while events:
            now, _, kind, queue, task_id, key = heapq.heappop(events)
            clock["now"] = now
            if kind == "slot":  # a free slot on the queue: the next task starts
                if waiting[queue]:
                    task = waiting[queue].popleft()
                    for index in range(keys[task.account]):
                        senders_busy[task.task_id] += 1
                        push(now + start, "send", queue, task.task_id, index)
                    if task.weight == 0:
                        end = max(end, now + start)
                continue
            task = by_id[task_id]
            if left[task_id] <= 0:
                senders_busy[task_id] -= 1
                if senders_busy[task_id] == 0:  # the task ends: its slot frees
                    end = max(end, now)
                    push(now, "slot", queue)
                continue
            key_name, address = f"{task.account}/{key}", queue
            key_times, address_times = in_window(key_name, now), in_window(address, now)
            waits = []
            if len(key_times) >= PER_KEY_PER_MINUTE:
                waits.append(key_times[0] + minute + 1e-6)
            if len(address_times) >= PER_ADDRESS_PER_MINUTE:
                waits.append(address_times[0] + minute + 1e-6)
            if waits:
                push(max(waits), "send", queue, task_id, key)
                continue
            decision = limiter.check(address, key_name)
            if not decision.allowed:
                refused += 1
                push(now + decision.retry_after, "send", queue, task_id, key)
                continue
            answered = now + latency * rng.uniform(0.2, 1.8)
            key_times.append(answered)
            address_times.append(answered)
            requests += 1
            left[task_id] -= 1
            push(answered, "send", queue, task_id, key)
        return Simulation(end, int(requests), int(refused))
    finally:
        module.time = saved_time


def workers_to_fit(
    workloads: Sequence[Workload], phase: str, window_hours: float, most: int = 200
) -> int | None:
    """The fewest addresses whose plan fits the window (None: a single task is longer)."""
    for workers in range(1, most + 1):
        tasks, keys = planned_tasks(workloads, workers, phase)
        if planned_seconds(tasks, keys) <= window_hours * 3600:
            return workers
        if len({task.queue for task in tasks}) < workers:
            return None  # queues left idle: more addresses cannot help
    return None


def duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def table() -> str:
    """The README's table: 1, 10, 50 accounts of each size, 1-5 keys each."""
    lines = [
        "| accounts | keys each | first sync, 1 worker | workers for 8 h | nightly, 1 worker "
        "| workers for 1 h |",
        "|---|---|---|---|---|---|",
    ]
    for size in SIZE_REQUESTS:
        for count in (1, 10, 50):
            for keys in range(1, 6):
                workload = [Workload(count, size, keys)]
                cells = []
                for phase in PHASES:
                    one = planned_seconds(*planned_tasks(workload, 1, phase))
                    fit = workers_to_fit(workload, phase, WINDOWS_HOURS[phase])
                    cells += [duration(one), "none fits" if fit is None else str(fit)]
                lines.append(f"| {count} {size} | {keys} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=1)
    parser.add_argument("--size", choices=sorted(SIZE_REQUESTS), default="small")
    parser.add_argument("--keys", type=int, default=1, choices=range(1, 6))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--window-hours", type=float, default=8.0)
    parser.add_argument("--first-requests", type=int, help="per account (the tap's plan line)")
    parser.add_argument("--nightly-requests", type=int, help="per account (the tap's plan line)")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args(argv)
    if args.table:
        print(table())
        return 0
    workload = [Workload(args.accounts, args.size, args.keys)]
    totals = {"first": args.first_requests, "incremental": args.nightly_requests}
    for phase in PHASES:
        figures = None
        if totals[phase]:
            shares = SIZE_REQUESTS[args.size][phase]
            scale = totals[phase] / sum(shares.values())
            figures = {args.size: {group: round(n * scale) for group, n in shares.items()}}
        tasks, keys = planned_tasks(workload, args.workers, phase, figures)
        planned = planned_seconds(tasks, keys)
        fit = workers_to_fit(workload, phase, args.window_hours)
        line = (
            f"{phase}: {sum(t.weight for t in tasks)} requests, {duration(planned)} on "
            f"{args.workers} worker(s); fits {args.window_hours:g} h with "
            f"{'no number of' if fit is None else fit} worker(s)"
        )
        if args.simulate:
            run = simulate(tasks, keys)
            line += f"; simulated {duration(run.seconds)} ({run.refused} 429s)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
