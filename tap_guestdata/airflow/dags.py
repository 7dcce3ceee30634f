"""Guest Data Read API -> warehouse with Meltano, for Airflow 3. Deployment: docs/airflow-deploy.md.

The DAGs of an accounts plan (accounts.py); a single account is a plan of one:

- `guestdata_meltano`: the daily load; accounts with a schedule of their own share a DAG per
  schedule (`guestdata_meltano_at_<schedule>`). Per worker queue, a `plan` task returns the
  queue's accounts in batches (never more than Airflow's `max_map_length`), and a task group is
  mapped over them: `load` (`operators.GuestDataLoadOperator`). With many accounts the run ends
  with one `dbt_build` of every account's models (`trigger_rule=all_done`: after every load,
  whatever its end) and `all_loaded`, which fails the run if a load failed. A backfill run
  reloads its data interval (reload.py).
- `guestdata_meltano_weekly_refresh`: `meltano run --full-refresh` of the streams the catalog
  marks `refreshed_weekly` (late changes, a guest's consent), every account; with many
  accounts, then the one build.
- `guestdata_transform` (a single account): `dbt build` of transform/, scheduled on the assets
  the loads publish: every daily group loaded, or the weekly refresh.

Every load publishes its account's asset (`guestdata_raw_<account>`; a single account's: one
per stream group, `guestdata_raw_<group>`) and one per raw table it wrote, through the alias
`guestdata_raw`; the build, `guestdata_models` and one per model (lineage.py). Pools (one per
queue, `guestdata_<queue>`) bound how many tasks a queue runs at once; the tap's shared rate
budget keeps spec 8's limits. Settings: config.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import (
    DAG,
    AssetAll,
    CronDataIntervalTimetable,
    Param,
    TaskGroup,
    TriggerRule,
    task,
    task_group,
)
from airflow.sdk import conf as airflow_conf

from tap_guestdata.airflow.accounts import (
    DEFAULT_QUEUE,
    REFRESH_GROUP,
    TASKS_PER_QUEUE,
    AccountsConfig,
    batches,
    queue_pool,
)
from tap_guestdata.airflow.config import PipelineConfig, settings_reader
from tap_guestdata.airflow.operators import (
    EXTRACTOR,
    MODELS_ALIAS,
    MODELS_ASSET,
    RESOLVERS,
    GuestDataLoadOperator,
    GuestDataModelsOperator,
    raw_asset,
)
from tap_guestdata.airflow.plan import AccountsPlan, schedule_key, single_account
from tap_guestdata.airflow.priority import DAILY_RUNS_FIRST
from tap_guestdata.run.catalog import GROUPS

DAG_ID = "guestdata_meltano"
REFRESH_DAG_ID = "guestdata_meltano_weekly_refresh"
TRANSFORM_DAG_ID = "guestdata_transform"
# A queue's group maps this group over its batches of accounts; each batch runs this task.
BATCH_GROUP, LOAD_TASK = "accounts", "load"


def queue_argument(queue: str) -> dict[str, Any]:
    """`queue=` only for a named queue, so the task keeps Airflow's configured default."""
    return {} if queue == DEFAULT_QUEUE else {"queue": queue}


def schedule_dag_id(schedule: str) -> str:
    """`guestdata_meltano_at_<schedule>`: `0 2 * * *` gives `..._at_0_2_x_x_x`."""
    slug = re.sub(r"[^a-z0-9]+", "_", schedule.lower().replace("*", "x")).strip("_")
    return f"{DAG_ID}_at_{slug}"


def meltano_arguments(config: PipelineConfig) -> dict[str, Any]:
    return {
        "project_root": config.project_root,
        "meltano_bin": config.meltano_bin,
        "environment": config.environment,
    }


def queue_group(
    plan: AccountsPlan, queue: str, schedule: str | None, *, refresh: bool, timeout: timedelta
) -> TaskGroup:
    """The queue's `plan` task and the task group mapped over the batches it returns: each
    batch's `load` loads its accounts one after the other."""
    config = plan.config
    env = (
        {"TAP_GUESTDATA_RATE_BUDGET_STORE": config.rate_budget_store}
        if config.rate_budget_store
        else {}
    )
    if queue != DEFAULT_QUEUE:
        # spec 8: 600 a minute per address; a queue is served by the workers of one address.
        env["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] = queue
    with TaskGroup(queue, tooltip=f"the accounts on queue {queue}") as group:
        # On the queue it plans for (no API call, so Airflow's default pool).
        @task(task_id="plan", **queue_argument(queue))
        def plan_batches(schedule: str | None, queue: str, refresh: bool) -> list[list[str]]:
            """This queue's accounts, from the configuration the worker just parsed."""
            names = plan.names(schedule, queue, refresh=refresh)
            return batches(names, airflow_conf.getint("core", "max_map_length"))

        @task_group(group_id=BATCH_GROUP)
        def batch(accounts: list[str]) -> None:
            GuestDataLoadOperator(
                task_id=LOAD_TASK,
                accounts=accounts,
                blocks=[EXTRACTOR, config.target, *config.after_load],
                env=env,
                full_refresh=refresh,
                reloadable=not refresh,
                warehouse_conn_id=config.warehouse_connection_id or None,
                pool=queue_pool(queue),
                weight_rule=DAILY_RUNS_FIRST,  # a backfill's tasks yield the pool to the daily's
                execution_timeout=timeout,
                map_index_template="{{ task.label }}",
                doc_md=f"`meltano run {EXTRACTOR} {config.target}` of a batch of accounts, "
                "each with every key of its own; pool of its queue.",
                **meltano_arguments(config),
                **queue_argument(queue),
            )

        batch.expand(accounts=plan_batches(schedule, queue, refresh))
    return group


def load_task_id(queue: TaskGroup) -> str:
    """The id of a queue's load task (queue_group): `<queue>.accounts.load`."""
    return f"{queue.group_id}.{BATCH_GROUP}.{LOAD_TASK}"


def models_build(plan: AccountsPlan, dag_id: str, queues: Sequence[TaskGroup]) -> None:
    """The run's one `dbt_build`, of every account's models, after every queue's loads.

    `all_done`: it runs once every load has ended, whatever the end; an account whose load
    failed keeps its earlier raw rows, so its model rows, and holds back no other account's.
    `all_loaded` (no work, never on a worker) fails the run when a load failed: the build is
    no longer the DAG's only leaf, and Airflow sets a run's state from its leaves.
    """
    config = plan.config
    build = GuestDataModelsOperator(
        task_id="dbt_build",
        accounts=[plan.models(dag_id)],
        unmodelled=plan.outside_models(),
        load_task_ids=[load_task_id(group) for group in queues],
        blocks=config.transform,
        warehouse_conn_id=config.warehouse_connection_id or None,
        trigger_rule=TriggerRule.ALL_DONE,
        execution_timeout=config.transform_timeout,
        outlets=[MODELS_ASSET, MODELS_ALIAS],
        doc_md=BUILD_DOC,
        **meltano_arguments(config),
        # The first queue's workers (they have the project); no API call: Airflow's pool.
        **queue_argument(config.queue or queues[0].group_id or DEFAULT_QUEUE),
    )
    loaded = EmptyOperator(
        task_id="all_loaded", doc_md="Fails the run (upstream_failed) when a load failed."
    )
    for group in queues:
        group >> [build, loaded]


BUILD_DOC = (
    "`dbt build` of transform/, every account's models at once: staging, marts, and the "
    "reconciliation tests, per account (an error-severity failure fails the task; warnings "
    "and each failing test's accounts are in its log)."
)


def common_arguments(config: PipelineConfig, queues: int) -> dict[str, Any]:
    return {
        "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
        # Meltano state drives increments, so missed intervals need no runs of their own.
        "catchup": config.catchup,
        # Two daily runs at once would race on a state id. Backfill runs do not count against
        # this (Airflow counts them against the backfill's own max_active_runs), and each
        # reloads under a state id of its own.
        "max_active_runs": 1,
        # Every queue's pool busy at once (Airflow's default cap is 16 running tasks per DAG).
        "max_active_tasks": TASKS_PER_QUEUE * queues,
        "dagrun_timeout": timedelta(hours=20),
        "default_args": {
            "owner": "data-engineering",
            "retries": config.retries,
            "retry_delay": config.retry_delay,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": config.max_retry_delay,
        },
        "tags": ["guestdata", "meltano"],
    }


def reload_params() -> dict[str, Param]:
    """The params a daily run may reload with (a backfill run reloads its data interval)."""
    return {
        "reload": Param(
            False,
            type="boolean",
            description="Re-read this run's data interval (backfill runs always do), "
            "under a state id of its own: the daily bookmarks do not move.",
        ),
        "reload_streams": Param(
            [],
            type="array",
            description="What a reload re-reads: stream groups (core, members, rewards, "
            "stats) or windowed streams; empty: every windowed stream.",
        ),
    }


def interval_timetable(schedule: str | None) -> CronDataIntervalTimetable | None:
    """The cron schedule with real data intervals (a run at 05:00 covers the 24 hours before):
    Airflow's default for a cron string, CronTriggerTimetable, has empty intervals."""
    if schedule is None:
        return None
    return CronDataIntervalTimetable(schedule, timezone="UTC")


def plan_dags(plan: AccountsPlan, accounts: AccountsConfig) -> list[DAG]:
    """The daily DAG (and one per schedule of its own), the weekly refresh, and for a single
    account the transform DAG."""
    config = plan.config
    common = common_arguments(config, len(accounts.queues))
    dags: list[DAG] = []
    # Many accounts: each DAG run ends with one build of every account's models. A single
    # account keeps the transform DAG, scheduled on its groups' assets (a split account's
    # groups load as tasks of their own, and the weekly refresh builds through it too).
    builds = not plan.single and bool(config.transform) and plan.builds

    def loads_then_build(
        dag_id: str, schedule: str | None, *, refresh: bool, timeout: timedelta
    ) -> None:
        """In the DAG being built: every queue's loads, then (many accounts) the one build; the
        DAG's accounts registered for its mapped tasks."""
        groups = [
            queue_group(plan, queue, schedule, refresh=refresh, timeout=timeout)
            for queue in plan.queues(schedule, refresh=refresh)
        ]
        if builds:
            models_build(plan, dag_id, groups)
        RESOLVERS[f"{dag_id}:load"] = lambda name: plan.load_of(name, refresh=refresh)

    for schedule in dict.fromkeys(schedule_key(a.schedule) for a in accounts.accounts):
        own = None if schedule is None or schedule.lower() == "none" else schedule
        dag_id = DAG_ID if schedule is None else schedule_dag_id(schedule)
        with DAG(
            dag_id,
            description="Guest Data API to the warehouse: the accounts in mapped batches"
            + ("" if schedule is None else f", the accounts scheduled {schedule}"),
            doc_md=__doc__,
            schedule=interval_timetable(config.schedule if schedule is None else own),
            params=reload_params(),
            **common,
        ) as daily:
            loads_then_build(dag_id, schedule, refresh=False, timeout=config.task_timeout)
        dags.append(daily)
    if plan.queues(None, refresh=True):
        with DAG(
            REFRESH_DAG_ID,
            schedule=config.refresh_schedule,
            description="Weekly full refresh of guests and daily stats, every account",
            doc_md=__doc__,
            **common,
        ) as refresh:
            loads_then_build(REFRESH_DAG_ID, None, refresh=True, timeout=config.refresh_timeout)
        dags.append(refresh)
    if plan.single and config.transform:
        with DAG(
            TRANSFORM_DAG_ID,
            # All five daily groups loaded since the last build, or the weekly refresh did.
            schedule=AssetAll(*map(raw_asset, GROUPS)) | raw_asset(REFRESH_GROUP),
            description="dbt build of the models once the loads have published their assets",
            doc_md=__doc__,
            **{**common, "tags": ["guestdata", "meltano", "dbt"]},
        ) as transform:
            GuestDataModelsOperator(
                task_id="dbt_build",
                accounts=[plan.models(TRANSFORM_DAG_ID)],
                blocks=config.transform,
                warehouse_conn_id=config.warehouse_connection_id or None,
                execution_timeout=config.transform_timeout,
                outlets=[MODELS_ASSET, MODELS_ALIAS],
                doc_md=BUILD_DOC,
                **meltano_arguments(config),
                **queue_argument(config.queue or DEFAULT_QUEUE),
            )
        dags.append(transform)
    return dags


def build_dags(
    project_root: str | os.PathLike[str] | None = None,
    *,
    environment: str | None = None,
    target: str | None = None,
    accounts: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    api_key_variables: str | Sequence[str] | None = None,
    settings: Mapping[str, object] | None = None,
    settings_variable: str | None = "guestdata_settings",
) -> dict[str, DAG]:
    """The Guest Data DAGs of a Meltano project, by DAG id; a DAG file puts them in its globals.

    Args:
        project_root: the Meltano project (meltano.yml) on the workers; default: env
            `GUESTDATA_PROJECT_ROOT` or `MELTANO_PROJECT_ROOT`.
        environment: the Meltano environment (`prod`).
        target: the loader (`target-postgres`).
        accounts: many accounts: the JSON document (or its path, relative to project_root,
            or the parsed document); None: one account.
        api_key_variables: names of the Variables (or worker env vars) holding the API keys of
            the single account (with `accounts`: each account's own).
        settings: any other setting of `config.SETTINGS` by name (`meltano_bin`, `schedule`...).
        settings_variable: the Variable (a JSON object of settings) read once per parse; None:
            no Variable read at all (settings from this call and the environment).

    Each is a default the Variable's JSON or env `GUESTDATA_<NAME>` overrides (config.py).
    """
    named = {
        "project_root": project_root,
        "meltano_environment": environment,
        "meltano_target": target,
        "accounts": accounts,
        "api_key_variables": api_key_variables,
    }
    given = {**(settings or {}), **{k: v for k, v in named.items() if v is not None}}
    config = PipelineConfig.load(settings_reader(given, settings_variable))
    single = config.accounts is None
    plan_accounts = single_account(config) if config.accounts is None else config.accounts
    plan = AccountsPlan(config, plan_accounts, single=single)
    return {dag.dag_id: dag for dag in plan_dags(plan, plan_accounts)}
