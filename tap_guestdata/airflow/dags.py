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
import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import (
    DAG,
    Asset,
    AssetAll,
    CronDataIntervalTimetable,
    Param,
    TaskGroup,
    Variable,
    task,
    task_group,
)
from airflow.sdk.log import mask_secret
from jinja2 import pass_context
from jinja2.runtime import Context

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
from tap_guestdata.airflow.priority import DAILY_RUNS_FIRST
from tap_guestdata.airflow.reload import SKIP_EXIT_CODE, reload_lines

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
    streams: Sequence[str],
    *,
    full_refresh: bool,
    state_id_suffix: str | None,
    reloadable: bool,
) -> str:
    """The task's shell script: `meltano run` of `streams` under the task's state id.

    A reloadable task (a daily one) asks `reload.reload_lines` at render time whether its run
    re-reads a period (a backfill run): those lines then set the window, the streams and a state
    id of the run's own, so the daily bookmarks never move (docs/airflow.md, "Re-loading a
    period").
    """
    options = ["--no-install"]  # see below
    if state_id_suffix:
        options.append('"--state-id-suffix=$suffix"')
    if full_refresh:
        options.append("--full-refresh")
    selection = json.dumps([f"{stream}.*" for stream in streams])
    lines = [
        "set -u",
        # One task's state id must not meet another's: `<env>:tap-guestdata-to-<target>:<suffix>`.
        f"suffix={shlex.quote(state_id_suffix or '')}",
        # Plugins are installed when the worker is deployed: parallel tasks on one machine must
        # not race to install into the shared plugin virtualenvs.
        f"run=({' '.join(options)})",
        # The task's streams, by Meltano's select extra (a project needs tap-guestdata alone).
        f"export TAP_GUESTDATA__SELECT={shlex.quote(selection)}",
    ]
    if reloadable:
        lines.append(
            "{{ guestdata_reload(dag_run.run_type, data_interval_start, data_interval_end, "
            f"params, {list(streams)!r}) }}}}"
        )
    lines += own_run_directory("${suffix:-default}")
    # A retry follows a try Airflow has given up on (it failed, or its worker was lost and the
    # heartbeat timed out). Meltano holds a lost try's job as running for 5 minutes after its
    # last heartbeat and refuses the state id until then; the retry takes it over.
    lines.append('take_over=(); [ "{{ ti.try_number }}" -le 1 ] || take_over=(--force)')
    head = shlex.join([config.meltano_bin, f"--environment={config.environment}", "run"])
    tail = shlex.join([EXTRACTOR, config.target, *config.after_load])
    lines.append(f'exec {head} "${{take_over[@]}}" "${{run[@]}}" {tail}')
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


def load_env(
    config: PipelineConfig, keys: Sequence[str] | str | None, queue: str | None
) -> dict[str, str]:
    """A load task's environment: its keys (templates rendered on the worker), the budget's
    store and address. The streams are chosen in its command.

    `keys`: the names of the Variables holding them, or (an account's mapped task) a Jinja
    expression naming the account, whose keys the account macros find.
    """
    env: dict[str, str] = {}
    if isinstance(keys, str):
        env["TAP_GUESTDATA_API_KEYS"] = f"{{{{ guestdata_account_keys({keys}) }}}}"
        env["TAP_GUESTDATA_API_KEY"] = f"{{{{ guestdata_account_key({keys}) }}}}"
    elif keys:
        # Rendered on the worker by `api_keys` (masked); the DAG file holds only the names.
        env["TAP_GUESTDATA_API_KEYS"] = f"{{{{ guestdata_api_keys({list(keys)!r}) }}}}"
        # The tap adds api_key to api_keys: set it to one of these, so no key configured for
        # the project or the worker (another account's) joins them.
        env["TAP_GUESTDATA_API_KEY"] = f"{{{{ guestdata_api_key({keys[0]!r}) }}}}"
    if config.rate_budget_store:
        env["TAP_GUESTDATA_RATE_BUDGET_STORE"] = config.rate_budget_store
    if queue:
        # spec 8: 600 a minute per address; a queue is served by the workers of one address.
        env["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] = queue
    return env


def retry_arguments(config: PipelineConfig) -> dict[str, Any]:
    return {
        "retries": config.retries,
        "retry_delay": config.retry_delay,
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": config.max_retry_delay,
    }


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
) -> BashOperator:
    """A load task of the single-account DAGs."""
    pool = queue_pool(config.queue or DEFAULT_QUEUE)
    streams = streams_of(groups)
    return BashOperator(
        task_id=task_id,
        bash_command=meltano_command(
            config,
            streams,
            full_refresh=full_refresh,
            state_id_suffix=state_id_suffix,
            reloadable=not full_refresh,
        ),
        cwd=config.project_root,
        env=load_env(config, keys, config.queue),
        append_env=True,  # PATH, MELTANO_DATABASE_URI, TARGET_POSTGRES_* from the worker
        # Only a reload with nothing of this task's streams to read says "skip" (reload.py);
        # every other non-zero exit is a failure (meltano never means "skip").
        skip_on_exit_code=SKIP_EXIT_CODE,
        pool=pool,
        weight_rule=DAILY_RUNS_FIRST,  # a backfill's tasks yield the pool to the daily run's
        execution_timeout=timeout,
        # Published only when the task succeeds: the transform DAG is scheduled on these.
        outlets=outlets,
        doc_md=f"`meltano run {EXTRACTOR} {config.target}`: {', '.join(streams)}. "
        f"Keys: {', '.join(keys) or 'from Meltano config'}; pool `{pool}`.",
        **queue_argument(config.queue),
    )


def queue_argument(queue: str | None) -> dict[str, Any]:
    """`queue=` only when set, so the operator keeps Airflow's configured default queue."""
    return {"queue": queue} if queue else {}


def build_command(config: PipelineConfig) -> str:
    """`meltano run dbt-postgres:build` (or the configured transform blocks)."""
    run = [config.meltano_bin, f"--environment={config.environment}", "run", "--no-install"]
    return shlex.join([*run, *config.transform])


def transform_task(config: PipelineConfig) -> BashOperator:
    """The single-account models' build: no API calls, so no key and no key pool."""
    return BashOperator(
        task_id="dbt_build",
        bash_command=build_command(config),
        cwd=config.project_root,
        append_env=True,  # TARGET_POSTGRES_* from the worker: the same database as the loads
        skip_on_exit_code=None,
        execution_timeout=config.transform_timeout,
        outlets=[MODELS_ASSET],
        doc_md=BUILD_DOC,
        **queue_argument(config.queue),
    )


BUILD_DOC = (
    "`dbt build` of transform/: staging, marts, and the reconciliation tests "
    "(an error-severity failure fails the task; warnings are in its log)."
)


def common_arguments(config: PipelineConfig) -> dict[str, Any]:
    return {
        "start_date": datetime(2026, 1, 1, tzinfo=timezone.utc),
        # Meltano state drives increments, so missed intervals need no runs of their own.
        "catchup": config.catchup,
        # Two daily runs at once would race on a state id. Backfill runs do not count against
        # this (Airflow counts them against the backfill's own max_active_runs), and each
        # reloads under a state id of its own.
        "max_active_runs": 1,
        "dagrun_timeout": timedelta(hours=20),
        "default_args": {"owner": "data-engineering", **retry_arguments(config)},
        "user_defined_macros": {
            "guestdata_api_key": api_key,
            "guestdata_api_keys": api_keys,
            "guestdata_reload": reload_lines,
        },
        "tags": ["guestdata", "meltano"],
    }


def daily_arguments(config: PipelineConfig, schedule: str | None) -> dict[str, Any]:
    """A daily DAG's schedule with real data intervals (a backfill run reloads its own) and
    the params a run may reload with."""
    return {
        "schedule": interval_timetable(schedule),
        "params": {
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
        },
    }


def interval_timetable(schedule: str | None) -> CronDataIntervalTimetable | None:
    """The cron schedule with real data intervals (a run at 05:00 covers the 24 hours before):
    Airflow's default for a cron string, CronTriggerTimetable, has empty intervals."""
    if schedule is None:
        return None
    return CronDataIntervalTimetable(schedule, timezone="UTC")


def single_account_dags(config: PipelineConfig) -> list[DAG]:
    common = common_arguments(config)
    keys = config.api_key_variables
    with DAG(
        DAG_ID,
        description="Guest Data API to the warehouse: one Meltano run (or one per stream group)",
        doc_md=__doc__,
        **daily_arguments(config, config.schedule),
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


# --- Many accounts: one mapped task per account, planned at run time ---------------------------
#
# Parsing builds a fixed number of tasks whatever the number of accounts: per schedule, a DAG;
# in it, per queue, a `plan` task and a task group mapped over the accounts it returns (`load`,
# then `dbt_build`). Each account is a map index labelled with its name: its failure and its
# retries are its own. The worker re-parses the DAG file when it runs a task, so `plan` and the
# commands read the accounts configuration as it is at run time.


class AccountOperator(BashOperator):
    """A BashOperator of one account of a mapped task group: `account` (mapped) names it to
    the templates, as `task.account`, which is why it is rendered first. Values mapped from
    XCom are never rendered, so the commands and keys come from macros given the name."""

    template_fields = ("account", *BashOperator.template_fields)

    def __init__(self, *, account: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.account = account


ACCOUNT_NAME = "task.account"  # the Jinja expression of a mapped task's account
ACCOUNT_LABEL = f"{{{{ {ACCOUNT_NAME} }}}}"  # map_index_template: the account's name


def state_id_suffix(spec: TaskSpec) -> str:
    """`<account>` for a whole-account task, `<account>-<group>` for a group or the refresh."""
    return spec.account if spec.group == WHOLE_ACCOUNT else f"{spec.account}-{spec.group}"


def account_script(
    config: PipelineConfig, account: Account, specs: Sequence[TaskSpec], *, refresh: bool
) -> str:
    """An account's load: its schema and base URL, then one `meltano run`, or for an account
    split by group (a large first sync) one per group side by side; the task fails if any
    fails, and its retry re-runs each group from that group's own state."""
    exports = {schema_variable(config.target): account.schema}
    if account.base_url:
        exports["TAP_GUESTDATA_BASE_URL"] = account.base_url
    lines = [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]
    scripts = [
        meltano_command(
            config,
            streams_of(spec.groups),
            full_refresh=refresh,
            state_id_suffix=state_id_suffix(spec),
            reloadable=not refresh,
        )
        for spec in specs
    ]
    if len(scripts) == 1:
        return "\n".join([*lines, scripts[0]])
    lines.append("pids=()")
    lines += [f"(\n{script}\n) &\npids+=($!)" for script in scripts]
    lines += [  # (no `${#...}`: the script is a Jinja template, where `{#` opens a comment)
        "failed=0 skipped=0",
        'for pid in "${pids[@]}"; do',
        f'  wait "$pid" && continue; case $? in {SKIP_EXIT_CODE}) skipped=$((skipped + 1)) ;;'
        " *) failed=1 ;; esac",
        "done",
        f'[ "$failed" = 0 ] && [ "$skipped" = {len(scripts)} ] && exit {SKIP_EXIT_CODE}',
        'exit "$failed"',
    ]
    return "\n".join(lines)


def account_build_script(config: PipelineConfig, account: Account) -> str:
    """The account's models (next to its raw schema: <schema>_analytics), with dbt's target/
    and logs/ of its own; skipped for an account without every group (the models need them)."""
    if set(account.groups) != set(GROUPS):
        return f"echo 'the models need every stream group'; exit {SKIP_EXIT_CODE}"
    exports = {
        schema_variable(config.target): account.schema,
        "DBT_TARGET_PATH": f"target/accounts/{account.name}",
        "DBT_LOG_PATH": f"logs/accounts/{account.name}",
    }
    lines = [f"export {name}={shlex.quote(value)}" for name, value in exports.items()]
    return "\n".join([*lines, build_command(config)])


class AccountsPlan:
    """The accounts configuration as the DAGs use it: at parse time the schedules and queues
    (a DAG per schedule, a task group per queue), at run time each account's tasks."""

    def __init__(self, config: PipelineConfig, accounts: AccountsConfig) -> None:
        self.config = config
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

    def macros(self) -> dict[str, Any]:
        """Template macros of the accounts' tasks, by account name (run on the worker)."""

        @pass_context
        def load_script(context: Context, name: str) -> str:
            return self.script(context, name, refresh=False)

        @pass_context
        def refresh_script(context: Context, name: str) -> str:
            return self.script(context, name, refresh=True)

        return {
            "guestdata_account_keys": lambda name: api_keys(self.account(name).key_variables),
            "guestdata_account_key": lambda name: api_key(self.account(name).key_variables[0]),
            "guestdata_load_script": load_script,
            "guestdata_refresh_script": refresh_script,
            "guestdata_build_script": lambda name: account_build_script(
                self.config, self.account(name)
            ),
        }

    def script(self, context: Context, name: str, *, refresh: bool) -> str:
        """The account's load script, rendered in the task's own template context (it holds
        templates of its own: the reload lines, the try number)."""
        specs = self.specs_of(name, refresh=refresh)
        script = account_script(self.config, self.account(name), specs, refresh=refresh)
        return context.environment.from_string(script).render(context.get_all())


def schedule_key(schedule: str | None) -> str | None:
    """An account's own schedule ("none": manual runs only), None for the daily one."""
    return None if schedule is None else schedule.strip()


def queue_name(queue: str) -> str | None:
    return None if queue == DEFAULT_QUEUE else queue


def schedule_dag_id(schedule: str) -> str:
    """`guestdata_meltano_at_<schedule>`: `0 2 * * *` gives `..._at_0_2_x_x_x`."""
    slug = re.sub(r"[^a-z0-9]+", "_", schedule.lower().replace("*", "x")).strip("_")
    return f"{DAG_ID}_at_{slug}"


def account_groups(
    plan: AccountsPlan, schedule: str | None, *, refresh: bool, timeout: timedelta
) -> None:
    """Per queue with accounts of `schedule`, its task group (`queue_group`)."""
    for queue in plan.queues(schedule, refresh=refresh):
        queue_group(plan, queue, schedule, refresh=refresh, timeout=timeout)


def queue_group(
    plan: AccountsPlan, queue: str, schedule: str | None, *, refresh: bool, timeout: timedelta
) -> None:
    """The queue's `plan` task and the task group mapped over the accounts it returns."""
    config = plan.config
    script = "guestdata_refresh_script" if refresh else "guestdata_load_script"
    with TaskGroup(queue, tooltip=f"the accounts on queue {queue}"):
        # On the queue it plans for: its workers are the ones a deployment has (no API call,
        # so Airflow's default pool).
        @task(task_id="plan", **queue_argument(queue_name(queue)))
        def accounts_of(schedule: str | None, queue: str, refresh: bool) -> list[str]:
            """This queue's accounts, from the configuration the worker just parsed."""
            return plan.names(schedule, queue, refresh=refresh)

        @task_group(group_id="account")
        def account(name: str) -> None:
            load = AccountOperator(
                task_id="load",
                account=name,
                bash_command=f"{{{{ {script}({ACCOUNT_NAME}) }}}}",
                env=load_env(config, ACCOUNT_NAME, queue_name(queue)),
                cwd=config.project_root,
                append_env=True,  # PATH, MELTANO_DATABASE_URI, TARGET_POSTGRES_* of the worker
                skip_on_exit_code=SKIP_EXIT_CODE,
                pool=queue_pool(queue),
                weight_rule=DAILY_RUNS_FIRST,  # a backfill's tasks yield the pool to the daily's
                execution_timeout=timeout,
                map_index_template=ACCOUNT_LABEL,
                doc_md=f"`meltano run {EXTRACTOR} {config.target}` of one account: its "
                "stream groups, every key of the account; pool of its queue.",
                **queue_argument(queue_name(queue)),
            )
            if not config.transform:
                return
            build = AccountOperator(
                task_id="dbt_build",
                account=name,
                bash_command=f"{{{{ guestdata_build_script({ACCOUNT_NAME}) }}}}",
                cwd=config.project_root,
                append_env=True,  # TARGET_POSTGRES_* from the worker
                skip_on_exit_code=SKIP_EXIT_CODE,
                execution_timeout=config.transform_timeout,
                outlets=[MODELS_ASSET],
                map_index_template=ACCOUNT_LABEL,
                doc_md=BUILD_DOC,
                **queue_argument(queue_name(queue)),  # the account's workers have its project
            )
            load >> build

        account.expand(name=accounts_of(schedule, queue, refresh))


def account_dags(config: PipelineConfig, accounts: AccountsConfig) -> list[DAG]:
    """Many accounts: the daily DAG holds every account on the daily schedule; accounts with
    a schedule of their own share a DAG per schedule (`guestdata_meltano_at_<schedule>`); the
    weekly refresh holds every account that reads guests or stats. Every account's load runs on
    its queue, in the queue's pool (accounts.py), and its models build after it."""
    plan = AccountsPlan(config, accounts)
    common = common_arguments(config)
    common["user_defined_macros"] = {**common["user_defined_macros"], **plan.macros()}
    # Every queue's pool busy at once (Airflow's default cap is 16 running tasks per DAG).
    common["max_active_tasks"] = TASKS_PER_QUEUE * len(accounts.queues)
    schedules = list(dict.fromkeys(schedule_key(a.schedule) for a in accounts.accounts))
    dags: list[DAG] = []
    for schedule in schedules:
        own = None if schedule is None or schedule.lower() == "none" else schedule
        with DAG(
            DAG_ID if schedule is None else schedule_dag_id(schedule),
            description="Guest Data API to the warehouse: one mapped task per account"
            + ("" if schedule is None else f", the accounts scheduled {schedule}"),
            doc_md=__doc__,
            **daily_arguments(config, config.schedule if schedule is None else own),
            **common,
        ) as daily:
            account_groups(plan, schedule, refresh=False, timeout=config.task_timeout)
        dags.append(daily)
    if any(spec.group == REFRESH_GROUP for spec in plan.specs):
        with DAG(
            REFRESH_DAG_ID,
            schedule=config.refresh_schedule,
            description="Weekly full refresh of guests and daily stats, every account",
            doc_md=__doc__,
            **common,
        ) as refresh:
            account_groups(plan, None, refresh=True, timeout=config.refresh_timeout)
        dags.append(refresh)
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
