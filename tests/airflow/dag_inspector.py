"""Loads `dags/` into Airflow DagBags, one per scenario, and prints what the tests assert on.

Run as a subprocess (importing Airflow installs its own logging handlers, which must not leak
into the rest of the test session), by any interpreter with Airflow (the standard library
only, besides). stdin: a JSON list of scenarios, each `{"env": {...}, "known_pools": [...] |
null, "api_keys": [names], "dags_folder": path (default: this repository's dags/),
"details": false (the accounts are not resolved)}`. Usage: dag_inspector.py RESULT_FILE. It
writes to RESULT_FILE, not stdout (a log line after the JSON broke run_dag.py's reader so), a
JSON list with, per scenario, the import errors, the Variables read while parsing, every DAG's
settings and tasks, each account its plan tasks return (its batch, and what the operators
resolve it to), for each name in `api_keys` what a load task reads for it and whether logs would
mask it, and the file the factory (`tap_guestdata.airflow`) was imported from.
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


def as_json(value: Any) -> Any:
    """An `AccountLoad` (a dataclass) as plain JSON."""
    from dataclasses import asdict, is_dataclass

    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value


def mapped_accounts(dag: Any, details: bool = True) -> dict[str, dict[str, Any]]:
    """Each account the DAG's `plan` tasks return today, with its queue group, its batch (the
    map index it is in) and (unless `details` is False) what its load resolves it to on the
    worker (`operators.AccountLoad`)."""
    from tap_guestdata.airflow.operators import RESOLVERS

    accounts: dict[str, dict[str, Any]] = {}
    for plan in [task for task in dag.tasks if task.task_id.endswith(".plan")]:
        group = plan.task_id.removesuffix(".plan")
        for index, batch in enumerate(plan.python_callable(*plan.op_args, **plan.op_kwargs)):
            for name in batch:
                accounts[name] = {"group": group, "batch": index}
                if details:
                    accounts[name]["load"] = as_json(RESOLVERS[f"{dag.dag_id}:load"](name))
    return accounts


def weight_of(task: Any, run_id: str) -> int:
    """A task's priority weight in run `run_id`, as the scheduler computes it (its weight
    rule, loaded through Airflow's plugin registry when it is a custom one)."""
    from types import SimpleNamespace

    from airflow.task.priority_strategy import validate_and_load_priority_weight_strategy

    strategy = validate_and_load_priority_weight_strategy(task.weight_rule)
    return strategy.get_weight(SimpleNamespace(run_id=run_id, task=task))


def describe_dag(dag: Any, details: bool = True) -> dict[str, Any]:
    return {
        "accounts": mapped_accounts(dag, details),
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
                # The operator's typed arguments (a mapped task's accounts come from its plan).
                "blocks": getattr(task, "blocks", None),
                "env": getattr(task, "env", None),
                "project_root": getattr(task, "project_root", None),
                "meltano_bin": getattr(task, "meltano_bin", None),
                "environment": getattr(task, "environment", None),
                "full_refresh": getattr(task, "full_refresh", None),
                "reloadable": getattr(task, "reloadable", None),
                "load_task_ids": getattr(task, "load_task_ids", None),
                "accounts": [as_json(a) for a in task.accounts]
                if isinstance(getattr(task, "accounts", None), list)
                else None,
                "queue": task.queue,
                "upstream": sorted(task.upstream_task_ids),
                "trigger_rule": getattr(task.trigger_rule, "value", task.trigger_rule),
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


def read_key(name: str) -> dict[str, Any]:
    """What a load task reads for key `name` on the worker, and whether logs would mask it."""
    from airflow.sdk.log import redact

    from tap_guestdata.airflow.operators import api_key

    try:
        value = api_key(name)
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
    from airflow.sdk import Variable

    variable_reads: list[str] = []
    real_get = Variable.get

    def counted_get(key: str, *args: Any, **kwargs: Any) -> Any:
        variable_reads.append(key)
        return real_get(key, *args, **kwargs)

    Variable.get = counted_get  # type: ignore[method-assign]
    try:
        known_pools = scenario.get("known_pools")
        started = time.perf_counter()
        bag = DagBag(
            dag_folder=scenario.get("dags_folder", DAGS_FOLDER),
            known_pools=set(known_pools) if known_pools else None,
        )
        parse_seconds = time.perf_counter() - started
        subprocess.Popen.__init__ = real_popen_init  # type: ignore[method-assign]
        Variable.get = real_get  # type: ignore[method-assign]
        return {
            "variable_reads": variable_reads,
            "parse_seconds": parse_seconds,
            "subprocesses_at_parse": [str(args) for args in spawned],
            "import_errors": {str(path): str(error) for path, error in bag.import_errors.items()},
            # Only filled when `known_pools` is given: pools the DAGs use that do not exist.
            "dag_warnings": sorted(warning.message for warning in bag.dag_warnings),
            "dags": {
                dag_id: describe_dag(dag, scenario.get("details", True))
                for dag_id, dag in bag.dags.items()
            },
            "api_keys": {name: read_key(name) for name in scenario.get("api_keys", [])},
            "factory_file": getattr(sys.modules.get("tap_guestdata.airflow"), "__file__", None),
        }
    finally:
        subprocess.Popen.__init__ = real_popen_init  # type: ignore[method-assign]
        Variable.get = real_get  # type: ignore[method-assign]
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    scenarios = json.load(sys.stdin)
    results = [inspect(scenario) for scenario in scenarios]
    Path(sys.argv[1]).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
