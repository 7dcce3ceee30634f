"""This repository's Guest Data DAGs: the package's factory on this checkout's Meltano project.

A user's own DAG file is these three lines with their project root (docs/airflow.md).
"""

from pathlib import Path

from tap_guestdata.airflow import build_dags

globals().update(build_dags(project_root=Path(__file__).resolve().parents[1]))
