"""Guest Data Read API -> warehouse with Meltano, for Airflow 3. Deployment: docs/airflow.md.

Three DAGs:

- `guestdata_meltano`: the daily load. One `meltano run tap-guestdata` per account with all
  its stream groups (task `all`), or, with `task_shape=groups` (a large account: `split`), one
  per group, in parallel. A task chooses its streams with Meltano's `TAP_GUESTDATA__SELECT` and
  its state id with `--state-id-suffix`, so a Meltano project needs `tap-guestdata` alone.
- `guestdata_meltano_weekly_refresh`: `meltano run --full-refresh` of guests and daily stats:
  rows that change after they are first read (a guest's `marketing_consent`, late visits in
  recent days) are read again in full once a week.
- `guestdata_transform`: `dbt build` of transform/ (models and their checks). Each load task
  publishes an Airflow asset per group it loads when it succeeds; this DAG is scheduled on
  those assets: once all five daily groups have loaded, or the weekly refresh has.

API keys and rate limits (spec 8: 120 requests per rolling minute per key, 600 per address):
every task uses every key of its account, and the tap's shared rate budget
(`rate_budget_store`: a Redis all workers reach, else a SQLite file per machine) counts every
process's requests per key and per address (a worker queue is an address). Two tasks may share
a key; the budget divides it. Pools (one per queue, `guestdata_<queue>`) only bound how many
tasks run at once, and no task sleeps after its run.

Many accounts: the setting `accounts` (JSON, or the path of a JSON file) lists them; each gets
a task group in the daily DAG (or a DAG of its own when it has its own schedule), its own
state id suffix and target schema, and a worker queue (`accounts.py`).
Without it the DAGs are the single-account ones described above.

Settings (config.py): Airflow Variable `guestdata_<name>`, else env `GUESTDATA_<NAME>`, else
the argument of `build_dags`, else the default; read when the DAG file is parsed.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset, AssetAll, TaskGroup, Variable
from airflow.sdk.log import mask_secret

from tap_guestdata.airflow.accounts import (
    DEFAULT_QUEUE,
    GROUPS,
    REFRESH_GROUP,
    TASKS_PER_QUEUE,
    WHOLE_ACCOUNT,
    Account,
    AccountsConfig,
    TaskSpec,
    plan_tasks,
    queue_pool,
)
from tap_guestdata.airflow.config import PipelineConfig, settings_reader

DAG_ID = "guestdata_meltano"
REFRESH_DAG_ID = "guestdata_meltano_weekly_refresh"
TRANSFORM_DAG_ID = "guestdata_transform"
EXTRACTOR = "tap-guestdata"

# Stream group -> its streams, chosen per task with TAP_GUESTDATA__SELECT.
STREAM_GROUPS: dict[str, str] = {  # the groups of accounts.GROUPS, in that order
    "core": "account, venues, guests, read_windows",
    "members": "members, member_ledger",
    "rewards": "rewards, redemptions",
    "offers": "programme, programme_venues, tiers, offers, offer_stats",
    "stats": "daily_stats, daily_account_stats",
}
REFRESH_STREAMS = "guests, read_windows, daily_stats, daily_account_stats"


def streams_of(groups: Sequence[str]) -> list[str]:
    """The streams of stream groups (or of the refresh), in group order."""
    every = {**STREAM_GROUPS, REFRESH_GROUP: REFRESH_STREAMS}
    return [stream for group in groups for stream in every[group].split(", ")]


def select_patterns(groups: Sequence[str]) -> str:
    """Meltano's `select` extra as JSON, for TAP_GUESTDATA__SELECT: these groups' streams."""
    return json.dumps([f"{stream}.*" for stream in streams_of(groups)])


def raw_asset(group: str) -> Asset:
    """What a load task publishes: the raw tables of its stream group (`<account>/<group>`
    with many accounts), in the warehouse."""
    name = group.replace("/", "_")
    return Asset(name=f"guestdata_raw_{name}", uri=f"guestdata://raw/{group}", group="guestdata")


MODELS_ASSET = Asset(name="guestdata_models", uri="guestdata://models", group="guestdata")


def models_asset(account: str) -> Asset:
    return Asset(
        name=f"guestdata_models_{account}", uri=f"guestdata://models/{account}", group="guestdata"
    )


def api_key(name: str) -> str:
    """Template macro, run on the worker: the key in Variable `name`, else env var `name`.

    The value is registered with Airflow's secrets masker whatever the name, so it is redacted
    from task logs and rendered-template views; errors name the variable, never the value.
    """
    try:
        value = Variable.get(name, default=None)
    except Exception:  # no API server (e.g. a local run): the worker's environment only
        value = None
    value = value or os.environ.get(name)
    if not value:
        raise ValueError(f"API key {name!r}: no Airflow Variable or environment variable so named")
    mask_secret(value)
    return value


def api_keys(names: Sequence[str]) -> str:
    """Template macro, run on the worker: the keys in Variables (or env vars) `names`, as the
    JSON list TAP_GUESTDATA_API_KEYS takes; each one masked (`api_key`)."""
    return json.dumps([api_key(name) for name in names])


def meltano_command(
    config: PipelineConfig,
    *,
    run_label: str,
    full_refresh: bool,
    state_id_suffix: str | None,
) -> str:
    run = [
        config.meltano_bin,
        f"--environment={config.environment}",
        "run",
        # Plugins are installed when the worker is deployed: parallel tasks on one machine must
        # not race to install into the shared plugin virtualenvs.
        "--no-install",
        # One task's state id must not meet another's: `<env>:tap-guestdata-to-<target>:<suffix>`.
        *([f"--state-id-suffix={state_id_suffix}"] if state_id_suffix else []),
        *(["--full-refresh"] if full_refresh else []),
        EXTRACTOR,
        config.target,
        *config.after_load,
    ]
    lines = ["set -u", *own_run_directory(run_label)]
    # A retry follows a try Airflow has given up on (it failed, or its worker was lost and the
    # heartbeat timed out). Meltano holds a lost try's job as running for 5 minutes after its
    # last heartbeat and refuses the state id until then; the retry takes it over.
    lines.append('take_over=(); [ "{{ ti.try_number }}" -le 1 ] || take_over=(--force)')
    head, tail = shlex.join(run[:3]), shlex.join(run[3:])
    lines.append(f'exec {head} "${{take_over[@]}}" {tail}')
    return "\n".join(lines)


def own_run_directory(label: str) -> list[str]:
    """Shell lines giving the task's runs a Meltano system directory of their own.

    Meltano 4.4 writes an extractor's catalog and incoming state to fixed names under
    `.meltano/run/<extractor>/` (`tap.properties.json`, `state.json`), and every task runs the
    same extractor with its own selection and state id, so two tasks on one machine would read
    each other's. The task's directory links everything else (plugin virtualenvs, the SQLite
    database if one is used) back to the shared one, so plugins are still installed once per
    machine; `ln` without `-f` leaves a link alone if another try made it first.
    """
    return [
        'shared="${MELTANO_SYS_DIR_ROOT:-$PWD/.meltano}"',
        f'own="$shared/tasks/{label}"',
        'mkdir -p "$own"',
        "shopt -s nullglob",
        'for entry in "$shared"/* "$shared/meltano.db"; do',
        '  case "${entry##*/}" in run | logs | tasks) ;;',
        '    *) ln -s "$entry" "$own/${entry##*/}" 2>/dev/null || true ;; esac',
        "done",
        'export MELTANO_SYS_DIR_ROOT="$own"',
    ]


def schema_variable(target: str) -> str:
    """The loader's schema setting as an environment variable (Meltano: namespace_setting)."""
    return f"{target.upper().replace('-', '_')}_DEFAULT_TARGET_SCHEMA"


def meltano_task(
    config: PipelineConfig,
    task_id: str,
    groups: Sequence[str],
    *,
    keys: Sequence[str],
    full_refresh: bool = False,
    timeout: timedelta,
    state_id_suffix: str | None,
    outlets: list[Asset],
    account: Account | None = None,
    queue: str | None = None,
) -> BashOperator:
    env: dict[str, str] = {"TAP_GUESTDATA__SELECT": select_patterns(groups)}
    if keys:
        # Rendered on the worker by `api_keys` (masked); the DAG file holds only the names.
        env["TAP_GUESTDATA_API_KEYS"] = f"{{{{ guestdata_api_keys({list(keys)!r}) }}}}"
        # The tap adds api_key to api_keys: set it to one of these, so no key configured for
        # the project or the worker (another account's) joins them.
        env["TAP_GUESTDATA_API_KEY"] = f"{{{{ guestdata_api_key({keys[0]!r}) }}}}"
    if config.rate_budget_store:
        env["TAP_GUESTDATA_RATE_BUDGET_STORE"] = config.rate_budget_store
    queue = queue or config.queue
    if queue:
        # spec 8: 600 a minute per address; a queue is served by the workers of one address.
        env["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] = queue
    if account is not None:
        env[schema_variable(config.target)] = account.schema
        if account.base_url:
            env["TAP_GUESTDATA_BASE_URL"] = account.base_url
    where = f"account `{account.name}`, " if account else ""
    pool = queue_pool(queue or DEFAULT_QUEUE)
    return BashOperator(
        task_id=task_id,
        bash_command=meltano_command(
            config,
            run_label=state_id_suffix or "default",
            full_refresh=full_refresh,
            state_id_suffix=state_id_suffix,
        ),
        cwd=config.project_root,
        env=env,
        append_env=True,  # PATH, MELTANO_DATABASE_URI, TARGET_POSTGRES_* from the worker
        skip_on_exit_code=None,  # every non-zero exit is a failure (meltano never means "skip")
        pool=pool,
        execution_timeout=timeout,
        # Published only when the task succeeds: the transform DAG is scheduled on these.
        outlets=outlets,
        doc_md=f"`meltano run {EXTRACTOR} {config.target}`: {', '.join(streams_of(groups))}. "
        f"{where}Keys: {', '.join(keys) or 'from Meltano config'}; pool `{pool}`.",
        **queue_argument(queue),
    )


def queue_argument(queue: str | None) -> dict[str, Any]:
    """`queue=` only when set, so the operator keeps Airflow's configured default queue."""
    return {"queue": queue} if queue else {}


def transform_task(config: PipelineConfig, account: Account | None = None) -> BashOperator:
    """`meltano run dbt-postgres:build`: no API calls, so no key and no key pool."""
    run = [config.meltano_bin, f"--environment={config.environment}", "run", "--no-install"]
    env = None
    if account is not None:
        env = {
            # The models go next to the account's raw schema: <schema>_analytics.
            schema_variable(config.target): account.schema,
            # Builds of two accounts at once must not share dbt's target/ and logs/.
            "DBT_TARGET_PATH": f"target/accounts/{account.name}",
            "DBT_LOG_PATH": f"logs/accounts/{account.name}",
        }
    return BashOperator(
        task_id="dbt_build",
        bash_command=shlex.join([*run, *config.transform]),
        cwd=config.project_root,
        env=env,
        append_env=True,  # TARGET_POSTGRES_* from the worker: the same database as the loads
        skip_on_exit_code=None,
        execution_timeout=config.transform_timeout,
        outlets=[models_asset(account.name) if account else MODELS_ASSET],
        doc_md="`dbt build` of transform/: staging, marts, and the reconciliation tests "
        "(an error-severity failure fails the task; warnings are in its log).",
        **queue_argument(config.queue),
    )


def common_arguments(config: PipelineConfig) -> dict[str, Any]:
    return {
        "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
        # Meltano state drives increments, so missed intervals need no runs of their own.
        "catchup": config.catchup,
        # Two runs of one group at once would race on its state id.
        "max_active_runs": 1,
        "dagrun_timeout": timedelta(hours=20),
        "default_args": {
            "owner": "data-engineering",
            "retries": config.retries,
            "retry_delay": config.retry_delay,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": config.max_retry_delay,
        },
        "user_defined_macros": {"guestdata_api_key": api_key, "guestdata_api_keys": api_keys},
        "tags": ["guestdata", "meltano"],
    }


def single_account_dags(config: PipelineConfig) -> list[DAG]:
    common = common_arguments(config)
    keys = config.api_key_variables
    with DAG(
        DAG_ID,
        schedule=config.schedule,
        description="Guest Data API to the warehouse: one Meltano run (or one per stream group)",
        doc_md=__doc__,
        **common,
    ) as incremental:
        if config.task_shape == "groups":
            for group in STREAM_GROUPS:
                meltano_task(
                    config,
                    group,
                    [group],
                    keys=keys,
                    timeout=config.task_timeout,
                    state_id_suffix=group,
                    outlets=[raw_asset(group)],
                )
        else:
            meltano_task(
                config,
                WHOLE_ACCOUNT,
                list(STREAM_GROUPS),
                keys=keys,
                timeout=config.task_timeout,
                state_id_suffix=None,  # the plain `meltano run tap-guestdata <target>` state
                outlets=[raw_asset(group) for group in STREAM_GROUPS],
            )
    with DAG(
        REFRESH_DAG_ID,
        schedule=config.refresh_schedule,
        description="Weekly full refresh of guests (marketing consent) and daily stats",
        doc_md=__doc__,
        **common,
    ) as refresh:
        meltano_task(
            config,
            REFRESH_GROUP,
            [REFRESH_GROUP],
            keys=keys,
            full_refresh=True,
            timeout=config.refresh_timeout,
            state_id_suffix=REFRESH_GROUP,
            outlets=[raw_asset(REFRESH_GROUP)],
        )
    if not config.transform:
        return [incremental, refresh]
    with DAG(
        TRANSFORM_DAG_ID,
        # All five daily groups loaded since the last build, or the weekly refresh did.
        schedule=AssetAll(*map(raw_asset, STREAM_GROUPS)) | raw_asset(REFRESH_GROUP),
        description="dbt build of the models once the loads have published their assets",
        doc_md=__doc__,
        **{**common, "tags": ["guestdata", "meltano", "dbt"]},
    ) as transform:
        transform_task(config)
    return [incremental, refresh, transform]


def state_id_suffix(spec: TaskSpec) -> str:
    """`<account>` for a whole-account task, `<account>-<group>` for a group or the refresh."""
    return spec.account if spec.group == WHOLE_ACCOUNT else f"{spec.account}-{spec.group}"


def account_tasks(
    config: PipelineConfig, account: Account, specs: list[TaskSpec], *, refresh: bool
) -> None:
    """The account's task group: its daily task(s), or its refresh, on the account's queue."""
    with TaskGroup(account.name, tooltip=f"account {account.name}: schema {account.schema}"):
        for spec in specs:
            if (spec.group == REFRESH_GROUP) != refresh:
                continue
            meltano_task(
                config,
                spec.group,
                spec.groups,
                keys=account.key_variables,
                full_refresh=refresh,
                timeout=config.refresh_timeout if refresh else config.task_timeout,
                state_id_suffix=state_id_suffix(spec),
                outlets=[raw_asset(f"{account.name}/{group}") for group in spec.groups],
                account=account,
                queue=None if spec.queue == DEFAULT_QUEUE else spec.queue,
            )


def account_dags(config: PipelineConfig, accounts: AccountsConfig) -> list[DAG]:
    """Many accounts: the daily DAG holds a task group per account on the daily schedule; an
    account with its own schedule gets `guestdata_meltano_<name>`; the weekly refresh holds a
    group per account; each account that loads every group gets `guestdata_transform_<name>`.
    Every task runs on its account's queue, in the queue's pool: see accounts.py."""
    specs = plan_tasks(accounts)
    by_account = {
        account.name: [s for s in specs if s.account == account.name]
        for account in accounts.accounts
    }
    # Every queue's pool busy at once (Airflow's default cap is 16 running tasks per DAG).
    common = {
        **common_arguments(config),
        "max_active_tasks": TASKS_PER_QUEUE * len(accounts.queues),
    }
    dags: list[DAG] = []
    shared = [a for a in accounts.accounts if a.schedule is None]
    with DAG(
        DAG_ID,
        schedule=config.schedule,
        description="Guest Data API to the warehouse: every account, one Meltano run per group",
        doc_md=__doc__,
        **common,
    ) as daily:
        for account in shared:
            account_tasks(config, account, by_account[account.name], refresh=False)
    if shared:
        dags.append(daily)
    for account in accounts.accounts:
        if account.schedule is None:
            continue
        with DAG(
            f"{DAG_ID}_{account.name}",
            schedule=None if account.schedule.lower() == "none" else account.schedule,
            description=f"Guest Data API to the warehouse: account {account.name}",
            doc_md=__doc__,
            **common,
        ) as own:
            account_tasks(config, account, by_account[account.name], refresh=False)
        dags.append(own)
    refreshed = [
        a for a in accounts.accounts if any(s.group == REFRESH_GROUP for s in by_account[a.name])
    ]
    if refreshed:
        with DAG(
            REFRESH_DAG_ID,
            schedule=config.refresh_schedule,
            description="Weekly full refresh of guests and daily stats, every account",
            doc_md=__doc__,
            **common,
        ) as refresh:
            for account in refreshed:
                account_tasks(config, account, by_account[account.name], refresh=True)
        dags.append(refresh)
    for account in accounts.accounts:
        if not config.transform or set(account.groups) != set(GROUPS):
            continue  # the models need every group's tables
        loaded = AssetAll(*(raw_asset(f"{account.name}/{group}") for group in GROUPS))
        schedule = loaded | raw_asset(f"{account.name}/{REFRESH_GROUP}")
        with DAG(
            f"{TRANSFORM_DAG_ID}_{account.name}",
            schedule=schedule,
            description=f"dbt build of account {account.name}'s models once its loads are in",
            doc_md=__doc__,
            **{**common, "tags": ["guestdata", "meltano", "dbt"]},
        ) as transform:
            transform_task(config, account)
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
) -> dict[str, DAG]:
    """The Guest Data DAGs of a Meltano project, by DAG id; a DAG file puts them in its globals.

    Args:
        project_root: the Meltano project (meltano.yml) on the workers; default: Variable
            `guestdata_project_root`, env `GUESTDATA_PROJECT_ROOT` or `MELTANO_PROJECT_ROOT`.
        environment: the Meltano environment (`prod`).
        target: the loader (`target-postgres`).
        accounts: many accounts: the JSON document (or its path, relative to project_root,
            or the parsed document); None: one account.
        api_key_variables: names of the Variables (or worker env vars) holding the API keys;
            every task uses them all (with `accounts`: each account's own).
        settings: any other setting of `config.SETTINGS` by name (`meltano_bin`, `schedule`...).

    Each is a default: Variable `guestdata_<name>` or env `GUESTDATA_<NAME>` overrides it.
    """
    named = {
        "project_root": project_root,
        "meltano_environment": environment,
        "meltano_target": target,
        "accounts": accounts,
        "api_key_variables": api_key_variables,
    }
    given = {**(settings or {}), **{k: v for k, v in named.items() if v is not None}}
    config = PipelineConfig.load(settings_reader(given))
    if config.accounts is None:
        dags = single_account_dags(config)
    else:
        dags = account_dags(config, config.accounts)
    return {dag.dag_id: dag for dag in dags}
