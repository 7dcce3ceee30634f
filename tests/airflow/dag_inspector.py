"""Loads `dags/` into Airflow DagBags, one per scenario, and prints what the tests assert on.

Run as a subprocess (importing Airflow installs its own logging handlers, which must not leak
into the rest of the test session), by any interpreter with Airflow (the standard library
only, besides). stdin: a JSON list of scenarios, each `{"env": {...}, "known_pools": [...] |
null, "api_keys": [names], "dags_folder": path (default: this repository's dags/),
"render_scripts": false (the accounts' commands are not rendered)}`; stdout's
last line: a JSON list with, per scenario, the import errors, every DAG's settings and tasks,
for each name in `api_keys` what the DAG's `guestdata_api_key` macro returns and whether logs
would mask it, and the file the factory (`tap_guestdata.airflow`) was imported from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
OWN_PREFIXES = ("GUESTDATA_", "AIRFLOW_VAR_GUESTDATA_")


def seconds(value: Any) -> float | None:
    return None if value is None else value.total_seconds()


def asset_condition(condition: Any) -> Any:
    if condition is None:
        return None
    if hasattr(condition, "objects"):  # AssetAll / AssetAny
        kind = "all" if type(condition).__name__ == "AssetAll" else "any"
        return {kind: [asset_condition(part) for part in condition.objects]}
    return condition.name


RELOAD_RUN = {  # a backfill run of one day: what the commands render for it
    "run_type": "backfill",
    "data_interval_start": "2026-10-01T05:00:00+00:00",
    "data_interval_end": "2026-10-02T05:00:00+00:00",
}


def render(dag: Any, template: str, account: str, run: dict[str, Any] | None = None) -> str:
    """A mapped task's command for `account`, rendered as the worker would (a daily run, or
    `run`); keys are not rendered (no Variables here)."""
    from datetime import datetime
    from types import SimpleNamespace

    run = run or {"run_type": "scheduled"}
    environment = dag.get_template_env()
    environment.globals.update(dag.user_defined_macros)
    interval = {
        name: datetime.fromisoformat(run[name]) if name in run else None
        for name in ("data_interval_start", "data_interval_end")
    }
    return environment.from_string(template).render(
        task=SimpleNamespace(account=account),
        ti=SimpleNamespace(try_number=1),
        dag_run=SimpleNamespace(run_type=run["run_type"]),
        params={"reload": False, "reload_streams": run.get("reload_streams", [])},
        **interval,
    )


def mapped_accounts(dag: Any, render_scripts: bool = True) -> dict[str, dict[str, Any]]:
    """Each account the DAG's `plan` tasks return today, with its queue group and (unless
    `render_scripts` is False) rendered commands: the daily (or refresh) load, a one-day
    reload, the models' build."""
    accounts: dict[str, dict[str, Any]] = {}
    for plan in [task for task in dag.tasks if task.task_id.endswith(".plan")]:
        group = plan.task_id.removesuffix(".plan")
        load = dag.get_task(f"{group}.account.load")
        build = dag.task_dict.get(f"{group}.account.dbt_build")
        for name in plan.python_callable(*plan.op_args, **plan.op_kwargs):
            if not render_scripts:
                accounts[name] = {"group": group}
                continue
            accounts[name] = {
                "group": group,
                "script": render(dag, load.bash_command, name),
                "reload_script": render(dag, load.bash_command, name, RELOAD_RUN),
                "build_script": render(dag, build.bash_command, name) if build else None,
            }
    return accounts


def weight_of(task: Any, run_id: str) -> int:
    """A task's priority weight in run `run_id`, as the scheduler computes it (its weight
    rule, loaded through Airflow's plugin registry when it is a custom one)."""
    from types import SimpleNamespace

    from airflow.task.priority_strategy import validate_and_load_priority_weight_strategy

    strategy = validate_and_load_priority_weight_strategy(task.weight_rule)
    return strategy.get_weight(SimpleNamespace(run_id=run_id, task=task))


def describe_dag(dag: Any, render_scripts: bool = True) -> dict[str, Any]:
    return {
        "accounts": mapped_accounts(dag, render_scripts),
        # A cron string, or a timetable object's cron expression.
        "schedule": None
        if dag.schedule is None
        else str(getattr(dag.schedule, "expression", dag.schedule)),
        "timetable": type(dag.timetable).__name__,
        # Asset-scheduled DAGs: the condition as nested {"all"|"any": [...]} of asset names.
        "asset_condition": asset_condition(getattr(dag.timetable, "asset_condition", None)),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "dagrun_timeout": seconds(dag.dagrun_timeout),
        "tags": sorted(dag.tags),
        "tasks": {
            task.task_id: {
                "operator": f"{type(task).__module__}.{type(task).__name__}",
                "mapped": bool(task.get_closest_mapped_task_group()),
                "pool": task.pool,
                "pool_slots": task.pool_slots,
                "retries": task.retries,
                "retry_delay": seconds(task.retry_delay),
                "retry_exponential_backoff": task.retry_exponential_backoff,
                "max_retry_delay": seconds(task.max_retry_delay),
                "execution_timeout": seconds(task.execution_timeout),
                "bash_command": getattr(task, "bash_command", None),
                "env": getattr(task, "env", None),
                "append_env": getattr(task, "append_env", None),
                "cwd": getattr(task, "cwd", None),
                "queue": task.queue,
                "upstream": sorted(task.upstream_task_ids),
                "skip_on_exit_code": sorted(getattr(task, "skip_on_exit_code", None) or []),
                "map_index_template": task.map_index_template,
                # The weight of a task of a scheduled run and of a backfill run.
                "priority": {
                    run: weight_of(task, f"{run}__2026-10-01T05:00:00+00:00")
                    for run in ("scheduled", "backfill")
                },
                "outlets": [asset.name for asset in task.outlets],
            }
            for task in dag.tasks
        },
    }


def call_macro(dag: Any, name: str) -> dict[str, Any]:
    from airflow.sdk.log import redact

    macro = dag.user_defined_macros["guestdata_api_key"]
    try:
        value = macro(name)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {"value": value, "masked_in_logs": redact(f"key={value}") == "key=***"}


def inspect(scenario: dict[str, Any]) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    saved = dict(os.environ)
    for name in [name for name in os.environ if name.startswith(OWN_PREFIXES)]:
        del os.environ[name]
    os.environ.update(scenario.get("env", {}))
    spawned: list[Any] = []
    real_popen_init = subprocess.Popen.__init__

    def record_popen(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        spawned.append(args)
        real_popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = record_popen  # type: ignore[method-assign]
    try:
        known_pools = scenario.get("known_pools")
        started = time.perf_counter()
        bag = DagBag(
            dag_folder=scenario.get("dags_folder", DAGS_FOLDER),
            known_pools=set(known_pools) if known_pools else None,
        )
        parse_seconds = time.perf_counter() - started
        subprocess.Popen.__init__ = real_popen_init  # type: ignore[method-assign]
        first_dag = next(iter(bag.dags.values()), None)
        return {
            "parse_seconds": parse_seconds,
            "subprocesses_at_parse": [str(args) for args in spawned],
            "import_errors": {str(path): str(error) for path, error in bag.import_errors.items()},
            # Only filled when `known_pools` is given: pools the DAGs use that do not exist.
            "dag_warnings": sorted(warning.message for warning in bag.dag_warnings),
            "dags": {
                dag_id: describe_dag(dag, scenario.get("render_scripts", True))
                for dag_id, dag in bag.dags.items()
            },
            "api_keys": {
                name: call_macro(first_dag, name) for name in scenario.get("api_keys", [])
            },
            "factory_file": getattr(sys.modules.get("tap_guestdata.airflow"), "__file__", None),
        }
    finally:
        subprocess.Popen.__init__ = real_popen_init  # type: ignore[method-assign]
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    scenarios = json.load(sys.stdin)
    print(json.dumps([inspect(scenario) for scenario in scenarios]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
