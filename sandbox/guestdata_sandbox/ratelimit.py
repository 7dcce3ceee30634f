"""spec 8: rolling-minute limits per key (120) and per address (600), tighter without a key.

`time_scale` shrinks the minute (0.1: 120 requests per 6 s) and scales Retry-After with it.
A refused request uses no quota. With enforcement off the headers are still computed and sent.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

PER_KEY = 120  # spec 8: per key, rolling minute
PER_ADDRESS = 600  # spec 8: per IP, for requests that carry a key; X-RateLimit-Limit
UNAUTHENTICATED = 10  # spec 8: "far more tightly"; the number is not shown
MINUTE_S = 60.0
RETRY_AFTER_MAX = 60  # spec 8: Retry-After up to 60


@dataclass
class Decision:
    allowed: bool
    limit: int
    remaining: int
    retry_after: int = 0


class RateLimiter:
    def __init__(self, enabled: bool = True, time_scale: float = 1.0) -> None:
        self.enabled, self.time_scale = enabled, time_scale
        self.lock = threading.Lock()
        self.buckets: dict[tuple[str, str], deque[float]] = {}

    @property
    def window(self) -> float:
        return MINUTE_S * self.time_scale

    def configure(self, enabled: bool | None = None, time_scale: float | None = None) -> None:
        with self.lock:
            if enabled is not None:
                self.enabled = enabled
            if time_scale is not None and time_scale > 0:
                self.time_scale = time_scale
            self.buckets.clear()

    def _bucket(self, name: tuple[str, str], now: float) -> deque[float]:
        bucket = self.buckets.setdefault(name, deque())
        horizon = now - self.window
        while bucket and bucket[0] <= horizon:
            bucket.popleft()
        return bucket

    def _wait(self, bucket: deque[float], limit: int, now: float) -> float:
        """Seconds until the window frees a slot (0 when one is free now)."""
        if len(bucket) < limit:
            return 0.0
        return bucket[len(bucket) - limit] + self.window - now

    def check(self, ip: str, key: str | None) -> Decision:
        now = time.monotonic()
        with self.lock:
            if key is None:
                buckets = [(self._bucket(("anonymous", ip), now), UNAUTHENTICATED)]
                shown = buckets[0]
                limit = UNAUTHENTICATED
            else:
                shown = self._bucket(("ip", ip), now)
                buckets = [(self._bucket(("key", key), now), PER_KEY), (shown, PER_ADDRESS)]
                limit = PER_ADDRESS
            wait = max(self._wait(bucket, ceiling, now) for bucket, ceiling in buckets)
            if wait > 0 and self.enabled:
                retry = min(RETRY_AFTER_MAX, max(1, math.ceil(wait)))
                return Decision(False, limit, max(0, limit - len(shown)), retry)
            for bucket, _ in buckets:
                bucket.append(now)
                if len(bucket) > 4 * PER_ADDRESS:  # limits off: keep memory bounded
                    bucket.popleft()
            return Decision(True, limit, max(0, limit - len(shown)))
