"""Issue #42, item 1 under fakesnow: the models over a start_date's window build green and each
mart holds what the window read (tests/transform/test_start_date.py runs the tap itself on
PostgreSQL).

The module's copy of the shared load is cut to what a first run with start_date 40 days back
reads (`support.dbt.Window`: guests, statistics and redemptions from start_date, rewards from
the longest offer validity before it, members and ledgers whole, and read_windows covering from
start_date), then built again from scratch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from support.dbt import (
    OFFER_FUNNEL,
    Window,
    assert_every_model_built_and_every_test_passed,
    expected_members,
    expected_rewards,
    expected_venue_daily,
    london_day,
)
from support.snowflake_pipeline import (
    SnowflakePipeline,
    built_members,
    built_offers,
    built_rewards,
    built_venue_days,
)
from support.streams import truth_today

pytestmark = pytest.mark.snowflake

WINDOW = Window(london_day(40))


@pytest.fixture(scope="module")
def windowed(
    built: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> SnowflakePipeline:
    """The raw tables as a first run with start_date reads them, and the models built anew."""
    start = WINDOW.start.isoformat()
    rewards_from = WINDOW.rewards_from(module_truth()).isoformat()
    built.warehouse.query(
        f"DELETE FROM GUESTDATA.GUESTS WHERE visited_at < '{start}'::timestamp_tz",
        f"DELETE FROM GUESTDATA.DAILY_STATS WHERE date < '{WINDOW.start_date}'",
        f"DELETE FROM GUESTDATA.DAILY_ACCOUNT_STATS WHERE date < '{WINDOW.start_date}'",
        f"DELETE FROM GUESTDATA.REDEMPTIONS WHERE created_at < '{start}'::timestamp_tz",
        f"DELETE FROM GUESTDATA.REWARDS WHERE issued_at < '{rewards_from}'::timestamp_tz",
        f"UPDATE GUESTDATA.READ_WINDOWS SET covers_from = '{start}'::timestamp_tz",
    )
    built.invoke_dbt("build", "--full-refresh")
    return built


def test_the_models_over_a_window_build_and_pass_every_test_under_fakesnow(
    windowed: SnowflakePipeline,
) -> None:
    assert windowed.dbt_target is not None
    assert_every_model_built_and_every_test_passed(windowed.dbt_target)


def test_each_mart_holds_what_the_window_read_under_fakesnow(
    windowed: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> None:
    truth = module_truth()
    read = WINDOW.read(truth)
    today = truth_today(truth)  # as_of_the_truth
    assert built_venue_days(windowed, today) == expected_venue_daily(read)
    assert built_members(windowed) == expected_members(truth)
    read_ids = {row["id"] for row in read["rewards"]}
    assert built_rewards(windowed) == {
        key: row for key, row in expected_rewards(truth).items() if key in read_ids
    }
    offers = built_offers(windowed, [*OFFER_FUNNEL, "has_whole_funnel"])
    assert {offer: row[:-1] for offer, row in offers.items()} == WINDOW.funnel(truth)
    assert {offer: row[-1] for offer, row in offers.items()} == WINDOW.whole_funnels(truth)
