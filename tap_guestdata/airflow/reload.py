"""Re-loading a period: what a backfill run (or a manual run asked to reload) reads.

Pure Python, no Airflow import. The load operator asks `reload_of` with the run's type, data
interval and params, for the streams of each of its Meltano runs:

- a scheduled or plain manual run gets None: Meltano state drives its window;
- a run of `airflow backfill create`, or a run whose params say `reload: true`, reads the London
  days of its data interval (`interval_days`) with the tap's `start_date` and `end_date`, only
  the windowed streams chosen in its params (`reload_streams`), under a state id of its own
  (`<suffix>-reload-<first>-<last>`) with `--full-refresh`, so the daily bookmarks never move
  and two reloads of different periods can run at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tap_guestdata.run.catalog import GROUPS, windowed_streams
from tap_guestdata.run.time_rules import london_day

BACKFILL_RUN_TYPE = "backfill"  # DagRunType.BACKFILL_JOB's value

# The streams a period can be re-read for: the catalog's windowed ones (the tap's start_date
# and end_date), by group or by name. read_windows goes with guests: what the read covered.
RELOADABLE_GROUPS = tuple(group for group in GROUPS if windowed_streams(group))
EVERY_WINDOWED_STREAM = windowed_streams()


class ReloadError(ValueError):
    """A run's params ask for a reload that cannot be done (the message says why)."""


def interval_days(start: dt.datetime, end: dt.datetime) -> tuple[dt.date, dt.date]:
    """The London days a data interval reloads: from the day it starts to the day before the
    day it ends (a daily interval 05:00 to 05:00 UTC is the one day it starts on); an interval
    inside one day is that day."""
    first = london_day(start)
    last = max(first, london_day(end) - dt.timedelta(days=1))
    return first, last


def chosen_streams(requested: Iterable[str], task_streams: Sequence[str]) -> list[str]:
    """The windowed streams of the task that the run's params choose, in the task's order.

    `requested` holds stream names or stream-group names; empty means every windowed stream.
    guests brings read_windows (a reload of guests is also a read window).
    """
    names = list(requested)
    if not names:
        wanted = set(EVERY_WINDOWED_STREAM)
    else:
        wanted = set()
        for name in names:
            if name in RELOADABLE_GROUPS:
                wanted.update(windowed_streams(name))
            elif name in EVERY_WINDOWED_STREAM:
                wanted.add(name)
            else:
                raise ReloadError(
                    f"reload_streams: {name!r} has no date window to reload; choose among "
                    f"the groups {sorted(RELOADABLE_GROUPS)} or the streams "
                    f"{list(EVERY_WINDOWED_STREAM)}"
                )
        if "guests" in wanted:
            wanted.add("read_windows")
    return [stream for stream in task_streams if stream in wanted]


def is_reload(run_type: object, params: Mapping[str, Any]) -> bool:
    # The run's DagRunType is a str enum: its value, not str() ("DagRunType.BACKFILL_JOB").
    return getattr(run_type, "value", run_type) == BACKFILL_RUN_TYPE or bool(params.get("reload"))


@dataclass(frozen=True)
class Reload:
    """What one Meltano run of a reload reads: London days `first` to `last`, `streams`."""

    first: dt.date
    last: dt.date
    streams: tuple[str, ...]

    @property
    def label(self) -> str:
        """The state id suffix's tail: `reload-<first>-<last>`."""
        return f"reload-{self.first.isoformat()}-{self.last.isoformat()}"

    @property
    def period(self) -> str:
        return f"{self.first.isoformat()} to {self.last.isoformat()}"


def reload_of(
    run_type: object,
    interval_start: dt.datetime | None,
    interval_end: dt.datetime | None,
    params: Mapping[str, Any],
    task_streams: Sequence[str],
) -> Reload | None:
    """None for a daily run; for a reload, its days and the streams of `task_streams` it
    re-reads (none: nothing of this run's to reload, the operator skips it)."""
    if not is_reload(run_type, params):
        return None
    if interval_start is None or interval_end is None:
        raise ReloadError("a reload needs the run's data interval: give the run a logical date")
    first, last = interval_days(interval_start, interval_end)
    streams = chosen_streams(params.get("reload_streams") or [], task_streams)
    return Reload(first, last, tuple(streams))
