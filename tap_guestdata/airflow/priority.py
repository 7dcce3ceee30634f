"""Daily runs before reloads: the priority of the Guest Data load tasks, as an Airflow plugin.

A queue's pool has a few slots, and Airflow hands a free slot to the highest priority weight,
then to the oldest logical date, which is a backfill's. So a backfill of a month would hold the
night's daily tasks back until its last run. The load tasks weigh by this strategy instead: a
task of a backfill run (`airflow backfill create`) weighs less than any other run's, so the
daily run's tasks take the next free slot, and the backfill shares with them only the API's
rate budget. The package registers it through the `airflow.plugins` entry point, so every
Airflow component where `tap-guestdata[airflow]` is installed knows it.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin
from airflow.task.priority_strategy import PriorityWeightStrategy

BACKFILL_RUN_ID_PREFIX = "backfill__"  # DagRunType.BACKFILL_JOB's run ids
DAILY_WEIGHT = 10
RELOAD_WEIGHT = 1


class DailyRunsFirst(PriorityWeightStrategy):
    """Weight 10 for a task of a scheduled or manual run, 1 for one of a backfill run."""

    def get_weight(self, ti: Any) -> int:
        return RELOAD_WEIGHT if str(ti.run_id).startswith(BACKFILL_RUN_ID_PREFIX) else DAILY_WEIGHT


# The operators' `weight_rule`: the class by name, resolved through the plugin registry.
DAILY_RUNS_FIRST = f"{DailyRunsFirst.__module__}.{DailyRunsFirst.__qualname__}"


class GuestdataPlugin(AirflowPlugin):
    name = "tap_guestdata"
    priority_weight_strategies = [DailyRunsFirst]
