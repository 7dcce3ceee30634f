"""Accounts of the Guest Data DAGs, the tasks each runs, and the worker queue each runs on.

Pure Python, no Airflow import: the DAG file, the planner (scripts/plan_workers.py) and the
unit tests share it. Deployment: docs/airflow-accounts.md.

Budgets (spec 8): 120 requests per rolling minute per key, 600 per address across keys. They
are kept by the rate budget every tap process shares (tap_guestdata/http/budget.py: a Redis
every worker reaches, or a SQLite file per machine), not by the scheduler: a task uses every key
of its account, two tasks may share a key (the budget divides it), and a worker queue is an
address (`rate_budget_address`). Pools only bound how many tasks a queue runs at once
(`TASKS_PER_QUEUE`, one pool per queue), and no task sleeps after its run.

Shape: each fixed start of a task costs about `TASK_START_SECONDS` (Airflow, Meltano, the tap
and the target), so an account runs as one task with all its stream groups; only an account
whose first sync is large enough to gain from running its groups side by side (they then fail
and retry alone) gets one task per group.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tap_guestdata.run.catalog import GROUPS  # the daily stream groups, in task order

PER_KEY_PER_MINUTE = 120  # spec 8: per key, rolling minute
PER_ADDRESS_PER_MINUTE = 600  # spec 8: per address, across keys
MAX_KEYS_PER_ACCOUNT = 5  # spec 5.3
TASKS_PER_QUEUE = 5  # the concurrency pool of a queue: tasks one worker runs at once
REFRESH_GROUP = "refresh"  # the weekly full refresh
WHOLE_ACCOUNT = "all"  # the task of an account that loads all its groups in one run
# First-sync requests from which an account's groups run as tasks of their own: a large
# account (49,092 requests; a medium one has 4,950, a small one 707).
SPLIT_FROM_REQUESTS = 20_000
DEFAULT_QUEUE = "default"  # Airflow's default queue (no `queue` on the task)
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
CONNECTION_ID = re.compile(r"^[\w.-]{1,250}$")  # Airflow's conn_id characters

# Requests per stream group for the sandbox's accounts (seed 42, 2026-11-23): a first sync
# (bench/first_sync_cost.py's rules, equal to the real tap's requests on small and medium) and
# a quiet night's incremental (bench/request_count.py's minimum with nothing changed: the
# floor; a busy day adds a page per 200 new guests and a ledger request per changed member).
SIZE_REQUESTS: dict[str, dict[str, dict[str, int]]] = {
    "small": {
        "first": {"core": 10, "members": 201, "rewards": 3, "offers": 15, "stats": 478},
        "incremental": {"core": 3, "members": 1, "rewards": 3, "offers": 15, "stats": 6},
    },
    "medium": {
        "first": {"core": 77, "members": 2010, "rewards": 25, "offers": 19, "stats": 2819},
        "incremental": {"core": 3, "members": 1, "rewards": 7, "offers": 19, "stats": 11},
    },
    "large": {
        "first": {"core": 3195, "members": 40200, "rewards": 483, "offers": 23, "stats": 5191},
        "incremental": {"core": 11, "members": 1, "rewards": 117, "offers": 23, "stats": 21},
    },
}


class AccountsError(ValueError):
    """The accounts configuration is invalid (the message says where)."""


@dataclass(frozen=True)
class Account:
    """One entry of the accounts configuration."""

    name: str  # task group, state id suffix, default schema: [a-z][a-z0-9_]*
    # Names of the Variables / env vars holding its keys: the old way, and the fallback while
    # its connection does not exist.
    key_variables: tuple[str, ...] = ()
    base_url: str | None = None  # None: the worker's TAP_GUESTDATA_BASE_URL
    groups: tuple[str, ...] = GROUPS
    schedule: str | None = None  # None: the daily DAG's schedule (the account is in it)
    target_schema: str | None = None  # None: guestdata_<name>
    size: str | None = None  # small / medium / large: a weight for spreading the work
    requests: Mapping[str, int] | None = None  # requests per group: a better weight
    split: bool | None = None  # one task per group; None: when the first sync is large
    connection: str | None = None  # None: guestdata_<name>

    @property
    def connection_id(self) -> str:
        """The `guestdata` Airflow connection holding its keys (and maybe its base URL)."""
        return self.connection or f"guestdata_{self.name}"

    @property
    def schema(self) -> str:
        return self.target_schema or f"guestdata_{self.name}"

    @property
    def split_groups(self) -> bool:
        """One task per group: asked for, or a first sync big enough to gain from it."""
        if self.split is not None:
            return self.split
        return sum(self.weight(group) for group in self.groups) >= SPLIT_FROM_REQUESTS

    def weight(self, group: str) -> int:
        """A group's share of the work, for spreading it: `requests` if given, else the first
        sync of the account's size (hours, where nightly runs are minutes), else 1."""
        if group == REFRESH_GROUP:
            return 0  # weekly: not part of the balance
        if self.requests is not None:
            return int(self.requests.get(group, 1))
        if self.size is not None:
            return SIZE_REQUESTS[self.size]["first"].get(group, 1)
        return 1


@dataclass(frozen=True)
class AccountsConfig:
    accounts: tuple[Account, ...]
    queues: tuple[str, ...] = (DEFAULT_QUEUE,)


@dataclass(frozen=True)
class TaskSpec:
    """One `meltano run` of one account: all its groups, one group, or the refresh."""

    account: str
    group: str  # WHOLE_ACCOUNT, a group of GROUPS, or REFRESH_GROUP
    groups: tuple[str, ...]  # the stream groups it loads
    queue: str
    weight: int = 1  # its requests (first sync of the account's size, or given)

    @property
    def task_id(self) -> str:
        return f"{self.account}.{self.group}"

    @property
    def pool(self) -> str:
        return queue_pool(self.queue)


def queue_pool(queue: str) -> str:
    """The pool (`TASKS_PER_QUEUE` slots) bounding how many tasks a queue runs at once."""
    return f"guestdata_{queue}"


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise AccountsError(f"{where}: expected a list of names")
    return tuple(item.strip() for item in value if item.strip())


def parse_account(entry: object, index: int) -> Account:
    if not isinstance(entry, dict):
        raise AccountsError(f"accounts[{index}]: expected an object")
    known = {
        "name",
        "base_url",
        "keys",
        "groups",
        "schedule",
        "target_schema",
        "size",
        "requests",
        "split",
        "connection",
    }
    unknown = sorted(set(entry) - known)
    if unknown:
        raise AccountsError(f"accounts[{index}]: unknown fields {unknown}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise AccountsError(f"accounts[{index}]: name must match {NAME.pattern}, got {name!r}")
    where = f"account {name!r}"
    # Without `keys` the connection holds them; `keys` given names 1 to 5 Variables.
    keys = _strings(entry.get("keys", []), f"{where}: keys")
    if "keys" in entry and (
        not 1 <= len(keys) <= MAX_KEYS_PER_ACCOUNT or len(set(keys)) != len(keys)
    ):
        raise AccountsError(f"{where}: 1 to {MAX_KEYS_PER_ACCOUNT} distinct key names (spec 5.3)")
    connection = entry.get("connection")
    if connection is not None and (
        not isinstance(connection, str) or not CONNECTION_ID.match(connection)
    ):
        raise AccountsError(f"{where}: connection must be an Airflow connection id")
    groups = _strings(entry.get("groups", list(GROUPS)), f"{where}: groups")
    if not groups or set(groups) - set(GROUPS) or len(set(groups)) != len(groups):
        raise AccountsError(f"{where}: groups must be distinct names among {list(GROUPS)}")
    size = entry.get("size")
    if size is not None and size not in SIZE_REQUESTS:
        raise AccountsError(f"{where}: size must be one of {sorted(SIZE_REQUESTS)}")
    requests = entry.get("requests")
    if requests is not None and (
        not isinstance(requests, dict)
        or not all(isinstance(v, int) and v >= 0 for v in requests.values())
    ):
        raise AccountsError(f"{where}: requests must map group names to request counts")
    split = entry.get("split")
    if split is not None and not isinstance(split, bool):
        raise AccountsError(f"{where}: split must be true or false")
    schedule = entry.get("schedule")
    schema = entry.get("target_schema")
    for label, value in (("base_url", entry.get("base_url")), ("schedule", schedule)):
        if value is not None and not isinstance(value, str):
            raise AccountsError(f"{where}: {label} must be a string")
    if schema is not None and (not isinstance(schema, str) or not NAME.match(schema)):
        raise AccountsError(f"{where}: target_schema must match {NAME.pattern}")
    return Account(
        name=name,
        key_variables=keys,
        base_url=entry.get("base_url") or None,
        groups=groups,
        schedule=schedule or None,
        target_schema=schema,
        size=size,
        requests=requests,
        split=split,
        connection=connection or None,
    )


def parse_config(text: str) -> AccountsConfig:
    """`{"queues": [...], "accounts": [...]}`, or just the list of accounts (one queue)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise AccountsError(f"accounts: not JSON ({error})") from error
    if isinstance(document, list):
        document = {"accounts": document}
    if not isinstance(document, dict) or not isinstance(document.get("accounts"), list):
        raise AccountsError('accounts: expected {"accounts": [...]} or a list of accounts')
    accounts = tuple(parse_account(entry, n) for n, entry in enumerate(document["accounts"]))
    if not accounts:
        raise AccountsError("accounts: the list is empty")
    names = [account.name for account in accounts]
    if len(set(names)) != len(names):
        raise AccountsError(f"accounts: names must be distinct, got {names}")
    schemas = [account.schema for account in accounts]
    if len(set(schemas)) != len(schemas):
        raise AccountsError(f"accounts: target schemas must be distinct, got {schemas}")
    owners: dict[str, str] = {}
    for account in accounts:
        for key in account.key_variables:
            if key in owners:
                # A key belongs to one account (spec 5): two entries would be a typo.
                raise AccountsError(
                    f"key {key!r} is listed for {owners[key]!r} and {account.name!r}"
                )
            owners[key] = account.name
    connections = [account.connection_id for account in accounts]
    if len(set(connections)) != len(connections):  # one connection holds one account's keys
        raise AccountsError(f"accounts: connections must be distinct, got {connections}")
    queues = _strings(document.get("queues", [DEFAULT_QUEUE]), "queues")
    if not queues or len(set(queues)) != len(queues) or not all(NAME.match(q) for q in queues):
        raise AccountsError(f"queues: distinct names matching {NAME.pattern}, got {queues}")
    return AccountsConfig(accounts, queues)


def account_tasks(account: Account, queue: str, *, refresh: bool = True) -> list[TaskSpec]:
    """The account's tasks: one with all its groups, or one per group; then its refresh."""
    if account.split_groups:
        specs = [
            TaskSpec(account.name, group, (group,), queue, account.weight(group))
            for group in account.groups
        ]
    else:
        total = sum(account.weight(group) for group in account.groups)
        specs = [TaskSpec(account.name, WHOLE_ACCOUNT, account.groups, queue, total)]
    if refresh and {"core", "stats"} & set(account.groups):  # the refresh reads guests, stats
        specs.append(TaskSpec(account.name, REFRESH_GROUP, (REFRESH_GROUP,), queue, 0))
    return specs


def account_minutes(account: Account) -> float:
    """Minutes of an account's first sync at its keys' budget (all keys at once, spec 8)."""
    keys = max(1, len(account.key_variables))  # none: the one key of Meltano's configuration
    rate = min(PER_KEY_PER_MINUTE * keys, PER_ADDRESS_PER_MINUTE)
    return sum(account.weight(group) for group in account.groups) / rate


def assign_queues(config: AccountsConfig) -> dict[str, str]:
    """Every account onto one queue (its address): the longest first, onto the least loaded
    queue (ties: queue order). All of an account's tasks leave from that address."""
    load = dict.fromkeys(config.queues, 0.0)
    order = {account.name: index for index, account in enumerate(config.accounts)}
    chosen: dict[str, str] = {}
    for account in sorted(config.accounts, key=lambda a: (-account_minutes(a), order[a.name])):
        queue = min(config.queues, key=lambda q: (load[q], config.queues.index(q)))
        load[queue] += account_minutes(account)
        chosen[account.name] = queue
    return chosen


def plan_tasks(config: AccountsConfig, *, refresh: bool = True) -> list[TaskSpec]:
    """Every account's tasks, in account order, each on its account's queue."""
    queues = assign_queues(config)
    return [
        spec
        for account in config.accounts
        for spec in account_tasks(account, queues[account.name], refresh=refresh)
    ]


def pools(config: AccountsConfig) -> list[str]:
    """The pools an operator creates (`TASKS_PER_QUEUE` slots each): one per queue."""
    return [queue_pool(queue) for queue in config.queues]


def queue_loads(tasks: Iterable[TaskSpec]) -> dict[str, int]:
    loads: dict[str, int] = {}
    for task in tasks:
        loads[task.queue] = loads.get(task.queue, 0) + task.weight
    return loads


def batches(names: list[str], max_map_length: int) -> list[list[str]]:
    """The accounts of a queue in at most `max_map_length` batches, in order (Airflow's `[core]
    max_map_length`: a longer list fails the task that returns it): one account per batch up to
    the limit, then ceil(accounts / limit) per batch."""
    size = max(1, math.ceil(len(names) / max_map_length))
    return [names[start : start + size] for start in range(0, len(names), size)]
