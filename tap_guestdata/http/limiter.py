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
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import requests

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

    def free_slots(self, now: float) -> int:
        while self.answered and self.answered[0] + self.window + SAFETY_SECONDS <= now:
            self.answered.popleft()
        if now < self.paused_until:
            return 0
        return self.limit - len(self.answered) - self.in_flight

    def next_change(self, now: float) -> float:
        """When this key may next gain a slot without an answer arriving."""
        if now < self.paused_until:
            return self.paused_until
        if self.answered:
            return self.answered[0] + self.window + SAFETY_SECONDS
        return float("inf")


@dataclass
class AddressBudget:
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

    __slots__ = ("_pool", "key", "limiter")

    def __init__(self, pool: KeyPool, limiter: KeyLimiter) -> None:
        self._pool = pool
        self.limiter = limiter
        self.key = limiter.key

    def release(self, response: requests.Response | None) -> None:
        self._pool.release(self, response)

    def pause(self, seconds: float, *, whole_address: bool = False) -> None:
        self._pool.pause(self.limiter, seconds, whole_address=whole_address)


class KeyPool:
    """Every key of the account, each with its own limiter; thread-safe."""

    def __init__(self, keys: list[str], limit: int, window: float) -> None:
        self._limiters = [KeyLimiter(key, limit, window) for key in keys]
        self._address = AddressBudget(window, configured=limit * len(keys))
        self._condition = threading.Condition()
        self._turn = 0
        self._closed = False

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
                limiter = self._least_loaded(now)
                if limiter is not None and self._address.free_slots(now) > 0:
                    limiter.in_flight += 1
                    self._address.in_flight += 1
                    return Lease(self, limiter)
                wakes = [each.next_change(now) for each in self._limiters]
                if self._address.free_slots(now) <= 0:
                    wakes.append(self._address.next_change(now))
                wake = min(wakes)
                self._condition.wait(timeout=None if wake == float("inf") else wake - now)

    def _least_loaded(self, now: float) -> KeyLimiter | None:
        count = len(self._limiters)
        best: KeyLimiter | None = None
        best_free = 0
        for offset in range(count):  # rotate ties so keys share the load evenly
            limiter = self._limiters[(self._turn + offset) % count]
            free = limiter.free_slots(now)
            if free > best_free:
                best, best_free = limiter, free
        self._turn = (self._turn + 1) % count
        return best

    def release(self, lease: Lease, response: requests.Response | None) -> None:
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
