"""What every stream of one run shares: settings, the key pool, the worker pool, the record of
forbidden stream groups, per-stream counters for the summary, and lookups read once per run.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import requests

from tap_guestdata.http.auth import KeyPoolAdapter, KeyPoolAuthenticator
from tap_guestdata.http.budget import (
    FALLBACK_WARNING,
    BudgetUnavailable,
    Limits,
    SharedBudget,
    api_origin,
    default_address,
    open_budget,
)
from tap_guestdata.http.errors import StreamForbidden
from tap_guestdata.http.limiter import ADDRESS_LIMIT_DEFAULT, KeyPool
from tap_guestdata.http.share import ShareFallback
from tap_guestdata.run import time_rules
from tap_guestdata.run.progress import Progress
from tap_guestdata.run.settings import MAX_KEYS, Settings
from tap_guestdata.run.state_markers import Checkpoints


@dataclass
class StreamCounters:
    """The numbers of one stream's summary line (spec: end-of-run log)."""

    records: int = 0
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    skipped: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, requests: int = 0, retries: int = 0, rate_limited: int = 0) -> None:
        with self._lock:
            self.requests += requests
            self.retries += retries
            self.rate_limited += rate_limited

    def line(self, stream: str) -> str:
        if self.skipped is not None:
            return f"Stream summary: {stream}: skipped ({self.skipped})"
        return (
            f"Stream summary: {stream}: {self.records} records, {self.requests} requests, "
            f"{self.retries} retries, {self.rate_limited} rate-limited (429)"
        )


class Gate:
    """Stream groups closed by a 403 (spec 4.5): "rewards" (every Rewards stream) and
    "members" (the member endpoints). Once closed, no further request is sent for them."""

    def __init__(self, logger: logging.Logger) -> None:
        self._closed: dict[str, str] = {}
        self._lock = threading.Lock()
        self._logger = logger

    def reason(self, scopes: tuple[str, ...]) -> str | None:
        for scope in scopes:
            if scope in self._closed:
                return self._closed[scope]
        return None

    def close(self, error: StreamForbidden, streams: list[str]) -> None:
        """Record the 403 and warn once, naming every stream it skips."""
        with self._lock:
            if error.scope in self._closed:
                return
            self._closed[error.scope] = error.reason
        self._logger.warning(
            "Skipping the %s streams (%s): %s. Set on_forbidden=fail to fail instead.",
            error.scope,
            ", ".join(streams),
            error.reason,
        )


def shared_budget(settings: Settings, logger: logging.Logger) -> SharedBudget | None:
    """The deployment's shared rate budget (http/budget.py), or None: off, or unavailable."""
    api = api_origin(settings.base_url)
    limits = Limits(
        per_key=settings.requests_per_minute,
        # spec 8: 600 per address; never below what this run's own keys may send (test setups
        # raise requests_per_minute far past the API's to switch client limits off)
        per_address=max(ADDRESS_LIMIT_DEFAULT, settings.requests_per_minute * MAX_KEYS),
        window_seconds=settings.rate_limit_window_seconds,
        address=f"{settings.rate_budget_address or default_address()}>{api}",
    )
    try:
        budget = open_budget(settings.rate_budget_store, limits)
    except BudgetUnavailable as error:
        logger.warning(FALLBACK_WARNING, error)
        return None
    if budget is None:
        return None
    logger.info("Rate budget shared through %s, address %s.", budget.description, limits.address)
    return ShareFallback(budget, logger)  # a share of the limits while the store fails


class Runtime:
    """Created once per tap run, on first use (after the config was validated)."""

    def __init__(self, settings: Settings, sync_started_at: dt.datetime, logger: logging.Logger):
        self.settings = settings
        self.logger = logger
        self.sync_started_at = sync_started_at
        # Where every window of this run ends (time_rules.window_end: the start, or end_date's end).
        self.window_end = time_rules.window_end(sync_started_at, settings.end_date)
        # As bookmarks are rendered: compared as strings with rows' cursors (stream/deletions.py).
        self.window_end_utc = time_rules.utc_text(self.window_end)
        self.keys = KeyPool(
            list(settings.keys),
            settings.requests_per_minute,
            settings.rate_limit_window_seconds,
            shared=shared_budget(settings, logger),
            api=api_origin(settings.base_url),
            logger=logger,
        )
        self.authenticator = KeyPoolAuthenticator(self.keys)
        self.workers = settings.max_workers * len(settings.keys)  # max_workers is per key
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="guestdata")
        self.gate = Gate(logger)
        self.counters: dict[str, StreamCounters] = {}
        self._sessions = threading.local()
        self._attempts = threading.local()  # the stream whose attempt this thread sends
        self._lookups: dict[str, Any] = {}
        self._lookup_lock = threading.Lock()
        self.server_clock_at_start: dt.datetime | None = None
        self.checkpoints = Checkpoints(settings.state_interval_seconds)
        self.progress = Progress(
            logger,
            interval=settings.progress_interval_seconds,
            requests_per_minute=settings.requests_per_minute,
            keys=len(settings.keys),
            window_seconds=settings.rate_limit_window_seconds,
        )
        self.first_pages: dict[str, requests.Response] = {}  # read by the plan, kept for the sync
        self.completed_reads: list[dict[str, Any]] = []  # read_windows rows (stream/deletions.py)

    def attempting(self, stream: str) -> None:
        """This thread's next attempts are `stream`'s (counted when they get a key's slot)."""
        self._attempts.stream = stream

    def attempt_sent(self) -> None:
        """An attempt got its slot and goes on the wire: count it for its stream."""
        stream: str = self._attempts.stream
        counters = self.counters_for(stream)
        counters.add(requests=1)
        self.progress.request_sent(stream, lambda: counters.requests)

    def note_server_clock(self, response: requests.Response) -> None:
        """Keep the API's clock (Date header) from the run's first answer: the members
        bookmark is compared with the API's own updated-at, so skew must not move it later."""
        if self.server_clock_at_start is not None:
            return
        try:
            self.server_clock_at_start = parsedate_to_datetime(response.headers["Date"])
        except (KeyError, TypeError, ValueError):
            return

    def members_bookmark(self, margin: dt.timedelta) -> dt.datetime:
        """The earlier of the tap's and the API's clock at the run's start, minus `margin`."""
        started = self.sync_started_at
        if self.server_clock_at_start is not None and self.server_clock_at_start.tzinfo:
            started = min(started, self.server_clock_at_start)
        return started - margin

    def counters_for(self, stream: str) -> StreamCounters:
        return self.counters.setdefault(stream, StreamCounters())

    def session(self) -> requests.Session:
        """One HTTP session (connection pool) per thread, every attempt signed from the pool."""
        session = getattr(self._sessions, "session", None)
        if session is None:
            session = requests.Session()
            adapter = KeyPoolAdapter(
                self.authenticator, on_send=self.attempt_sent, on_response=self.note_server_clock
            )
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            self._sessions.session = session
        return session

    def lookup(self, name: str, read: Callable[[], Any]) -> Any:
        """A value read once per run and shared (venues, offers, the programme answer)."""
        with self._lookup_lock:
            if name not in self._lookups:
                self._lookups[name] = read()
            return self._lookups[name]

    def close(self) -> None:
        """Stop what is still queued or waiting (after a failure workers may be mid-flight)."""
        self.keys.close()
        if self.keys.shared is not None:
            self.keys.shared.close()
        self.progress.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)
