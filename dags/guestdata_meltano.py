"""This repository's Guest Data DAGs: the package's factory on this checkout's Meltano project,
with the two blocks its meltano.yml adds for target-postgres (timestamptz columns, dbt models).

A user's own DAG file is the factory call with their project root (docs/airflow.md).
"""

from pathlib import Path

from tap_guestdata.airflow import build_dags

globals().update(
    build_dags(
        project_root=Path(__file__).resolve().parents[1],
        settings={"meltano_after_load": "auto", "meltano_transform": "auto"},
    )
)
