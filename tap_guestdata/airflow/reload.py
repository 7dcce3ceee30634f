"""Re-loading a period: what a backfill run (or a manual run asked to reload) reads.

Pure Python, no Airflow import. The daily DAGs' tasks call `reload_lines` from their command
template (the `guestdata_reload` macro) with the run's type, data interval and params:

- a scheduled or plain manual run gets no lines: Meltano state drives its window;
- a run of `airflow backfill create`, or a run whose params say `reload: true`, reads the London
  days of its data interval (`interval_days`) with the tap's `start_date` and `end_date`, only
  the windowed streams chosen in its params (`reload_streams`), under a state id of its own
  (`<suffix>-reload-<first>-<last>`) with `--full-refresh`, so the daily bookmarks never move
  and two reloads of different periods can run at once.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tap_guestdata.windows import london_day

BACKFILL_RUN_TYPE = "backfill"  # DagRunType.BACKFILL_JOB's value
SKIP_EXIT_CODE = 99  # a task with nothing to reload: Airflow marks it skipped

# The streams a period can be re-read for, by stream group: the ones with a date window (the
# tap's start_date and end_date). read_windows goes with guests: what the read covered
# (deletions.py). The others (account, venues, offers, programme, tiers) have no window.
WINDOWED_STREAMS: dict[str, tuple[str, ...]] = {
    "core": ("guests", "read_windows"),
    "members": ("members", "member_ledger"),
    "rewards": ("rewards", "redemptions"),
    "stats": ("daily_stats", "daily_account_stats"),
}
EVERY_WINDOWED_STREAM = tuple(s for streams in WINDOWED_STREAMS.values() for s in streams)


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
            if name in WINDOWED_STREAMS:
                wanted.update(WINDOWED_STREAMS[name])
            elif name in EVERY_WINDOWED_STREAM:
                wanted.add(name)
            else:
                raise ReloadError(
                    f"reload_streams: {name!r} has no date window to reload; choose among "
                    f"the groups {sorted(WINDOWED_STREAMS)} or the streams "
                    f"{list(EVERY_WINDOWED_STREAM)}"
                )
        if "guests" in wanted:
            wanted.add("read_windows")
    return [stream for stream in task_streams if stream in wanted]


def is_reload(run_type: object, params: Mapping[str, Any]) -> bool:
    # The run's DagRunType is a str enum: its value, not str() ("DagRunType.BACKFILL_JOB").
    return getattr(run_type, "value", run_type) == BACKFILL_RUN_TYPE or bool(params.get("reload"))


def reload_lines(
    run_type: object,
    interval_start: dt.datetime | None,
    interval_end: dt.datetime | None,
    params: Mapping[str, Any],
    task_streams: Sequence[str],
) -> str:
    """Shell lines for a task's command: empty for a daily run; for a reload, the window and
    streams as the tap's settings, and the run's own state id (`$suffix`, `$run` of the
    command, see dags.meltano_command)."""
    if not is_reload(run_type, params):
        return "# a daily run: Meltano state drives the window"
    if interval_start is None or interval_end is None:
        raise ReloadError("a reload needs the run's data interval: give the run a logical date")
    first, last = interval_days(interval_start, interval_end)
    streams = chosen_streams(params.get("reload_streams") or [], task_streams)
    period = f"{first.isoformat()} to {last.isoformat()}"
    if not streams:
        message = f"nothing of this task's streams to reload for {period}"
        return f"echo {shlex.quote(message)}; exit {SKIP_EXIT_CODE}"
    selection = json.dumps([f"{stream}.*" for stream in streams])
    label = f"reload-{first.isoformat()}-{last.isoformat()}"
    return "\n".join(
        [
            f"# reload of the London days {period}: {', '.join(streams)}",
            f"export TAP_GUESTDATA_START_DATE={first.isoformat()}",
            f"export TAP_GUESTDATA_END_DATE={last.isoformat()}",
            f"export TAP_GUESTDATA__SELECT={shlex.quote(selection)}",
            f'suffix="${{suffix:+$suffix-}}{label}"',
            'run=(--no-install "--state-id-suffix=$suffix" --full-refresh)',
        ]
    )
