"""Incremental models equal a full refresh under dbt-snowflake, against fakesnow (issue 31).

The PostgreSQL suite's changes (tests/transform/test_incremental.py, a step each) on the
Snowflake path, in three builds: the module's load and build; new arrivals with a person erased;
then late arrivals on an old day and a day's stats changed, loaded by a reloaded period, and guests
deleted at the source, followed by the weekly refresh, in one build. After each every mart and
every incremental staging model equals, row for row (every column), a `--full-refresh` build of
the same raw data into a schema of its own. The incremental builds run with no lookback, so the
comparison tests the watermark itself. The changes share builds here (each build and full
refresh costs half a minute of CPU under fakesnow): what this suite adds is the Snowflake SQL of
each macro, which they all reach.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    BUILD_STAMP,
    INCREMENTAL_STAGING,
    LONDON,
    MARTS,
    person_to_erase,
)
from support.snowflake_pipeline import DBT_JOB, DBT_UTILITY, LOADER, SnowflakePipeline

pytestmark = pytest.mark.snowflake

MODELS = "GUESTDATA_ANALYTICS"
FULL = "GUESTDATA_FULL_REFRESH"
COMPARED = [("", model) for model in MARTS] + [("_STAGING", m) for m in INCREMENTAL_STAGING]


def load_and_build(pipeline: SnowflakePipeline, *tasks: str, full_refresh: bool = False) -> None:
    """`meltano run` of the tasks (the daily job by default) then the incremental dbt build."""
    flags = ["--full-refresh"] if full_refresh else []
    if not tasks:
        pipeline.run(*DBT_JOB)
        return
    pipeline.run("--environment=dev", "run", *flags, *tasks, f"{DBT_UTILITY}:build")


def reload_period(pipeline: SnowflakePipeline, first: dt.date, last: dt.date) -> None:
    """docs/configuration.md end_date: a period re-read under its own state id (no build)."""
    pipeline.env.update(
        {"TAP_GUESTDATA_START_DATE": str(first), "TAP_GUESTDATA_END_DATE": str(last)}
    )
    try:
        pipeline.run(
            "--environment=dev",
            "run",
            "--full-refresh",
            f"--state-id-suffix=reload-{first}-{last}",
            "tap-guestdata",
            LOADER,
        )
    finally:
        del pipeline.env["TAP_GUESTDATA_START_DATE"], pipeline.env["TAP_GUESTDATA_END_DATE"]


def table_rows(pipeline: SnowflakePipeline, schema: str) -> list[Counter[str]]:
    """Each compared model's rows in `schema`, as a multiset of their every column but
    BUILD_STAMP."""
    results = pipeline.warehouse.query(
        *(f"SELECT * FROM {schema}{suffix}.{model.upper()}" for suffix, model in COMPARED)
    )
    return [
        Counter(
            repr(sorted(item for item in row.items() if item[0].lower() != BUILD_STAMP))
            for row in rows
        )
        for rows in results
    ]


def london_day_of(instant: str) -> dt.date:
    return dt.datetime.fromisoformat(instant).astimezone(LONDON).date()


@pytest.fixture(scope="module")
def last_day(module_truth: Callable[[], dict]) -> dt.date:
    """The London day of the sandbox's newest arrival before any step: the steps' days count
    back from it, so they hold data whatever GUESTDATA_TEST_SANDBOX_ANCHOR ends it on."""
    return max(london_day_of(guest["visited_at"]) for guest in module_truth()["guests"])


@pytest.fixture(scope="module")
def incremental(built: SnowflakePipeline, last_day: dt.date) -> SnowflakePipeline:
    """The module's load and first build (the data's last day read before any change); every
    build after it reads only what is new."""
    built.env["GUESTDATA_INCREMENTAL_LOOKBACK_HOURS"] = "0"
    return built


@pytest.fixture(scope="module")
def compare(
    incremental: SnowflakePipeline, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., None]]:
    target = tmp_path_factory.mktemp("dbt-snowflake-full-refresh")
    refreshed: list[bool] = []

    def equal_to_a_full_refresh(rebuild: bool = True) -> None:
        """rebuild=False: against the module's last full refresh (built now if there is none),
        when no load has come since."""
        if rebuild or not refreshed:
            incremental.invoke_dbt(  # raises if the build fails
                # `run`, not `build`: the copy's tables are compared; its data tests would add
                # nothing the incremental build's own tests did not.
                "run",
                "--full-refresh",
                GUESTDATA_DBT_SCHEMA=FULL,
                DBT_TARGET_PATH=str(target),
                DBT_LOG_PATH=str(target / "logs"),
            )
            refreshed.append(True)
        built_incrementally, rebuilt = (
            table_rows(incremental, MODELS),
            table_rows(incremental, FULL),
        )
        for (_, model), mine, full in zip(COMPARED, built_incrementally, rebuilt, strict=True):
            assert mine, model
            assert (mine - full, full - mine) == (Counter(), Counter()), model

    yield equal_to_a_full_refresh


def guests_on(truth: dict[str, Any], day: dt.date) -> list[dict[str, Any]]:
    return [guest for guest in truth["guests"] if london_day_of(guest["visited_at"]) == day]


def test_1_a_first_load(compare: Callable[..., None]) -> None:
    compare()


def test_2_new_arrivals_members_ledger_rewards_redemptions_and_a_person_erased(
    incremental: SnowflakePipeline,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    compare: Callable[..., None],
) -> None:
    module_sandbox.mutate("add_guests", count=5)
    module_sandbox.mutate("add_ledger_lines", member_id=module_truth()["members"][0]["id"], count=2)
    module_sandbox.mutate("add_rewards", count=2)
    module_sandbox.mutate("add_redemptions", count=1)
    person = person_to_erase(module_sandbox)
    incremental.invoke_dbt("run-operation", "erase_person", GUESTDATA_ERASE_IDENTIFIER=person.email)
    load_and_build(incremental)
    (held,) = incremental.warehouse.query(
        f"SELECT count(*) AS n FROM {MODELS}.MARKETING_AUDIENCE "
        f"WHERE contact_key = '{person.email}'"
    )
    assert held == [{"N": 0}]
    compare()


def test_3_a_reloaded_period_with_late_arrivals_and_a_changed_day_then_deletions_followed(
    incremental: SnowflakePipeline,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    last_day: dt.date,
    compare: Callable[..., None],
) -> None:
    late_day, changed_day = last_day - dt.timedelta(days=4), last_day - dt.timedelta(days=6)
    noon = dt.datetime.combine(late_day, dt.time(12), tzinfo=LONDON).isoformat()
    module_sandbox.mutate("add_guests", count=3, visited_at=noon)
    guest = guests_on(module_truth(), changed_day)[0]
    module_sandbox.mutate(
        "set_marketing_consent", guest_id=guest["id"], value=not guest["marketing_consent"]
    )
    reload_period(incremental, last_day - dt.timedelta(days=14), late_day)

    day = last_day - dt.timedelta(days=9)
    deleted = [guest["id"] for guest in guests_on(module_truth(), day)][:2]
    assert deleted
    for guest_id in deleted:
        module_sandbox.mutate("delete_guest", guest_id=guest_id)
    load_and_build(incremental, "tap-guestdata--refresh", LOADER, full_refresh=True)
    (flagged,) = incremental.warehouse.query(
        "SELECT id FROM GUESTDATA.GUESTS WHERE _sdc_deleted_at IS NOT NULL"
    )
    assert {row["ID"] for row in flagged} >= set(deleted)
    compare()


def test_the_comparison_can_fail(
    incremental: SnowflakePipeline, compare: Callable[..., None]
) -> None:
    """A mart row changed behind dbt's back shows as a difference."""
    incremental.warehouse.query(
        f"UPDATE {MODELS}.FCT_VENUE_DAILY SET visits = visits + 1 "
        f"WHERE date = (SELECT max(date) FROM {MODELS}.FCT_VENUE_DAILY)"
    )
    with pytest.raises(AssertionError, match="fct_venue_daily"):
        compare(rebuild=False)  # the last step's full refresh: the same raw data
