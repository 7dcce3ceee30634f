"""Spec 4.4: bare dates are London days, instants are exact, since > until and "+" are 422."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from support.sandbox_api import Get, client, read_all

LONDON = ZoneInfo("Europe/London")


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def london_day(text: str) -> dt.date:
    return instant(text).astimezone(LONDON).date()


def busiest_day(rows: list[dict], field: str) -> dt.date:
    days = [london_day(row[field]) for row in rows]
    return max(set(days), key=days.count)


def test_bare_date_as_since_and_until_is_the_whole_london_day(get: Get, truth: dict) -> None:
    day = busiest_day(truth["rewards"], "issued_at")
    rows = read_all(get, "/rewards/rewards", since=day.isoformat(), until=day.isoformat())
    expected = [r["id"] for r in truth["rewards"] if london_day(r["issued_at"]) == day]
    assert rows and [row["id"] for row in rows] == expected


def test_bst_london_day_edges_are_exact(fresh_sandbox) -> None:
    """A BST date: the London day starts at 23:00 UTC the day before (spec 4.4.2)."""

    get = client(fresh_sandbox)
    truth = fresh_sandbox.truth("gd_owner_growth_1")
    bst = [r for r in truth["redemptions"] if instant(r["created_at"]).astimezone(LONDON).dst()]
    if not bst:
        pytest.skip("no redemption in British Summer Time in this data")
    day = london_day(bst[0]["created_at"])
    start = dt.datetime(day.year, day.month, day.day, tzinfo=LONDON)
    assert start.utcoffset() == dt.timedelta(hours=1)
    by_date = read_all(get, "/rewards/redemptions", since=day.isoformat(), until=day.isoformat())
    end = start + dt.timedelta(days=1) - dt.timedelta(seconds=1)
    by_instant = read_all(
        get,
        "/rewards/redemptions",
        since=start.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z"),
        until=end.isoformat(),
    )
    assert by_date == by_instant
    assert by_date and all(london_day(row["created_at"]) == day for row in by_date)


def test_equal_moments_with_different_offsets_are_equivalent(get: Get, truth: dict) -> None:
    moment = instant(truth["guests"][len(truth["guests"]) // 2]["visited_at"])
    a = read_all(get, "/rewards/rewards", since=moment.astimezone(dt.timezone.utc).isoformat())
    b = read_all(
        get,
        "/rewards/rewards",
        since=moment.astimezone(dt.timezone(dt.timedelta(hours=10))).isoformat(),
    )
    c = read_all(
        get,
        "/rewards/rewards",
        since=moment.astimezone(dt.timezone(dt.timedelta(hours=-5))).isoformat(),
    )
    assert a == b == c
    assert all(instant(row["issued_at"]) >= moment for row in a)


def test_instant_is_exact_to_the_second(get: Get, truth: dict) -> None:
    row = truth["rewards"][5]
    at = instant(row["issued_at"])
    ids = [r["id"] for r in read_all(get, "/rewards/rewards", since=at.isoformat())]
    assert row["id"] in ids
    later = (at + dt.timedelta(seconds=1)).isoformat()
    assert row["id"] not in [r["id"] for r in read_all(get, "/rewards/rewards", since=later)]
    assert row["id"] in [r["id"] for r in read_all(get, "/rewards/rewards", until=at.isoformat())]


def test_unencoded_plus_arrives_as_a_space_and_is_422(get: Get) -> None:
    """A "+" not percent-encoded is a space to PHP: the offset is gone, so 422 on that name."""
    response = get("/rewards/rewards", raw_query="since=2026-07-01T10:00:00+01:00")
    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["since"]
    encoded = get("/rewards/rewards", raw_query="since=2026-07-01T10:00:00%2B01:00")
    assert encoded.status_code == 200


@pytest.mark.parametrize(
    "value", ["2026-07-01T10:00:00", "yesterday", "2026-13-01", "01/07/2026", "2026-07-01 10:00"]
)
def test_values_that_are_neither_date_nor_instant_with_offset_are_422(get: Get, value: str) -> None:
    for path, name in [
        ("/rewards/rewards", "since"),
        ("/rewards/redemptions", "until"),
        ("/rewards/members", "updated_since"),
    ]:
        response = get(path, params={name: value})
        assert response.status_code == 422, (path, name, value)
        assert list(response.json()["errors"]) == [name]


def test_since_later_than_until_is_422_on_since(get: Get, truth: dict) -> None:
    response = get("/rewards/redemptions", params={"since": "2026-05-02", "until": "2026-05-01"})
    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["since"]
    member = truth["members"][0]["id"]
    response = get(
        f"/rewards/members/{member}/ledger",
        params={"since": "2026-05-01T12:00:00Z", "until": "2026-05-01T11:00:00Z"},
    )
    assert response.status_code == 422 and list(response.json()["errors"]) == ["since"]
    same = get("/rewards/redemptions", params={"since": "2026-05-01", "until": "2026-05-01"})
    assert same.status_code == 200


def test_guests_from_to_are_inclusive_london_dates(get: Get, truth: dict) -> None:
    day = busiest_day(truth["guests"], "visited_at")
    rows = read_all(get, "/guests", **{"from": day.isoformat(), "to": day.isoformat()})
    expected = [g["id"] for g in truth["guests"] if london_day(g["visited_at"]) == day]
    assert rows and [row["id"] for row in rows] == expected
    response = get("/guests", params={"from": "2026-05-02", "to": "2026-05-01"})
    assert response.status_code == 422 and list(response.json()["errors"]) == ["from"]
    assert get("/guests", params={"from": "2026-05-01T00:00:00Z"}).status_code == 422


def test_stats_period_defaults_to_the_last_30_days(get: Get) -> None:
    body = get("/stats").json()["data"]
    start, end = dt.date.fromisoformat(body["from"]), dt.date.fromisoformat(body["to"])
    assert end == dt.datetime.now(LONDON).date()
    assert (end - start).days + 1 == 30


def test_stats_match_the_guests_of_the_period(get: Get, truth: dict) -> None:
    """spec 2.4: visits, distinct emails, arrivals of guests who may be marketed to now."""
    venue_id = truth["venues"][1]["id"]
    day = busiest_day([g for g in truth["guests"] if g["venue_id"] == venue_id], "visited_at")
    first = day - dt.timedelta(days=6)
    body = get(
        "/stats", params={"venue_id": venue_id, "from": first.isoformat(), "to": day.isoformat()}
    ).json()
    rows = [
        g
        for g in truth["guests"]
        if g["venue_id"] == venue_id and first <= london_day(g["visited_at"]) <= day
    ]
    assert body["data"] == {
        "from": first.isoformat(),
        "to": day.isoformat(),
        "visits": len(rows),
        "unique_guests": len({g["email"] for g in rows}),
        "marketing_opt_ins": sum(g["marketing_consent"] for g in rows),
    }
    assert body["meta"] == {"venue_ids": [venue_id]}
    daily = {(r["venue_id"], r["date"]): r for r in truth["daily_stats"]}
    one = get(
        "/stats", params={"venue_id": venue_id, "from": day.isoformat(), "to": day.isoformat()}
    )
    row = daily[(venue_id, day.isoformat())]
    assert one.json()["data"]["visits"] == row["visits"] > 0
