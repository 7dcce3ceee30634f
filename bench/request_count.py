"""Request count: the requests a full sync and an incremental sync make, divided by the minimum
the API allows for the same data, computed from the sandbox's ground truth.

    .venv/bin/python bench/request_count.py [--size small] [--streams all]

Full sync: every stream, no state. Then a few changes (new guests, ledger lines on some members,
a tier change, redemptions), then an incremental sync from the full sync's last STATE.
Requests are read from the sandbox's request log (limits off, so no 429 retries are counted).
The minimum (MINIMUM_FORMULA below) is independent of the tap's design; record counts per stream
are checked against the truth beside it, since a tap that skips data would make fewer requests.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any
from zoneinfo import ZoneInfo

import harness
from harness import OWNER_KEYS, PER_PAGE_MAX

LONDON = ZoneInfo("Europe/London")
MINIMUM_FORMULA = """\
minimum requests (pages of 200, spec 4.3; p(n) = max(1, ceil(n / 200))):
  account 1 (/me); venues 1; programme + programme_venues + tiers 1 (one /rewards/programme
  answer carries all three); offers p(not archived) + p(archived) (archived only with
  status=archived); offer_stats 1 per offer, archived included (/rewards/offers/{id})
  full:        guests, members, rewards, redemptions p(rows); member_ledger sum over members of
               p(that member's lines); daily_stats 1 per venue-day; daily_account_stats 1 per day
  incremental: guests p(rows on or after the London day of the newest guest already read: /guests
               filters by date); members p(members new or changed); member_ledger sum over those
               members of p(their new lines); rewards, redemptions p(rows from the newest
               down to the oldest row new, changed or (rewards) open at the first sync: a
               newest-first list reaches a row changed later only by paging down to it, and
               any open reward may have changed); daily_stats 1 per venue-day
               from each venue's last day already read; daily_account_stats 1 per day from
               the last day already read"""

# Which bucket a request path belongs to (paths are logged without the base path).
ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^/me$"), "account"),
    (re.compile(r"^/venues$"), "venues"),
    (re.compile(r"^/guests$"), "guests"),
    (re.compile(r"^/rewards/programme$"), "programme"),
    (re.compile(r"^/rewards/members$"), "members"),
    (re.compile(r"^/rewards/members/\d+/ledger$"), "member_ledger"),
    (re.compile(r"^/rewards/members/\d+$"), "member (single read)"),
    (re.compile(r"^/rewards/rewards$"), "rewards"),
    (re.compile(r"^/rewards/rewards/\d+$"), "reward (single read)"),
    (re.compile(r"^/rewards/redemptions$"), "redemptions"),
    (re.compile(r"^/rewards/redemptions/\d+$"), "redemption (single read)"),
    (re.compile(r"^/rewards/offers$"), "offers"),
    (re.compile(r"^/rewards/offers/\d+$"), "offer_stats"),
]
PROGRAMME_STREAMS = {"programme", "programme_venues", "tiers"}


def pages(rows: int) -> int:
    return max(1, math.ceil(rows / PER_PAGE_MAX))


def bucket(entry: Mapping[str, Any]) -> str:
    path = entry["path"]
    if path == "/stats":
        return "daily_stats" if "venue_id=" in (entry.get("query") or "") else "daily_account_stats"
    for pattern, name in ROUTES:
        if pattern.match(path):
            return name
    return f"other {path}"


def is_open(reward: Mapping[str, Any]) -> bool:
    """A reward that can still change: issued, a use left, not read as expired (spec 3)."""
    return reward["status"] == "issued" and reward["uses_remaining"] > 0


def instant(timestamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def london_day(timestamp: str) -> dt.date:
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(LONDON).date()


def group_by(rows: Iterable[Mapping[str, Any]], key: str) -> dict[Any, list[Mapping[str, Any]]]:
    grouped: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row[key]].append(row)
    return grouped


def minimum_full(truth: Mapping[str, Any], streams: set[str]) -> dict[str, int]:
    minimum: dict[str, int] = {}
    if "account" in streams:
        minimum["account"] = 1
    if "venues" in streams:
        minimum["venues"] = 1
    if streams & PROGRAMME_STREAMS:
        minimum["programme"] = 1
    for name in ("guests", "members", "rewards", "redemptions"):
        if name in streams:
            minimum[name] = pages(len(truth[name]))
    if "member_ledger" in streams:
        lines = Counter(row["member_id"] for row in truth["member_ledger"])
        minimum["member_ledger"] = sum(pages(lines[row["id"]]) for row in truth["members"])
    if "offers" in streams:
        archived = sum(1 for row in truth["offers"] if row["status"] == "archived")
        minimum["offers"] = pages(len(truth["offers"]) - archived) + pages(archived)
    if "offer_stats" in streams:
        minimum["offer_stats"] = len(truth["offer_stats"])
    for name in ("daily_stats", "daily_account_stats"):
        if name in streams:
            minimum[name] = len(truth[name])
    return minimum


def minimum_incremental(
    before: Mapping[str, Any], after: Mapping[str, Any], streams: set[str]
) -> dict[str, int]:
    minimum = {
        name: count
        for name, count in minimum_full(after, streams).items()
        if name in {"account", "venues", "programme", "offers", "offer_stats"}
    }
    if "guests" in streams:
        newest_day = max(london_day(row["visited_at"]) for row in before["guests"])
        rows = sum(1 for row in after["guests"] if london_day(row["visited_at"]) >= newest_day)
        minimum["guests"] = pages(rows)
    old_members = {row["id"]: row for row in before["members"]}
    changed = [row["id"] for row in after["members"] if old_members.get(row["id"]) != row]
    if "members" in streams:
        minimum["members"] = pages(len(changed))
    if "member_ledger" in streams:
        old_lines = {row["id"] for row in before["member_ledger"]}
        new_lines = Counter(
            row["member_id"] for row in after["member_ledger"] if row["id"] not in old_lines
        )
        minimum["member_ledger"] = sum(pages(new_lines[member]) for member in changed)
    for name, cursor in (("rewards", "issued_at"), ("redemptions", "created_at")):
        if name in streams:
            # A newest-first list (spec 4.2) reaches a changed row only by paging down to it:
            # the minimum covers every row from the newest to the oldest one that is new, or
            # changed, or (rewards) could have changed: open at the last read (spec 3).
            old_rows = {row["id"]: row for row in before[name]}
            changed_at = [
                instant(row[cursor]) for row in after[name] if old_rows.get(row["id"]) != row
            ]
            if name == "rewards":
                changed_at += [instant(row[cursor]) for row in before[name] if is_open(row)]
            oldest = min(changed_at, default=None)
            reach = (
                0 if oldest is None else sum(1 for r in after[name] if instant(r[cursor]) >= oldest)
            )
            minimum[name] = pages(reach)
    if "daily_stats" in streams:
        last_day = {
            venue: max(row["date"] for row in rows)
            for venue, rows in group_by(before["daily_stats"], "venue_id").items()
        }
        minimum["daily_stats"] = sum(
            1 for row in after["daily_stats"] if row["date"] >= last_day.get(row["venue_id"], "")
        )
    if "daily_account_stats" in streams:
        last = max(row["date"] for row in before["daily_account_stats"])
        minimum["daily_account_stats"] = sum(
            1 for row in after["daily_account_stats"] if row["date"] >= last
        )
    return minimum


def make_changes(server: Any, truth: Mapping[str, Any]) -> list[str]:
    """A small, realistic day of changes between the two syncs."""
    members = [row["id"] for row in truth["members"] if row.get("left_at") is None]
    done = [f"add_guests 5: {server.mutate('add_guests', count=5)}"]
    for member in members[:3]:
        server.mutate("add_ledger_lines", member_id=member, count=2)
        done.append(f"add_ledger_lines member {member} x2")
    tiers = [row["key"] for row in truth.get("tiers", [])]
    if tiers and len(members) > 3:
        server.mutate("update_member", member_id=members[3], fields={"tier_key": tiers[-1]})
        done.append(f"update_member {members[3]} tier_key={tiers[-1]}")
    done.append(f"add_redemptions 3: {server.mutate('add_redemptions', count=3)}")
    return done


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0], default_size="small")
    parser.add_argument("--streams", default="all", help="comma list, or all")
    args = parser.parse_args()
    key = OWNER_KEYS[0]
    with (
        harness.sandbox(args.size, args.seed, limits=False) as server,
        harness.scratch_dir("request-count") as scratch,
    ):
        config = harness.tap_config(server, extra=harness.parse_settings(args.tap_setting))
        selected = None if args.streams == "all" else args.streams.split(",")
        tap = harness.prepare_tap(scratch, config, selected)
        streams = set(selected or harness.catalog_stream_names(tap.catalog_body))

        before = server.truth(key)
        server.clear_requests()
        full = harness.run_measured("full sync", tap.argv(), keep_last_state=True)
        full_log = server.requests_log()
        if full.last_state is None:
            sys.exit("the full sync emitted no STATE message")
        changes = make_changes(server, before)
        after = server.truth(key)
        state_path = harness.write_json(scratch, "state.json", full.last_state)
        server.clear_requests()
        incremental = harness.run_measured("incremental sync", tap.argv(state_path))
        incremental_log = server.requests_log()

    results = {
        "full": summarise(full_log, minimum_full(before, streams), full, before, streams),
        "incremental": summarise(
            incremental_log, minimum_incremental(before, after, streams), incremental, None, streams
        ),
    }
    report(args, streams, changes, results)


def summarise(
    log: list[Mapping[str, Any]],
    minimum: dict[str, int],
    run: harness.RunResult,
    truth: Mapping[str, Any] | None,
    streams: set[str],
) -> dict[str, Any]:
    actual = Counter(bucket(entry) for entry in log)
    statuses = Counter(entry["status"] for entry in log)
    record_check = {}
    if truth is not None:
        for name in sorted(streams):
            rows = truth.get(name)
            if isinstance(rows, list):
                record_check[name] = {"emitted": run.records.get(name, 0), "truth": len(rows)}
    return {
        "requests": sum(actual.values()),
        "minimum": sum(minimum.values()),
        "ratio": sum(actual.values()) / max(1, sum(minimum.values())),
        "by_endpoint": {
            name: {"actual": actual.get(name, 0), "minimum": minimum.get(name, 0)}
            for name in sorted(set(actual) | set(minimum))
        },
        "status_counts": dict(statuses),
        "records": run.records,
        "record_check": record_check,
        "wall_s": run.wall_s,
    }


def report(
    args: Any, streams: set[str], changes: list[str], results: dict[str, dict[str, Any]]
) -> None:
    print(f"\nrequest count, size={args.size}, limits off, streams: {', '.join(sorted(streams))}")
    print(MINIMUM_FORMULA)
    print("changes between the syncs: " + "; ".join(changes) + "\n")
    endpoints = sorted(
        set(results["full"]["by_endpoint"]) | set(results["incremental"]["by_endpoint"])
    )
    rows = []
    for name in endpoints:
        full = results["full"]["by_endpoint"].get(name, {"actual": 0, "minimum": 0})
        incremental = results["incremental"]["by_endpoint"].get(name, {"actual": 0, "minimum": 0})
        rows.append(
            (name, full["actual"], full["minimum"], incremental["actual"], incremental["minimum"])
        )
    rows.append(
        (
            "TOTAL",
            results["full"]["requests"],
            results["full"]["minimum"],
            results["incremental"]["requests"],
            results["incremental"]["minimum"],
        )
    )
    harness.print_table(["endpoint", "full", "full min", "incr", "incr min"], rows)
    print()
    for kind, result in results.items():
        verdict = "met" if result["ratio"] <= 1.02 else "NOT met"
        print(
            f"{kind}: {result['requests']:,} requests / minimum {result['minimum']:,} = "
            f"{result['ratio']:.3f} (target <= 1.02: {verdict}); statuses {result['status_counts']}"
        )
    wrong = {
        name: check
        for name, check in results["full"]["record_check"].items()
        if check["emitted"] != check["truth"]
    }
    if wrong:
        print(f"full sync record counts differ from the truth: {wrong}")
    else:
        print("full sync record counts: every stream matched the truth")
    harness.save_results(
        "request_count",
        {
            "size": args.size,
            "seed": args.seed,
            "formula": MINIMUM_FORMULA,
            "changes": changes,
            **results,
        },
    )


if __name__ == "__main__":
    main()
