"""`as_of` (`--as-of`): the data as of a fixed instant, the same at any wall time.

Sandboxes of one seed, size and instant, started one after the other, generate the same rows
and read them at that instant: rewards past expires_at, members' rewards_available, offer stats
and the stats' today follow the instant, not the clock (tests/snowflake starts each module's
sandbox at the instant of a load they share). The instant here lies 15 s before a London
midnight, so the data's today is its day whatever day the test runs on.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox_api import OWNER, client, read_all

LONDON = ZoneInfo("Europe/London")
INSTANT = dt.datetime(2026, 7, 3, 23, 59, 45, tzinfo=LONDON)  # 15 s before a London midnight
KEYS = (OWNER, "gd_limited_access")
PATHS = ("/rewards/rewards", "/rewards/members", "/rewards/offers", "/guests")


def served(server: SandboxProcess) -> dict[str, Any]:
    """Everything compared: the truth for two keys, every row of the lists that read the
    instant, the default /stats period, each offer's stats and the health's anchor."""
    get = client(server)
    answers: dict[str, Any] = {key: server.truth(key) for key in KEYS}
    answers.update({path: read_all(get, path) for path in PATHS})
    answers["/stats"] = get("/stats").json()
    offers = [offer["id"] for offer in answers["/rewards/offers"]]
    answers["offer stats"] = [get(f"/rewards/offers/{o}").json()["data"]["stats"] for o in offers]
    answers["anchor"] = server.health()["anchor"]
    return answers


def differences(one: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """The parts (a key's truth resource, a path, ...) two sandboxes serve differently."""
    parts = []
    for name in one.keys() | other.keys():
        mine, theirs = one.get(name), other.get(name)
        if name in KEYS and isinstance(mine, dict) and isinstance(theirs, dict):
            parts += [
                f"{name}: {resource}"
                for resource in mine.keys() | theirs.keys()
                if mine.get(resource) != theirs.get(resource)
            ]
        elif mine != theirs:
            parts.append(name)
    return sorted(parts)


def test_two_sandboxes_of_one_instant_serve_the_same_data_read_at_that_instant() -> None:
    with SandboxProcess(size="small", seed=11, limits=False, as_of=INSTANT) as first:
        one = served(first)
    with SandboxProcess(size="small", seed=11, limits=False, as_of=INSTANT.isoformat()) as second:
        assert second.health()["as_of"] == INSTANT.astimezone(dt.timezone.utc).isoformat()
        other = served(second)
    assert differences(one, other) == []

    # The instant's London day is the data's today: the anchor, where the stats end.
    day = INSTANT.date().isoformat()
    assert one["anchor"] == day
    assert one[OWNER]["daily_account_stats"][-1]["date"] == day
    assert one["/stats"]["data"]["to"] == day
    visited = [dt.datetime.fromisoformat(guest["visited_at"]) for guest in one[OWNER]["guests"]]
    assert max(visited) < INSTANT - dt.timedelta(seconds=60)  # generated as if started then
    assert {reward["status"] for reward in one[OWNER]["rewards"]} >= {"issued", "expired"}


def test_a_later_instant_reads_the_same_rows_with_a_reward_expired() -> None:
    """The comparison can fail: the same rows, read at a later instant, when the first reward
    still issued at the earlier one has expired. Both instants lie after the anchor's day, so
    both generate the rows up to its end (the cutoff sets every generated time)."""
    anchor = INSTANT.date().isoformat()
    after_midnight = INSTANT + dt.timedelta(hours=1)
    with SandboxProcess(
        size="small", seed=11, limits=False, as_of=after_midnight, anchor=anchor
    ) as first:
        one = served(first)
    issued = [row for row in one[OWNER]["rewards"] if row["status"] == "issued"]
    soonest = min(issued, key=lambda row: dt.datetime.fromisoformat(row["expires_at"]))
    later = soonest["expires_at"]  # expires_at <= now: read as expired (spec 3)
    with SandboxProcess(size="small", seed=11, limits=False, as_of=later, anchor=anchor) as second:
        other = served(second)

    changed = differences(one, other)
    assert f"{OWNER}: rewards" in changed and "/rewards/rewards" in changed, changed
    assert f"{OWNER}: guests" not in changed and "/guests" not in changed, changed
    (reread,) = [row for row in other[OWNER]["rewards"] if row["id"] == soonest["id"]]
    assert (soonest["status"], reread["status"]) == ("issued", "expired")
    assert {**reread, "status": "issued"} == soonest
