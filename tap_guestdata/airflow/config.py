"""The DAGs' settings: `build_dags` arguments, one Airflow Variable, environment, defaults.

A setting `<name>` is read, first found wins, from the Variable `guestdata_settings` (a JSON
object of settings by name: one Variable read per parse; `build_dags(settings_variable=None)`
reads none), env `AIRFLOW_VAR_GUESTDATA_<NAME>`, env `GUESTDATA_<NAME>`, the `build_dags`
argument, the default in `SETTINGS`. So the DAG file's arguments are its defaults and an
operator can still change one without a deploy. No subprocess, and no failure without a
metadata database.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from airflow.sdk import Variable

from tap_guestdata.airflow.accounts import AccountsConfig, parse_config

# Setting name -> default. Lists are JSON lists or comma-separated; "none" as a schedule means
# manual runs only.
SETTINGS: dict[str, str] = {
    # Where meltano.yml is, on the workers; empty: env MELTANO_PROJECT_ROOT (Meltano's own).
    "project_root": "",
    "meltano_bin": "meltano",
    "meltano_environment": "prod",
    "meltano_target": "target-postgres",
    # Blocks run after the loader in the same `meltano run` (space-separated, or "none");
    # "auto": this repository's timestamptz step (its meltano.yml) for target-postgres.
    "meltano_after_load": "none",
    # The models' build (space-separated blocks, or "none": no transform DAG); "auto": this
    # repository's dbt utility (its meltano.yml) for target-postgres.
    "meltano_transform": "none",
    "transform_timeout_minutes": "60",
    "schedule": "0 5 * * *",
    "refresh_schedule": "0 3 * * 0",
    "catchup": "false",
    # A single account's `guestdata` connection; empty: guestdata_default if it exists, else
    # the Variables of api_key_variables (the old way), else Meltano's own key.
    "connection_id": "",
    "api_key_variables": "",
    # The warehouse's Airflow connection (postgres or snowflake, warehouse.py) for every load
    # and build; empty: the workers' TARGET_POSTGRES_* / TARGET_SNOWFLAKE_* environment.
    "warehouse_connection_id": "",
    # Ignored: the shared rate budget replaced the cool-down; kept so DAG files that set it
    # still parse.
    "key_cooldown_seconds": "0",
    # One task per account ("account") or one per stream group ("groups"), single account.
    "task_shape": "account",
    # The tap's rate_budget_store for every task (e.g. the broker's redis://...); empty: the
    # tap's default, a SQLite file per machine.
    "rate_budget_store": "",
    "retries": "3",
    "retry_delay_minutes": "5",
    "max_retry_delay_minutes": "60",
    "task_timeout_minutes": "180",
    "refresh_timeout_minutes": "360",
    "queue": "",
    # Many accounts: JSON ({"queues": [...], "accounts": [...]}) or the path of a JSON file
    # (relative to project_root); empty: one account, configured as above.
    "accounts": "",
}

Reader = Callable[[str], str]


def variable_settings(variable: str | None) -> dict[str, object]:
    """The settings Variable's JSON object (one read), {} without it or a metadata database."""
    if variable is None:
        return {}
    try:
        value = Variable.get(variable, default=None)
    except Exception:  # no metadata database or API server (a bare import): the fallbacks
        return {}
    if not value:
        return {}
    document = json.loads(value) if isinstance(value, str) else value
    if not isinstance(document, dict):
        raise ValueError(f"Variable {variable}: expected a JSON object of settings by name")
    return document


def read_setting(
    name: str, defaults: Mapping[str, str] = SETTINGS, variable: Mapping[str, object] = {}
) -> str:
    """`variable[name]`, else env `AIRFLOW_VAR_GUESTDATA_<NAME>`, then `GUESTDATA_<NAME>`, else
    `defaults[name]`."""
    key = f"GUESTDATA_{name.upper()}"
    value = variable.get(name)
    if isinstance(value, dict | list):
        value = json.dumps(value)
    for candidate in (value, os.environ.get(f"AIRFLOW_VAR_{key}"), os.environ.get(key)):
        if candidate not in (None, ""):
            return str(candidate).strip()
    return defaults[name]


def settings_reader(given: Mapping[str, object], variable: str | None = None) -> Reader:
    """`read_setting` with `given` (the factory's arguments; None: not given) as the defaults
    and the settings Variable `variable` read once."""
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ValueError(f"build_dags: unknown settings {unknown}; known: {sorted(SETTINGS)}")
    defaults = dict(SETTINGS)
    for name, value in given.items():
        if value is None:
            continue
        if isinstance(value, Mapping):  # accounts, as the JSON document
            defaults[name] = json.dumps(dict(value))
        elif isinstance(value, list | tuple):  # api_key_variables, or accounts as a list
            defaults[name] = json.dumps(list(value))
        else:
            defaults[name] = str(value)
    from_variable = variable_settings(variable)

    def read(name: str) -> str:
        return read_setting(name, defaults, from_variable)

    return read


def flag(value: object) -> bool:
    """A boolean setting, or a templated one: as text ("True", "false", "1") when rendered."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


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


def project_root(value: str) -> str:
    """The setting, else Meltano's own `MELTANO_PROJECT_ROOT`; the DAGs need one."""
    root = value or os.environ.get("MELTANO_PROJECT_ROOT", "")
    if not root:
        raise ValueError(
            "Meltano project root unknown: pass build_dags(project_root=...), or set the "
            "project_root in the Variable guestdata_settings, or env GUESTDATA_PROJECT_ROOT or "
            "MELTANO_PROJECT_ROOT"
        )
    return root


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
    connection_id: str | None
    task_shape: str
    rate_budget_store: str
    retries: int
    retry_delay: timedelta
    max_retry_delay: timedelta
    task_timeout: timedelta
    refresh_timeout: timedelta
    transform_timeout: timedelta
    queue: str | None
    accounts: AccountsConfig | None = None
    warehouse_connection_id: str = ""  # "": the workers' environment holds the warehouse's

    @classmethod
    def load(cls, read: Reader = read_setting) -> PipelineConfig:
        def schedule(value: str) -> str | None:
            return None if value.lower() in ("none", "null", "manual") else value

        root = project_root(read("project_root"))
        target = read("meltano_target")
        return cls(
            project_root=root,
            meltano_bin=read("meltano_bin"),
            environment=read("meltano_environment"),
            target=target,
            after_load=after_load(read("meltano_after_load"), target),
            transform=transform_blocks(read("meltano_transform"), target),
            schedule=schedule(read("schedule")),
            refresh_schedule=schedule(read("refresh_schedule")),
            catchup=flag(read("catchup")),
            api_key_variables=tuple(parse_list(read("api_key_variables"))),
            connection_id=read("connection_id") or None,
            task_shape=task_shape(read("task_shape")),
            rate_budget_store=read("rate_budget_store"),
            retries=int(read("retries")),
            retry_delay=timedelta(minutes=float(read("retry_delay_minutes"))),
            max_retry_delay=timedelta(minutes=float(read("max_retry_delay_minutes"))),
            task_timeout=timedelta(minutes=float(read("task_timeout_minutes"))),
            refresh_timeout=timedelta(minutes=float(read("refresh_timeout_minutes"))),
            transform_timeout=timedelta(minutes=float(read("transform_timeout_minutes"))),
            queue=read("queue") or None,
            accounts=load_accounts(read("accounts"), root),
            warehouse_connection_id=read("warehouse_connection_id"),
        )


def task_shape(value: str) -> str:
    if value not in ("account", "groups"):
        raise ValueError(f"task_shape must be 'account' or 'groups', got {value!r}")
    return value


def load_accounts(value: str, project_root: str) -> AccountsConfig | None:
    """The accounts setting: inline JSON, or a JSON file (relative paths: the project root)."""
    if not value:
        return None
    if not value.lstrip().startswith(("{", "[")):
        value = (Path(project_root) / value).read_text()
    return parse_config(value)
