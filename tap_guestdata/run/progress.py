"""What the log says while a sync runs: a plan at the start, progress lines at most every
`progress_interval_seconds`, and (in tap.py) one summary line per stream at the end.

The default log grows with minutes and streams, not with requests: the SDK's per-request and
per-partition METRIC lines, and its per-partition "Beginning sync" lines, are left out unless
`log_request_metrics` is set or the log level is DEBUG.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from singer_sdk.metrics import Point

from tap_guestdata.http.limiter import ADDRESS_LIMIT_DEFAULT


def duration_text(seconds: float) -> str:
    """`2h05m`, `6m40s`, `38s`: short, for a log line."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class StreamPlan:
    """Requests a stream expects, and what the figure comes from."""

    stream: str
    requests: int
    source: str


class Progress:
    """The run's plan and its progress lines (thread-safe: workers count requests)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float,
        requests_per_minute: int,
        keys: int,
        window_seconds: float,
    ) -> None:
        self.logger = logger
        self.interval = interval
        per_window = min(requests_per_minute * keys, ADDRESS_LIMIT_DEFAULT)  # spec 8
        self.budget_per_second = per_window / window_seconds
        self.budget_text = (
            f"{requests_per_minute} requests per {window_seconds:g}s per key x {keys} "
            f"key{'s' if keys != 1 else ''}"
        )
        self.plans: dict[str, StreamPlan] = {}
        self._started: dict[str, float] = {}
        self._active: dict[str, Callable[[], int]] = {}  # stream -> its request count
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    def at_budget(self, requests: int) -> str:
        return duration_text(requests / self.budget_per_second)

    def log_plan(self, plans: list[StreamPlan]) -> None:
        """One line per selected stream, then the total, at the budget configured."""
        for plan in plans:
            self.plans[plan.stream] = plan
            self.logger.info(
                "Plan: %s: about %d requests (%s), %s at %s",
                plan.stream,
                plan.requests,
                plan.source,
                self.at_budget(plan.requests),
                self.budget_text,
            )
        total = sum(plan.requests for plan in plans)
        self.logger.info(
            "Plan: %d requests in all, about %s at %s",
            total,
            self.at_budget(total),
            self.budget_text,
        )

    def request_sent(self, stream: str, done: Callable[[], int]) -> None:
        """`stream` sent a request (any thread): it is active from now on, and `done` reads
        its request count (the stream's summary counters) for the progress lines."""
        with self._lock:
            if stream not in self._active:
                self._started.setdefault(stream, time.monotonic())
                self._active[stream] = done

    def finished(self, *streams: str) -> None:
        with self._lock:
            for stream in streams:
                self._active.pop(stream, None)

    def start(self) -> None:
        """Progress lines every `interval` seconds, also while requests wait for the budget."""
        self._thread = threading.Thread(target=self._report, name="progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _report(self) -> None:
        while not self._stopped.wait(self.interval):
            with self._lock:
                active = list(self._active.items())
            now = time.monotonic()
            for stream, done in active:
                self.log_progress(stream, done(), now - self._started[stream])

    def log_progress(self, stream: str, done: int, elapsed: float) -> None:
        plan = self.plans.get(stream)
        rate = done / elapsed if elapsed > 0 else 0.0
        if plan is None or plan.requests <= 0:
            self.logger.info("Progress: %s: %d requests, %.1f requests/s", stream, done, rate)
            return
        left = max(plan.requests - done, 0)
        self.logger.info(
            "Progress: %s: %d of about %d requests (%d%%), %.1f requests/s, about %s left",
            stream,
            done,
            plan.requests,
            min(100, round(100 * done / plan.requests)),
            rate,
            duration_text(left / rate) if rate > 0 else "unknown",
        )


class PerRequestMetrics(logging.Filter):
    """Drops the SDK's METRIC lines that come once per request (http_request_duration) or once
    per partition (any point tagged with a context: every member's ledger, every day)."""

    def filter(self, record: logging.LogRecord) -> bool:
        point = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if not isinstance(point, Point):
            return True
        return point.metric.value != "http_request_duration" and not point.tags.get("context")


class NotResumableWarning(logging.Filter):
    """The SDK warns that an unsorted stream "is not resumable if interrupted"; this tap resumes
    those streams from its own markers (run/state_markers.py), so the warning would mislead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Stream is assumed to be unsorted")


class RepeatedLines(logging.Filter):
    """Lets the first of each message template through and drops its repeats: the SDK logs
    "Beginning sync of ..." and the starting bookmark once per partition (per member)."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        template = str(record.msg)
        if template in self._seen:
            return False
        self._seen.add(template)
        return True


class QuietLog:
    """Installs the filters for one run (removed again at its end); `per_request` keeps the
    per-request and per-partition lines."""

    def __init__(
        self,
        metrics_logger: logging.Logger,
        stream_loggers: list[logging.Logger],
        *,
        per_request: bool,
    ) -> None:
        self._installed: list[tuple[logging.Logger, logging.Filter]] = [
            (logging.getLogger("singer_sdk"), NotResumableWarning())
        ]
        if not per_request:
            self._installed.append((metrics_logger, PerRequestMetrics()))
            self._installed += [(logger, RepeatedLines()) for logger in stream_loggers]

    def __enter__(self) -> QuietLog:
        for logger, log_filter in self._installed:
            logger.addFilter(log_filter)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for logger, log_filter in self._installed:
            logger.removeFilter(log_filter)
