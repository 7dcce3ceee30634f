"""What each account runs, from the accounts configuration: the plan the DAGs are built on.

At parse time the schedules and queues (a DAG per schedule, a task group per queue); at run time
each account's `AccountLoad` (its Meltano runs, its keys' names, its schema) for the operators.
A deployment without accounts is a plan of one (`single_account`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tap_guestdata.airflow.accounts import (
    DEFAULT_QUEUE,
    REFRESH_GROUP,
    WHOLE_ACCOUNT,
    Account,
    AccountsConfig,
    TaskSpec,
    plan_tasks,
)
from tap_guestdata.airflow.config import PipelineConfig
from tap_guestdata.airflow.connection import DEFAULT_CONN_ID
from tap_guestdata.airflow.operators import AccountLoad, MeltanoRun
from tap_guestdata.run.catalog import GROUPS, refreshed_weekly, streams_of_group

SINGLE_ACCOUNT = "guestdata"  # the account of a deployment without an accounts setting
# Many accounts: the one build reads every raw schema matching this LIKE pattern (the accounts'
# default schemas, guestdata_<name>) into one models schema (staging: <schema>_staging).
RAW_SCHEMAS = "guestdata\\_%"
MODELS_SCHEMA = "guestdata_analytics"


def streams_of(groups: Sequence[str]) -> tuple[str, ...]:
    """The streams of stream groups (or of the refresh), in group order."""
    return tuple(
        stream
        for group in groups
        for stream in (refreshed_weekly() if group == REFRESH_GROUP else streams_of_group(group))
    )


def schema_variable(target: str) -> str:
    """The loader's schema setting as an environment variable (Meltano: namespace_setting)."""
    return f"{target.upper().replace('-', '_')}_DEFAULT_TARGET_SCHEMA"


class AccountsPlan:
    """The accounts configuration as the DAGs use it: at parse time the schedules and queues
    (a DAG per schedule, a task group per queue), at run time each account's work.

    `single`: the plan of one of a deployment without accounts: its state ids are the plain
    ones (`<group>` and `refresh` suffixes, none for the whole account), Meltano's own schema,
    and an asset per stream group (the transform DAG is scheduled on them).
    """

    def __init__(self, config: PipelineConfig, accounts: AccountsConfig, *, single: bool) -> None:
        self.config = config
        self.single = single
        self.accounts = {account.name: account for account in accounts.accounts}
        self.specs = plan_tasks(accounts)
        self.queue_order = accounts.queues
        # By account, once: the plan task looks up every account (10,000 x every spec else).
        self.specs_by_account: dict[str, list[TaskSpec]] = {}
        for spec in self.specs:
            self.specs_by_account.setdefault(spec.account, []).append(spec)

    def specs_of(self, name: str, *, refresh: bool) -> list[TaskSpec]:
        return [
            spec
            for spec in self.specs_by_account.get(name, [])
            if (spec.group == REFRESH_GROUP) == refresh
        ]

    def names(self, schedule: str | None, queue: str, *, refresh: bool) -> list[str]:
        """The accounts of `schedule` (refresh: every account with a refresh) on `queue`."""
        return [
            name
            for name, account in self.accounts.items()
            if (specs := self.specs_of(name, refresh=refresh))
            and specs[0].queue == queue
            and (refresh or schedule_key(account.schedule) == schedule)
        ]

    def queues(self, schedule: str | None, *, refresh: bool) -> list[str]:
        """The queues with accounts of `schedule` (refresh: with a refresh), in queue order."""
        used = {
            spec.queue
            for spec in self.specs
            if (spec.group == REFRESH_GROUP) == refresh
            and (refresh or schedule_key(self.accounts[spec.account].schedule) == schedule)
        }
        return [queue for queue in self.queue_order if queue in used]

    def account(self, name: str) -> Account:
        try:
            return self.accounts[name]
        except KeyError:
            raise ValueError(f"account {name!r} is no longer in the accounts setting") from None

    def state_id_suffix(self, spec: TaskSpec) -> str | None:
        """Many accounts: `<account>`, `<account>-<group>`; a single account: none, `<group>`."""
        if self.single:
            return None if spec.group == WHOLE_ACCOUNT else spec.group
        return spec.account if spec.group == WHOLE_ACCOUNT else f"{spec.account}-{spec.group}"

    def env_of(self, account: Account) -> dict[str, str]:
        if self.single:
            return {}  # Meltano's configuration: schema, base URL
        env = {schema_variable(self.config.target): account.schema}
        if account.base_url:
            env["TAP_GUESTDATA_BASE_URL"] = account.base_url
        return env

    def load_of(self, name: str, *, refresh: bool) -> AccountLoad:
        """The account's Meltano runs: all its groups in one, or (split) one per group."""
        account = self.account(name)
        specs = self.specs_of(name, refresh=refresh)
        # A single account: an asset per group (the transform DAG's schedule); else its own.
        assets = tuple(g for spec in specs for g in spec.groups) if self.single else (name,)
        return AccountLoad(
            name=name,
            runs=tuple(MeltanoRun(streams_of(s.groups), self.state_id_suffix(s)) for s in specs),
            key_variables=account.key_variables,
            env=self.env_of(account),
            assets=assets,
            connection_id=account.connection_id,
            # A single account named no connection: Meltano's own key may still be the one.
            connection_required=not self.single or self.config.connection_id is not None,
        )

    @property
    def builds(self) -> bool:
        """The models need every stream group's tables: some account loads every group."""
        return any(set(a.groups) == set(GROUPS) for a in self.accounts.values())

    def models(self, dag_id: str) -> AccountLoad:
        """The one build of every account's models, after a DAG run's loads.

        A single account: its one raw schema and `<schema>_analytics` (Meltano's configuration,
        nothing set). Many: every raw schema matching `RAW_SCHEMAS` into one models schema,
        `MODELS_SCHEMA` (docs/transform.md, "Across accounts"); an account whose load failed
        keeps its earlier raw rows, so its model rows. Named after its DAG, so two DAGs' builds
        on one worker keep their Meltano directories and dbt's target/ apart.
        """
        if self.single:
            account = self.account(SINGLE_ACCOUNT)
            return AccountLoad(account.name, (), env=self.env_of(account), build=self.builds)
        env = {
            "GUESTDATA_RAW_SCHEMAS": RAW_SCHEMAS,
            "GUESTDATA_DBT_SCHEMA": MODELS_SCHEMA,
            "DBT_TARGET_PATH": f"target/{dag_id}",  # in the dbt project (its log: dbt's own)
        }
        return AccountLoad(dag_id, (), env=env, build=self.builds)

    def outside_models(self) -> list[str]:
        """The accounts whose raw schema the models' pattern does not match (a target_schema
        of their own): loaded, but in no model."""
        return [
            f"{name} ({account.schema})"
            for name, account in self.accounts.items()
            if not like(account.schema, RAW_SCHEMAS)
        ]


def like(value: str, pattern: str) -> bool:
    """SQL `LIKE` (backslash escapes), case-insensitive as the models' catalog query on
    Snowflake (PostgreSQL's schema names are lower case here)."""
    regex = "".join(
        ".*" if part == "%" else "." if part == "_" else re.escape(part[-1])
        for part in re.findall(r"\\.|%|_|[^%_\\]", pattern)
    )
    return re.fullmatch(regex, value, flags=re.IGNORECASE) is not None


def schedule_key(schedule: str | None) -> str | None:
    """An account's own schedule ("none": manual runs only), None for the daily one."""
    return None if schedule is None else schedule.strip()


def single_account(config: PipelineConfig) -> AccountsConfig:
    """A deployment without accounts: one account with the configured connection (default
    `guestdata_default`) or keys (none: Meltano's own), its groups as tasks of their own with
    `task_shape=groups`, on the configured queue."""
    account = Account(
        name=SINGLE_ACCOUNT,
        key_variables=config.api_key_variables,
        split=config.task_shape == "groups",
        connection=config.connection_id or DEFAULT_CONN_ID,
    )
    return AccountsConfig((account,), (config.queue or DEFAULT_QUEUE,))
