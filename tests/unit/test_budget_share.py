"""The rate budget through its store's faults (http/share.py), on a fake store and clock.

While the store is down a process keeps to its share of what it last saw; when the store
answers again (restarted empty, or not) the process re-records its own slots and keeps its
share for one window before trusting the store's grants."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field

import pytest

from guestdata_sandbox.testing import busiest_window
from tap_guestdata.http.budget import (
    UNANSWERED_MARGIN_SECONDS,
    BudgetUnavailable,
    Grant,
    Limits,
    Sighting,
    redis_location,
)
from tap_guestdata.http.share import ShareFallback

WINDOW = 60.0
LIMITS = Limits(per_key=120, per_address=600, window_seconds=WINDOW, address="worker-1")
SECRET_URL = "redis://:hunter2@broker.internal:6390/4"


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeStore:
    """Grants every slot and reports the sharing the test sets; fails while `down`."""

    clock: FakeClock
    limits: Limits = LIMITS
    description: str = f"Redis {redis_location(SECRET_URL)}"
    epoch: str = "first"
    key_processes: int = 1
    address_processes: int = 1
    key_count: int = 0
    address_count: int = 0
    down: bool = False
    takes: int = 0
    recorded: list[tuple[str, str, float]] = field(default_factory=list)

    def _check(self) -> None:
        if self.down:
            raise BudgetUnavailable(f"{self.description}: Connection refused")

    def take(self, key_id: str) -> Grant:
        self._check()
        self.takes += 1
        seen = Sighting(
            self.epoch,
            self.clock.now + 500,  # the store's clock runs 500 s ahead of the process's
            self.key_processes,
            self.address_processes,
            self.key_count,
            self.address_count,
        )
        return Grant(secrets.token_hex(4), 0.0, seen)

    def answered(self, key_id: str, slot: str) -> None:
        self._check()

    def record(self, slots: list[tuple[str, str, float]]) -> tuple[str, float]:
        self._check()
        self.recorded += slots
        return self.epoch, self.clock.now + 500

    def close(self) -> None:
        pass


def drain(budget: ShareFallback, clock: FakeClock, keys: list[str], seconds: float) -> list[float]:
    """Take every slot the budget grants, answered at once, for `seconds`; their times."""
    granted: list[float] = []
    end = clock.now + seconds
    while clock.now < end:
        for key in keys:
            grant = budget.take(key)
            if grant.slot is not None:
                granted.append(clock.now)
                budget.answered(key, grant.slot)
        clock.now += 0.25
    return granted


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


def test_while_the_store_is_down_each_key_keeps_to_its_share(clock: FakeClock) -> None:
    store = FakeStore(clock, key_processes=3, address_processes=3, key_count=1, address_count=1)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    assert budget.take("key-a").slot is not None  # the store says: 3 processes share key-a
    store.down = True
    granted = drain(budget, clock, ["key-a"], 4 * WINDOW)
    assert store.takes == 1  # never asked again while down; it would refuse anyway
    assert busiest_window(granted, WINDOW) == 120 // 3
    assert len(granted) >= 3 * (120 // 3)  # and it keeps sending at its share, not less


def test_while_the_store_is_down_the_address_keeps_to_its_share(clock: FakeClock) -> None:
    store = FakeStore(clock, key_processes=1, address_processes=8)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    keys = [f"key-{index}" for index in range(5)]
    for key in keys:
        assert budget.take(key).slot is not None
    store.down = True
    clock.now += WINDOW  # past the sighting's window: the rolling share alone binds
    granted = drain(budget, clock, keys, 3 * WINDOW)
    assert busiest_window(granted, WINDOW) == 600 // 8


def test_in_the_window_of_the_last_sighting_new_slots_fit_what_others_hold(
    clock: FakeClock,
) -> None:
    # 100 of key-a's 120 were in the window, two processes share it: 10 more each at most.
    store = FakeStore(clock, key_processes=2, address_processes=2, key_count=100, address_count=100)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    assert budget.take("key-a").slot is not None
    seen_at = clock.now
    store.down = True
    granted = drain(budget, clock, ["key-a"], WINDOW)
    assert len(granted) == (120 - 100) // 2
    clock.now = seen_at + WINDOW + UNANSWERED_MARGIN_SECONDS + 0.01
    assert budget.take("key-a").slot is not None  # that window has passed


def test_a_key_unseen_before_the_fault_waits_out_one_window(clock: FakeClock) -> None:
    store = FakeStore(clock)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    assert budget.take("key-a").slot is not None
    store.down = True
    refused = budget.take("key-b")
    assert refused.slot is None
    assert refused.wait_seconds == pytest.approx(WINDOW + UNANSWERED_MARGIN_SECONDS)


def test_the_fault_is_warned_once_naming_the_store_without_its_password(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = FakeStore(clock, address_processes=4)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    budget.take("key-a")
    with caplog.at_level(logging.INFO, logger="test"):
        for _ in range(2):  # two outages, many takes each
            store.down = True
            drain(budget, clock, ["key-a"], 5)
            store.down = False
            drain(budget, clock, ["key-a"], 2 * WINDOW)
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1, [record.getMessage() for record in caplog.records]
    message = warnings[0].getMessage()
    assert "Redis broker.internal:6390/4" in message
    assert "4 processes" in message
    assert "hunter2" not in caplog.text
    # Then one line per outage and one per return: failed retries of the store say nothing.
    assert len(caplog.records) == 4, [record.getMessage() for record in caplog.records]
    assert caplog.text.count("answers again after") == 2


@pytest.mark.parametrize("empty", [True, False], ids=["back-empty", "back-with-its-data"])
def test_a_store_that_answers_again_is_re_taught_and_trusted_one_window_later(
    clock: FakeClock, empty: bool
) -> None:
    store = FakeStore(clock, key_processes=2, address_processes=2)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    before = drain(budget, clock, ["key-a"], 10)  # 40 slots through the store
    store.down = True
    during = drain(budget, clock, ["key-a"], 5)
    store.down, store.takes = False, 0
    if empty:
        store.epoch = "second"
    back = clock.now
    drain(budget, clock, ["key-a"], 1)
    # Every own slot of the last window, on the store's clock, before any grant of the store's.
    recorded = {slot: at for slot, _, at in store.recorded}
    assert len(recorded) >= len(before) + len(during)
    assert min(recorded.values()) == pytest.approx(before[0] + 500)
    assert store.takes == 0
    assert budget.on_share
    drain(budget, clock, ["key-a"], WINDOW + UNANSWERED_MARGIN_SECONDS - (clock.now - back))
    assert budget.on_share is False
    drain(budget, clock, ["key-a"], 1)
    assert store.takes > 0  # trusted again: grants come from the store


def test_a_process_idle_through_the_outage_notices_the_empty_store_by_its_epoch(
    clock: FakeClock,
) -> None:
    store = FakeStore(clock, key_processes=2, address_processes=2)
    budget = ShareFallback(store, logging.getLogger("test"), clock=clock)
    before = drain(budget, clock, ["key-a"], 5)
    clock.now += 20  # the store was killed and restarted empty meanwhile: no call failed
    store.epoch, store.takes = "second", 0
    assert budget.take("key-a").slot is not None
    assert store.takes == 1  # that grant came from a store that forgot the last window...
    assert budget.on_share  # ...so it is not trusted: this process keeps its share
    assert len({slot for slot, _, _ in store.recorded}) >= len(before)
    assert len(drain(budget, clock, ["key-a"], WINDOW)) <= 120 // 2
