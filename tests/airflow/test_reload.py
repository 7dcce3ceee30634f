"""What a run of the daily DAG re-reads (tap_guestdata/airflow/reload.py; no Airflow needed):
the London days of its data interval, the windowed streams its params choose, its own state id.
The operator's runs of a reload are run for real in test_dag_run.py."""

from __future__ import annotations

import datetime as dt
import enum

import pytest

from tap_guestdata.airflow.reload import (
    EVERY_WINDOWED_STREAM,
    ReloadError,
    chosen_streams,
    interval_days,
    reload_of,
)

UTC = dt.timezone.utc
ALL = ["account", "venues", "guests", "read_windows", "members", "member_ledger", "offers"]


class DagRunType(str, enum.Enum):  # as the task's context gives it (airflow.utils.types)
    BACKFILL_JOB = "backfill"
    MANUAL = "manual"


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("start", "end", "days"),
    [
        # The daily 05:00 UTC schedule: the day the interval starts on.
        ("2026-10-01 05:00", "2026-10-02 05:00", ("2026-10-01", "2026-10-01")),
        # 23:30 UTC in summer is the next London day (BST): the London days count.
        ("2026-07-01 23:30", "2026-07-02 23:30", ("2026-07-02", "2026-07-02")),
        # The night the clocks go back (25 hours in London): still one day.
        ("2026-10-25 05:00", "2026-10-26 05:00", ("2026-10-25", "2026-10-25")),
        # A weekly schedule: its seven days.
        ("2026-10-04 03:00", "2026-10-11 03:00", ("2026-10-04", "2026-10-10")),
        # An hourly one: the day it is in.
        ("2026-10-04 10:00", "2026-10-04 11:00", ("2026-10-04", "2026-10-04")),
    ],
)
def test_a_run_reloads_the_london_days_of_its_interval(
    start: str, end: str, days: tuple[str, str]
) -> None:
    first, last = interval_days(at(start), at(end))
    assert (first.isoformat(), last.isoformat()) == days


def test_params_choose_windowed_streams_of_the_task_in_its_order() -> None:
    assert chosen_streams([], ALL) == ["guests", "read_windows", "members", "member_ledger"]
    assert chosen_streams(["members"], ALL) == ["members", "member_ledger"]
    assert chosen_streams(["guests"], ALL) == ["guests", "read_windows"], "what the read covered"
    assert chosen_streams(["stats"], ALL) == [], "a group the task does not load"
    assert set(EVERY_WINDOWED_STREAM) >= set(chosen_streams([], ALL))
    with pytest.raises(ReloadError, match="'offers' has no date window"):
        chosen_streams(["offers"], ALL)


@pytest.mark.parametrize("run_type", ["scheduled", DagRunType.MANUAL])
def test_a_daily_run_is_no_reload(run_type: object) -> None:
    assert reload_of(run_type, at("2026-10-01 05:00"), at("2026-10-02 05:00"), {}, ALL) is None


@pytest.mark.parametrize(
    ("run_type", "params"),
    [
        ("backfill", {}),
        (DagRunType.BACKFILL_JOB, {}),
        ("manual", {"reload": True}),
        (DagRunType.MANUAL, {"reload": True}),
    ],
)
def test_a_backfill_run_or_a_reload_param_reads_its_days_under_its_own_state_id(
    run_type: object, params: dict[str, object]
) -> None:
    reload = reload_of(
        run_type,
        at("2026-10-01 05:00"),
        at("2026-10-02 05:00"),
        {**params, "reload_streams": ["core"]},
        ALL,
    )
    assert reload is not None
    assert (reload.first.isoformat(), reload.last.isoformat()) == ("2026-10-01", "2026-10-01")
    assert reload.streams == ("guests", "read_windows")
    assert reload.label == "reload-2026-10-01-2026-10-01", "the state id suffix's tail"


def test_a_reload_with_nothing_of_the_task_to_read_reads_no_stream() -> None:
    reload = reload_of(
        "backfill",
        at("2026-10-01 05:00"),
        at("2026-10-02 05:00"),
        {"reload_streams": ["stats"]},
        ALL,
    )
    assert reload is not None and reload.streams == (), "the operator skips the run"
    assert reload.period == "2026-10-01 to 2026-10-01"


def test_a_reload_without_a_data_interval_says_what_it_needs() -> None:
    with pytest.raises(ReloadError, match="data interval"):
        reload_of("manual", None, None, {"reload": True}, ALL)
