"""No rolling window passes spec 8's limits when the budget's Redis goes away mid-window.

Three budgets (threads acting as processes: each its own `ShareFallback` over its own
`RedisBudget`, its own process name) take slots as fast as they are granted, on two keys from
one address, on a Redis server of this test's own (never the shared one). Each notes the
moment its grant returns. Mid-run, the server is killed (SIGKILL) and started again empty, or
shut down with its AOF and started again. No key's window and no address window may pass its
limit, and the budgets keep sending (at their shares) throughout.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from guestdata_sandbox.testing import busiest_window
from support.services import OwnRedis
from tap_guestdata.http.budget import Limits, RedisBudget
from tap_guestdata.http.share import ShareFallback

WINDOW_SECONDS = 1.5
PER_KEY = 20
PER_ADDRESS = 30  # below 2 x PER_KEY: the address binds, as 5 keys x 120 = 600 does
PROCESSES = 3
KEYS = ("key-a", "key-b")
LIMITS = Limits(PER_KEY, PER_ADDRESS, WINDOW_SECONDS, address="test-address")

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")


@pytest.fixture(params=[False, True], ids=["killed-back-empty", "planned-restart-with-aof"])
def own_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path, persistent=request.param)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def take_until(budget: ShareFallback, stop: threading.Event, worker: int, granted: list) -> None:  # type: ignore[type-arg]
    index = worker
    while not stop.is_set():
        key = KEYS[index % len(KEYS)]
        grant = budget.take(key)
        if grant.slot is None:
            time.sleep(min(grant.wait_seconds, 0.02))
            continue
        granted.append((key, time.time()))  # "arrival": after the store (or share) dated it
        budget.answered(key, grant.slot)
        index += 1


def test_a_store_restart_mid_window_passes_no_window(own_redis: OwnRedis) -> None:
    budgets = [
        ShareFallback(RedisBudget(own_redis.url, LIMITS), logging.getLogger(f"process-{n}"))
        for n in range(PROCESSES)
    ]
    granted: list[tuple[str, float]] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=take_until, args=(budget, stop, n, granted))
        for n, budget in enumerate(budgets)
    ]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.5 * WINDOW_SECONDS)  # the store full: every process at its limits
        down_at = time.time()
        own_redis.shut_down() if own_redis.persistent else own_redis.kill()
        time.sleep(1.5 * WINDOW_SECONDS)  # past the last sighting's window: shares send
        own_redis.start()
        back_at = time.time()
        time.sleep(3 * WINDOW_SECONDS)  # the share, the re-learning window, then the store
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for budget in budgets:
            budget.close()
    started, ended = granted[0][1], granted[-1][1]
    by_key = {key: [at for name, at in granted if name == key] for key in KEYS}
    busiest = {key: busiest_window(times, WINDOW_SECONDS) for key, times in by_key.items()}
    address = busiest_window([at for _, at in granted], WINDOW_SECONDS)
    sent_down = sum(1 for _, at in granted if down_at <= at < back_at)
    sent_after = sum(1 for _, at in granted if back_at + WINDOW_SECONDS <= at)
    print(
        f"\n{'AOF restart' if own_redis.persistent else 'kill, back empty'}: {len(granted)} slots"
        f" in {ended - started:.1f} s, busiest windows {busiest} and address {address}"
        f" (limits {PER_KEY}, {PER_ADDRESS}); {sent_down} while down"
        f" ({(back_at - down_at):.2f} s), {sent_after} in the last"
        f" {ended - back_at - WINDOW_SECONDS:.1f} s"
    )
    assert all(count <= PER_KEY for count in busiest.values()), busiest
    assert address <= PER_ADDRESS, address
    # Kept sending at its shares while down, and at the store's full rate once trusted again.
    assert sent_down >= PER_ADDRESS // 2, sent_down
    last_windows = (ended - back_at - WINDOW_SECONDS) / WINDOW_SECONDS
    assert sent_after >= 0.5 * PER_ADDRESS * last_windows, (sent_after, last_windows)
    if own_redis.persistent:
        keys = redis.Redis.from_url(own_redis.url).keys("tap-guestdata:rate-budget:epoch")
        assert keys, "the AOF kept the store's epoch"
