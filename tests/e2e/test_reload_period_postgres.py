"""Issue #27: re-loading a past period with Meltano alone (no Airflow), leaving the daily state be.

In order, on one sandbox and a database of this module's own:
- the daily load (`meltano run tap-guestdata target-postgres ...`), state id `dev:tap-guestdata-
  to-target-postgres`;
- the sandbox changes inside a period of four London days about 100 days back, past every
  lookback: late arrivals on its second day (so that day's stats change too), one at 00:30
  London on its first day (the day before in UTC in summer) and one at 00:30 London the day
  after it (outside the period, inside it by UTC day), and a guest of the period deleted; a
  guest outside the period deleted too;
- the reload: RELOAD_COMMAND with start_date and end_date, its own state id.

The warehouse then holds the sandbox's truth for the period, rows of other days are as the daily
load left them, the daily state id is unchanged, and the reload's requests are only the period's.
dbt then flags the guest deleted inside the period (read_windows covers exactly the period) and
no other row. `scripts/deletions_any_day` shows how to run it at other times of day.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from demo_pipeline import TARGET_SCHEMA, Destination, same_value
from guestdata_sandbox.testing import SandboxProcess
from support.pipeline import MeltanoProject, business, throwaway_database
from support.sandbox import last_seq
from support.streams import key_of, truth_rows
from support.tap_suite import PATH_GROUPS, param, requests_for
from tap_guestdata.run import time_rules

pytestmark = pytest.mark.e2e

DAILY_LOAD = (
    "--environment=dev",
    "run",
    "tap-guestdata",
    "target-postgres",
    "guestdata-pg-types:timestamptz",
)
DAILY_STATE_ID = "dev:tap-guestdata-to-target-postgres"
RELOADED = ["guests", "read_windows", "daily_stats", "daily_account_stats"]
DATED_STREAMS = {"guests": "visited_at", "daily_stats": "date", "daily_account_stats": "date"}
WINDOW_PARAMS = ("from", "to", "since", "until", "updated_since")
PERIOD_DAYS = 4
DAYS_BACK = 100  # past every lookback (redemptions 30 days, stats 0)


def reload_command(first: dt.date, last: dt.date) -> tuple[tuple[str, ...], dict[str, str]]:
    """What a user without Airflow runs to re-load [first, last]: the documented command."""
    suffix = f"reload-{first.isoformat()}-{last.isoformat()}"
    args = (
        "--environment=dev",
        "run",
        "--full-refresh",
        f"--state-id-suffix={suffix}",
        "tap-guestdata",
        "target-postgres",
    )
    env = {
        "TAP_GUESTDATA_START_DATE": first.isoformat(),
        "TAP_GUESTDATA_END_DATE": last.isoformat(),
        "TAP_GUESTDATA__SELECT": json.dumps([f"{stream}.*" for stream in RELOADED]),
    }
    return args, env


@dataclass(frozen=True)
class Period:
    first: dt.date
    last: dt.date

    @classmethod
    def about_100_days_back(cls) -> Period:
        last = time_rules.london_day(dt.datetime.now(time_rules.UTC)) - dt.timedelta(days=DAYS_BACK)
        return cls(last - dt.timedelta(days=PERIOD_DAYS - 1), last)

    @property
    def days(self) -> list[dt.date]:
        return time_rules.days_between(self.first, self.last)

    def holds(self, value: str | dt.date) -> bool:
        """A time (text or loaded) or a day inside the period, by London day."""
        day = time_rules.london_day(value) if isinstance(value, str | dt.datetime) else value
        return self.first <= day <= self.last

    def london(self, day: dt.date, hour: int, minute: int) -> str:
        return dt.datetime(
            day.year, day.month, day.day, hour, minute, tzinfo=time_rules.LONDON
        ).isoformat()


@pytest.fixture(scope="module")
def meltano_database(pg_server: Destination) -> Iterator[str]:
    with throwaway_database(pg_server, "guestdata_reload") as name:
        yield name


def rows(conninfo: str, stream: str) -> list[dict[str, Any]]:
    query = sql.SQL("SELECT * FROM {}").format(sql.Identifier(TARGET_SCHEMA, stream))
    with psycopg.connect(conninfo) as connection:
        return connection.cursor(row_factory=dict_row).execute(query).fetchall()


def table(conninfo: str, stream: str) -> dict[tuple, dict[str, Any]]:
    return {key_of(stream, row): row for row in rows(conninfo, stream)}


def state(meltano: MeltanoProject, state_id: str) -> dict[str, Any]:
    result = meltano.run("--environment=dev", "state", "get", state_id)
    return json.loads(result.stdout[result.stdout.index("{") :])


def differences(expected: dict[str, Any], loaded: dict[str, Any]) -> list[str]:
    return [
        f"{name}: truth {value!r}, warehouse {loaded.get(name)!r}"
        for name, value in expected.items()
        if not same_value(value, loaded.get(name))
    ]


def test_a_reload_of_a_past_period_loads_its_truth_and_nothing_else(
    meltano: MeltanoProject,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    database: str,
) -> None:
    period = Period.about_100_days_back()
    venues = truth_rows(module_truth(), "venues")
    old_enough = [v for v in venues if time_rules.london_day(v["created_at"]) < period.first]
    assert old_enough, f"no venue of the sandbox is older than {period.first}"
    venue_id = min(old_enough, key=lambda venue: venue["created_at"])["id"]
    # A guest of the period the daily load holds, deleted in the source before the reload.
    (deleted_inside,) = module_sandbox.mutate(
        "add_guests", venue_id=venue_id, visited_at=period.london(period.last, 18, 0)
    )["ids"]

    meltano.run(*DAILY_LOAD)
    daily_state = state(meltano, DAILY_STATE_ID)
    before = {stream: table(database, stream) for stream in DATED_STREAMS}
    assert (deleted_inside,) in before["guests"]

    # The sandbox changes inside the period (and just outside it).
    changed_day = period.first + dt.timedelta(days=1)
    late = module_sandbox.mutate(
        "add_guests", count=3, venue_id=venue_id, visited_at=period.london(changed_day, 12, 0)
    )["ids"]
    first_minutes = module_sandbox.mutate(
        "add_guests", venue_id=venue_id, visited_at=period.london(period.first, 0, 30)
    )["ids"]
    day_after = period.last + dt.timedelta(days=1)
    outside = module_sandbox.mutate(
        "add_guests", venue_id=venue_id, visited_at=period.london(day_after, 0, 30)
    )["ids"]
    newest_guest = max(truth_rows(module_truth(), "guests"), key=lambda row: row["visited_at"])
    deleted_outside = newest_guest["id"]
    assert (deleted_outside,) in before["guests"]
    for guest_id in (deleted_inside, deleted_outside):
        module_sandbox.mutate("delete_guest", guest_id=guest_id)
    truth = module_truth()

    after_seq = last_seq(module_sandbox)
    args, env = reload_command(period.first, period.last)
    meltano.run(*args, extra_env=env)
    log = module_sandbox.requests_log(after=after_seq)
    after = {stream: table(database, stream) for stream in DATED_STREAMS}

    # The warehouse holds the sandbox's truth for the period.
    problems: list[str] = []
    for stream, field in DATED_STREAMS.items():
        for row in truth_rows(truth, stream):
            if not period.holds(row[field]):
                continue
            loaded = after[stream].get(key_of(stream, row))
            if loaded is None:
                problems.append(f"{stream} {key_of(stream, row)}: missing")
            else:
                problems += [
                    f"{stream} {key_of(stream, row)}: {d}" for d in differences(row, loaded)
                ]
    assert not problems, "\n".join(problems[:20])
    assert set(late + first_minutes) <= {key[0] for key in after["guests"]}
    changed = (venue_id, changed_day.isoformat())
    assert business(after["daily_stats"][changed]) != business(before["daily_stats"][changed])
    assert after["daily_stats"][changed]["visits"] == before["daily_stats"][changed]["visits"] + 3

    # Rows of other days are as the daily load left them; the guest of the day after is not read.
    for stream, field in DATED_STREAMS.items():
        kept = {
            key: business(row)
            for key, row in before[stream].items()
            if not period.holds(row[field])
        }
        now = {
            key: business(row) for key, row in after[stream].items() if not period.holds(row[field])
        }
        assert now == kept, f"{stream}: rows outside the period changed"
    assert (outside[0],) not in after["guests"]

    # The daily state id is untouched; the reload's own never passes the end of end_date.
    assert state(meltano, DAILY_STATE_ID) == daily_state
    reload_state = state(meltano, f"{DAILY_STATE_ID}:reload-{period.first}-{period.last}")
    bookmarks = reload_state["singer_state"]["bookmarks"]
    assert set(bookmarks) >= {"guests", "daily_stats", "daily_account_stats"}
    end = time_rules.end_of_london_day(period.last)
    for stream, bookmark in bookmarks.items():
        for entry in [bookmark, *bookmark.get("partitions", [])]:
            value = entry.get("replication_key_value")
            if isinstance(value, str):
                assert time_rules.parse_boundary(value) < end, (stream, value)

    # The reload asked only for the period: stats days x venues, guests from/to, and /venues.
    stats = requests_for(log, PATH_GROUPS[("daily_stats", "daily_account_stats")])
    expected_stats = [
        (venue["id"], day.isoformat())
        for venue in venues
        for day in period.days
        if time_rules.london_day(venue["created_at"]) <= day
    ]
    expected_stats += [
        (None, day.isoformat())
        for day in period.days
        if min(time_rules.london_day(venue["created_at"]) for venue in venues) <= day
    ]
    asked = [
        (int(v) if (v := param(entry, "venue_id")) else None, param(entry, "from"))
        for entry in stats
    ]
    assert sorted(asked, key=str) == sorted(expected_stats, key=str)
    assert all(param(entry, "from") == param(entry, "to") for entry in stats)
    guest_windows = {
        (param(e, "from"), param(e, "to")) for e in requests_for(log, PATH_GROUPS[("guests",)])
    }
    assert guest_windows == {(period.first.isoformat(), period.last.isoformat())}
    undated = {e["path"] for e in log if not any(param(e, name) for name in WINDOW_PARAMS)}
    assert undated == {"/venues"}, undated
    dated_outside = [
        (e["path"], e["query"])
        for e in log
        for name in WINDOW_PARAMS
        if (value := param(e, name)) and not period.holds(dt.date.fromisoformat(value))
    ]
    assert not dated_outside, dated_outside[:5]

    # read_windows covers exactly the period: dbt flags the guest deleted inside it, no other.
    read_windows = rows(database, "read_windows")
    reload_version = max(row["read_version"] for row in read_windows)
    reads = [row for row in read_windows if row["read_version"] == reload_version]
    assert {row["venue_id"] for row in reads} == {venue["id"] for venue in venues}
    assert {row["covers_until"] for row in reads} == {end}
    assert {row["covers_from"] for row in reads} == {time_rules.start_of_london_day(period.first)}
    meltano.run("--environment=dev", "run", "dbt-postgres:run")
    flagged = {
        key[0]
        for key, row in table(database, "guests").items()
        if row["_sdc_deleted_at"] is not None
    }
    assert flagged == {deleted_inside}
