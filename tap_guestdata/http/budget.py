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
docs/decisions.md.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import sqlite3
import stat
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
# A process counts as sharing a key or an address while it asked the store within this many
# windows: the shares a process falls back to when the store fails (http/share.py).
MEMBERSHIP_WINDOWS = 2
FALLBACK_WARNING = (
    "Shared rate budget unavailable (%s); this run keeps to its own per-process limits only, "
    "so other processes' requests on the same keys or address are not counted."
)


class BudgetUnavailable(Exception):
    """The store cannot be reached or used; the tap falls back to per-process limits."""


class UnsafeStoreFile(Exception):
    """The SQLite store's file or folder is not the user's own: another user could fill or
    lock it (and so stop or flood every tap run). The run stops rather than use it."""


@dataclass(frozen=True)
class Sighting:
    """What the store said with a grant: who shares the key and the address, how full they are.

    `epoch` names the store's life: a store restarted empty has a new one. `store_now` is the
    store's clock (seconds) when it answered; the counts include the slot just taken."""

    epoch: str
    store_now: float
    key_processes: int
    address_processes: int
    key_count: int
    address_count: int


@dataclass(frozen=True)
class Grant:
    """A slot taken (`slot` set), or how long to wait before asking again."""

    slot: str | None
    wait_seconds: float = 0.0
    seen: Sighting | None = None


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


class Store(SharedBudget, Protocol):
    """A store the fallback (http/share.py) can re-teach: it records slots dated elsewhere."""

    limits: Limits

    def record(self, slots: list[tuple[str, str, float]]) -> tuple[str, float]:
        """Add (slot, key_id, store time) unless present; return (epoch, store_now)."""
        ...


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
    """One file per machine and user, found by every process without configuration, in a
    folder only the user can write: `$XDG_RUNTIME_DIR/tap-guestdata` (a per-user tmpfs),
    else `~/.cache/tap-guestdata`. Not the shared temp folder, where any user could create
    the file first."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "tap-guestdata" / "rate-budget.sqlite"


def private_folder(folder: Path) -> None:
    """Create `folder` (mode 0700) or check that it is the user's own and nobody else's to
    write; raise UnsafeStoreFile naming it and the fix."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_owned(folder, "folder")


def check_owned(path: Path, what: str) -> None:
    """`path` is the user's, not a symlink, and not writable by group or others."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    uid = os.getuid()
    fix = (
        "remove it, or set rate_budget_store to sqlite:///PATH in a folder only you can "
        "write (mode 0700)"
    )
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeStoreFile(f"rate budget {what} {path} is a symbolic link: {fix}")
    if info.st_uid != uid:
        raise UnsafeStoreFile(
            f"rate budget {what} {path} belongs to uid {info.st_uid}, not to you ({uid}): {fix}"
        )
    if info.st_mode & 0o022:
        raise UnsafeStoreFile(
            f"rate budget {what} {path} is writable by others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod go-w it, or {fix}"
        )


def check_sqlite_file(path: Path) -> None:
    """The database and SQLite's side files (-wal, -shm, -journal) are the user's own."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        check_owned(path.with_name(path.name + suffix), "file")


class SqliteBudget:
    """The embedded store: every process of one machine, one SQLite file."""

    def __init__(self, path: Path, limits: Limits, *, default_place: bool = False) -> None:
        self.limits = limits
        self.description = f"SQLite file {path}"
        self.process = secrets.token_hex(8)  # this process's name among those sharing
        self._local = threading.local()
        self._path = path
        try:
            if default_place:
                private_folder(path.parent)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
            check_sqlite_file(path)
            with self._transaction() as connection:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS slots (slot TEXT PRIMARY KEY, key_id TEXT NOT NULL,"
                    " address TEXT NOT NULL, at REAL NOT NULL)"
                )
                connection.execute("CREATE INDEX IF NOT EXISTS slots_key ON slots (key_id, at)")
                connection.execute("CREATE INDEX IF NOT EXISTS slots_addr ON slots (address, at)")
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS processes (process TEXT NOT NULL,"
                    " scope TEXT NOT NULL, seen REAL NOT NULL, PRIMARY KEY (process, scope))"
                )
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"
                )
            os.chmod(path, 0o600)
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

    def _epoch(self, connection: sqlite3.Connection) -> str:
        connection.execute(
            "INSERT OR IGNORE INTO meta VALUES ('epoch', ?)", (secrets.token_hex(8),)
        )
        row = connection.execute("SELECT value FROM meta WHERE name = 'epoch'").fetchone()
        return str(row[0])

    def _register(self, connection: sqlite3.Connection, scopes: list[str], now: float) -> None:
        """This process shares these scopes now; forget processes silent for too long."""
        connection.executemany(
            "INSERT INTO processes VALUES (?, ?, ?)"
            " ON CONFLICT (process, scope) DO UPDATE SET seen = excluded.seen",
            [(self.process, scope, now) for scope in scopes],
        )
        horizon = now - MEMBERSHIP_WINDOWS * self.limits.window_seconds
        connection.execute("DELETE FROM processes WHERE seen < ?", (horizon,))

    def take(self, key_id: str) -> Grant:
        limits = self.limits
        try:
            with self._transaction() as connection:
                now = time.time()
                window_start = now - limits.window_seconds
                connection.execute(
                    "DELETE FROM slots WHERE at < ?", (window_start - UNANSWERED_MARGIN_SECONDS,)
                )
                self._register(connection, [f"key:{key_id}", f"address:{limits.address}"], now)
                wait = max(
                    self._wait(connection, "key_id", key_id, limits.per_key, now),
                    self._wait(connection, "address", limits.address, limits.per_address, now),
                )
                slot = None if wait > 0 else secrets.token_hex(8)
                if slot is not None:
                    connection.execute(
                        "INSERT INTO slots VALUES (?, ?, ?, ?)", (slot, key_id, limits.address, now)
                    )
                seen = self._sighting(connection, key_id, now)
                return Grant(slot, wait, seen)
        except sqlite3.Error as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def _sighting(self, connection: sqlite3.Connection, key_id: str, now: float) -> Sighting:
        """Who shares the key and the address, and their slots in the window (fallback shares)."""
        address = self.limits.address
        horizon = now - self.limits.window_seconds - UNANSWERED_MARGIN_SECONDS
        processes = "SELECT COUNT(*) FROM processes WHERE scope = ?"
        slots = "SELECT COUNT(*) FROM slots WHERE at >= ? AND "
        counts = [
            int(connection.execute(sql, arguments).fetchone()[0])
            for sql, arguments in (
                (processes, (f"key:{key_id}",)),
                (processes, (f"address:{address}",)),
                (slots + "key_id = ?", (horizon, key_id)),
                (slots + "address = ?", (horizon, address)),
            )
        ]
        return Sighting(self._epoch(connection), now, *counts)

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

    def record(self, slots: list[tuple[str, str, float]]) -> tuple[str, float]:
        try:
            with self._transaction() as connection:
                now = time.time()
                scopes = {f"key:{key_id}" for _, key_id, _ in slots}
                self._register(connection, [*scopes, f"address:{self.limits.address}"], now)
                connection.executemany(
                    "INSERT INTO slots VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (slot) DO UPDATE SET at = max(at, excluded.at)",
                    [(slot, key_id, self.limits.address, at) for slot, key_id, at in slots],
                )
                return self._epoch(connection), now
        except sqlite3.Error as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


# Shared by both scripts: the server's clock in ms (one clock for every machine), the
# store's epoch (a new one when Redis came back empty), and this process registered as one
# sharing each scope (a sorted set of processes by when they last asked).
REDIS_COMMON = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  redis.call('SET', KEYS[1], ARGV[2])
  epoch = ARGV[2]
end
local function register(processes)
  redis.call('ZADD', processes, now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', processes, '-inf', now - tonumber(ARGV[3]))
  redis.call('PEXPIRE', processes, tonumber(ARGV[3]) + 1000)
  return redis.call('ZCARD', processes)
end
"""
# KEYS: epoch, key set, address set, key's processes, address's processes.
# ARGV: process, new epoch, membership (ms), limits, window (ms), margin (ms), slot id.
TAKE_SCRIPT = (
    REDIS_COMMON
    + """
local window = tonumber(ARGV[6])
local horizon = now - window - tonumber(ARGV[7])
local sharing = {register(KEYS[4]), register(KEYS[5])}
local wait = 0
for index, limit in ipairs({tonumber(ARGV[4]), tonumber(ARGV[5])}) do
  local slots = KEYS[index + 1]
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', horizon)
  local count = redis.call('ZCARD', slots)
  if count >= limit then
    local oldest = redis.call('ZRANGE', slots, count - limit, count - limit, 'WITHSCORES')
    wait = math.max(wait, tonumber(oldest[2]) + window + tonumber(ARGV[7]) - now)
  end
end
if wait <= 0 then
  for index = 2, 3 do
    redis.call('ZADD', KEYS[index], now, ARGV[8])
    redis.call('PEXPIRE', KEYS[index], window * 2 + 1000)
  end
end
return {wait <= 0 and 1 or 0, wait, epoch, now, sharing[1], sharing[2],
        redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])}
"""
)
# KEYS: epoch, address set, address's processes, then one key set per slot.
# ARGV: process, new epoch, membership (ms), window (ms), then slot id and date (ms) per slot.
# GT: a slot the store still has keeps its later date (its answer); a missing one is added.
RECORD_SCRIPT = (
    REDIS_COMMON
    + """
register(KEYS[3])
local expiry = tonumber(ARGV[4]) * 2 + 1000
for index = 4, #KEYS do
  local slot, at = ARGV[(index - 4) * 2 + 5], tonumber(ARGV[(index - 4) * 2 + 6])
  for _, slots in ipairs({KEYS[index], KEYS[2]}) do
    redis.call('ZADD', slots, 'GT', at, slot)
    redis.call('PEXPIRE', slots, expiry)
  end
end
return {epoch, now}
"""
)
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
        self.process = secrets.token_hex(8)
        self._address_set = f"{REDIS_PREFIX}:address:{limits.address}"
        self._epoch_key = f"{REDIS_PREFIX}:epoch"
        try:
            self._client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
            self._take = self._client.register_script(TAKE_SCRIPT)
            self._record = self._client.register_script(RECORD_SCRIPT)
            self._answer = self._client.register_script(ANSWER_SCRIPT)
            self._client.ping()
        except redis.RedisError as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error
        self._errors: tuple[type[Exception], ...] = (redis.RedisError,)

    def _sets(self, key_id: str) -> list[str]:
        return [f"{REDIS_PREFIX}:key:{key_id}", self._address_set]

    def _common(self) -> list[int | str]:
        membership = MEMBERSHIP_WINDOWS * self.limits.window_seconds
        return [self.process, secrets.token_hex(8), round(membership * 1000)]

    def take(self, key_id: str) -> Grant:
        limits, slot = self.limits, secrets.token_hex(8)
        keys = [
            self._epoch_key,
            *self._sets(key_id),
            f"{REDIS_PREFIX}:processes:key:{key_id}",
            f"{REDIS_PREFIX}:processes:address:{limits.address}",
        ]
        arguments: list[int | str] = [
            *self._common(),
            limits.per_key,
            limits.per_address,
            round(limits.window_seconds * 1000),
            round(UNANSWERED_MARGIN_SECONDS * 1000),
            slot,
        ]
        try:
            answer = self._take(keys=keys, args=arguments)
        except self._errors as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error
        granted, wait_ms, epoch, now_ms, key_processes, address_processes = answer[:6]
        seen = Sighting(
            epoch=text(epoch),
            store_now=int(now_ms) / 1000,
            key_processes=int(key_processes),
            address_processes=int(address_processes),
            key_count=int(answer[6]),
            address_count=int(answer[7]),
        )
        if int(granted):
            return Grant(slot, 0.0, seen)
        return Grant(None, max(0.001, int(wait_ms) / 1000), seen)

    def answered(self, key_id: str, slot: str) -> None:
        try:
            self._answer(keys=self._sets(key_id), args=[slot])
        except self._errors as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error

    def record(self, slots: list[tuple[str, str, float]]) -> tuple[str, float]:
        keys = [
            self._epoch_key,
            self._address_set,
            f"{REDIS_PREFIX}:processes:address:{self.limits.address}",
        ]
        arguments: list[int | str] = [*self._common(), round(self.limits.window_seconds * 1000)]
        for slot, key_id, at in slots:
            keys.append(f"{REDIS_PREFIX}:key:{key_id}")
            arguments += [slot, round(at * 1000)]
        try:
            epoch, now_ms = self._record(keys=keys, args=arguments)
        except self._errors as error:
            raise BudgetUnavailable(f"{self.description}: {error}") from error
        return text(epoch), int(now_ms) / 1000

    def close(self) -> None:
        self._client.close()


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def redis_location(url: str) -> str:
    """host:port/db of a Redis URL, without any password it carries."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"


def open_budget(store: str, limits: Limits) -> Store | None:
    """The store a `rate_budget_store` setting names; None for `off`.

    Raises BudgetUnavailable when it cannot be opened (the caller warns and falls back)."""
    if store == "off":
        return None
    if store.startswith(("redis://", "rediss://", "unix://")):
        return RedisBudget(store, limits)
    if store.startswith("sqlite:///"):
        return SqliteBudget(Path(store.removeprefix("sqlite:///")).expanduser(), limits)
    if store in ("", "sqlite"):
        return SqliteBudget(default_sqlite_path(), limits, default_place=True)
    raise BudgetUnavailable(f"rate_budget_store {store!r}: not off, sqlite:///PATH or redis://")
