"""Accounts of the Guest Data DAGs, and how their keys are spread over worker addresses.

Pure Python, no Airflow import: the DAG file, the planner (scripts/plan_workers.py) and the
unit tests share it. Deployment: docs/airflow.md, "Many accounts, many workers".

Budgets (spec 8): 120 requests per rolling minute per key, 600 per address across keys. A
worker machine (one address) serves one Celery queue; each queue has `LANES_PER_QUEUE` = 600 /
120 = 5 *lanes*, and each lane is an Airflow pool of one slot. Every key is given one lane and
every task that uses the key runs in that lane's pool, so:

- a key is in at most one running task (its tasks share a one-slot pool);
- a queue runs at most 5 tasks at a time, each holding one key its tap keeps to 120 a minute,
  so the address never carries more than 600 a minute.

A lane generalises today's pool per key (`guestdata_api_key_<n>`): several keys, of one
account or several, may share a lane and then take turns. Airflow gives a task one pool, which
is why one pool has to carry both guarantees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

PER_KEY_PER_MINUTE = 120  # spec 8: per key, rolling minute
PER_ADDRESS_PER_MINUTE = 600  # spec 8: per address, across keys
LANES_PER_QUEUE = PER_ADDRESS_PER_MINUTE // PER_KEY_PER_MINUTE  # 5 keys running per address
MAX_KEYS_PER_ACCOUNT = 5  # spec 5.3
GROUPS = ("core", "members", "rewards", "offers", "stats")  # the daily stream groups
REFRESH_GROUP = "refresh"  # the weekly full refresh
COOLDOWN_REQUESTS = PER_KEY_PER_MINUTE  # a minute's cool-down after a task, in request slots
DEFAULT_QUEUE = "default"  # Airflow's default queue (no `queue` on the task)
NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

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
    key_variables: tuple[str, ...]  # names of the Variables / env vars holding its keys
    base_url: str | None = None  # None: the worker's TAP_GUESTDATA_BASE_URL
    groups: tuple[str, ...] = GROUPS
    schedule: str | None = None  # None: the daily DAG's schedule (the account is in it)
    target_schema: str | None = None  # None: guestdata_<name>
    size: str | None = None  # small / medium / large: a weight for spreading the keys
    requests: Mapping[str, int] | None = None  # requests per group: a better weight

    @property
    def schema(self) -> str:
        return self.target_schema or f"guestdata_{self.name}"

    @property
    def state_id_suffix(self) -> str:
        """Meltano: `<env>:tap-guestdata--<group>-to-<target>:<suffix>`, one per account."""
        return self.name

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
class Lane:
    """One of the 5 concurrent key slots of a worker address: an Airflow pool of 1 slot."""

    queue: str
    number: int  # 1 .. LANES_PER_QUEUE

    @property
    def pool(self) -> str:
        return f"guestdata_{self.queue}_lane_{self.number}"


@dataclass(frozen=True)
class TaskSpec:
    """One `meltano run` of one account's stream group, with the key and lane it holds."""

    account: str
    group: str
    key_variable: str
    lane: Lane
    weight: int = 1

    @property
    def task_id(self) -> str:
        return f"{self.account}.{self.group}"


@dataclass
class _LaneLoad:
    lane: Lane
    load: int = 0
    keys: list[tuple[str, str]] = field(default_factory=list)


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
    }
    unknown = sorted(set(entry) - known)
    if unknown:
        raise AccountsError(f"accounts[{index}]: unknown fields {unknown}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise AccountsError(f"accounts[{index}]: name must match {NAME.pattern}, got {name!r}")
    where = f"account {name!r}"
    keys = _strings(entry.get("keys", []), f"{where}: keys")
    if not 1 <= len(keys) <= MAX_KEYS_PER_ACCOUNT or len(set(keys)) != len(keys):
        raise AccountsError(f"{where}: 1 to {MAX_KEYS_PER_ACCOUNT} distinct key names (spec 5.3)")
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
                # A key belongs to one account; two entries would put it in two lanes.
                raise AccountsError(
                    f"key {key!r} is listed for {owners[key]!r} and {account.name!r}"
                )
            owners[key] = account.name
    queues = _strings(document.get("queues", [DEFAULT_QUEUE]), "queues")
    if not queues or len(set(queues)) != len(queues) or not all(NAME.match(q) for q in queues):
        raise AccountsError(f"queues: distinct names matching {NAME.pattern}, got {queues}")
    return AccountsConfig(accounts, queues)


def key_of_group(account: Account, groups: Sequence[str]) -> dict[str, str]:
    """Heaviest group first onto the account's least loaded key (ties: the first key), so the
    heavy groups land on different keys; with equal weights this is round-robin in group
    order, as the single-account DAG does."""
    keys = account.key_variables
    load = dict.fromkeys(keys, 0)
    count = dict.fromkeys(keys, 0)
    chosen: dict[str, str] = {}
    for group in sorted(groups, key=lambda g: -account.weight(g)):
        key = min(keys, key=lambda k: (load[k], count[k], keys.index(k)))
        load[key] += account.weight(group)
        count[key] += 1
        chosen[group] = key
    return {group: chosen[group] for group in groups}


def assign_lanes(
    accounts: Sequence[Account], queues: Sequence[str], weight: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], Lane]:
    """Every (account, key) onto one lane, heaviest key first onto the least loaded lane.

    `weight[(account, key)]` is the work the key does per run (requests). Lanes are the
    `LANES_PER_QUEUE` lanes of every queue; ties go to the lane holding fewest keys, then to
    queue order, so the result is deterministic. A key is never split: all its tasks share its
    lane's one slot.
    """
    lanes = [
        _LaneLoad(Lane(queue, number))
        for number in range(1, LANES_PER_QUEUE + 1)
        for queue in queues
    ]
    order = {account.name: index for index, account in enumerate(accounts)}
    keys = [(account.name, key) for account in accounts for key in account.key_variables]
    keys.sort(key=lambda item: (-weight.get(item, 1), order[item[0]]))
    assigned: dict[tuple[str, str], Lane] = {}
    for item in keys:
        target = min(lanes, key=lambda lane: (lane.load, len(lane.keys)))
        target.load += weight.get(item, 1)
        target.keys.append(item)
        assigned[item] = target.lane
    return assigned


def plan_tasks(config: AccountsConfig, *, refresh: bool = True) -> list[TaskSpec]:
    """Every account's tasks (its daily groups, then the refresh), each with key and lane.

    A task's weight is its group's `Account.weight`; a key's lane load counts its tasks'
    weights plus `COOLDOWN_REQUESTS` each (the minute a task holds its slot after the run).
    """
    keyed: list[tuple[Account, str, str]] = []
    for account in config.accounts:
        groups = list(account.groups)
        if refresh and {"core", "stats"} & set(groups):  # the refresh reads guests and stats
            groups.append(REFRESH_GROUP)
        keyed += [(account, g, key) for g, key in key_of_group(account, groups).items()]
    key_weight: dict[tuple[str, str], int] = {}
    for account, group, key in keyed:
        extra = 0 if group == REFRESH_GROUP else COOLDOWN_REQUESTS
        key_weight[(account.name, key)] = (
            key_weight.get((account.name, key), 0) + account.weight(group) + extra
        )
    lanes = assign_lanes(config.accounts, config.queues, key_weight)
    return [
        TaskSpec(account.name, group, key, lanes[(account.name, key)], account.weight(group))
        for account, group, key in keyed
    ]


def pools(config: AccountsConfig) -> list[str]:
    """The pools an operator creates (1 slot each): every lane of every queue."""
    return [Lane(queue, n).pool for queue in config.queues for n in range(1, LANES_PER_QUEUE + 1)]


def lane_loads(tasks: Iterable[TaskSpec]) -> dict[Lane, int]:
    loads: dict[Lane, int] = {}
    for task in tasks:
        loads[task.lane] = loads.get(task.lane, 0) + task.weight
    return loads
