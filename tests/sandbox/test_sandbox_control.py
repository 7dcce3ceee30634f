"""The test-only control surface: truth, request log, mutations, faults, latency, reset."""

from __future__ import annotations

import datetime as dt
import time
from zoneinfo import ZoneInfo

import pytest
import requests

from guestdata_sandbox.control import is_loopback
from guestdata_sandbox.testing import SandboxError, SandboxProcess
from support.sandbox_api import OWNER, client, read_all

LONDON = ZoneInfo("Europe/London")
DOCUMENTED = [
    "account",
    "venues",
    "guests",
    "daily_stats",
    "daily_account_stats",
    "programme",
    "programme_venues",
    "tiers",
    "members",
    "member_ledger",
    "rewards",
    "redemptions",
    "offers",
    "offer_stats",
]


def test_health_and_keys(sandbox: SandboxProcess) -> None:
    health = sandbox.health()
    assert health["ok"] is True and health["size"] == "small" and health["seed"] == 7
    keys = sandbox.keys()
    assert {"key", "account_id", "description"} <= set(keys[0])
    assert "gd_owner_growth_1" in {row["key"] for row in keys}


def test_truth_has_every_documented_resource_and_matches_the_api(sandbox: SandboxProcess) -> None:
    truth = sandbox.truth(OWNER)
    assert list(truth) == DOCUMENTED
    get = client(sandbox)
    assert truth["account"] == get("/me").json()["data"]
    assert truth["venues"] == get("/venues").json()["data"]
    assert truth["guests"] == read_all(get, "/guests")
    assert truth["members"] == read_all(get, "/rewards/members")
    assert truth["rewards"] == read_all(get, "/rewards/rewards")
    assert truth["redemptions"] == read_all(get, "/rewards/redemptions")
    offers = read_all(get, "/rewards/offers") + read_all(get, "/rewards/offers", status="archived")
    assert sorted(truth["offers"], key=lambda r: r["id"]) == sorted(offers, key=lambda r: r["id"])
    programme = get("/rewards/programme").json()
    assert truth["programme"] == programme["data"]
    assert truth["programme_venues"] == programme["meta"]["venues"]
    assert truth["tiers"] == [
        {**tier, "programme_id": programme["data"]["id"]} for tier in programme["data"]["tiers"]
    ]
    member = truth["members"][3]
    lines = read_all(get, f"/rewards/members/{member['id']}/ledger")
    assert lines == [line for line in truth["member_ledger"] if line["member_id"] == member["id"]]
    assert sandbox.truth(OWNER, resource="guests") == truth["guests"]


def test_truth_daily_stats_cover_each_day_from_creation_to_today(sandbox: SandboxProcess) -> None:
    truth = sandbox.truth(OWNER)
    get = client(sandbox)
    venue = truth["venues"][0]
    rows = [row for row in truth["daily_stats"] if row["venue_id"] == venue["id"]]
    created = dt.datetime.fromisoformat(venue["created_at"]).astimezone(LONDON).date()
    assert rows[0]["date"] == created.isoformat()  # from the venue's London creation day
    assert len(rows) == len({row["date"] for row in rows})
    assert rows[-1]["date"] == get("/stats").json()["data"]["to"]
    for row in rows[-3:]:
        body = get(
            "/stats", params={"venue_id": venue["id"], "from": row["date"], "to": row["date"]}
        )
        data = body.json()["data"]
        assert {k: data[k] for k in ("visits", "unique_guests", "marketing_opt_ins")} == {
            k: row[k] for k in ("visits", "unique_guests", "marketing_opt_ins")
        }
    account_row = truth["daily_account_stats"][-1]
    data = get("/stats", params={"from": account_row["date"], "to": account_row["date"]}).json()
    assert data["data"]["visits"] == account_row["visits"]
    assert account_row["venue_ids"] == data["meta"]["venue_ids"]


def test_truth_leaves_out_what_a_key_may_not_read(sandbox: SandboxProcess) -> None:
    assert "rewards" not in sandbox.truth("gd_rewards_off")
    assert "members" not in sandbox.truth("gd_team_no_guest_data")
    assert "rewards" in sandbox.truth("gd_team_no_guest_data")
    assert sandbox.truth("gd_essentials") == {}
    with pytest.raises(SandboxError):
        sandbox.truth("no_such_key")


def test_request_log_records_time_key_path_raw_query_status(fresh_sandbox: SandboxProcess) -> None:
    get = client(fresh_sandbox)
    fresh_sandbox.clear_requests()
    before = time.time()
    get("/rewards/rewards", raw_query="since=2026-07-01T10:00:00+01:00&per_page=5")
    get("/me", key=None)
    fresh_sandbox.truth(OWNER)  # control calls are not logged
    log = fresh_sandbox.requests_log()
    assert [entry["path"] for entry in log] == ["/rewards/rewards", "/me"]
    first, second = log
    assert first["query"] == "since=2026-07-01T10:00:00+01:00&per_page=5"
    assert first["status"] == 422 and first["key"] == OWNER and first["ip"] == "127.0.0.1"
    assert second["key"] is None and second["status"] == 401
    assert before <= first["time"] <= second["time"] <= time.time()
    assert fresh_sandbox.requests_log(after=first["seq"]) == [second]
    fresh_sandbox.clear_requests()
    assert fresh_sandbox.requests_log() == []


def test_a_late_arrival_is_listed_on_its_london_day_and_counted_by_its_stats(
    fresh_sandbox: SandboxProcess,
) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    venue = min(server.truth(OWNER, resource="venues"), key=lambda row: row["created_at"])
    day = dt.datetime.fromisoformat(venue["created_at"]).astimezone(LONDON).date()
    day += dt.timedelta(days=2)
    window = {"venue_id": venue["id"], "from": day.isoformat(), "to": day.isoformat()}
    visits = get("/stats", params=window).json()["data"]["visits"]
    # 00:30 London on a summer day is the day before in UTC: listed on the London day
    moment = dt.datetime(day.year, day.month, day.day, 0, 30, tzinfo=LONDON)
    ids = server.mutate("add_guests", count=2, venue_id=venue["id"], visited_at=moment.isoformat())[
        "ids"
    ]
    listed = get("/guests", params={**window, "per_page": 200}).json()["data"]
    late = [row for row in listed if row["id"] in ids]
    assert [dt.datetime.fromisoformat(row["visited_at"]) for row in late] == [moment, moment]
    assert get("/stats", params=window).json()["data"]["visits"] == visits + 2
    with pytest.raises(SandboxError, match="in the future"):
        future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        server.mutate("add_guests", visited_at=future.isoformat())


def test_mutations_change_what_the_api_answers(fresh_sandbox: SandboxProcess) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    truth = server.truth(OWNER)
    ids = server.mutate("add_guests", count=3)["ids"]
    assert [row["id"] for row in get("/guests").json()["data"][:3]] == ids[::-1]
    guest = truth["guests"][10]
    server.mutate(
        "set_marketing_consent", guest_id=guest["id"], value=not guest["marketing_consent"]
    )
    after = {row["id"]: row for row in server.truth(OWNER, resource="guests")}
    assert after[guest["id"]]["marketing_consent"] is (not guest["marketing_consent"])
    member = truth["members"][5]
    lines = server.mutate("add_ledger_lines", member_id=member["id"], count=2)["ids"]
    ledger = get(f"/rewards/members/{member['id']}/ledger").json()
    assert [line["id"] for line in ledger["data"][:2]] == lines[::-1]
    assert ledger["meta"]["points_balance"] == ledger["data"][0]["balance_after"]
    server.mutate("update_member", member_id=member["id"], fields={"tier_key": "gold"})
    assert get(f"/rewards/members/{member['id']}").json()["data"]["tier_key"] == "gold"
    server.mutate("update_member", member_id=member["id"], fields={"status": "left"})
    assert get(f"/rewards/members/{member['id']}").json()["data"]["left_at"]
    server.mutate("update_member", member_id=member["id"], fields={"anonymise": True})
    assert get(f"/rewards/members/{member['id']}").json()["data"]["anonymised_at"]
    offer = next(row for row in truth["offers"] if row["status"] == "active")
    server.mutate("archive_offer", offer_id=offer["id"])
    assert offer["id"] not in [row["id"] for row in read_all(get, "/rewards/offers")]


def test_redeem_void_and_restore(fresh_sandbox: SandboxProcess) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    rewards = server.truth(OWNER, resource="rewards")
    reward = next(row for row in rewards if row["status"] == "issued")
    result = server.mutate("redeem_reward", reward_id=reward["id"])
    redeemed = get(f"/rewards/rewards/{reward['id']}").json()["data"]
    assert redeemed["status"] == "redeemed" and redeemed["uses_remaining"] == 0
    assert redeemed["redemption_id"] == result["redemption_id"] and result["ledger_ids"]
    with pytest.raises(SandboxError):
        server.mutate("redeem_reward", reward_id=reward["id"])
    path = f"/rewards/redemptions/{result['redemption_id']}"
    assert get(path).json()["data"]["status"] == "completed"
    server.mutate("void_redemption", redemption_id=result["redemption_id"])
    voided = get(path).json()["data"]
    assert voided["status"] == "voided" and voided["voided_at"] and voided["void_reason"]
    server.mutate("restore_redemption", redemption_id=result["redemption_id"])
    restored = get(path).json()["data"]
    assert restored["status"] == "completed" and restored["restored_at"]
    assert restored["restored_by_user_id"] and restored["voided_at"]
    assert len(server.mutate("add_redemptions", count=2)["ids"]) == 2


def test_revoke_switch_rewards_and_grant_permission(fresh_sandbox: SandboxProcess) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    server.mutate("revoke_key", key="gd_owner_growth_5")
    assert get("/me", key="gd_owner_growth_5").status_code == 401  # spec 5.4: immediate
    server.mutate("set_rewards", account_id=1001, enabled=False)
    assert get("/rewards/offers").json()["error"] == "REWARDS_DISABLED"
    server.mutate("set_rewards", account_id=1001, enabled=True)
    assert get("/rewards/offers").status_code == 200
    assert get("/rewards/members", key="gd_team_no_guest_data").status_code == 403
    server.mutate("grant_permission", key="gd_team_no_guest_data")
    assert get("/rewards/members", key="gd_team_no_guest_data").status_code == 200  # 4.5.4


def test_insert_while_paging_puts_records_at_the_head(fresh_sandbox: SandboxProcess) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    for resource, path in [
        ("guests", "/guests"),
        ("members", "/rewards/members"),
        ("rewards", "/rewards/rewards"),
        ("redemptions", "/rewards/redemptions"),
    ]:
        total = get(path).json()["meta"]["total"]
        server.mutate("insert_while_paging", resource=resource, count=3, times=2)
        first = get(path, params={"per_page": 10}).json()
        second = get(path, params={"per_page": 10, "page": 2}).json()
        third = get(path, params={"per_page": 10, "page": 3}).json()
        assert first["meta"]["total"] == total + 3, resource
        assert second["meta"]["total"] == third["meta"]["total"] == total + 6, resource
        # the rows shift: page 2 now repeats the last rows of page 1 as the client saw it
        assert first["data"][-3]["id"] == second["data"][0]["id"], resource
    member = server.truth(OWNER, resource="members")[0]["id"]
    server.mutate("insert_while_paging", resource="member_ledger", count=2, times=1)
    path = f"/rewards/members/{member}/ledger"
    total = len(
        [1 for line in server.truth(OWNER, resource="member_ledger") if line["member_id"] == member]
    )
    assert get(path).json()["meta"]["total"] == total + 2


def test_add_and_remove_field_change_the_rows_of_a_path(fresh_sandbox: SandboxProcess) -> None:
    server, get = fresh_sandbox, client(fresh_sandbox)
    before = get("/guests").json()["data"]
    assert all("loyalty_segment" not in row for row in before)
    server.mutate("add_field", path="/guests", field="loyalty_segment", values=[None, "gold"])
    rows = read_all(get, "/guests")
    assert {row["loyalty_segment"] for row in rows} == {None, "gold"}
    assert all(row["loyalty_segment"] == [None, "gold"][row["id"] % 2] for row in rows)
    truth = server.truth(OWNER, resource="guests")
    assert [row["loyalty_segment"] for row in truth] == [row["loyalty_segment"] for row in rows]
    # ledgers of every member, by their path template; a constant value on every row
    member = server.truth(OWNER, resource="members")[0]["id"]
    server.mutate("add_field", path="/rewards/members/{id}/ledger", field="channel", value=7)
    ledger = get(f"/rewards/members/{member}/ledger").json()["data"]
    assert ledger and {line["channel"] for line in ledger} == {7}
    server.mutate("remove_field", path="/guests", field="phone")
    assert all("phone" not in row for row in get("/guests").json()["data"])
    assert "loyalty_segment" not in get("/rewards/rewards").json()["data"][0]  # /guests only
    with pytest.raises(SandboxError):
        server.mutate("add_field", path="/venues", field="x", value=1)
    server.reset()
    assert "loyalty_segment" not in get("/guests").json()["data"][0]


@pytest.mark.parametrize("kind", ["server_error", "bad_gateway_html", "rate_limit"])
def test_http_faults_for_the_next_requests(fresh_sandbox: SandboxProcess, kind: str) -> None:
    get = client(fresh_sandbox)
    fresh_sandbox.fault(kind, 2, retry_after=7)
    answers = [get("/me") for _ in range(3)]
    expected = {"server_error": 500, "bad_gateway_html": 502, "rate_limit": 429}[kind]
    assert [r.status_code for r in answers] == [expected, expected, 200]
    if kind == "bad_gateway_html":
        assert answers[0].headers["Content-Type"].startswith("text/html")
        assert "<html>" in answers[0].text
    if kind == "rate_limit":
        assert answers[0].headers["Retry-After"] == "7"
    if kind == "server_error":
        assert answers[0].json()["message"]
    statuses = [entry["status"] for entry in fresh_sandbox.requests_log()]
    assert statuses == [expected, expected, 200]


def test_fault_path_filter(fresh_sandbox: SandboxProcess) -> None:
    get = client(fresh_sandbox)
    fresh_sandbox.fault("server_error", 1, path="/rewards/members")
    assert get("/me").status_code == 200
    assert get("/rewards/members").status_code == 500
    assert get("/rewards/members").status_code == 200


def test_drop_closes_the_connection_without_an_answer(fresh_sandbox: SandboxProcess) -> None:
    fresh_sandbox.fault("drop", 1)
    with pytest.raises(requests.ConnectionError):
        requests.get(fresh_sandbox.base_url + "/me", headers={"Authorization": f"Bearer {OWNER}"})
    assert fresh_sandbox.requests_log()[-1]["status"] == 0
    assert client(fresh_sandbox)("/me").status_code == 200


def test_truncated_body_is_cut_json_with_matching_length(fresh_sandbox: SandboxProcess) -> None:
    fresh_sandbox.fault("truncated", 1)
    response = client(fresh_sandbox)("/guests")
    assert response.status_code == 200
    assert int(response.headers["Content-Length"]) == len(response.content)
    with pytest.raises(ValueError):
        response.json()
    full = client(fresh_sandbox)("/guests")
    assert full.content.startswith(response.content) and len(full.content) > len(response.content)


def test_slow_fault_and_latency(fresh_sandbox: SandboxProcess) -> None:
    get = client(fresh_sandbox)
    fresh_sandbox.fault("slow", 1, seconds=0.6)
    started = time.monotonic()
    assert get("/me").status_code == 200
    assert time.monotonic() - started >= 0.6
    fresh_sandbox.latency(0.2)
    started = time.monotonic()
    get("/me")
    assert time.monotonic() - started >= 0.2
    fresh_sandbox.latency(0)


def test_reset_regenerates_and_clears(fresh_sandbox: SandboxProcess) -> None:
    before = fresh_sandbox.truth(OWNER, resource="guests")
    fresh_sandbox.mutate("add_guests", count=2)
    fresh_sandbox.fault("server_error", 5)
    fresh_sandbox.reset()
    assert fresh_sandbox.truth(OWNER, resource="guests") == before
    assert fresh_sandbox.requests_log() == []
    assert client(fresh_sandbox)("/me").status_code == 200


def test_control_surface_answers_loopback_only() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1")
    assert not is_loopback("10.0.0.5") and not is_loopback("192.168.1.2")


def test_not_found_fault_answers_as_for_a_vanished_record(fresh_sandbox: SandboxProcess) -> None:
    get = client(fresh_sandbox)
    fresh_sandbox.fault("not_found", 2)
    rewards_answer, core_answer = get("/rewards/offers/1"), get("/guests")
    # spec 7: REWARD_NOT_FOUND (upper case) under /rewards, a message only on core endpoints
    assert rewards_answer.status_code == core_answer.status_code == 404
    assert rewards_answer.json()["error"] == "REWARD_NOT_FOUND"
    assert "error" not in core_answer.json() and core_answer.json()["message"]
    assert get("/guests").status_code == 200
