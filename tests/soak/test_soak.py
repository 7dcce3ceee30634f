"""The soak test (issue #42, item 6): fourteen simulated days of the accounts DAG's own load and
build steps against one sandbox, each day's marts checked against the truth. A nightly job:
`scripts/soak` (docs/development.md, "The soak test (nightly)"); one line a day.

Accounts (the accounts configuration, one queue; keys from each account's Airflow connection):
harbour (account 1001, Rewards, split: a Meltano run and state id per stream group), twin (1006:
its own data under 1001's ids), kettle (1004: a plan without Rewards); northgate (1003, Rewards
switched off) joins on day 9, kettle leaves on day 12. Each loads into `guestdata_<name>` with
`start_date` 40 days back; one build of every account's models a run, as the DAG's `dbt_build`.

Time. The sandbox serves its data as of the soak's start (`as_of`) and the simulated days are
runs of the DAG a few minutes apart, all on that London day: the history does not grow by a day
between them. A sandbox restarted each day with a later `as_of` (the anchor fixed) is not a
history that grows: the generator draws its random numbers for arrivals only where they fall
before the cut-off, so every row after the first one cut changes (guests of account 1001 with
other people and venues, members' balances, rewards), and mutations held in memory get other
ids when applied again; the tap's own clock (its "today", the members' `updated_since`) is the
real one besides. So one sandbox, time held: a day's new arrivals are stamped earlier that
London day, late arrivals days before; mutations of members and rewards stamp the real clock,
after `as_of`, and the tap reads them (its windows close at the real now). The incremental
lookback is 0 hours, as a build a day after the last one sees it (the default 6 hours would
re-read every row the soak loaded, at every build).

Each day: its events, the loads, the build (a weekly refresh run, or a reload run, where the
day has one), then every account's status in `guestdata_account_status`, and the marts of each
current account equal its truth row for row inside the window (`support.soak.expected_marts`),
a held account's marts equal what they held before the day, a removed account has no row in
any model. Where the daily read does not see a change until the weekly refresh (a deletion or a
consent change on an old day: docs/tap.md), that day's expectation is the truth from before the
change, and the refresh's day checks it was followed.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from demo_pipeline import PROJECT_ROOT, meltano_env
from guestdata_sandbox.accounts import (
    COLLIDING_ACCOUNT,
    COLLIDING_KEY,
    NO_REWARDS_PLAN_KEY,
    OWNER_KEYS,
    REWARDS_OFF_KEY,
)
from guestdata_sandbox.testing import SandboxProcess
from support.dbt import LONDON, Dbt, Window, dbt_env, instant, query
from support.pipeline import FAST_TAP, MELTANO, throwaway_database
from support.sandbox import this_instant
from support.soak import (
    AccountsDag,
    OperatorLog,
    SoakAccount,
    account_statuses,
    accounts_document,
    build_statuses,
    built_marts,
    compare,
    connection_env,
    expected_marts,
    held_schemas,
    live_raw_guests,
    london_day_of,
    mart_snapshot,
    rows_per_model,
)

pytestmark = [pytest.mark.soak, pytest.mark.timeout(3600)]

# Fewer only to try a change quickly (GUESTDATA_SOAK_DAYS); the nightly job runs all 14.
DAYS = int(os.environ.get("GUESTDATA_SOAK_DAYS") or 14)
SEED = 97
START_DAYS_BACK = 40  # start_date: inside every account's history (main: 120 days, others 60)
HARBOUR = SoakAccount("harbour", 1001, (OWNER_KEYS[0], OWNER_KEYS[1]), rewards=True, split=True)
TWIN = SoakAccount("twin", COLLIDING_ACCOUNT, (COLLIDING_KEY,), rewards=True)
KETTLE = SoakAccount("kettle", 1004, (NO_REWARDS_PLAN_KEY,), rewards=False)
NORTHGATE = SoakAccount("northgate", 1003, (REWARDS_OFF_KEY,), rewards=False)
STARTING = (HARBOUR, TWIN, KETTLE)
BAD_VENUE = 990_000  # a venue no account lists
# What the worker's environment must not bring in: a developer's own settings.
SCRUBBED = ("TAP_GUESTDATA", "TARGET_POSTGRES", "MELTANO_", "GUESTDATA_", "DBT_", "AIRFLOW", "PG")


@dataclass
class Day:
    """What a day does and what its build must show."""

    number: int
    events: list[str] = field(default_factory=list)
    fail_load: SoakAccount | None = None  # its load fails (every try of the day)
    bad_row: SoakAccount | None = None  # its load serves a guest at a venue it does not list
    refresh: bool = False  # the weekly refresh run first
    reload: tuple[dt.date, dt.date] | None = None  # a reload run of these London days after
    reloaded: list[str] = field(default_factory=list)  # the accounts that wait for it
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> truth as read
    held: dict[str, str] = field(default_factory=dict)  # name -> why (in held_reasons)
    catching_up: set[str] = field(default_factory=set)
    allowed_warnings: tuple[str, ...] = ()  # tests that may warn (substrings of their names)


class Soak:
    """The soak's world: one sandbox, one database, the accounts DAG's steps, and what has been
    done to each account so far."""

    def __init__(
        self,
        sandbox: SandboxProcess,
        dag: AccountsDag,
        conninfo: str,
        erase_env: dict[str, str],
        work: Path,
        as_of: dt.datetime,
    ) -> None:
        self.sandbox, self.dag, self.conninfo, self.work = sandbox, dag, conninfo, work
        self.erase_env = erase_env
        self.as_of = as_of
        self.today = as_of.astimezone(LONDON).date()
        self.window = Window(self.today - dt.timedelta(days=START_DAYS_BACK))
        self.configured: list[SoakAccount] = list(STARTING)
        self.removed: list[SoakAccount] = []
        self.erased: dict[str, frozenset[str]] = {}
        self.arrivals: dict[tuple[str, int], list[int]] = {}  # (name, day) -> guest ids
        self.random = random.Random(SEED)
        self.models = dag.models_schema(dag.plan(accounts_document(self.configured)))

    # ------------------------------------------------------------------ events

    def truth(self, account: SoakAccount) -> dict[str, Any]:
        return self.sandbox.truth(account.truth_key)

    def arrive(self, day: Day, account: SoakAccount, count: int) -> list[int]:
        """New arrivals, stamped this London day (before `as_of`)."""
        midnight = dt.datetime.combine(self.today, dt.time(), LONDON).timestamp()
        latest = self.as_of.timestamp() - 120
        earliest = max(midnight + 60, latest - 4 * 3600)
        ids = []
        for _ in range(count):
            moment = dt.datetime.fromtimestamp(
                int(self.random.uniform(earliest, latest)), dt.timezone.utc
            )
            result = self.sandbox.mutate(
                "add_guests", count=1, visited_at=moment.isoformat(), account_id=account.account_id
            )
            ids += result["ids"]
        self.arrivals.setdefault((account.name, day.number), []).extend(ids)
        return ids

    def everyone_arrives(self, day: Day, count: int = 3) -> None:
        for account in self.configured:
            self.arrive(day, account, count)
        day.events.append(f"{count} arrivals each")

    def late_arrivals(self, day: Day, account: SoakAccount, count: int, days_back: int) -> None:
        noon = dt.datetime.combine(self.today - dt.timedelta(days=days_back), dt.time(12), LONDON)
        self.sandbox.mutate(
            "add_guests", count=count, visited_at=noon.isoformat(), account_id=account.account_id
        )
        day.events.append(f"{count} late arrivals at {account.name} on day -{days_back}")

    def flip_consent(self, day: Day, account: SoakAccount, guest_id: int) -> None:
        guests = {g["id"]: g for g in self.sandbox.truth(account.truth_key, "guests")}
        value = not guests[guest_id]["marketing_consent"]
        self.sandbox.mutate(
            "set_marketing_consent", guest_id=guest_id, value=value, account_id=account.account_id
        )
        day.events.append(f"consent {'given' if value else 'withdrawn'} at {account.name}")

    def guests_of_old_days(self, account: SoakAccount) -> list[dict[str, Any]]:
        """The account's arrivals inside the window on a London day before today."""
        today = self.today.isoformat()
        return [
            guest
            for guest in self.sandbox.truth(account.truth_key, "guests")
            if instant(guest["visited_at"]) >= self.window.start
            and london_day_of(guest["visited_at"]) < today
        ]

    def erase(self, day: Day, account: SoakAccount) -> None:
        """`dbt run-operation erase_person` of the account's consenting member with the most
        arrivals in the window (recorded in its raw schema; its model rows change at once)."""
        truth = self.truth(account)
        members = {m["email"].lower() for m in truth["members"] if not m["anonymised_at"]}
        arrivals: dict[str, int] = {}
        for guest in self.window.read(truth)["guests"]:
            email = guest["email"].lower()
            if email in members and guest["marketing_consent"]:
                arrivals[email] = arrivals.get(email, 0) + 1
        assert arrivals, f"{account.name}: no consenting member arrived in the window"
        email = max(arrivals, key=lambda e: (arrivals[e], e))
        env = {**self.erase_env, "GUESTDATA_PG_SCHEMA": account.schema}
        dbt = Dbt(env=env, target_dir=self.work / "erase")
        run = dbt.run(
            "run-operation", "erase_person", extra_env={"GUESTDATA_ERASE_IDENTIFIER": email}
        )
        assert run.returncode == 0, run.output[-3000:]
        self.erased[account.name] = self.erased.get(account.name, frozenset()) | {email}
        day.events.append(f"a person erased at {account.name} ({arrivals[email]} arrivals)")

    # ------------------------------------------------------------------ a day

    def run_day(self, number: int, events: Callable[[Soak, Day], None]) -> None:
        started = time.monotonic()
        day = Day(number)
        events(self, day)
        before = {
            name: mart_snapshot(self.conninfo, self.models, schema_of(name)) for name in day.held
        }
        plan = self.dag.plan(accounts_document(self.configured))
        problems: list[str] = []
        if day.refresh:
            xcoms: dict = {}
            for account in self.configured:
                self.expect_load(self.dag.load(plan, account.name, xcoms, refresh=True), account)
            self.expect_build(self.dag.build(plan, self.dag.refresh_id, xcoms, refresh=True), {})
            problems += self.check_build(day)
            for account in self.configured:  # the refresh alone follows what the days did not
                problems += [f"after the refresh, {p}" for p in self.against_truth(account)[0]]
        xcoms = {}
        for account in self.configured:
            if day.fail_load == account:
                # The fault stands for a failure every try of the day meets: the account's
                # rewards group stops at its redemptions (a 404 is fatal), its other groups load.
                self.sandbox.fault("not_found", count=1000, path="/rewards/redemptions")
            result = self.dag.load(plan, account.name, xcoms)
            self.sandbox.clear_faults()
            self.expect_load(result, account, failed=day.fail_load == account)
            if day.bad_row == account:
                self.serve_bad_row(day, account)
        if day.fail_load is not None:
            # The hold does work: the account's raw tables took the day's arrivals.
            schema = day.fail_load.schema
            ((visits,),) = query(
                self.conninfo,
                f"SELECT coalesce(sum(visits), 0) FROM {self.models}.fct_venue_daily"
                " WHERE source_relation = %s",
                schema,
            )
            raw = live_raw_guests(self.conninfo, schema)
            window_guests = len(self.window.read(self.truth(day.fail_load))["guests"])
            assert raw == window_guests and visits < raw, (schema, raw, visits, window_guests)
        self.expect_build(self.dag.build(plan, self.dag.daily_id, xcoms), day.held)
        if day.reload:
            late = [a.name for a in self.configured if self.against_truth(a)[0]]
            if late != day.reloaded:
                problems.append(
                    f"before the reload, {late} differ from their truth, not {day.reloaded}"
                )
            first, last = day.reload
            interval = (
                dt.datetime.combine(first, dt.time(), LONDON),
                dt.datetime.combine(last + dt.timedelta(days=1), dt.time(), LONDON),
            )
            params = {"reload": True, "reload_streams": ["core", "stats"]}
            xcoms = {}
            for account in self.configured:
                result = self.dag.load(plan, account.name, xcoms, params=params, interval=interval)
                self.expect_load(result, account)
            self.expect_build(self.dag.build(plan, self.dag.daily_id, xcoms), {})
        problems += self.check_build(day)
        counts, more = self.check_accounts(day, before)
        problems += more
        current = [a.name for a in self.configured if a.name not in day.held]
        held = "; ".join(f"{name}: {why}" for name, why in day.held.items())
        line = (
            f"day {number:2}/{DAYS}: current {len(current)} ({', '.join(current)}),"
            f" held {len(day.held)}{f' ({held})' if held else ''}"
            f" | {'; '.join(day.events) or 'nothing new'}"
            f" | {counts['venue_days']:,} venue-days, {counts['audience']:,} in the audience,"
            f" {counts['members']:,} members, {counts['rewards']:,} rewards"
            f" | {time.monotonic() - started:.0f} s"
        )
        print(line, flush=True)
        assert not problems, f"day {number}:\n" + "\n".join(problems)

    def serve_bad_row(self, day: Day, account: SoakAccount) -> None:
        """The row this load wrote of one of today's arrivals holds a venue the account does
        not list, as if the API had served it so (the next load re-reads today: it mends)."""
        guest = self.arrivals[(account.name, day.number)][0]
        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            changed = connection.execute(
                f"UPDATE {account.schema}.guests SET venue_id = %s, _sdc_batched_at = now()"
                f" WHERE id = %s AND _sdc_batched_at = (SELECT max(_sdc_batched_at)"
                f" FROM {account.schema}.guests WHERE id = %s)",
                (BAD_VENUE, guest, guest),
            ).rowcount
        assert changed == 1, f"{account.name}: guest {guest} not loaded"

    def expect_load(self, result: Any, account: SoakAccount, *, failed: bool = False) -> None:
        wanted = "failed" if failed else "success"
        assert result.outcome == wanted, (
            f"the load of {account.name}: {result.outcome} ({result.message}), not {wanted};"
            f" its log ({self.dag.log.path}):\n{self.dag.log.tail()}"
        )
        if failed:  # by the fault, in its rewards group alone
            output = "\n".join(self.dag.log.lines)
            assert result.message == f"1 of 1 failed: {account.name}", result.message
            assert "Sync failed: GET /rewards/redemptions" in output, self.dag.log.tail()
            assert output.count("Extractor failed") == 1, self.dag.log.tail()

    def expect_build(self, result: Any, held: dict[str, str]) -> None:
        if not held:
            assert result.outcome == "success", (
                f"the build: {result.outcome} ({result.message}); its log ({self.dag.log.path}):"
                f"\n{self.dag.log.tail()}"
            )
            return
        assert result.outcome == "held", (
            f"the build: {result.outcome} ({result.message}), not held;"
            f" its log:\n{self.dag.log.tail()}"
        )
        assert held_schemas(result.message) == {schema_of(name) for name in held}, result.message
        output = "\n".join(self.dag.log.lines)
        for name, why in held.items():
            line = f"ACCOUNT HELD {name} ({schema_of(name)}): "
            assert line in output and why in output.split(line, 1)[1].split("\n", 1)[0], (
                f"no line {line}...{why}:\n{self.dag.log.tail()}"
            )

    def check_build(self, day: Day) -> list[str]:
        """Every model built; every test passed, but the staging tests the day's bad row fails
        (they warn and hold its account)."""
        models, tests = build_statuses(self.dag.target_dir)
        problems = []
        if len(models) < 21 or set(models.values()) != {"success"}:
            problems.append(f"models not built: {models}")
        unexpected = {
            name: status
            for name, status in tests.items()
            if status != "pass"
            and not (status == "warn" and any(w in name for w in day.allowed_warnings))
        }
        if len(tests) < 60 or unexpected:
            problems.append(f"{len(tests)} tests; not passing: {unexpected}")
        return problems

    def against_truth(
        self, account: SoakAccount, truth: dict[str, Any] | None = None
    ) -> tuple[list[str], Any]:
        """How the account's marts differ from `truth` (default: its truth now), and them."""
        erased = self.erased.get(account.name, frozenset())
        expected = expected_marts(
            truth or self.truth(account), self.window, erased, account.rewards
        )
        built = built_marts(self.conninfo, self.models, account.schema)
        return [f"{account.name}: {problem}" for problem in compare(expected, built)], built

    def check_accounts(
        self, day: Day, before: dict[str, dict[str, list[str]]]
    ) -> tuple[dict[str, int], list[str]]:
        problems = []
        statuses = account_statuses(self.conninfo, self.models)
        wanted = {account.schema for account in self.configured}
        if set(statuses) != wanted:
            problems.append(
                f"guestdata_account_status holds {sorted(statuses)}, not {sorted(wanted)}"
            )
        counts = dict.fromkeys(("venue_days", "audience", "members", "rewards"), 0)
        for account in self.configured:
            status, reasons, catching_up = statuses.get(account.schema, ("absent", None, False))
            if account.name in day.held:
                if status != "held" or day.held[account.name] not in (reasons or ""):
                    problems.append(f"{account.name}: {status} ({reasons}), not held")
                now = mart_snapshot(self.conninfo, self.models, account.schema)
                if now != before[account.name]:
                    changed = [mart for mart in now if now[mart] != before[account.name][mart]]
                    problems.append(f"{account.name} is held, yet its marts changed: {changed}")
                if not self.against_truth(account)[0]:
                    problems.append(f"{account.name} is held, yet its marts equal its truth now")
                continue
            if status != "current" or catching_up != (account.name in day.catching_up):
                problems.append(
                    f"{account.name}: {status}, catching up {catching_up}"
                    f" (expected current, catching up {account.name in day.catching_up})"
                )
            found, built = self.against_truth(account, day.pending.get(account.name))
            problems += found
            if account.name in day.pending and not self.against_truth(account)[0]:
                problems.append(f"{account.name}: its marts already follow the change pending")
            counts["venue_days"] += len(built.venue_days)
            counts["audience"] += len(built.audience)
            counts["members"] += len(built.members)
            counts["rewards"] += len(built.rewards)
        for account in self.removed:
            if left := rows_per_model(self.conninfo, self.models, account.schema):
                problems.append(f"{account.name} was removed, yet models hold its rows: {left}")
        return counts, problems


def schema_of(name: str) -> str:
    return f"guestdata_{name}"


# ------------------------------------------------------------------ the days


def first_sync(soak: Soak, day: Day) -> None:
    split = ", ".join(a.name + (" (split by stream group)" if a.split else "") for a in STARTING)
    day.events.append(f"first sync of {split} from {soak.window.start_date}")


def new_members_and_rewards(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day, 4)
    members = soak.truth(HARBOUR)["members"]
    member = next(m for m in members if not m["anonymised_at"])
    soak.sandbox.mutate("add_ledger_lines", member_id=member["id"], count=2, account_id=1001)
    soak.sandbox.mutate("add_rewards", count=2, account_id=1001)
    soak.sandbox.mutate("add_members", count=1, account_id=TWIN.account_id)
    day.events.append("harbour: 2 ledger lines, 2 rewards; twin: a new member")


def consent_of_new_arrivals(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    for account in (HARBOUR, TWIN):
        soak.flip_consent(day, account, soak.arrivals[(account.name, day.number - 1)][0])
    soak.sandbox.mutate("add_redemptions", count=1, account_id=1001)
    day.events.append("harbour: a redemption")


def late_arrivals_and_a_reload(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    soak.late_arrivals(day, HARBOUR, 3, days_back=4)
    soak.late_arrivals(day, KETTLE, 2, days_back=6)
    day.reload = (soak.today - dt.timedelta(days=6), soak.today - dt.timedelta(days=1))
    day.reloaded = [HARBOUR.name, KETTLE.name]  # the daily read leaves their old days alone
    day.events.append("then a reload run of days -6 to -1 (core, stats)")


def a_load_fails(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day, 5)
    member = soak.truth(HARBOUR)["members"][3]
    soak.sandbox.mutate("add_ledger_lines", member_id=member["id"], count=1, account_id=1001)
    day.fail_load = HARBOUR
    day.held[HARBOUR.name] = "its load failed"
    day.events.append("harbour's load fails (its rewards group)")


def catch_up_and_an_erasure(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    soak.erase(day, TWIN)
    day.catching_up.add(HARBOUR.name)


def deletions_and_an_old_consent(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    # A guest who arrived today, deleted: the daily read of today follows it at once.
    today_guest = soak.arrivals[(TWIN.name, day.number - 1)][0]
    soak.sandbox.mutate("delete_guest", guest_id=today_guest, account_id=TWIN.account_id)
    # A guest of an old day, deleted: the weekly refresh follows it; until then its row stays.
    erased = soak.erased.get(TWIN.name, frozenset())
    old = [g for g in soak.guests_of_old_days(TWIN) if g["email"].lower() not in erased]
    day.pending[TWIN.name] = soak.truth(TWIN)
    soak.sandbox.mutate(
        "delete_guest", guest_id=old[len(old) // 2]["id"], account_id=TWIN.account_id
    )
    # Consent withdrawn by someone who last came days ago: also the refresh's to follow.
    today = soak.today.isoformat()
    came_today = {
        g["email"].lower()
        for g in soak.truth(KETTLE)["guests"]
        if london_day_of(g["visited_at"]) == today
    }
    person = next(
        g
        for g in soak.guests_of_old_days(KETTLE)
        if g["marketing_consent"] and g["email"].lower() not in came_today
    )
    day.pending[KETTLE.name] = soak.truth(KETTLE)
    soak.sandbox.mutate(
        "set_marketing_consent", guest_id=person["id"], value=False, account_id=KETTLE.account_id
    )
    day.events.append(
        "twin: a guest of today and one of an old day deleted; kettle: consent withdrawn on an"
        " old visit (both old ones wait for the refresh)"
    )


def weekly_refresh(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    soak.late_arrivals(day, TWIN, 2, days_back=10)
    day.refresh = True
    day.events.append("the weekly refresh run, then the daily")


def an_account_added(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    soak.configured.append(NORTHGATE)
    day.events.append("northgate added (its first sync)")


def a_bad_row(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    day.bad_row = KETTLE
    reason = "stg_guestdata__guests.venue_id: guestdata_relationships_in_account: 1 rows"
    day.held[KETTLE.name] = reason
    day.allowed_warnings = ("stg_guestdata__guests_venue_id",)
    day.events.append(f"kettle serves a guest at venue {BAD_VENUE}, which it does not list")


def mended(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    day.catching_up.add(KETTLE.name)
    day.events.append("kettle's row read again, right")


def an_account_removed(soak: Soak, day: Day) -> None:
    soak.configured.remove(KETTLE)
    soak.removed.append(KETTLE)
    with psycopg.connect(soak.conninfo, autocommit=True) as connection:
        connection.execute(f"ALTER SCHEMA {KETTLE.schema} RENAME TO offboarded_{KETTLE.name}")
    soak.everyone_arrives(day)
    day.events.append("kettle offboarded (out of the configuration, its raw schema renamed)")


def members_and_consent(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)
    member = soak.truth(HARBOUR)["members"][5]
    soak.sandbox.mutate(
        "update_member", member_id=member["id"], fields={"tier_key": "gold"}, account_id=1001
    )
    soak.sandbox.mutate("add_redemptions", count=1, account_id=TWIN.account_id)
    soak.flip_consent(day, NORTHGATE, soak.arrivals[(NORTHGATE.name, day.number - 1)][0])
    day.events.append("harbour: a member's tier; twin: a redemption")


def ordinary(soak: Soak, day: Day) -> None:
    soak.everyone_arrives(day)


SCHEDULE: dict[int, Callable[[Soak, Day], None]] = {
    1: first_sync,
    2: new_members_and_rewards,
    3: consent_of_new_arrivals,
    4: late_arrivals_and_a_reload,
    5: a_load_fails,
    6: catch_up_and_an_erasure,
    7: deletions_and_an_old_consent,
    8: weekly_refresh,
    9: an_account_added,
    10: a_bad_row,
    11: mended,
    12: an_account_removed,
    13: members_and_consent,
    14: ordinary,
}


# ------------------------------------------------------------------ set-up


def quiet_london_hour() -> None:
    """Wait while London midnight is near: the sandbox's today is the London day of its
    `as_of`, the tap's the real one, and the soak must start and end on one."""
    now = dt.datetime.now(LONDON)
    since_midnight = now - now.replace(hour=0, minute=0, second=0, microsecond=0)
    wait = 0.0
    if since_midnight < dt.timedelta(minutes=10):
        wait = (dt.timedelta(minutes=10) - since_midnight).total_seconds()
    elif since_midnight > dt.timedelta(hours=23, minutes=25):
        wait = (dt.timedelta(days=1, minutes=10) - since_midnight).total_seconds()
    if wait:
        print(f"soak: London midnight is near; waiting {wait:.0f} s", flush=True)
        time.sleep(wait)


@pytest.fixture
def soak(
    pg_server: Any,
    meltano_installed: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Soak]:
    for name in [n for n in os.environ if n.startswith(SCRUBBED)]:
        monkeypatch.delenv(name)
    # Airflow's home (its configuration file, made on import) and Meltano's system directory
    # (the plugins linked from the repository's, the runs' own directories), the soak's own.
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    system = tmp_path / "meltano-system"
    system.mkdir()
    for entry in (PROJECT_ROOT / ".meltano").iterdir():
        if entry.name not in ("run", "logs", "tasks", "meltano.db"):
            (system / entry.name).symlink_to(entry)
    monkeypatch.setenv("MELTANO_SYS_DIR_ROOT", str(system))
    quiet_london_hour()
    as_of = this_instant()
    with (
        throwaway_database(pg_server, "guestdata_soak") as database,
        SandboxProcess(
            size="small", seed=SEED, limits=False, as_of=as_of, colliding_account=True
        ) as sandbox,
    ):
        for account in (*STARTING, NORTHGATE):
            monkeypatch.setenv(*connection_env(account, sandbox.base_url))
        start_date = as_of.astimezone(LONDON).date() - dt.timedelta(days=START_DAYS_BACK)
        env = {
            **meltano_env(sandbox.base_url, pg_server, database, tmp_path),
            **FAST_TAP,
            "TAP_GUESTDATA_START_DATE": start_date.isoformat(),
            "GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0",
        }
        env = {k: v for k, v in env.items() if k not in os.environ or os.environ[k] != v}
        env.pop("TAP_GUESTDATA_BASE_URL")  # each account's connection names it
        # Meltano migrates a new system database at its first start: the split account's
        # groups starting side by side on a new one race (`table plugin_settings already
        # exists`), so it is migrated first, as a deployment's first `meltano` command does.
        subprocess.run(
            [str(MELTANO), "--environment=dev", "state", "list"],
            cwd=PROJECT_ROOT,
            env={**os.environ, **env},
            capture_output=True,
            check=True,
            timeout=300,
        )
        (target := tmp_path / "dbt-target").mkdir()
        log = OperatorLog(tmp_path / "operators.log")
        from tap_guestdata.airflow.operators import GuestDataAccountsOperator

        monkeypatch.setattr(GuestDataAccountsOperator, "log", property(lambda _: log))
        dag = AccountsDag(env, target, log)
        erase_env = {
            **dbt_env(pg_server, database),
            "GUESTDATA_RAW_SCHEMAS": "guestdata\\_%",
            "GUESTDATA_DBT_SCHEMA": dag.models_schema(dag.plan(accounts_document(STARTING))),
            "DBT_LOG_PATH": str(tmp_path / "erase" / "logs"),
        }
        print(f"\nsoak: operators' log {log.path}", flush=True)
        yield Soak(sandbox, dag, pg_server.conninfo(database), erase_env, tmp_path, as_of)


def test_fourteen_days_of_the_accounts_dag(soak: Soak) -> None:
    started = time.monotonic()
    print(
        f"soak: {DAYS} days of the accounts DAG; the sandbox as of {soak.as_of.isoformat()}"
        f" (London day {soak.today}, held), start_date {soak.window.start_date}",
        flush=True,
    )
    for number in range(1, DAYS + 1):
        soak.run_day(number, SCHEDULE.get(number, ordinary))
    print(f"soak: {DAYS} days in {time.monotonic() - started:.0f} s", flush=True)
    # The comparison compares real rows: one visit changed behind dbt's back shows.
    query(
        soak.conninfo,
        f"UPDATE {soak.models}.fct_venue_daily SET visits = visits + 1 WHERE ctid ="
        f" (SELECT min(ctid) FROM {soak.models}.fct_venue_daily WHERE source_relation = %s)"
        " RETURNING 1",
        TWIN.schema,
    )
    (problem,) = soak.against_truth(TWIN)[0]
    assert problem.startswith("twin: fct_venue_daily") and "1 differ" in problem, problem
