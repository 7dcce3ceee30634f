"""Runs one DAG of `dags/` for real with `dag.test()` and prints its outcome as JSON.

Usage: python run_dag.py DAG_ID (in an environment from `dag_testing.airflow_env`, after
`airflow db migrate`). stdout's last line: `{"dag_id", "state", "seconds", "tasks": {id: state},
"assets_published": [names of the assets the run's tasks published]}`.
Exit status 0 when the run succeeded.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def main(dag_id: str) -> int:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.asset import AssetEvent
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=DAGS_FOLDER)
    if bag.import_errors:
        print(json.dumps({"dag_id": dag_id, "import_errors": bag.import_errors}))
        return 2
    started = time.monotonic()
    dag_run = bag.dags[dag_id].test()
    seconds = time.monotonic() - started
    with create_session() as session:
        instances = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dag_run.run_id)
        states = {ti.task_id: str(ti.state) for ti in instances}
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
                "tasks": states,
                "assets_published": published,
            }
        )
    )
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
