"""The dbt project on a real load: sandbox -> Meltano (job ending with dbt build) -> PostgreSQL.

In order, on one sandbox and database: every model builds and every test passes; the marts
equal the sandbox's ground truth; a second build changes nothing; each reconciliation fails on
its own broken data and passes once the data is restored; a masked (limited-access) load puts
no contact in the audience; and an incremental load after changes gives the same marts as a
full reload into a fresh database.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from guestdata_sandbox.accounts import LIMITED_ACCESS_KEY, OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    MARTS,
    OFFER_FUNNEL,
    RAW_SCHEMA,
    RECONCILIATIONS,
    RUN_ALL,
    Dbt,
    assert_every_model_built_and_every_test_passed,
    expected_audience,
    expected_members,
    expected_offer_funnel,
    expected_rewards,
    expected_venue_daily,
    mart_rows,
    meltano_project,
    query,
)
from support.pipeline import MeltanoProject

pytestmark = pytest.mark.e2e

MODELS_SCHEMA = f"{RAW_SCHEMA}_analytics"


def test_the_job_builds_every_model_and_passes_every_test(
    loaded: MeltanoProject, dbt: Dbt, target_dir: Path
) -> None:
    # The job's own dbt build wrote this target dir's run_results.json.
    assert_every_model_built_and_every_test_passed(target_dir)


def test_fct_venue_daily_equals_the_ground_truth_per_venue_and_london_day(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str
) -> None:
    truth = sandbox.truth(OWNER_KEYS[0])
    expected = expected_venue_daily(truth)
    built = query(
        conninfo,
        f"SELECT venue_id, date::text, visits, unique_guests, marketing_opt_ins, api_visits "
        f"FROM {MODELS_SCHEMA}.fct_venue_daily",
    )
    assert {(row[0], row[1]): row[2:5] for row in built} == expected
    assert all(row[2] == row[5] for row in built), "the API's figures sit beside ours"
    assert sum(row[2] for row in built) == len(truth["guests"]) > 1000


def test_marketing_audience_holds_exactly_the_people_the_truth_allows(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str
) -> None:
    audience = expected_audience(sandbox.truth(OWNER_KEYS[0]))
    assert audience.erased, "the sandbox has anonymised members"
    allowed, visits = audience.allowed, audience.visits
    built = query(
        conninfo,
        f"SELECT contact_key, visits, venue_ids FROM {MODELS_SCHEMA}.marketing_audience",
    )
    assert {row[0] for row in built} == allowed
    assert len(allowed) < len(visits), "some people said no"
    for contact, count, venue_ids in built:
        assert (count, venue_ids) == (len(visits[contact]), sorted(set(visits[contact])))


def test_members_rewards_and_offers_equal_the_ground_truth(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str
) -> None:
    truth = sandbox.truth(OWNER_KEYS[0])
    members = query(
        conninfo,
        f"SELECT member_id, member_status, tier_key, points_balance, ledger_points_sum, "
        f"balance_matches_ledger FROM {MODELS_SCHEMA}.dim_members",
    )
    assert {row[0]: row[1:] for row in members} == expected_members(truth)
    assert {row[1] for row in members} == {"active", "left", "anonymised"}

    rewards = query(
        conninfo,
        f"SELECT reward_id, status_as_read, redemption_id FROM {MODELS_SCHEMA}.fct_rewards",
    )
    assert {row[0]: row[1:] for row in rewards} == expected_rewards(truth)
    assert {row[1] for row in rewards} >= {"issued", "redeemed", "expired"}

    offers = query(
        conninfo,
        f"SELECT offer_id, {', '.join(OFFER_FUNNEL)} FROM {MODELS_SCHEMA}.fct_offer_performance",
    )
    assert {row[0]: row[1:] for row in offers} == expected_offer_funnel(truth)


def test_a_second_build_on_an_unchanged_database_changes_nothing(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str
) -> None:
    before = mart_rows(conninfo, MODELS_SCHEMA)
    run = dbt.build()
    assert run.returncode == 0, run.output[-3000:]
    assert mart_rows(conninfo, MODELS_SCHEMA) == before
    assert all(before[mart] for mart in MARTS)


def build_span(target_dir: Path) -> tuple[str, str]:
    """When a build's first model or test started and its last ended (run_results.json, UTC
    ISO text); not its hooks (on-run-start is where a build waits for the lock)."""
    results = json.loads((target_dir / "run_results.json").read_text())["results"]
    nodes = [result for result in results if not result["unique_id"].startswith("operation.")]
    times = [step for result in nodes for step in result["timing"]]
    return min(step["started_at"] for step in times), max(step["completed_at"] for step in times)


def test_two_builds_at_once_take_turns_and_the_rows_stay_right(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str, tmp_path: Path
) -> None:
    """#42 item 5 (macros/build_lock.sql): a build still holding the models schema (a third
    holder here) keeps two builds started at once waiting; once it lets go, one builds while
    the other waits for it, and then builds. Without the lock the two collide."""
    before = mart_rows(conninfo, MODELS_SCHEMA)
    lock = f"{MODELS_SCHEMA}.guestdata_build_lock"
    running = "00000000-0000-0000-0000-00000000000a"
    query(conninfo, f"UPDATE {lock} SET holder = %s, held_since = now() RETURNING holder", running)
    builds = [Dbt(env=dbt.env, target_dir=tmp_path / name) for name in ("first", "second")]
    poll = ("--vars", "{guestdata_build_lock_poll_seconds: 1}")
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(build.build, *poll) for build in builds]
        waiting = 0
        for _ in range(600):  # until both wait (each polls with pg_sleep), at most 10 minutes
            (waiting,) = query(
                conninfo,
                "SELECT count(DISTINCT pid) FROM pg_stat_activity WHERE datname = "
                "current_database() AND query LIKE %s AND pid <> pg_backend_pid()",
                "%pg_sleep(1)%",
            )[0]
            if waiting >= 2 or any(run.done() for run in runs):
                break
            time.sleep(1)
        query(conninfo, f"UPDATE {lock} SET holder = NULL RETURNING lock_name")
        first, second = (run.result() for run in runs)
    assert waiting >= 2, (first.output[-2000:], second.output[-2000:])
    for run in (first, second):
        assert run.returncode == 0, run.output[-3000:]
        assert f"another build holds {MODELS_SCHEMA} (invocation {running}" in run.output
    spans = sorted(build_span(build.target_dir) for build in builds)
    assert spans[0][1] <= spans[1][0], f"the builds overlapped: {spans}"
    assert query(conninfo, f"SELECT holder FROM {lock}") == [(None,)]
    assert mart_rows(conninfo, MODELS_SCHEMA) == before

    # A build killed mid-way never released its claim: older than a build lasts, it is taken.
    query(
        conninfo,
        f"UPDATE {lock} SET holder = %s, held_since = now() - interval '4 hours' RETURNING 1",
        running,
    )
    after_a_crash = dbt.build()
    assert after_a_crash.returncode == 0, after_a_crash.output[-3000:]
    assert f"build lock: {MODELS_SCHEMA} is this build's\n" in after_a_crash.output + "\n"
    assert query(conninfo, f"SELECT holder FROM {lock}") == [(None,)]


class Breakage:
    """Damage to the loaded raw tables that can be undone: rows kept aside, flags flipped."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.undo: list[tuple[str, tuple]] = []

    def execute(self, statement: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.conninfo) as connection:
            cursor = connection.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def delete_row(self, table: str, row_id: int) -> None:
        keep = f"scratch_{table}_{row_id}"
        self.execute(
            sql.SQL("CREATE TABLE public.{} AS SELECT * FROM {} WHERE id = %s")
            .format(sql.Identifier(keep), sql.Identifier(RAW_SCHEMA, table))
            .as_string(),
            row_id,
        )
        self.execute(f"DELETE FROM {RAW_SCHEMA}.{table} WHERE id = %s", row_id)
        self.undo.append(
            (
                f"INSERT INTO {RAW_SCHEMA}.{table} SELECT * FROM public.{keep}; "
                f"DROP TABLE public.{keep}",
                (),
            )
        )

    def flip_consent(self, guest_id: int) -> None:
        flip = (
            f"UPDATE {RAW_SCHEMA}.guests SET marketing_consent = NOT marketing_consent "
            "WHERE id = %s"
        )
        self.execute(flip, guest_id)
        self.undo.append((flip, (guest_id,)))

    def restore(self) -> None:
        while self.undo:
            statement, params = self.undo.pop()
            with psycopg.connect(self.conninfo) as connection:
                for part in statement.split("; "):
                    connection.execute(part, params if "%s" in part else ())


def test_each_reconciliation_fails_on_its_broken_data_and_passes_once_restored(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str
) -> None:
    """Four breaks in one build, each on data only its own check reads (the deleted guest has
    no consent and another venue-day than the flipped one), and every other test passes: so
    each result is that break's doing."""
    breakage = Breakage(conninfo)
    # Guests on days that ended before the load (today's counts are not final).
    old_guests = breakage.execute(
        f"SELECT id, venue_id, (visited_at AT TIME ZONE 'Europe/London')::date, "
        f"marketing_consent FROM {RAW_SCHEMA}.guests "
        f"WHERE visited_at < now() - interval '2 days' ORDER BY id"
    )
    flipped = old_guests[0]
    deleted = next(g for g in old_guests if not g[3] and g[1:3] != flipped[1:3])
    line = breakage.execute(
        f"SELECT id FROM {RAW_SCHEMA}.member_ledger WHERE delta <> 0 ORDER BY id LIMIT 1"
    )[0]
    redemption = breakage.execute(
        f"SELECT id FROM {RAW_SCHEMA}.redemptions WHERE status = 'completed' ORDER BY id LIMIT 1"
    )[0]
    breakage.flip_consent(flipped[0])
    breakage.delete_row("guests", deleted[0])
    breakage.delete_row("member_ledger", line[0])
    breakage.delete_row("redemptions", redemption[0])
    # Edits by hand bypass the loader's times the incremental models follow: --full-refresh.
    try:
        broken = dbt.build("--full-refresh")
    finally:
        breakage.restore()
    tests = broken.statuses("test")
    assert broken.returncode == 1, "an error-severity failure fails the build"
    assert {name: tests[name] for name in RECONCILIATIONS} == {
        "reconcile_venue_daily_visits_with_api_stats": "fail",  # a lost guest row: error
        "reconcile_venue_daily_opt_ins_with_api_stats": "warn",  # a stale consent flag: warn
        "reconcile_member_balance_with_ledger": "fail",  # a lost ledger line: error
        "reconcile_offer_funnel_with_offer_stats": "warn",  # a lost redemption: warn
    }
    others = {name: status for name, status in tests.items() if name not in RECONCILIATIONS}
    assert set(others.values()) == {"pass"}, "only the reconciliations notice"
    # Each says what to do.
    assert "RECONCILIATION FAIL reconcile_member_balance_with_ledger (1 rows)" in broken.output
    # ... and for which account: one build holds them all (the raw schema names this one), in
    # the log and in the monitor table.
    (line,) = [
        line for line in broken.output.splitlines() if f"ACCOUNT CHECKS {RAW_SCHEMA} (" in line
    ]
    ((monitored,),) = query(
        conninfo, f"SELECT mart_check_failures FROM {RAW_SCHEMA}_analytics.guestdata_account_status"
    )
    assert line.endswith(f"ACCOUNT CHECKS {RAW_SCHEMA} ({RAW_SCHEMA}): {monitored}")
    assert "reconcile_member_balance_with_ledger (fail): 1 rows; " in monitored
    assert "reconcile_offer_funnel_with_offer_stats (warn): " in monitored
    assert "--full-refresh tap-guestdata--members" in broken.output
    assert "RECONCILIATION WARN reconcile_venue_daily_opt_ins_with_api_stats" in broken.output
    assert broken.output.count("--full-refresh tap-guestdata--refresh") >= 2

    restored = dbt.build("--full-refresh")
    assert restored.returncode == 0, restored.output[-3000:]
    assert set(restored.statuses("test").values()) == {"pass"}


def test_a_masked_load_puts_no_contact_in_the_audience(
    loaded: MeltanoProject,
    sandbox: SandboxProcess,
    pg_server: Any,
    e2e_database: str,
    conninfo: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The limited-access key (spec 2.8): every contact masked, consent still given."""
    schema = "guestdata_masked"
    project = meltano_project(
        sandbox,
        pg_server,
        e2e_database,
        tmp_path_factory.mktemp("dbt-target-masked"),
        tmp_path_factory.mktemp("logs-masked"),
        TAP_GUESTDATA_API_KEY=LIMITED_ACCESS_KEY,
        TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA=schema,
    )
    project.run(*RUN_ALL)
    consenting = query(
        conninfo,
        f"SELECT count(*), count(*) FILTER (WHERE email LIKE '%%*%%') FROM {schema}.guests "
        "WHERE marketing_consent",
    )[0]
    assert consenting[0] > 0 and consenting[0] == consenting[1]
    assert query(conninfo, f"SELECT count(*) FROM {schema}_analytics.marketing_audience") == [(0,)]
    assert (
        query(
            conninfo,
            f"SELECT count(*), count(*) FILTER (WHERE is_contact_masked) "
            f"FROM {schema}_analytics.dim_members",
        )[0]
        == (len(sandbox.truth(LIMITED_ACCESS_KEY, "members")),) * 2
    )


def test_an_incremental_load_then_build_equals_a_full_reload(
    loaded: MeltanoProject,
    sandbox: SandboxProcess,
    pg_server: Any,
    conninfo: str,
    scratch_database: Callable[[str], str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    truth = sandbox.truth(OWNER_KEYS[0])
    now_open = [r for r in truth["rewards"] if r["status"] == "issued" and not r["is_locked"]]
    # Newest first: a recent redemption, inside the tap's 30-day redemptions lookback (a void
    # older than that is only caught by a full refresh; the offer funnel check warns then).
    completed = [r for r in truth["redemptions"] if r["status"] == "completed"]
    sandbox.mutate("add_guests", count=4)
    sandbox.mutate("add_ledger_lines", member_id=truth["members"][0]["id"], count=2)
    sandbox.mutate("redeem_reward", reward_id=now_open[0]["id"])
    sandbox.mutate("void_redemption", redemption_id=completed[0]["id"])
    sandbox.mutate("add_members", count=2)
    sandbox.mutate("update_member", member_id=truth["members"][1]["id"], fields={"status": "left"})

    loaded.run(*RUN_ALL)  # incremental: state from the first load, then dbt build
    incremental = mart_rows(conninfo, MODELS_SCHEMA)

    fresh = scratch_database("reload")
    reload = meltano_project(
        sandbox,
        pg_server,
        fresh,
        tmp_path_factory.mktemp("dbt-target-reload"),
        tmp_path_factory.mktemp("logs-reload"),
    )
    reload.run(*RUN_ALL)
    full = mart_rows(pg_server.conninfo(fresh), MODELS_SCHEMA)
    for mart in MARTS:
        # Keyed on the account and the grain (the first five columns) so a failure names the
        # rows that differ.
        assert {row[:5]: row for row in incremental[mart]} == {
            row[:5]: row for row in full[mart]
        }, mart
    guests = query(conninfo, f"SELECT sum(visits) FROM {MODELS_SCHEMA}.fct_venue_daily")
    assert guests == [(len(sandbox.truth(OWNER_KEYS[0], "guests")),)]
