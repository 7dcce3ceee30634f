"""The shared rate budget's stores keep spec 8's rolling window exactly, across processes.

Three processes take slots as fast as the store grants them, on two keys that share one
address; each notes the moment after its grant (later than the store's own date, as a
server's arrival time is) and only then reports the answer. In every rolling window: no key
above its limit, the address not above its own, and the work is all done (the store is not
simply refusing). The same for the embedded SQLite store and for Redis (db 13).
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
import redis

from guestdata_sandbox.testing import busiest_window
from tap_guestdata.http.budget import (
    BudgetUnavailable,
    Limits,
    RedisBudget,
    SharedBudget,
    SqliteBudget,
    open_budget,
)

WINDOW_SECONDS = 1.0
PER_KEY = 20
PER_ADDRESS = 30  # below 2 x PER_KEY: the address is the binding limit for two busy keys
PROCESSES = 3
TAKES_PER_PROCESS = 40  # 120 in all: at 30 a window, at least four windows' worth
REDIS_URL = "redis://127.0.0.1:6379/13"  # not the cluster tests' Redis db (11)
LIMITS = Limits(PER_KEY, PER_ADDRESS, WINDOW_SECONDS, address="test-address")


def open_store(store: str) -> SharedBudget:
    budget = open_budget(store, LIMITS)
    assert budget is not None
    return budget


def take_slots(store: str, worker: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    budget = open_store(store)
    granted: list[tuple[str, float]] = []
    for index in range(TAKES_PER_PROCESS):
        key = "key-a" if (index + worker) % 2 else "key-b"
        while True:
            grant = budget.take(key)
            if grant.slot is not None:
                break
            time.sleep(grant.wait_seconds)
        granted.append((key, time.time()))  # "arrival": after the store dated the slot
        budget.answered(key, grant.slot)
    results.put(granted)


def run_processes(store: str) -> list[tuple[str, float]]:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=take_slots, args=(store, worker, results))
        for worker in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    granted = [grant for _ in workers for grant in results.get(timeout=60)]
    for worker in workers:
        worker.join(timeout=10)
    return granted


@pytest.fixture()
def redis_store() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    for name in client.scan_iter("tap-guestdata:rate-budget:*"):
        client.delete(name)
    return REDIS_URL


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_three_processes_keep_every_rolling_window_per_key_and_per_address(
    kind: str, tmp_path: Path, redis_store: str
) -> None:
    store = f"sqlite:///{tmp_path / 'budget.sqlite'}" if kind == "sqlite" else redis_store
    granted = run_processes(store)
    assert len(granted) == PROCESSES * TAKES_PER_PROCESS
    by_key: dict[str, list[float]] = {}
    for key, moment in granted:
        by_key.setdefault(key, []).append(moment)
    busiest = {key: busiest_window(times, WINDOW_SECONDS) for key, times in by_key.items()}
    address = busiest_window([moment for _, moment in granted], WINDOW_SECONDS)
    assert all(count <= PER_KEY for count in busiest.values()), busiest
    assert address <= PER_ADDRESS, address
    assert address >= PER_ADDRESS - 2, f"the store held back: {address} in the busiest window"
    # 120 slots at 30 a window: three full windows pass between the first grant and the last,
    # and not many more (the processes' start is not counted: it varies with the machine).
    windows_needed = len(granted) / PER_ADDRESS - 1
    span = max(moment for _, moment in granted) - min(moment for _, moment in granted)
    assert windows_needed * WINDOW_SECONDS <= span < (windows_needed + 2) * WINDOW_SECONDS, span


def test_a_slot_never_answered_ages_out_within_one_window(tmp_path: Path) -> None:
    # A process killed mid-request holds nothing: its slots simply leave the window.
    budget = SqliteBudget(tmp_path / "budget.sqlite", LIMITS)
    for _ in range(PER_KEY):
        assert budget.take("key-a").slot is not None  # never answered: the process "died"
    refused = budget.take("key-a")
    assert refused.slot is None
    assert 0 < refused.wait_seconds <= WINDOW_SECONDS + 0.2
    time.sleep(refused.wait_seconds)
    assert budget.take("key-a").slot is not None


def test_an_unreachable_or_unusable_store_raises_budget_unavailable(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    with pytest.raises(BudgetUnavailable):
        SqliteBudget(blocked / "budget.sqlite", LIMITS)
    with pytest.raises(BudgetUnavailable):
        RedisBudget("redis://127.0.0.1:1/11", LIMITS)  # nothing listens on port 1
