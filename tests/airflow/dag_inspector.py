"""Loads `dags/` into Airflow DagBags, one per scenario, and prints what the tests assert on.

Run as a subprocess (importing Airflow installs its own logging handlers, which must not leak
into the rest of the test session), by any interpreter with Airflow (the standard library
only, besides). stdin: a JSON list of scenarios, each `{"env": {...}, "known_pools": [...] |
null, "api_keys": [names], "dags_folder": path (default: this repository's dags/)}`; stdout's
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


def describe_dag(dag: Any) -> dict[str, Any]:
    return {
        "schedule": dag.schedule if dag.schedule is None else str(dag.schedule),
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
                "pool": task.pool,
                "pool_slots": task.pool_slots,
                "retries": task.retries,
                "retry_delay": seconds(task.retry_delay),
                "retry_exponential_backoff": task.retry_exponential_backoff,
                "max_retry_delay": seconds(task.max_retry_delay),
                "execution_timeout": seconds(task.execution_timeout),
                "bash_command": task.bash_command,
                "env": task.env,
                "append_env": task.append_env,
                "cwd": task.cwd,
                "queue": task.queue,
                "upstream": sorted(task.upstream_task_ids),
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
            "dags": {dag_id: describe_dag(dag) for dag_id, dag in bag.dags.items()},
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
