"""Issue #42, item 1: the setting the docs recommend, a `start_date` inside the history, builds
green, and each mart equals the truth inside what the tap read.

The job users run (load, then dbt build) with start_date 40 days back, on its own sandbox and
database. What the window reads is `support.dbt.Window` (docs/tap.md, "What a start_date
reads"): guests, statistics and redemptions from start_date; members with their whole ledgers;
rewards from the longest offer validity before start_date, so that every reward a redemption
read points to is read.
On main 0a8a655 the build failed reconcile_member_balance_with_ledger (121 members) and the
relationship of stg_guestdata__redemptions.reward_id (13 redemptions), skipping
fct_offer_performance and fct_rewards; and fct_venue_daily held zero-visit days before the
window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    OFFER_FUNNEL,
    RAW_SCHEMA,
    Window,
    assert_every_model_built_and_every_test_passed,
    expected_audience,
    expected_members,
    expected_rewards,
    expected_venue_daily,
    instant,
    london_day,
    query,
)
from support.pipeline import MeltanoProject

pytestmark = pytest.mark.e2e

MODELS_SCHEMA = f"{RAW_SCHEMA}_analytics"
WINDOW = Window(london_day(40))  # inside the small account's history


@pytest.fixture(scope="module")
def run_env() -> dict[str, str]:
    return {"TAP_GUESTDATA_START_DATE": WINDOW.start_date.isoformat()}


@pytest.fixture(scope="module")
def truth(loaded: MeltanoProject, sandbox: SandboxProcess) -> dict[str, Any]:
    return sandbox.truth(OWNER_KEYS[0])


def test_the_job_with_a_start_date_builds_every_model_and_passes_every_test(
    loaded: MeltanoProject, target_dir: Path, truth: dict[str, Any]
) -> None:
    first_day = min(row["date"] for row in truth["daily_stats"])
    assert first_day < WINDOW.start_date.isoformat(), "start_date is inside the history"
    assert_every_model_built_and_every_test_passed(target_dir)


def test_venue_days_from_start_date_equal_the_truth_and_none_is_older(
    loaded: MeltanoProject, conninfo: str, truth: dict[str, Any]
) -> None:
    built = query(
        conninfo,
        f"SELECT venue_id, date::text, visits, unique_guests, marketing_opt_ins "
        f"FROM {MODELS_SCHEMA}.fct_venue_daily",
    )
    expected = expected_venue_daily(WINDOW.read(truth))
    assert {(row[0], row[1]): row[2:] for row in built} == expected
    assert len(expected) < len(expected_venue_daily(truth))
    assert sum(row[2] for row in built) > 100


def test_members_have_their_whole_ledgers_and_their_balances_match(
    loaded: MeltanoProject, conninfo: str, truth: dict[str, Any]
) -> None:
    members = query(
        conninfo,
        f"SELECT member_id, member_status, tier_key, points_balance, ledger_points_sum, "
        f"balance_matches_ledger FROM {MODELS_SCHEMA}.dim_members",
    )
    assert {row[0]: row[1:] for row in members} == expected_members(truth)
    older = [line for line in truth["member_ledger"] if instant(line["created_at"]) < WINDOW.start]
    assert older, "the ledgers have lines before start_date, read all the same"


def test_rewards_from_the_longest_validity_before_start_date_hold_every_redeemed_one(
    loaded: MeltanoProject, conninfo: str, truth: dict[str, Any]
) -> None:
    read = {row["id"] for row in WINDOW.read(truth)["rewards"]}
    rewards = query(
        conninfo,
        f"SELECT reward_id, status_as_read, redemption_id FROM {MODELS_SCHEMA}.fct_rewards",
    )
    # a reward redeemed before the window has its own redemption_id (its redemption unread)
    expected = {key: row for key, row in expected_rewards(truth).items() if key in read}
    assert {row[0]: row[1:] for row in rewards} == expected
    assert len(expected) < len(truth["rewards"]), "some rewards are older than the window"
    redeemed = query(conninfo, f"SELECT DISTINCT member_reward_id FROM {RAW_SCHEMA}.redemptions")
    before_start = {
        row["id"] for row in truth["rewards"] if instant(row["issued_at"]) < WINDOW.start
    }
    assert {reward for (reward,) in redeemed} & before_start, (
        "some redemptions read are of rewards issued before start_date"
    )
    assert {reward for (reward,) in redeemed} <= {row[0] for row in rewards}


def test_offers_count_what_the_window_holds_and_say_whether_that_is_their_whole_funnel(
    loaded: MeltanoProject, conninfo: str, truth: dict[str, Any]
) -> None:
    offers = query(
        conninfo,
        f"SELECT offer_id, {', '.join(OFFER_FUNNEL)}, has_whole_funnel "
        f"FROM {MODELS_SCHEMA}.fct_offer_performance",
    )
    assert {row[0]: row[1:-1] for row in offers} == WINDOW.funnel(truth)
    whole = WINDOW.whole_funnels(truth)
    assert {row[0]: row[-1] for row in offers} == whole
    assert not all(whole.values()), "some offers are older than the window"


def test_the_audience_is_the_consenting_guests_of_the_window(
    loaded: MeltanoProject, conninfo: str, truth: dict[str, Any]
) -> None:
    read = WINDOW.read(truth)
    assert len(read["guests"]) < len(truth["guests"])
    built = query(conninfo, f"SELECT contact_key FROM {MODELS_SCHEMA}.marketing_audience")
    assert {row[0] for row in built} == expected_audience(read).allowed
