"""Runs one DAG of `dags/` for real with `dag.test()` and prints its outcome as JSON.

Usage: python run_dag.py DAG_ID [RUN_JSON] (in an environment from `dag_testing.airflow_env`,
after `airflow db migrate`); RUN_JSON: `{"logical_date": ISO, "conf": {...}}` for `dag.test()`.
stdout's last line: `{"dag_id", "state", "seconds", "run_type", "data_interval": [start, end],
"tasks": {id: state}, "accounts": {label: {task: state}}, "assets_published": [names]}`, where
`tasks` are the unmapped task instances and `accounts` the mapped ones by their map index label
(the account) and the last part of their task id (`load`, `dbt_build`).
Exit status 0 when the run succeeded.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def main(dag_id: str, run: dict[str, Any]) -> int:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=DAGS_FOLDER)
    if bag.import_errors:
        print(json.dumps({"dag_id": dag_id, "import_errors": bag.import_errors}))
        return 2
    started = time.monotonic()
    arguments: dict[str, Any] = {}
    if "logical_date" in run:
        arguments["logical_date"] = datetime.fromisoformat(run["logical_date"])
    if "conf" in run:
        arguments["run_conf"] = run["conf"]
    dag_run = bag.dags[dag_id].test(**arguments)
    seconds = time.monotonic() - started
    with create_session() as session:
        instances = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dag_run.run_id)
        states = {ti.task_id: str(ti.state) for ti in instances if ti.map_index < 0}
        # A mapped task group's index: its tasks' label (a task that never ran has none).
        mapped = [ti for ti in instances if ti.map_index >= 0]
        labels = {
            (ti.task_id.rsplit(".", 1)[0], ti.map_index): ti.rendered_map_index
            for ti in mapped
            if ti.rendered_map_index
        }
        accounts: dict[str, dict[str, str]] = {}
        for ti in mapped:
            group, name = ti.task_id.rsplit(".", 1)
            label = labels.get((group, ti.map_index), f"{group}[{ti.map_index}]")
            accounts.setdefault(label, {})[name] = str(ti.state)
        events = session.query(AssetEvent).filter_by(source_dag_id=dag_id)
        published = sorted(
            event.asset.name for event in events if event.source_run_id == dag_run.run_id
        )
    state = str(dag_run.state)
    print(
        json.dumps(
            {
                "dag_id": dag_id,
                "state": state,
                "seconds": seconds,
                "run_type": str(dag_run.run_type),
                "data_interval": [
                    str(dag_run.data_interval_start),
                    str(dag_run.data_interval_end),
                ],
                "tasks": states,
                "accounts": accounts,
                "assets_published": published,
            }
        )
    )
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}))
