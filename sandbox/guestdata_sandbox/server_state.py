"""What the HTTP layer and the control surface share: the store, the limiter, injected faults,
added latency and the request log. The server reads it on every request; `/_sandbox/` sets it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from guestdata_sandbox.ratelimit import RateLimiter
from guestdata_sandbox.store import Store

LOG_LIMIT = 200_000
FAULT_KINDS = (
    "rate_limit",
    "server_error",
    "bad_gateway_html",
    "slow",
    "drop",
    "truncated",
    "not_found",
)


@dataclass
class Fault:
    """A failure of a proxy in front of the API, for the next `count` requests under `path`."""

    kind: str
    count: int
    path: str = ""
    retry_after: int = 1
    seconds: float = 1.0


class ServerState:
    def __init__(self, store: Store, limiter: RateLimiter) -> None:
        self.store, self.limiter = store, limiter
        self.lock = threading.Lock()
        self.faults: deque[Fault] = deque()
        self.latency = 0.0
        self.log: list[dict] = []
        self.log_seq = 0

    def take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if path.startswith(fault.path):
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                    return fault
        return None

    def record(self, received: float, key: str | None, ip: str, path: str, query: str, status: int):
        with self.lock:
            self.log_seq += 1
            self.log.append(
                {
                    "seq": self.log_seq,
                    "time": received,
                    "key": key,
                    "ip": ip,
                    "path": path,
                    "query": query,
                    "status": status,
                }
            )
            if len(self.log) > LOG_LIMIT:
                del self.log[: LOG_LIMIT // 10]
