"""Guest Data Read API -> warehouse with Meltano, for Airflow 3. Deployment: docs/airflow.md.

Three DAGs:

- `guestdata_meltano`: one `meltano run` per stream group (core, members, rewards, offers, stats),
  in parallel. Each group is its own inheriting extractor in meltano.yml, so each has its own
  state id (`<env>:tap-guestdata--<group>-to-<target>`) and can be cleared and re-run alone.
- `guestdata_meltano_weekly_refresh`: `meltano run --full-refresh tap-guestdata--refresh`
  (guests, daily stats): rows that change after they are first read (a guest's
  `marketing_consent`, late visits in recent days) are read again in full once a week.
- `guestdata_transform`: `dbt build` of transform/ (models and their checks). Each load task
  publishes an Airflow asset for its group when it succeeds; this DAG is scheduled on those
  assets: once all five daily groups have loaded, or the weekly refresh has.

API keys and rate limits (spec 8: 120 requests per rolling minute per key): each task gets one
key, round-robin over the keys configured, and runs in that key's pool `guestdata_api_key_<n>`
(1 slot). A key is thus used by one running task at a time, whose own tap limits it to 120 a
minute; the task keeps its slot for a cool-down after the run so the next holder of the key
starts with an empty rolling minute.

Settings, read when the file is parsed (cheap: no subprocess, no failure without a database):
Airflow Variable `guestdata_<name>` (which includes env `AIRFLOW_VAR_GUESTDATA_<NAME>`), else
env `GUESTDATA_<NAME>`, else the default in `SETTINGS`.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Asset, AssetAll, Variable
from airflow.sdk.log import mask_secret

DAG_ID = "guestdata_meltano"
REFRESH_DAG_ID = "guestdata_meltano_weekly_refresh"
TRANSFORM_DAG_ID = "guestdata_transform"
EXTRACTOR = "tap-guestdata"
POOL_PREFIX = "guestdata_api_key_"

# Task id -> streams; the extractor is `tap-guestdata--<task id>` (meltano.yml).
STREAM_GROUPS: dict[str, str] = {
    "core": "account, venues, guests",
    "members": "members, member_ledger",
    "rewards": "rewards, redemptions",
    "offers": "programme, programme_venues, tiers, offers, offer_stats",
    "stats": "daily_stats, daily_account_stats",
}
REFRESH_GROUP = "refresh"
REFRESH_STREAMS = "guests, daily_stats, daily_account_stats"

# Setting name -> default. Lists are JSON lists or comma-separated; "none" as a schedule means
# manual runs only.
SETTINGS: dict[str, str] = {
    "project_root": str(Path(__file__).resolve().parents[1]),  # this repository
    "meltano_bin": "meltano",
    "meltano_environment": "prod",
    "meltano_target": "target-postgres",
    # Blocks run after the loader in the same `meltano run` (space-separated, or "none");
    # "auto": the timestamptz step (meltano.yml) when the target is target-postgres.
    "meltano_after_load": "auto",
    # The models' build (space-separated blocks, or "none": no transform DAG); "auto": the dbt
    # utility of meltano.yml when the target is target-postgres.
    "meltano_transform": "auto",
    "transform_timeout_minutes": "60",
    "schedule": "0 5 * * *",
    "refresh_schedule": "0 3 * * 0",
    "catchup": "false",
    "api_key_variables": "",
    "key_cooldown_seconds": "60",
    "retries": "3",
    "retry_delay_minutes": "5",
    "max_retry_delay_minutes": "60",
    "task_timeout_minutes": "180",
    "refresh_timeout_minutes": "360",
    "queue": "",
}


def read_setting(name: str) -> str:
    """Variable `guestdata_<name>`, else env `GUESTDATA_<NAME>`, else the default."""
    key = f"guestdata_{name}"
    try:
        value = Variable.get(key, default=None)
    except Exception:  # no metadata database or API server (a bare import): use the fallbacks
        value = None
    if value in (None, ""):
        value = os.environ.get(key.upper())
    return SETTINGS[name] if value in (None, "") else str(value).strip()


def parse_list(value: str) -> list[str]:
    if value.startswith("["):
        return [str(item).strip() for item in json.loads(value) if str(item).strip()]
    return [item.strip() for item in value.split(",") if item.strip()]


def blocks(value: str, target: str, postgres_default: str) -> tuple[str, ...]:
    """Meltano blocks from a setting: "auto" (a default for target-postgres only) or "none"."""
    if value == "auto":
        return (postgres_default,) if target == "target-postgres" else ()
    return () if value.lower() == "none" else tuple(value.split())


def after_load(value: str, target: str) -> tuple[str, ...]:
    return blocks(value, target, "guestdata-pg-types:timestamptz")


def transform_blocks(value: str, target: str) -> tuple[str, ...]:
    return blocks(value, target, "dbt-postgres:build")


def raw_asset(group: str) -> Asset:
    """What a load task publishes: the raw tables of its stream group, in the warehouse."""
    return Asset(name=f"guestdata_raw_{group}", uri=f"guestdata://raw/{group}", group="guestdata")


MODELS_ASSET = Asset(name="guestdata_models", uri="guestdata://models", group="guestdata")


@dataclass(frozen=True)
class PipelineConfig:
    project_root: str
    meltano_bin: str
    environment: str
    target: str
    after_load: tuple[str, ...]
    transform: tuple[str, ...]
    schedule: str | None
    refresh_schedule: str | None
    catchup: bool
    api_key_variables: tuple[str, ...]
    key_cooldown_seconds: int
    retries: int
    retry_delay: timedelta
    max_retry_delay: timedelta
    task_timeout: timedelta
    refresh_timeout: timedelta
    transform_timeout: timedelta
    queue: str | None

    @classmethod
    def load(cls, read: Callable[[str], str] = read_setting) -> PipelineConfig:
        def schedule(value: str) -> str | None:
            return None if value.lower() in ("none", "null", "manual") else value

        return cls(
            project_root=read("project_root"),
            meltano_bin=read("meltano_bin"),
            environment=read("meltano_environment"),
            target=read("meltano_target"),
            after_load=after_load(read("meltano_after_load"), read("meltano_target")),
            transform=transform_blocks(read("meltano_transform"), read("meltano_target")),
            schedule=schedule(read("schedule")),
            refresh_schedule=schedule(read("refresh_schedule")),
            catchup=read("catchup").lower() in ("1", "true", "yes", "on"),
            api_key_variables=tuple(parse_list(read("api_key_variables"))),
            key_cooldown_seconds=int(read("key_cooldown_seconds")),
            retries=int(read("retries")),
            retry_delay=timedelta(minutes=float(read("retry_delay_minutes"))),
            max_retry_delay=timedelta(minutes=float(read("max_retry_delay_minutes"))),
            task_timeout=timedelta(minutes=float(read("task_timeout_minutes"))),
            refresh_timeout=timedelta(minutes=float(read("refresh_timeout_minutes"))),
            transform_timeout=timedelta(minutes=float(read("transform_timeout_minutes"))),
            queue=read("queue") or None,
        )


@dataclass(frozen=True)
class KeySlot:
    """Which API key a task uses, and the pool (1 slot) that makes it that key's only user."""

    pool: str
    key_variable: str | None  # None: no key pinned, Meltano's own config supplies it


def assign_keys(task_ids: list[str], key_variables: tuple[str, ...]) -> dict[str, KeySlot]:
    """Round-robin: task i gets key i mod N and pool `guestdata_api_key_<i mod N + 1>`."""
    if not key_variables:
        return {task_id: KeySlot(f"{POOL_PREFIX}1", None) for task_id in task_ids}
    return {
        task_id: KeySlot(
            f"{POOL_PREFIX}{index % len(key_variables) + 1}",
            key_variables[index % len(key_variables)],
        )
        for index, task_id in enumerate(task_ids)
    }


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


def meltano_command(
    config: PipelineConfig, group: str, *, full_refresh: bool, key_pinned: bool
) -> str:
    run = [
        config.meltano_bin,
        f"--environment={config.environment}",
        "run",
        # Plugins are installed when the worker is deployed: parallel tasks on one machine must
        # not race to install into the shared plugin virtualenvs.
        "--no-install",
        *(["--full-refresh"] if full_refresh else []),
        f"{EXTRACTOR}--{group}",
        config.target,
        *config.after_load,
    ]
    lines = ["set -u"]
    if key_pinned:
        # The tap would otherwise spread requests over a key pool, past the one this task holds.
        lines.append("unset TAP_GUESTDATA_API_KEYS")
    lines.append(f"{shlex.join(run)} && status=0 || status=$?")
    if config.key_cooldown_seconds > 0:
        # spec 8: the 120/minute is a rolling minute; keep the pool slot until it has passed.
        lines.append(f"sleep {config.key_cooldown_seconds}")
    lines.append('exit "$status"')
    return "\n".join(lines)


def meltano_task(
    config: PipelineConfig,
    group: str,
    slot: KeySlot,
    *,
    full_refresh: bool = False,
    timeout: timedelta,
    streams: str,
) -> BashOperator:
    env: Mapping[str, str] | None = None
    if slot.key_variable:
        # Rendered on the worker by `api_key` (masked); the DAG file holds only the name.
        env = {"TAP_GUESTDATA_API_KEY": f"{{{{ guestdata_api_key({slot.key_variable!r}) }}}}"}
    return BashOperator(
        task_id=group,
        bash_command=meltano_command(
            config, group, full_refresh=full_refresh, key_pinned=slot.key_variable is not None
        ),
        cwd=config.project_root,
        env=env,
        append_env=True,  # PATH, MELTANO_DATABASE_URI, TARGET_POSTGRES_* from the worker
        skip_on_exit_code=None,  # every non-zero exit is a failure (meltano never means "skip")
        pool=slot.pool,
        execution_timeout=timeout,
        # Published only when the task succeeds: the transform DAG is scheduled on these.
        outlets=[raw_asset(group)],
        doc_md=f"`meltano run {EXTRACTOR}--{group} {config.target}`: {streams}. "
        f"Key: {slot.key_variable or 'from Meltano config'}; pool `{slot.pool}`.",
        **({"queue": config.queue} if config.queue else {}),
    )


def transform_task(config: PipelineConfig) -> BashOperator:
    """`meltano run dbt-postgres:build`: no API calls, so no key and no key pool."""
    run = [config.meltano_bin, f"--environment={config.environment}", "run", "--no-install"]
    return BashOperator(
        task_id="dbt_build",
        bash_command=shlex.join([*run, *config.transform]),
        cwd=config.project_root,
        append_env=True,  # TARGET_POSTGRES_* from the worker: the same database as the loads
        skip_on_exit_code=None,
        execution_timeout=config.transform_timeout,
        outlets=[MODELS_ASSET],
        doc_md="`dbt build` of transform/: staging, marts, and the reconciliation tests "
        "(an error-severity failure fails the task; warnings are in its log).",
        **({"queue": config.queue} if config.queue else {}),
    )


def build_dags(config: PipelineConfig) -> tuple[DAG, DAG, DAG | None]:
    slots = assign_keys([*STREAM_GROUPS, REFRESH_GROUP], config.api_key_variables)
    common = {
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
        "user_defined_macros": {"guestdata_api_key": api_key},
        "tags": ["guestdata", "meltano"],
    }
    with DAG(
        DAG_ID,
        schedule=config.schedule,
        description="Guest Data API to the warehouse, one Meltano run per stream group",
        doc_md=__doc__,
        **common,
    ) as incremental:
        for group, streams in STREAM_GROUPS.items():
            meltano_task(config, group, slots[group], timeout=config.task_timeout, streams=streams)
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
            slots[REFRESH_GROUP],
            full_refresh=True,
            timeout=config.refresh_timeout,
            streams=REFRESH_STREAMS,
        )
    if not config.transform:
        return incremental, refresh, None
    with DAG(
        TRANSFORM_DAG_ID,
        # All five daily groups loaded since the last build, or the weekly refresh did.
        schedule=AssetAll(*map(raw_asset, STREAM_GROUPS)) | raw_asset(REFRESH_GROUP),
        description="dbt build of the models once the loads have published their assets",
        doc_md=__doc__,
        **{**common, "tags": ["guestdata", "meltano", "dbt"]},
    ) as transform:
        transform_task(config)
    return incremental, refresh, transform


guestdata_meltano, guestdata_meltano_weekly_refresh, guestdata_transform = build_dags(
    PipelineConfig.load()
)
