"""How many workers: first-sync and nightly durations of many accounts on W worker addresses.

    .venv/bin/python scripts/plan_workers.py --accounts 10 --size medium --keys 2 --workers 1
    .venv/bin/python scripts/plan_workers.py --table          # the README's table (docs/airflow.md)
    .venv/bin/python scripts/plan_workers.py ... --simulate   # also a simulated run

The plan is the DAG's own: `tap_guestdata/airflow/accounts.py` spreads the keys over the 5 lanes of
every address (one running task per lane, so 5 x 120 = 600 requests a minute per address, spec
8), each account's stream groups go round-robin over its keys, and a lane runs its tasks one
after another. A task of n requests takes about n / 120 minutes (its one key's budget: 120
at once, then 120 a minute after the first, ...) plus the cool-down it holds its slot for
(60 s); a lane's time is the sum of its tasks'; the run takes as long as the busiest lane.
Requests per group: `SIZE_REQUESTS` (first sync from bench/first_sync_cost.py, nightly = a
quiet night's incremental from bench/request_count.py); `--first-requests` and
`--nightly-requests` take an account's own totals (the tap's `Plan: N requests in all` line)
and split them over the groups as the size's figures are split.

`--simulate` checks the closed form with a discrete-event run against the sandbox's own rate
limiter (`RateLimiter`, on a virtual clock): every request of every task is sent by a client
that keeps, like the tap, to 120 per rolling minute per key, from its queue's address; the
sandbox's limiter answers (a 429 waits Retry-After); the run ends when the last lane's last
cool-down does. A plan that put more than 600 a minute on an address would show 429s.
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
    PER_KEY_PER_MINUTE,
    SIZE_REQUESTS,
    Account,
    AccountsConfig,
    TaskSpec,
    plan_tasks,
)

PHASES = ("first", "incremental")
WINDOWS_HOURS = {"first": 8.0, "incremental": 1.0}  # the README table's windows
COOLDOWN_SECONDS = 60.0  # guestdata_key_cooldown_seconds' default
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
) -> list[TaskSpec]:
    """The DAG's tasks (keys and lanes as `plan_tasks` gives them for this configuration),
    each weighted by its requests in this phase."""
    config = accounts_config(workloads, workers)
    figures = requests or {size: SIZE_REQUESTS[size][phase] for size in SIZE_REQUESTS}
    sizes = {account.name: account.size or "small" for account in config.accounts}
    return [
        replace(task, weight=figures[sizes[task.account]][task.group])
        for task in plan_tasks(config, refresh=False)
    ]


def task_seconds(requests: int, latency: float = LATENCY_SECONDS, minute: float = 60.0) -> float:
    """One key's task: the rolling minute lets it send 120 at once (one answer after another),
    then the next 120 a minute after the first of them, and so on. `minute`: the length of the
    rate-limit window (a scaled sandbox's is shorter)."""
    if requests <= 0:
        return 0.0
    full_minutes, last = divmod(requests - 1, PER_KEY_PER_MINUTE)
    return full_minutes * minute + (last + 1) * latency


def planned_seconds(
    tasks: Sequence[TaskSpec],
    cooldown: float = COOLDOWN_SECONDS,
    latency: float = LATENCY_SECONDS,
    minute: float = 60.0,
) -> float:
    """The busiest lane: the sum of its tasks' times plus a cool-down each."""
    lanes: dict[str, float] = {}
    for task in tasks:
        seconds = task_seconds(task.weight, latency, minute) + cooldown
        lanes[task.lane.pool] = lanes.get(task.lane.pool, 0.0) + seconds
    return max(lanes.values(), default=0.0)


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
    cooldown: float = COOLDOWN_SECONDS,
    latency: float = LATENCY_SECONDS,
    seed: int = 1,
) -> Simulation:
    """Every request of `tasks`, lane by lane, through the sandbox's RateLimiter in virtual time.

    Answers take `latency` on average (uniform from 0.2x to 1.8x, seeded); the client dates a
    request's slot in its own rolling minute when the answer arrives, as the tap does."""
    rng = random.Random(seed)
    limiter_class, module = rate_limiter_class()
    clock = {"now": 0.0}
    saved_time = module.time
    module.time = types.SimpleNamespace(monotonic=lambda: clock["now"])
    try:
        limiter = limiter_class(enabled=True, time_scale=1.0)
        lanes: dict[str, list[TaskSpec]] = {}
        for task in tasks:
            lanes.setdefault(task.lane.pool, []).append(task)
        # per lane: [task index, requests left in it]
        progress = {pool: [0, lane[0].weight] for pool, lane in lanes.items()}
        sent_by_key: dict[tuple[str, str], deque[float]] = {}
        events = [(0.0, pool) for pool in lanes]
        heapq.heapify(events)
        end = requests = refused = 0
        while events:
            now, pool = heapq.heappop(events)
            clock["now"] = now
            index, left = progress[pool]
            if left == 0:  # the task is done: its slot is held for the cool-down
                done_at = now + cooldown
                index += 1
                if index == len(lanes[pool]):
                    end = max(end, done_at)
                    continue
                progress[pool] = [index, lanes[pool][index].weight]
                heapq.heappush(events, (done_at, pool))
                continue
            task = lanes[pool][index]
            key = (task.account, task.key_variable)
            window = sent_by_key.setdefault(key, deque())
            while window and window[0] <= now - 60.0:
                window.popleft()
            if len(window) >= PER_KEY_PER_MINUTE:  # the tap's own budget: wait for a slot
                heapq.heappush(events, (window[0] + 60.0 + 1e-6, pool))
                continue
            decision = limiter.check(task.lane.queue, f"{task.account}/{task.key_variable}")
            if not decision.allowed:
                refused += 1
                heapq.heappush(events, (now + decision.retry_after, pool))
                continue
            answered = now + latency * rng.uniform(0.2, 1.8)
            window.append(answered)
            requests += 1
            progress[pool][1] = left - 1
            heapq.heappush(events, (answered, pool))
        return Simulation(end, requests, refused)
    finally:
        module.time = saved_time


def workers_to_fit(
    workloads: Sequence[Workload], phase: str, window_hours: float, most: int = 200
) -> int | None:
    """The fewest addresses whose plan fits the window (None: a single task is longer)."""
    for workers in range(1, most + 1):
        tasks = planned_tasks(workloads, workers, phase)
        if planned_seconds(tasks) <= window_hours * 3600:
            return workers
        if len({task.lane.pool for task in tasks}) < 5 * workers:
            return None  # lanes left idle: more addresses cannot help
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
                    one = planned_seconds(planned_tasks(workload, 1, phase))
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
        tasks = planned_tasks(workload, args.workers, phase, figures)
        planned = planned_seconds(tasks)
        fit = workers_to_fit(workload, phase, args.window_hours)
        line = (
            f"{phase}: {sum(t.weight for t in tasks)} requests, {duration(planned)} on "
            f"{args.workers} worker(s); fits {args.window_hours:g} h with "
            f"{'no number of' if fit is None else fit} worker(s)"
        )
        if args.simulate:
            run = simulate(tasks)
            line += f"; simulated {duration(run.seconds)} ({run.refused} 429s)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
