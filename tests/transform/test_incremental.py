"""Incremental models equal a full refresh (docs/transform-incremental.md).

One sandbox and database, the daily job's own incremental dbt build after each change, in order:
a first load; new arrivals; late arrivals on an old day and a day's stats changed, in one
reloaded period; guests deleted at the source and followed; a person erased. After each step
every mart and every incremental staging model equals, row for row (all columns), a
`--full-refresh` build of the same raw data into a schema of its own; the incremental schema is
never rebuilt whole.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import (
    INCREMENTAL_MARTS,
    INCREMENTAL_STAGING,
    LOAD_ONLY,
    LONDON,
    MARTS,
    RAW_SCHEMA,
    REFRESH_AND_BUILD,
    RUN_ALL,
    Dbt,
    dbt_env,
    london_day,
    model_rows,
    person_to_erase,
    query,
)
from support.pipeline import MeltanoProject

pytestmark = pytest.mark.e2e

MODELS_SCHEMA = f"{RAW_SCHEMA}_analytics"
ONLY_GUESTS = ("--select", "stg_guestdata__guests")  # the model and its tests
FULL_SCHEMA = f"{RAW_SCHEMA}_full_refresh"


@pytest.fixture(scope="module")
def run_env() -> dict[str, str]:
    """No lookback: each build reads only what the loader wrote since the last one, so the
    comparison tests the watermark itself (the default 6 hours would re-read these minutes)."""
    return {"GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0"}


@pytest.fixture(scope="module")
def full_refresh(
    pg_server: Any, e2e_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Dbt:
    """dbt on the same raw data, its models in FULL_SCHEMA, always built with --full-refresh."""
    target_dir = tmp_path_factory.mktemp("dbt-target-full-refresh")
    env = {**dbt_env(pg_server, e2e_database), "GUESTDATA_DBT_SCHEMA": FULL_SCHEMA}
    env["DBT_LOG_PATH"] = str(target_dir / "logs")
    return Dbt(env=env, target_dir=target_dir)


@pytest.fixture(scope="module")
def compare(loaded: MeltanoProject, full_refresh: Dbt, conninfo: str) -> Iterator[Any]:
    refreshed: list[bool] = []

    def equal_to_a_full_refresh(rebuild: bool = True) -> None:
        """rebuild=False: against the module's last full refresh (built now if there is none),
        when no load has come since."""
        if rebuild or not refreshed:
            # `run`, not `build`: the copy's tables are compared; its data tests would add
            # nothing the incremental build's own tests did not (two thirds of a build's time).
            run = full_refresh.run("run", "--full-refresh")
            assert run.returncode == 0, run.output[-3000:]
            refreshed.append(True)
        for schema_suffix, models in (("", MARTS), ("_staging", INCREMENTAL_STAGING)):
            incremental = model_rows(conninfo, MODELS_SCHEMA + schema_suffix, models)
            full = model_rows(conninfo, FULL_SCHEMA + schema_suffix, models)
            for model in models:
                assert incremental[model], model
                only_incremental = set(incremental[model]) - set(full[model])
                only_full = set(full[model]) - set(incremental[model])
                assert (only_incremental, only_full) == (set(), set()), model
                assert len(incremental[model]) == len(full[model]), model

    yield equal_to_a_full_refresh


def relation_id(conninfo: str, model: str, schema: str = f"{MODELS_SCHEMA}_staging") -> int:
    """The table's oid: an incremental build keeps it, a rebuild makes a new one."""
    ((oid,),) = query(conninfo, f"SELECT '{schema}.{model}'::regclass::oid")
    return int(oid)


def reload_period(loaded: MeltanoProject, first: dt.date, last: dt.date) -> None:
    """docs/configuration.md end_date: a period re-read under its own state id, then the build."""
    loaded.run(
        "--environment=dev",
        "run",
        "--full-refresh",
        f"--state-id-suffix=reload-{first}-{last}",
        "tap-guestdata",
        "target-postgres",
        "guestdata-pg-types:timestamptz",
        "dbt-postgres:build",
        extra_env={"TAP_GUESTDATA_START_DATE": str(first), "TAP_GUESTDATA_END_DATE": str(last)},
    )


def visits_on(conninfo: str, day: dt.date) -> int:
    ((visits,),) = query(
        conninfo,
        f"SELECT coalesce(sum(visits), 0) FROM {MODELS_SCHEMA}.fct_venue_daily WHERE date = %s",
        day,
    )
    return int(visits)


def test_1_a_first_load(compare: Any) -> None:
    compare()


def test_2_new_arrivals_members_ledger_rewards_and_redemptions(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str, compare: Any
) -> None:
    truth = sandbox.truth(OWNER_KEYS[0])
    kept = relation_id(conninfo, "stg_guestdata__guests")
    kept_marts = [relation_id(conninfo, mart, MODELS_SCHEMA) for mart in INCREMENTAL_MARTS]
    sandbox.mutate("add_guests", count=5)
    sandbox.mutate("add_ledger_lines", member_id=truth["members"][0]["id"], count=2)
    sandbox.mutate("add_rewards", count=2)
    sandbox.mutate("add_redemptions", count=1)
    loaded.run(*RUN_ALL)
    assert relation_id(conninfo, "stg_guestdata__guests") == kept, "built incrementally"
    assert [relation_id(conninfo, mart, MODELS_SCHEMA) for mart in INCREMENTAL_MARTS] == kept_marts
    compare()


def test_3_late_arrivals_and_a_days_stats_changed_in_a_reloaded_period(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str, compare: Any
) -> None:
    """Late arrivals on an old day and another day's consent changed, in one reload of eleven
    days: the incremental models re-read every row of them (a load and a build each cost 40 CPU
    seconds, so a reload of one day each and a period's reload are one step)."""
    late_day, changed_day = london_day(4), london_day(6)
    before = visits_on(conninfo, late_day)
    noon = dt.datetime.combine(late_day, dt.time(12), tzinfo=LONDON).isoformat()
    sandbox.mutate("add_guests", count=3, visited_at=noon)
    guest = next(
        g
        for g in sandbox.truth(OWNER_KEYS[0], "guests")
        if dt.datetime.fromisoformat(g["visited_at"]).astimezone(LONDON).date() == changed_day
    )
    sandbox.mutate(
        "set_marketing_consent", guest_id=guest["id"], value=not guest["marketing_consent"]
    )
    reload_period(loaded, london_day(14), late_day)
    assert visits_on(conninfo, late_day) == before + 3
    compare()


def test_4_guests_deleted_at_the_source_and_followed(
    loaded: MeltanoProject, sandbox: SandboxProcess, conninfo: str, compare: Any
) -> None:
    day = london_day(9)
    deleted = [
        g["id"]
        for g in sandbox.truth(OWNER_KEYS[0], "guests")
        if dt.datetime.fromisoformat(g["visited_at"]).astimezone(LONDON).date() == day
    ][:2]
    assert deleted
    before = visits_on(conninfo, day)
    for guest_id in deleted:
        sandbox.mutate("delete_guest", guest_id=guest_id)
    loaded.run(*REFRESH_AND_BUILD)
    assert visits_on(conninfo, day) == before - len(deleted)
    compare()


def test_5_a_person_erased(
    loaded: MeltanoProject, sandbox: SandboxProcess, dbt: Dbt, conninfo: str, compare: Any
) -> None:
    person = person_to_erase(sandbox)
    erased = dbt.run(
        "run-operation", "erase_person", extra_env={"GUESTDATA_ERASE_IDENTIFIER": person.email}
    )
    assert erased.returncode == 0, erased.output[-3000:]
    loaded.run(*RUN_ALL)
    assert query(
        conninfo,
        f"SELECT count(*) FROM {MODELS_SCHEMA}.marketing_audience WHERE contact_key = %s",
        person.email,
    ) == [(0,)]
    compare()


def test_the_equivalence_compares_real_rows(conninfo: str, compare: Any) -> None:
    """The comparison can fail: a row changed behind dbt's back shows as a difference."""
    query(
        conninfo,
        f"UPDATE {MODELS_SCHEMA}.fct_venue_daily SET visits = visits + 1 "
        f"WHERE ctid = (SELECT min(ctid) FROM {MODELS_SCHEMA}.fct_venue_daily) RETURNING 1",
    )
    with pytest.raises(AssertionError, match="fct_venue_daily"):
        compare(rebuild=False)  # the last step's full refresh: the same raw data


def test_the_deletions_hook_reads_only_the_reads_loaded_since_the_last_build(
    loaded: MeltanoProject, dbt: Dbt, conninfo: str
) -> None:
    """The source-deletions hook applies a read at the first build after its load: a read loaded
    before the last build (here, one made up to flag a whole day) is not read again, nor the raw
    rows of its window; `--full-refresh` reads every read again, and so applies it."""
    start = dt.datetime.combine(london_day(20), dt.time(0), tzinfo=LONDON)
    end = start + dt.timedelta(days=1)
    raw = f"{RAW_SCHEMA}.guests"
    ((venue_id, arrivals),) = query(
        conninfo,
        f"SELECT venue_id, count(*) FROM {raw} WHERE visited_at >= %s AND visited_at < %s "
        "AND _sdc_deleted_at IS NULL GROUP BY venue_id ORDER BY count(*) DESC, venue_id LIMIT 1",
        start,
        end,
    )
    flagged = (
        f"SELECT count(*) FROM {raw} WHERE venue_id = %s AND visited_at >= %s "
        "AND visited_at < %s AND _sdc_deleted_at IS NOT NULL"
    )
    # A complete read of that venue's day that returned no row, newer than every raw row, and
    # loaded two days ago: applied, it flags the day's arrivals as deleted at the source.
    two_days_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=2)
    query(
        conninfo,
        f"INSERT INTO {RAW_SCHEMA}.read_windows (stream, venue_id, read_version, "
        "read_started_at, covers_from, covers_until, rows_read, completed_at, _sdc_batched_at) "
        f"SELECT 'guests', %s, max(_sdc_table_version) + 1, %s, %s, %s, 0, %s, %s FROM {raw} "
        "RETURNING 1",
        venue_id,
        two_days_ago,
        start,
        end,
        two_days_ago,
        two_days_ago,
    )
    incremental = dbt.run("run")
    assert incremental.returncode == 0, incremental.output[-3000:]
    # GUESTDATA_DBT_THREADS (tests/transform/conftest.py) reaches the profile (default 4)
    assert "Concurrency: 1 threads (target='postgres')" in incremental.output
    assert query(conninfo, flagged, venue_id, start, end) == [(0,)]
    full = dbt.run("run", "--full-refresh")
    assert full.returncode == 0, full.output[-3000:]
    assert arrivals > 0 and query(conninfo, flagged, venue_id, start, end) == [(arrivals,)]


def test_the_reads_model_is_indexed_on_its_key_for_the_hooks_lookups(conninfo: str) -> None:
    """stg_guestdata__guest_reads: the source-deletions hook looks each account's reads up by
    this key, one account at a time (macros/source_deletions.sql, applied_read)."""
    definitions = query(
        conninfo,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
        f"{MODELS_SCHEMA}_staging",
        "stg_guestdata__guest_reads",
    )
    assert any(
        definition.endswith("(source_relation, venue_id, read_version)")
        for (definition,) in definitions
    ), definitions


def test_a_builds_data_tests_read_the_rows_not_yet_tested(
    loaded: MeltanoProject, sandbox: SandboxProcess, dbt: Dbt, conninfo: str
) -> None:
    """macros/data_test_scope.sql: a `dbt build`'s generic tests of an incremental model read
    the rows written since its last build whose tests all passed; a failure is read again at
    every build until it is mended; `dbt test` reads every row. The builds after the first
    select the model (its tests and its record come with it): a build of every model costs
    six times the CPU and adds nothing here."""
    guests = f"{MODELS_SCHEMA}_staging.stg_guestdata__guests"
    record = f"{MODELS_SCHEMA}.guestdata_tested_builds"
    not_null_venue = "guestdata_not_null_stg_guestdata__guests_venue_id"
    # A load of its own, so some rows lie behind the watermark: every build reads the newest
    # batch again (the watermark is inclusive), and after a refresh that batch holds every guest.
    sandbox.mutate("add_guests", count=1)
    loaded.run(*LOAD_ONLY)
    passed = dbt.run("build")
    assert passed.returncode == 0, passed.output[-3000:]
    ((tested_through,),) = query(
        conninfo, f"SELECT tested_through FROM {record} WHERE model_name = 'stg_guestdata__guests'"
    )
    ((newest_build,),) = query(conninfo, f"SELECT max(built_at) FROM {guests}")
    assert tested_through >= newest_build
    # A row a passed build wrote, broken behind dbt's back: the next build's tests do not read it.
    assert query(
        conninfo,
        f"UPDATE {guests} SET venue_id = NULL WHERE guest_visit_id = (SELECT min(guest_visit_id)"
        f" FROM {guests} WHERE loaded_at < (SELECT max(loaded_at) FROM {guests})) RETURNING 1",
    ) == [(1,)]
    nightly = dbt.run("build", *ONLY_GUESTS)
    assert nightly.returncode == 0, nightly.output[-3000:]
    assert nightly.statuses("test")[not_null_venue] == "pass"
    assert dbt.run("test", "--select", not_null_venue).statuses("test")[not_null_venue] == "warn"
    # The same row as a build after the last tested one would have left it: read, and read again
    # at the next build (the record stays where it was).
    query(
        conninfo,
        f"UPDATE {guests} SET built_at = built_at + interval '1 day' "
        "WHERE venue_id IS NULL RETURNING 1",
    )
    for _ in range(2):
        failing = dbt.run("build", *ONLY_GUESTS)
        assert failing.statuses("test")[not_null_venue] == "warn", failing.output[-3000:]
    mended = dbt.run("build", "--full-refresh", *ONLY_GUESTS)
    assert mended.returncode == 0, mended.output[-3000:]
    assert dbt.run("build", *ONLY_GUESTS).statuses("test")[not_null_venue] == "pass"
