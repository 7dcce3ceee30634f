"""Client-side rate limiting (spec 8): one pool of keys for the whole tap, one limiter per key.

Each key may have `limit` requests per rolling `window` seconds. A request holds a slot from
the moment it is sent; when its answer arrives the slot is dated then (later than the server's
arrival time, so our rolling count is never below the server's) and frees `window` seconds on.
In-flight requests always count. Requests go to the key with the most free slots; a 429 pauses
only its key. The per-address ceiling (X-RateLimit-Limit / -Remaining) is a second, shared
budget: what the server counts beyond our own requests is taken as other clients' use, and we
wait when that leaves no room (Remaining near 0 because of others). Our own keys' budgets are
already within the ceiling by configuration (5 x 120 = 600), so the ceiling never slows us more
than the configured per-key budgets do.

Other processes' requests on the same keys and address (two `meltano run`s, Airflow tasks on
other workers) are counted by the shared budget (http/budget.py): a key's slot is taken there
too before the request goes out. If the shared store fails, each process keeps to its share of
the limits until the store is trusted again (http/share.py); a budget that raises
BudgetUnavailable anyway leaves the pool on its own limits, said once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import requests

from tap_guestdata.http.budget import FALLBACK_WARNING, BudgetUnavailable, SharedBudget, key_id
from tap_guestdata.http.errors import retry_after_seconds

ADDRESS_LIMIT_DEFAULT = 600  # spec 8: requests per minute per IP address
SAFETY_SECONDS = 0.005  # a slot frees a little after `window`, never at the boundary


@dataclass
class KeyLimiter:
    """The rolling-window budget of one key."""

    key: str
    limit: int
    window: float
    answered: deque[float] = field(default_factory=deque)  # monotonic answer times
    in_flight: int = 0
    paused_until: float = 0.0
    shared_full_until: float = 0.0  # the shared budget said: no slot for this key before then
    shared_id: str = ""  # the key's name in the shared store (a hash: never the key itself)

    @property
    def blocked_until(self) -> float:
        """Until when this key sends nothing: a 429's Retry-After, or a full shared budget."""
        return max(self.paused_until, self.shared_full_until)

    def free_slots(self, now: float) -> int:
        while self.answered and self.answered[0] + self.window + SAFETY_SECONDS <= now:
            self.answered.popleft()
        if now < self.blocked_until:
            return 0
        return self.limit - len(self.answered) - self.in_flight

    def next_change(self, now: float) -> float:
        """When this key may next gain a slot without an answer arriving."""
        if now < self.blocked_until:
            return self.blocked_until
        if self.answered:
            return self.answered[0] + self.window + SAFETY_SECONDS
        return float("inf")


@dataclass
class AddressCeiling:
    """The per-address ceiling shared by every key from this machine (spec 8)."""

    window: float
    configured: int  # the sum of our keys' budgets per window
    limit: int = ADDRESS_LIMIT_DEFAULT  # X-RateLimit-Limit
    answered: deque[float] = field(default_factory=deque)
    in_flight: int = 0
    others: int = 0  # requests the server counted that were not ours
    others_valid_until: float = 0.0

    def free_slots(self, now: float) -> int:
        while self.answered and self.answered[0] + self.window + SAFETY_SECONDS <= now:
            self.answered.popleft()
        others = self.others if now < self.others_valid_until else 0
        capacity = max(self.limit, self.configured)
        return capacity - others - len(self.answered) - self.in_flight

    def next_change(self, now: float) -> float:
        candidates = [now + self.window / 10]
        if self.others_valid_until > now:
            candidates.append(self.others_valid_until)
        if self.answered:
            candidates.append(self.answered[0] + self.window + SAFETY_SECONDS)
        return min(candidates)

    def observe(self, response: requests.Response, now: float) -> None:
        """Read X-RateLimit-Limit / -Remaining: the server's count includes other clients.

        The reading says nothing of when others' requests age out, so it is trusted only
        briefly: on a 429 until its Retry-After (spec 8 rule 4), else for a tenth of the
        window, after which one request checks again. A stale "Remaining: 0" never holds
        every key back for a whole window."""
        try:
            limit = int(response.headers["X-RateLimit-Limit"])
            remaining = int(response.headers["X-RateLimit-Remaining"])
        except (KeyError, ValueError):
            return
        self.limit = limit
        self.others = max(0, (limit - remaining) - len(self.answered) - self.in_flight)
        if response.status_code == requests.codes.too_many_requests:
            trusted_for = retry_after_seconds(response)
        else:
            trusted_for = self.window / 10
        self.others_valid_until = now + min(trusted_for, self.window)


class PoolClosed(Exception):
    """The run ended (finished or failed) while a request waited for a slot."""


class Lease:
    """One request's slot on one key; `release` dates the slot when the answer arrives."""

    __slots__ = ("_pool", "key", "limiter", "shared_slot")

    def __init__(self, pool: KeyPool, limiter: KeyLimiter, shared_slot: str | None) -> None:
        self._pool = pool
        self.limiter = limiter
        self.key = limiter.key
        self.shared_slot = shared_slot

    def release(self, response: requests.Response | None) -> None:
        self._pool.release(self, response)

    def pause(self, seconds: float, *, whole_address: bool = False) -> None:
        self._pool.pause(self.limiter, seconds, whole_address=whole_address)


class KeyPool:
    """Every key of the account, each with its own limiter; thread-safe."""

    def __init__(
        self,
        keys: list[str],
        limit: int,
        window: float,
        *,
        shared: SharedBudget | None = None,
        api: str = "",
        logger: logging.Logger | None = None,
    ) -> None:
        self._limiters = [
            KeyLimiter(key, limit, window, shared_id=key_id(api, key)) for key in keys
        ]
        self._address = AddressCeiling(window, configured=limit * len(keys))
        self._condition = threading.Condition()
        self._turn = 0
        self._closed = False
        self._shared = shared
        self._logger = logger or logging.getLogger("tap-guestdata")

    @property
    def shared(self) -> SharedBudget | None:
        """The shared budget in use; None once it failed (or was never configured)."""
        return self._shared

    def _shared_failed(self, error: BudgetUnavailable) -> None:
        """spec 8 is still kept per process: warn once, and go on without the store."""
        if self._shared is None:
            return
        self._shared = None
        self._logger.warning(FALLBACK_WARNING, error)

    def close(self) -> None:
        """End of run: waiting requests give up (a failed run's workers stop quickly)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def acquire(self) -> Lease:
        """Block until some key has a free slot, then take it."""
        with self._condition:
            while True:
                if self._closed:
                    raise PoolClosed("the run has ended")
                now = time.monotonic()
                if self._address.free_slots(now) > 0:
                    for limiter in self._by_free_slots(now):
                        granted, shared_slot = self._take_shared(limiter, now)
                        if granted:
                            limiter.in_flight += 1
                            self._address.in_flight += 1
                            return Lease(self, limiter, shared_slot)
                wakes = [each.next_change(now) for each in self._limiters]
                if self._address.free_slots(now) <= 0:
                    wakes.append(self._address.next_change(now))
                wake = min(wakes)
                self._condition.wait(timeout=None if wake == float("inf") else wake - now)

    def _by_free_slots(self, now: float) -> list[KeyLimiter]:
        """Keys with a free slot here, the least loaded first (ties rotate, so keys share)."""
        count = len(self._limiters)
        rotated = [self._limiters[(self._turn + offset) % count] for offset in range(count)]
        self._turn = (self._turn + 1) % count
        free = [(limiter.free_slots(now), limiter) for limiter in rotated]
        ordered = sorted(
            ((slots, index, limiter) for index, (slots, limiter) in enumerate(free) if slots > 0),
            key=lambda entry: (-entry[0], entry[1]),
        )
        return [limiter for _, _, limiter in ordered]

    def _take_shared(self, limiter: KeyLimiter, now: float) -> tuple[bool, str | None]:
        """A slot for this key (and this address) in the shared budget, taken before sending."""
        shared = self._shared
        if shared is None:
            return True, None
        try:
            grant = shared.take(limiter.shared_id)
        except BudgetUnavailable as error:
            self._shared_failed(error)
            return True, None
        if grant.slot is None:
            limiter.shared_full_until = now + grant.wait_seconds
            return False, None
        return True, grant.slot

    def release(self, lease: Lease, response: requests.Response | None) -> None:
        shared = self._shared
        if lease.shared_slot is not None and shared is not None:
            try:  # dated again at the answer: the server counted it before now (spec 8)
                shared.answered(lease.limiter.shared_id, lease.shared_slot)
            except BudgetUnavailable as error:
                with self._condition:
                    self._shared_failed(error)
        with self._condition:
            now = time.monotonic()
            lease.limiter.in_flight -= 1
            lease.limiter.answered.append(now)
            self._address.in_flight -= 1
            self._address.answered.append(now)
            if response is not None:
                self._address.observe(response, now)
            self._condition.notify_all()

    def pause(self, limiter: KeyLimiter, seconds: float, *, whole_address: bool) -> None:
        """After a 429: that key (or, at the address ceiling, every key) waits `seconds`."""
        with self._condition:
            until = time.monotonic() + seconds
            for each in self._limiters if whole_address else [limiter]:
                each.paused_until = max(each.paused_until, until)
            self._condition.notify_all()
