"""The Guest Data operators: a batch of accounts' `meltano run`s from typed arguments.

`GuestDataLoadOperator` loads accounts (`AccountLoad`: the account's Meltano runs, each its
streams and state id suffix; the Airflow connection holding its keys, or the names of the
Variables holding them; its schema and base URL), one after the other; an account split by
stream group runs its groups side by side.
`GuestDataModelsOperator` builds the accounts' models the same way. A single account is a batch
of one; the many-accounts DAGs map a batch per task so no list outgrows `max_map_length`.

- Keys are read on the worker when the task runs (the account's connection; the old way, its
  Variables, else the worker's environment: connection.py), masked, and reach Meltano through
  its process environment only (`hooks.MeltanoHook`).
- `env`, `blocks`, `full_refresh` and `reloadable` are templated (a run's params can set them).
- A run with nothing to do (a reload of streams the account does not load) is skipped; a task
  whose accounts were all skipped raises `AirflowSkipException`.
- A failed account fails the task naming it; the others still run. A task of several accounts
  records the ones done in a Variable while it runs, so its retry runs only the rest. A load
  task's failed accounts' raw schemas go to XCom (`failed_loads`); the build holds their marts
  (docs/transform.md, "Accounts in production").
- A build that held accounts, and had no other error, fails without a retry (it would read the
  same rows), naming them.
- `on_kill` (and a timeout) ends every Meltano process group the task started.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk import Asset, AssetAlias, BaseOperator, Variable
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from tap_guestdata.airflow.config import flag
from tap_guestdata.airflow.connection import account_credentials
from tap_guestdata.airflow.connection import api_key as api_key  # its old home: DAGs import it
from tap_guestdata.airflow.hooks import MeltanoHook
from tap_guestdata.airflow.lineage import (
    BuiltModels,
    LoadedAccount,
    StreamCounts,
    Warehouse,
    built_models,
    load_lineage,
    loaded_tables,
    models_lineage,
    raw_schema_of,
    warehouse_of,
)
from tap_guestdata.airflow.reload import Reload, reload_of
from tap_guestdata.airflow.warehouse import WarehouseCredentials, warehouse_env

EXTRACTOR = "tap-guestdata"
FAILED_LOADS = "failed_loads"  # the XCom of a load task's failed accounts' raw schemas
# The line a build ends with when it held accounts (transform/macros/account_status.sql).
HELD_MARKER = "GUESTDATA ACCOUNTS HELD:"
DBT_ERRORS = re.compile(r"Done\. PASS=\d+ WARN=\d+ ERROR=(\d+)")
RAW_ALIAS = AssetAlias(name="guestdata_raw", group="guestdata")  # what every load publishes
# The build's models, one Asset per table (lineage.py), beside the one `guestdata_models`.
MODELS_ALIAS = AssetAlias(name="guestdata_model_tables", group="guestdata")


def raw_asset(key: str) -> Asset:
    """The raw tables of an account (`guestdata_raw_<account>`) or, with a single account, of
    a stream group or the refresh (`guestdata_raw_<group>`)."""
    return Asset(name=f"guestdata_raw_{key}", uri=f"guestdata://raw/{key}", group="guestdata")


MODELS_ASSET = Asset(name="guestdata_models", uri="guestdata://models", group="guestdata")


@dataclass(frozen=True)
class MeltanoRun:
    """One `meltano run` of an account: its streams, under `<env>:tap-...-to-...[:suffix]`."""

    streams: tuple[str, ...]
    state_id_suffix: str | None = None  # None: the plain state id (a single account's)


@dataclass(frozen=True)
class AccountLoad:
    """What a task needs to load one account (no key in it: where its keys are)."""

    name: str
    runs: tuple[MeltanoRun, ...]
    # The Variables (or worker env vars) of its keys: the old way, and the fallback when its
    # connection does not exist; neither: the key Meltano's own configuration holds.
    key_variables: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # its schema, base URL, dbt paths
    assets: tuple[str, ...] = ()  # `raw_asset` keys published when it loads
    build: bool = True  # its models can be built (every stream group loaded)
    connection_id: str | None = None  # the `guestdata` connection of its keys (connection.py)
    # A missing connection is an error unless key_variables stand in; False: Meltano's own key
    # stands in too (a single account deployed before connections).
    connection_required: bool = True

    @property
    def raw_schema(self) -> str | None:
        """The raw schema its env gives the loader (None: Meltano's configuration's)."""
        schemas = (v for k, v in self.env.items() if k.endswith("_DEFAULT_TARGET_SCHEMA"))
        return next(schemas, None)


Resolver = Callable[[str], AccountLoad]
# The factory's accounts by name, per `<DAG id>:<load|build>`: a mapped task's names come from
# its plan task (XCom), and the DAG file the worker just parsed knows each account's details.
RESOLVERS: dict[str, Resolver] = {}


class GuestDataAccountsOperator(BaseOperator):
    """A batch of accounts, each one after the other; see the module's docstring."""

    ui_color = "#e8f1fa"
    account_verb: ClassVar[str] = "load"
    # Rendered first thing on the worker: a mapped task's names are resolved there; a run's
    # params can set the rest (`{{ params.... }}`).
    template_fields: Sequence[str] = ("accounts", "env", "blocks", "warehouse_conn_id")

    def __init__(
        self,
        *,
        accounts: Sequence[AccountLoad | str],
        project_root: str,
        meltano_bin: str = "meltano",
        environment: str = "prod",
        blocks: Sequence[str] = (EXTRACTOR, "target-postgres"),
        env: Mapping[str, str] | None = None,
        warehouse_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.accounts = accounts  # a mapped task's is resolved when its fields are rendered
        self.project_root = project_root
        self.meltano_bin = meltano_bin
        self.environment = environment
        # A string is one template (split into blocks once rendered, in execute).
        self.blocks: list[str] | str = blocks if isinstance(blocks, str) else list(blocks)
        self.env = dict(env or {})
        # The warehouse's connection (warehouse.py); None: the worker's TARGET_* environment.
        self.warehouse_conn_id = warehouse_conn_id
        self.warehouse_credentials: WarehouseCredentials | None = None  # read in execute
        self.warned_no_warehouse = False  # the lineage warning, once a task
        self.hook: MeltanoHook | None = None

    @property
    def label(self) -> str:
        """The task's accounts by name (its map index label)."""
        names = [a if isinstance(a, str) else a.name for a in self.accounts]
        return ", ".join(names)

    def resolve(self, account: AccountLoad | str) -> AccountLoad:
        if isinstance(account, AccountLoad):
            return account
        try:
            return RESOLVERS[f"{self.dag_id}:{self.account_verb}"](account)
        except KeyError:
            raise AirflowException(f"account {account!r}: unknown to DAG {self.dag_id}") from None

    def execute(self, context: Any) -> list[str]:
        if self.warehouse_conn_id:  # once per task, before any account: every run shares it
            self.warehouse_credentials = warehouse_env(self.warehouse_conn_id)
            self.log.info("warehouse: credentials from connection %s", self.warehouse_conn_id)
        if isinstance(self.blocks, str):  # rendered from one template: space-separated
            self.blocks = self.blocks.split()
        accounts = [self.resolve(account) for account in self.accounts]
        self.hook = MeltanoHook(self.project_root, self.meltano_bin, self.environment)
        record = DoneRecord(context, len(accounts) > 1, self.retries or 0)
        done = record.read()
        outcomes: dict[str, str] = {}
        try:
            for account in accounts:
                if account.name in done:
                    self.log.info("%s: done by an earlier try of this task", account.name)
                    outcomes[account.name] = "success"
                    continue
                try:
                    outcomes[account.name] = self.run_account(account, context)
                except AirflowFailException:  # a failure no retry mends
                    raise
                except Exception:  # its key missing, say: its failure, not its batch's
                    self.log.exception("%s: failed", account.name)
                    outcomes[account.name] = "failed"
                self.log.info("%s: %s", account.name, outcomes[account.name])
                if outcomes[account.name] != "failed":
                    record.add(account.name)
        except BaseException:
            self.hook.kill()  # a timeout or an interrupt: no Meltano outlives the task
            raise
        failed = [name for name, outcome in outcomes.items() if outcome == "failed"]
        if failed:
            self.record_failed(context, [a for a in accounts if a.name in failed])
            if record.last_try:  # no retry will read it: a Variable per failed batch would pile up
                record.clear()
            raise AirflowException(f"{len(failed)} of {len(accounts)} failed: {', '.join(failed)}")
        record.clear()
        if all(outcome == "skipped" for outcome in outcomes.values()):
            raise AirflowSkipException(f"nothing to {self.account_verb}: {self.label}")
        self.publish(context, [a for a in accounts if outcomes[a.name] == "success"])
        return [name for name, outcome in outcomes.items() if outcome == "success"]

    def on_kill(self) -> None:
        if self.hook is not None:
            self.hook.kill()

    def run_account(self, account: AccountLoad, context: Any) -> str:
        raise NotImplementedError

    def publish(self, context: Any, accounts: Sequence[AccountLoad]) -> None:
        """Asset events of the accounts loaded (none by default)."""

    def record_failed(self, context: Any, accounts: Sequence[AccountLoad]) -> None:
        """What the run should know of the accounts that failed (nothing by default)."""

    def account_env(self, account: AccountLoad, more: Mapping[str, str]) -> dict[str, str]:
        """What an account's Meltano run gets on top of the worker's environment. The
        warehouse's connection is under the account's env: its own schema beats it."""
        warehouse = self.warehouse_credentials.env if self.warehouse_credentials else {}
        return {**self.env, **warehouse, **account.env, **more}

    def run_env(self, account: AccountLoad, **more: str) -> dict[str, str]:
        """The environment an account's Meltano run sees (the worker's underneath)."""
        return {**os.environ, **self.account_env(account, more)}

    @property
    def snowflake(self) -> bool:
        """The blocks load into (or build on) Snowflake."""
        return any("snowflake" in block for block in self.blocks)

    def warehouse(self, env: Mapping[str, str]) -> Warehouse | None:
        """Where its tables are, for lineage and Assets; None (with a warning, once a task) when
        the run's environment does not say (Meltano's own configuration holds the host)."""
        warehouse = warehouse_of(env, snowflake=self.snowflake)
        if warehouse is None and not self.warned_no_warehouse:
            self.warned_no_warehouse = True
            self.log.warning(
                "lineage: no warehouse host and database in the environment (a warehouse "
                "connection, or TARGET_* variables); no table Assets or OpenLineage outputs"
            )
        return warehouse

    def meltano(self, account: AccountLoad, blocks: Sequence[str], **run: Any) -> int:
        assert self.hook is not None
        env = self.account_env(account, run.pop("env", {}))
        return self.hook.run(blocks, env=env, log=self.log, **run)


class GuestDataLoadOperator(GuestDataAccountsOperator):
    """`meltano run tap-guestdata <target> [after-load blocks]` of each account of the batch.

    Args:
        accounts: `AccountLoad`s (or, in the factory's DAGs, names its plan task resolved).
        full_refresh: ignore and replace the state (the weekly refresh).
        reloadable: a backfill run (or `reload: true` in the run's params) re-reads the London
            days of the run's data interval under a state id of its own (reload.py).
        blocks: the tap, the loader, and blocks after it (`guestdata-pg-types:timestamptz`).
        env: more environment for every run (the rate budget's store and address).
    `full_refresh`, `reloadable`, `blocks` and `env` are templated: `"{{ params.full }}"`.
    """

    template_fields: Sequence[str] = (
        *GuestDataAccountsOperator.template_fields,
        "full_refresh",
        "reloadable",
    )

    def __init__(
        self, *, full_refresh: bool | str = False, reloadable: bool | str = True, **kwargs: Any
    ):
        kwargs.setdefault("outlets", [RAW_ALIAS])
        super().__init__(**kwargs)
        self.full_refresh = full_refresh
        self.reloadable = reloadable
        self.loaded: dict[str, LoadedAccount] = {}  # this try's, for Assets and lineage

    def run_account(self, account: AccountLoad, context: Any) -> str:
        credentials = account_credentials(
            account.connection_id, account.key_variables, required=account.connection_required
        )
        env = {}
        if credentials is not None:
            self.log.info(
                "%s: %d key(s) from %s", account.name, len(credentials.keys), credentials.source
            )
            env["TAP_GUESTDATA_API_KEYS"] = json.dumps(list(credentials.keys))
            # The tap adds api_key to api_keys: one of these, so no key configured for the
            # project or the worker (another account's) joins them.
            env["TAP_GUESTDATA_API_KEY"] = credentials.keys[0]
            if credentials.base_url:  # the connection's host: over the account's base_url
                env["TAP_GUESTDATA_BASE_URL"] = credentials.base_url
        retry = int(context["ti"].try_number) > 1
        counts = StreamCounts()  # from the tap's summary lines, every run of the account

        def one(run: MeltanoRun) -> str:
            return self.run_streams(account, run, context, env, counts, retry=retry)

        if len(account.runs) == 1:
            outcomes = [one(account.runs[0])]
        else:  # an account split by group: its groups side by side, a state id each
            with ThreadPoolExecutor(len(account.runs)) as pool:
                outcomes = list(pool.map(one, account.runs))
        if "failed" in outcomes:
            return "failed"
        if set(outcomes) == {"skipped"}:
            return "skipped"
        self.record_loaded(account, self.run_env(account, **env), counts)
        return "success"

    def record_loaded(
        self, account: AccountLoad, env: Mapping[str, str], counts: StreamCounts
    ) -> None:
        """What the account's runs wrote: its raw tables and their rows (lineage.py)."""
        warehouse = self.warehouse(env)
        if warehouse is None:
            return
        schema = account.raw_schema or raw_schema_of(env, snowflake=self.snowflake)
        self.loaded[account.name] = LoadedAccount(
            name=account.name,
            api=env.get("TAP_GUESTDATA_BASE_URL") or "guestdata://api",
            tables=loaded_tables(warehouse, schema, counts),
            records=dict(counts.records),
        )

    def run_streams(
        self,
        account: AccountLoad,
        run: MeltanoRun,
        context: Any,
        env: Mapping[str, str],
        counts: StreamCounts,
        *,
        retry: bool,
    ) -> str:
        streams, suffix, full_refresh = run.streams, run.state_id_suffix, flag(self.full_refresh)
        run_env = dict(env)
        reload = self.reload(context, run.streams) if flag(self.reloadable) else None
        if reload is not None:
            if not reload.streams:
                self.log.info(
                    "%s: nothing of %s to reload for %s", account.name, streams, reload.period
                )
                return "skipped"
            streams, full_refresh = reload.streams, True
            suffix = f"{suffix}-{reload.label}" if suffix else reload.label
            run_env["TAP_GUESTDATA_START_DATE"] = reload.first.isoformat()
            run_env["TAP_GUESTDATA_END_DATE"] = reload.last.isoformat()
            self.log.info("%s: reload of the London days %s", account.name, reload.period)
        # The run's streams, by Meltano's select extra (a project needs tap-guestdata alone).
        run_env["TAP_GUESTDATA__SELECT"] = json.dumps([f"{stream}.*" for stream in streams])
        options = [f"--state-id-suffix={suffix}"] if suffix else []
        if full_refresh:
            options.append("--full-refresh")
        if retry:
            # Meltano holds a lost try's job as running for 5 minutes after its last heartbeat
            # and refuses the state id until then; the retry takes it over.
            options.append("--force")
        code = self.meltano(
            account,
            self.blocks,
            label=suffix or "default",
            options=options,
            env=run_env,
            on_line=counts.watch,
        )
        return "success" if code == 0 else "failed"

    @staticmethod
    def reload(context: Any, streams: Sequence[str]) -> Reload | None:
        dag_run = context["dag_run"]
        return reload_of(
            dag_run.run_type,
            context.get("data_interval_start"),
            context.get("data_interval_end"),
            context["params"],
            streams,
        )

    def record_failed(self, context: Any, accounts: Sequence[AccountLoad]) -> None:
        """Their raw schemas, for the build to hold (its try's XComs: a retry that loads them
        clears the list)."""
        schemas = [account.raw_schema for account in accounts if account.raw_schema]
        context["ti"].xcom_push(key=FAILED_LOADS, value=schemas)

    def publish(self, context: Any, accounts: Sequence[AccountLoad]) -> None:
        """Each account's asset (or its groups') and one per raw table it wrote."""
        events = context["outlet_events"][RAW_ALIAS]
        for account in accounts:
            for key in account.assets:
                events.add(raw_asset(key))
            loaded = self.loaded.get(account.name)
            if loaded is None:  # failed, skipped, or no warehouse to name its tables by
                continue
            for stream, table in loaded.tables.items():
                rows = loaded.records.get(stream, 0)
                events.add(table.asset(), extra={"account": account.name, "rows": rows})

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's: the API endpoints read, the raw tables written."""
        return load_lineage(self.loaded.values())

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """The accounts that did load before the task failed (a failed one wrote a part)."""
        return self.get_openlineage_facets_on_complete(task_instance)


class GuestDataModelsOperator(GuestDataAccountsOperator):
    """`meltano run <transform blocks>` (dbt build) of each account whose models can be built.

    The DAGs give it one: every account's models at once (`AccountsPlan.models`).
    `unmodelled`: accounts loaded into a raw schema the models do not read, warned about.
    `load_task_ids`: the run's load tasks; the raw schemas whose load failed in them
    (`failed_loads`) reach dbt as `GUESTDATA_FAILED_LOADS`, and their marts are held.
    """

    account_verb = "build"

    def __init__(
        self, *, unmodelled: Sequence[str] = (), load_task_ids: Sequence[str] = (), **kwargs: Any
    ) -> None:
        kwargs.setdefault("outlets", [MODELS_ASSET, MODELS_ALIAS])
        super().__init__(**kwargs)
        self.unmodelled = list(unmodelled)
        self.load_task_ids = list(load_task_ids)
        self.models: BuiltModels | None = None  # from dbt's run_results.json, once built

    def failed_loads(self, context: Any) -> list[str]:
        """The raw schemas whose load failed in this run (every map index of every load task)."""
        if not self.load_task_ids:
            return []
        pulled = context["ti"].xcom_pull(task_ids=self.load_task_ids, key=FAILED_LOADS)
        return sorted({schema for schemas in pulled or [] if schemas for schema in schemas})

    def run_account(self, account: AccountLoad, context: Any) -> str:
        if self.unmodelled:
            self.log.warning(
                "not in the models (their raw schema is outside %s): %s",
                account.env.get("GUESTDATA_RAW_SCHEMAS", "the pattern"),
                ", ".join(self.unmodelled),
            )
        if not account.build:
            self.log.info("%s: the models need every stream group", account.name)
            return "skipped"
        env = {}
        failed_loads = self.failed_loads(context)
        if failed_loads:
            self.log.warning(
                "loads failed in this run, their marts held: %s", ", ".join(failed_loads)
            )
            env["GUESTDATA_FAILED_LOADS"] = ",".join(failed_loads)
        held: list[str] = []
        errors: list[
            str
        ] = []  # dbt's summary's ERROR= count: a held build is not also a broken one

        def watch(line: str) -> None:
            if HELD_MARKER in line:
                held.append(line.split(HELD_MARKER, 1)[1].strip())
            errors.extend(DBT_ERRORS.findall(line))

        started = time.time()
        code = self.meltano(
            account, self.blocks, label=f"{account.name}-models", env=env, on_line=watch
        )
        self.read_run_results(account, started)
        if code != 0 and held and set(errors) == {"0"}:
            raise AirflowFailException(f"the build held accounts: {held[-1]}")
        return "success" if code == 0 else "failed"

    def read_run_results(self, account: AccountLoad, started: float) -> None:
        """The models this build wrote and the raw tables they read (dbt's run_results.json,
        in the dbt project's target path: meltano.yml's DBT_PROJECT_DIR, transform/)."""
        env = self.run_env(account)
        project = Path(env.get("DBT_PROJECT_DIR") or Path(self.project_root) / "transform")
        results = project / env.get("DBT_TARGET_PATH", "target") / "run_results.json"
        if not results.is_file() or results.stat().st_mtime < started:
            self.log.warning("lineage: this build wrote no %s", results)
            return
        warehouse = self.warehouse(env)
        if warehouse is not None:
            self.models = built_models(results, warehouse)

    def publish(self, context: Any, accounts: Sequence[AccountLoad]) -> None:
        """One Asset event per model table built (`guestdata_models` is the outlet's own)."""
        if self.models is None or MODELS_ALIAS not in self.outlets:
            return
        events = context["outlet_events"][MODELS_ALIAS]
        for table in self.models.built:
            events.add(table.asset())

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The OpenLineage provider's: the raw tables read, the models built."""
        return models_lineage(self.models or BuiltModels([], [], {}))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """A failed build still built some models (a held account's build fails at its end)."""
        return self.get_openlineage_facets_on_complete(task_instance)


class DoneRecord:
    """The accounts a batch task has done in this run, kept across its tries in a Variable
    (XComs are cleared when a try starts). Only for a task of several accounts. Deleted when
    the task succeeds or fails its last try; a task cleared by hand after that runs them all."""

    def __init__(self, context: Any, used: bool, retries: int) -> None:
        ti = context["ti"]
        where = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"
        self.key = f"guestdata_done_{hashlib.sha256(where.encode()).hexdigest()[:24]}"
        self.used = used
        self.first_try = int(ti.try_number) <= 1
        self.last_try = int(ti.try_number) > retries
        self.names: list[str] = []

    def read(self) -> set[str]:
        if not self.used or self.first_try:
            return set()
        self.names = json.loads(Variable.get(self.key, default="[]"))
        return set(self.names)

    def add(self, name: str) -> None:
        if self.used:
            self.names.append(name)
            Variable.set(self.key, json.dumps(self.names))

    def clear(self) -> None:
        if self.used and self.names:
            Variable.delete(self.key)
