"""Runs one DAG of `dags/` for real with `dag.test()` and writes its outcome as JSON.

Usage: python run_dag.py DAG_ID OUTCOME_FILE [RUN_JSON] (in an environment from
`dag_testing.airflow_env`, after `airflow db migrate`). RUN_JSON, all optional:
`{"logical_date": ISO, "conf": {...}}` for one run, or `{"backfill": {"from": ISO, "to": ISO},
"conf": {...}}` for a backfill of a range.

A backfill asks Airflow's own backfill planner (`airflow backfill create`'s) for the runs of
the range and their data intervals, and runs each with `dag.test()` as a run of type
`backfill` with that interval: `dag.test()` itself only makes manual runs, so its run factory is
swapped for one that makes the backfill's run (the scheduler's part, which `dag.test()` stands
in for, is otherwise the same).

The outcome goes to OUTCOME_FILE, not stdout: a log line written after it (Airflow's, or a task
child's) broke a test that read stdout's last line. For one run `{"dag_id", "state", "seconds",
"run_type", "data_interval": [start, end], "tasks": {id: state}, "accounts": {label: {task:
state}}, "assets_published": [names], "variables": [the keys of Airflow's Variables after the
run], "asset_triggered": [the DAGs the scheduler would now start because of asset events]}`,
where `tasks` are the unmapped task instances and `accounts` the state of each account's mapped
tasks (its batch's) by the last part of their task id (`load`, `dbt_build`), and `labels` what
Airflow shows for each batch (`<account>, <account>.<task>`: the rendered map index, None if the
task never rendered it); for a backfill `{"dag_id", "state", "runs": [one run's outcome, ...]}`.
Exit status 0 when every run succeeded.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

# The test's DAGs folder (a user's DAGs beside this repository's), else this repository's.
DAGS_FOLDER = Path(
    os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") or Path(__file__).resolve().parents[2] / "dags"
)


def outcome(dag_id: str, dag_run: Any, seconds: float) -> dict[str, Any]:
    from airflow.models.asset import AssetEvent
    from airflow.models.dag import DagModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session

    with create_session() as session:
        instances = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dag_run.run_id)
        states = {ti.task_id: str(ti.state) for ti in instances if ti.map_index < 0}
        # A mapped task group's index is a batch of accounts: the plan task of its queue
        # returned the batches in map index order. A label Airflow rendered names them.
        planned = {
            ti.task_id.removesuffix(".plan"): ti.xcom_pull(task_ids=ti.task_id, session=session)
            for ti in instances
            if ti.task_id.endswith(".plan")
        }
        accounts: dict[str, dict[str, str]] = {}
        labels: dict[str, str | None] = {}
        for ti in instances:
            if ti.map_index < 0:
                continue
            queue, _, name = ti.task_id.split(".")
            batch = planned[queue][ti.map_index]
            for account in batch:
                accounts.setdefault(account, {})[name] = str(ti.state)
            labels[f"{', '.join(batch)}.{name}"] = ti.rendered_map_index
        events = session.query(AssetEvent).filter_by(source_dag_id=dag_id)
        published = sorted(
            event.asset.name for event in events if event.source_run_id == dag_run.run_id
        )
        variables = sorted(variable.key for variable in session.query(Variable))
        # The scheduler's own question: which DAGs' asset conditions hold now.
        _, triggered = DagModel.dags_needing_dagruns(session)
        asset_triggered = sorted(triggered)
        session.rollback()  # it locks the rows it read
    return {
        "dag_id": dag_id,
        "state": str(dag_run.state),
        "seconds": seconds,
        "run_type": str(dag_run.run_type),
        "data_interval": [str(dag_run.data_interval_start), str(dag_run.data_interval_end)],
        "tasks": states,
        "accounts": accounts,
        "labels": labels,
        "assets_published": published,
        "variables": variables,
        "asset_triggered": asset_triggered,
    }


@contextmanager
def as_backfill_run(interval: Any) -> Any:
    """`dag.test()` makes the backfill's run (type backfill, the backfill's data interval)."""
    import airflow.models.dagrun as dagrun_module
    from airflow.utils.types import DagRunType

    def create(**arguments: Any) -> Any:
        dag = arguments["dag"]
        return dag.create_dagrun(
            run_id=dagrun_module.DagRun.generate_run_id(
                run_type=DagRunType.BACKFILL_JOB,
                logical_date=arguments["logical_date"],
                run_after=arguments["run_after"],
            ),
            logical_date=arguments["logical_date"],
            data_interval=interval,
            run_after=arguments["run_after"],
            conf=arguments["conf"],
            run_type=DagRunType.BACKFILL_JOB,
            state="running",
            triggered_by=arguments["triggered_by"],
            triggering_user_name=arguments["triggering_user_name"],
            start_date=arguments["start_date"],
            session=arguments["session"],
        )

    with mock.patch.object(dagrun_module, "get_or_create_dagrun", create):
        yield


def backfill(dag: Any, first: datetime, last: datetime, conf: dict[str, Any]) -> list[Any]:
    """The runs `airflow backfill create --from-date first --to-date last` would make, each
    run with `dag.test()`."""
    from airflow.models.backfill import _get_info_list
    from airflow.serialization.serialized_objects import DagSerialization

    serialized = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    runs = []
    for info in _get_info_list(from_date=first, to_date=last, reverse=False, dag=serialized):
        started = time.monotonic()
        with as_backfill_run(info.data_interval):
            dag_run = dag.test(logical_date=info.logical_date, run_conf=conf)
        runs.append(outcome(dag.dag_id, dag_run, time.monotonic() - started))
    return runs


def main(dag_id: str, outcome_file: Path, run: dict[str, Any]) -> int:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=DAGS_FOLDER)
    if bag.import_errors:
        outcome_file.write_text(json.dumps({"dag_id": dag_id, "import_errors": bag.import_errors}))
        return 2
    dag = bag.dags[dag_id]
    if "backfill" in run:
        first, last = (datetime.fromisoformat(run["backfill"][end]) for end in ("from", "to"))
        runs = backfill(dag, first, last, run.get("conf") or {})
        state = "success" if runs and all(r["state"] == "success" for r in runs) else "failed"
        outcome_file.write_text(json.dumps({"dag_id": dag_id, "state": state, "runs": runs}))
        return 0 if state == "success" else 1
    arguments: dict[str, Any] = {}
    if "logical_date" in run:
        arguments["logical_date"] = datetime.fromisoformat(run["logical_date"])
    if "conf" in run:
        arguments["run_conf"] = run["conf"]
    started = time.monotonic()
    dag_run = dag.test(**arguments)
    result = outcome(dag_id, dag_run, time.monotonic() - started)
    outcome_file.write_text(json.dumps(result))
    return 0 if result["state"] == "success" else 1


if __name__ == "__main__":
    run = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    sys.exit(main(sys.argv[1], Path(sys.argv[2]), run))
