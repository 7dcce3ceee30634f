"""The rate budget every process of a deployment shares (spec 8), in a store they all reach.

spec 8 counts requests in a rolling minute: at most 120 per key, and 600 per source address
across every key. A process's own limiter (http/limiter.py) sees only its own requests; two
`meltano run`s, or two Airflow tasks, on one key would send 240. This budget is one log of
slots, one row (or sorted-set member) per request with its key and its address, kept where
the processes meet:

- `SqliteBudget`, the embedded default: a file on the machine (WAL, `BEGIN IMMEDIATE`), for
  every process of one machine, no server needed;
- `RedisBudget`, across machines: the Celery broker's Redis, one Lua script per grant, timed
  by the Redis server's clock, so machines' clocks need not agree.

A slot is taken, for the key and the address at once, before its request is sent; when the
answer arrives it is dated again at that moment, so it frees a window after the server can
have counted it (the server counts on arrival, which lies between the two). A process that
dies holds nothing beyond its slots, which age out of the window.

Neither `pyrate-limiter` 4.5 nor `limits` 5.8 is used: neither takes a slot on two windows
(key and address) atomically nor re-dates a slot at its answer, and pyrate-limiter's SQLite
bucket dates an item before it holds the file lock (21 let through a window of 20, measured):
docs/development.md, "Decisions".
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import sqlite3
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

# A never-answered slot (its process died mid-request) frees this long after the window: the
# server counted it on arrival, a little after the slot was taken.
UNANSWERED_MARGIN_SECONDS = 0.1
SQLITE_BUSY_TIMEOUT_SECONDS = 10.0
FALLBACK_WARNING = (
    "Shared rate budget unavailable (%s); this run keeps to its own per-process limits only, "
    "so other processes' requests on the same keys or address are not counted."
)


class BudgetUnavailable(Exception):
    """The store cannot be reached or used; the tap falls back to per-process limits."""


@dataclass(frozen=True)
class Grant:
    """A slot taken (`slot` set), or how long to wait before asking again."""

    slot: str | None
    wait_seconds: float = 0.0


class SharedBudget(Protocol):
    """Slots on (key, address) in a rolling window, shared by every process using the store."""

    description: str

    def take(self, key_id: str) -> Grant: ...

    def answered(self, key_id: str, slot: str) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Limits:
    per_key: int
    per_address: int
    window_seconds: float
    address: str  # the egress its requests leave from (a machine, a worker queue) and the API


def key_id(api: str, api_key: str) -> str:
    """What the store holds instead of the key (spec 5.7: keys stay out of shared places);
    `api` (scheme://host:port) keeps two APIs' budgets apart, e.g. two test servers."""
    return hashlib.sha256(f"{api}\0{api_key}".encode()).hexdigest()[:24]


def api_origin(base_url: str) -> str:
    """scheme://host:port of the API: the server whose limits the budget mirrors."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def default_address() -> str:
    return socket.gethostname() or "localhost"


def default_sqlite_path() -> Path:
    """One file per machine and user, found by every process without configuration."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"tap-guestdata-rate-budget-{uid}.sqlite"


class SqliteBudget:
    """The embedded store: every process of one machine, one SQLite file."""

    def __init__(self, path: Path, limits: Limits) -> None:
        self.limits = limits
        self.description = f"SQLite file {path}"
        self._local = threading.local()
        self._path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._transaction() as connection:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS slots (slot TEXT PRIMARY KEY, key_id TEXT NOT NULL,"
                    " address TEXT NOT NULL, at REAL NOT NULL)"
                )
                connection.execute("CREATE INDEX IF NOT EXISTS slots_key ON slots (key_id, at)")
                connection.execute("CREATE INDEX IF NOT EXISTS slots_addr ON slots (address, at)")
        except (OSError, sqlite3.Error) as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self._path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS, isolation_level=None
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
        return connection

    def _transaction(self) -> Any:
        budget = self

        class Transaction:
            def __enter__(self) -> sqlite3.Connection:
                self.connection = budget._connection()
                # IMMEDIATE: the write lock first, so the clock is read and the count made
                # while no other process can insert (the cause of pyrate-limiter's 21 in 20).
                self.connection.execute("BEGIN IMMEDIATE")
                return self.connection

            def __exit__(self, kind: object, error: object, trace: object) -> None:
                self.connection.execute("COMMIT" if kind is None else "ROLLBACK")

        return Transaction()

    def take(self, key_id: str) -> Grant:
        limits = self.limits
        try:
            with self._transaction() as connection:
                now = time.time()
                window_start = now - limits.window_seconds
                connection.execute(
                    "DELETE FROM slots WHERE at < ?", (window_start - UNANSWERED_MARGIN_SECONDS,)
                )
                wait = max(
                    self._wait(connection, "key_id", key_id, limits.per_key, now),
                    self._wait(connection, "address", limits.address, limits.per_address, now),
                )
                if wait > 0:
                    return Grant(None, wait)
                slot = secrets.token_hex(8)
                connection.execute(
                    "INSERT INTO slots VALUES (?, ?, ?, ?)", (slot, key_id, limits.address, now)
                )
                return Grant(slot)
        except sqlite3.Error as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def _wait(
        self, connection: sqlite3.Connection, column: str, value: str, limit: int, now: float
    ) -> float:
        """0 when `value` has a free slot now, else seconds until its oldest needed one frees."""
        rows = connection.execute(
            f"SELECT at FROM slots WHERE {column} = ? AND at >= ?"
            " ORDER BY at DESC LIMIT 1 OFFSET ?",
            (value, now - self.limits.window_seconds - UNANSWERED_MARGIN_SECONDS, limit - 1),
        ).fetchall()
        if not rows:
            return 0.0
        oldest: float = rows[0][0]
        return max(0.001, oldest + self.limits.window_seconds + UNANSWERED_MARGIN_SECONDS - now)

    def answered(self, key_id: str, slot: str) -> None:
        try:
            with self._transaction() as connection:
                connection.execute(
                    "UPDATE slots SET at = max(at, ?) WHERE slot = ?",
                    (time.time(), slot),
                )
        except sqlite3.Error as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


# KEYS: the key's sorted set, the address's. ARGV: limits, window (ms), margin (ms), slot id.
# Scores are the Redis server's clock in ms: one clock for every machine.
TAKE_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window = tonumber(ARGV[3])
local horizon = now - window - tonumber(ARGV[4])
local wait = 0
for index, limit in ipairs({tonumber(ARGV[1]), tonumber(ARGV[2])}) do
  redis.call('ZREMRANGEBYSCORE', KEYS[index], '-inf', horizon)
  local count = redis.call('ZCARD', KEYS[index])
  if count >= limit then
    local oldest = redis.call('ZRANGE', KEYS[index], count - limit, count - limit, 'WITHSCORES')
    wait = math.max(wait, tonumber(oldest[2]) + window + tonumber(ARGV[4]) - now)
  end
end
if wait > 0 then return {0, wait} end
for index = 1, 2 do
  redis.call('ZADD', KEYS[index], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[index], window * 2 + 1000)
end
return {1, 0}
"""
# Re-date a slot at its answer, only if it is still in its sets (XX: never re-add an aged one).
ANSWER_SCRIPT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for index = 1, 2 do redis.call('ZADD', KEYS[index], 'XX', 'GT', now, ARGV[1]) end
return 1
"""
REDIS_PREFIX = "tap-guestdata:rate-budget"


class RedisBudget:
    """Across machines: a Redis every worker reaches (the Celery broker's, say)."""

    def __init__(self, url: str, limits: Limits) -> None:
        import redis  # only a deployment that names a Redis store needs it

        self.limits = limits
        self.description = f"Redis {redis_location(url)}"
        self._address_set = f"{REDIS_PREFIX}:address:{limits.address}"
        try:
            self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            self._take = self._client.register_script(TAKE_SCRIPT)
            self._answer = self._client.register_script(ANSWER_SCRIPT)
            self._client.ping()
        except redis.RedisError as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error
        self._errors: tuple[type[Exception], ...] = (redis.RedisError,)

    def _sets(self, key_id: str) -> list[str]:
        return [f"{REDIS_PREFIX}:key:{key_id}", self._address_set]

    def take(self, key_id: str) -> Grant:
        limits, slot = self.limits, secrets.token_hex(8)
        arguments: list[int | str] = [
            limits.per_key,
            limits.per_address,
            round(limits.window_seconds * 1000),
            round(UNANSWERED_MARGIN_SECONDS * 1000),
            slot,
        ]
        try:
            granted, wait_ms = self._take(keys=self._sets(key_id), args=arguments)
        except self._errors as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error
        return Grant(slot) if int(granted) else Grant(None, max(0.001, int(wait_ms) / 1000))

    def answered(self, key_id: str, slot: str) -> None:
        try:
            self._answer(keys=self._sets(key_id), args=[slot])
        except self._errors as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def close(self) -> None:
        self._client.close()


def redis_location(url: str) -> str:
    """host:port/db of a Redis URL, without any password it carries."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


def open_budget(store: str, limits: Limits) -> SharedBudget | None:
    """The store a `rate_budget_store` setting names; None for `off`.

    Raises BudgetUnavailable when it cannot be opened (the caller warns and falls back)."""
    if store == "off":
        return None
    if store.startswith(("redis://", "rediss://", "unix://")):
        return RedisBudget(store, limits)
    if store.startswith("sqlite:///"):
        return SqliteBudget(Path(store.removeprefix("sqlite:///")).expanduser(), limits)
    if store in ("", "sqlite"):
        return SqliteBudget(default_sqlite_path(), limits)
    raise BudgetUnavailable(f"rate_budget_store {store!r}: not off, sqlite:///PATH or redis://")
