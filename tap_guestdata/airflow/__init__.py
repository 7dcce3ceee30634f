"""Airflow helpers (the `airflow` extra): `build_dags`, the Guest Data DAGs of a Meltano project.

A DAG file of your own is three lines (docs/airflow.md):

    from tap_guestdata.airflow import build_dags

    globals().update(build_dags(project_root="/opt/my-meltano-project"))

A DAG of your own can use the operator the factory's DAGs are made of,
`operators.GuestDataLoadOperator` (docs/airflow-reference.md, "Writing a DAG by hand"), built on
`hooks.MeltanoHook`. `accounts` (the many-accounts planner) and `reload` are plain Python;
`config`, `plan`, `dags`, `operators` and `hooks` import Airflow. Nothing here is imported by
the tap, and this module imports Airflow only when `build_dags` is first used, so the planner
works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tap_guestdata.airflow.dags import build_dags

__all__ = ["build_dags"]


def __getattr__(name: str) -> object:
    # Lazy: importing tap_guestdata.airflow.accounts must not import Airflow.
    if name == "build_dags":
        from tap_guestdata.airflow.dags import build_dags

        return build_dags
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
