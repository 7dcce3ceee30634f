"""First-sync cost: the requests a first sync of every stream makes for the sandbox's small,
medium and large accounts, the hours they take at the API's budget, and what the settings that
shorten a first sync save and cost.

    .venv/bin/python bench/first_sync_cost.py [--sizes small,medium,large] [--measure small]
                                              [--start-days 90] [--history-days 30]

Requests are computed from each sandbox's ground truth with the tap's first-sync rules
(RULES below). For every size in --measure the real tap also syncs every stream, once per
setting, against that sandbox with limits off, and the requests in the sandbox's log must equal
the computed ones stream by stream (the script exits 1 otherwise): that is what makes the
computed figures for the sizes too big to sync here the tap's figures.

Hours: spec 8 allows 120 requests per key per minute and 600 per address; an account holds at
most 5 keys (spec 5.3), so 5 keys reach the address ceiling. 429s, retries and latency are not
counted (the tap uses its whole budget, bench/rate_use.py).
"""

from __future__ import annotations

import datetime as dt
import math
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import harness
from harness import OWNER_KEYS
from request_count import bucket, pages

LONDON = ZoneInfo("Europe/London")
PER_KEY_PER_MINUTE = 120  # spec 8
PER_ADDRESS_PER_MINUTE = 600  # spec 8
KEY_COUNTS = (1, 5)  # spec 5.3: at most 5 keys
RULES = """\
first sync, no state (p(n) = max(1, ceil(n / 200)), spec 4.3); D = start_date's London day,
H = stats_history_days, T = today (London):
  account 1; venues 1; programme + programme_venues + tiers 1; members p(all members);
  offers p(not archived) + p(archived); offer_stats 1 per offer
  guests p(guests visited on London days >= D)        (/guests from/to are London dates)
  member_ledger sum over members of p(all their lines)   (one request each; read whole)
  rewards p(issued >= D's start - V), V = the longest offer validity (valid_days_after_issue):
  every reward a redemption from D can be of; redemptions p(created >= D's start)
  daily_stats 1 per venue per day from max(venue's first day, D, T - H + 1) to T
  daily_account_stats 1 per day from max(first venue's first day, D, T - H + 1) to T"""


@dataclass(frozen=True)
class Scenario:
    label: str
    settings: dict[str, Any]
    costs: str


def scenarios(today: dt.date, start_days: int, history_days: int) -> list[Scenario]:
    start_date = (today - dt.timedelta(days=start_days)).isoformat()
    return [
        Scenario("everything (defaults)", {}, "nothing"),
        Scenario(
            f"start_date = {start_days} days ago",
            {"start_date": start_date},
            "guests, redemptions and daily statistics from before that day, and rewards "
            "issued more than the longest offer validity before it, for good (later runs start "
            "from the bookmarks; only a run without state and with an earlier start_date loads "
            "them); members with their whole ledgers, balances, tiers and offers stay complete",
        ),
        Scenario(
            f"stats_history_days = {history_days}",
            {"stats_history_days": history_days},
            "the API's per-day statistics before those days (the dbt models derive daily "
            "visits, unique guests and opt-ins per venue from guests over the full history; "
            "a full refresh without the setting loads them)",
        ),
        Scenario(
            "both",
            {"start_date": start_date, "stats_history_days": history_days},
            "both of the above",
        ),
    ]


# ----------------------------------------------------------------------------- computed


def instant(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def london_day(value: str) -> dt.date:
    return instant(value).astimezone(LONDON).date()


def day_start(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(0), tzinfo=LONDON)


def days_from(first: dt.date, today: dt.date) -> int:
    return max(0, (today - first).days + 1)


@dataclass
class AccountShape:
    """What the request count depends on, read from the truth (only the fields needed)."""

    venue_days: list[dt.date]  # each venue's first London day
    guest_days: list[dt.date]
    members: int
    ledger_lines: dict[int, list[dt.datetime]]  # member id -> line instants
    rewards: list[dt.datetime]
    redemptions: list[dt.datetime]
    offers_archived: int
    offers_other: int
    longest_validity: int  # days: the longest valid_days_after_issue of any offer

    @classmethod
    def read(cls, server: Any, key: str) -> AccountShape:
        def rows(resource: str) -> list[dict[str, Any]]:
            return server.truth(key, resource=resource) or []

        members = rows("members")
        ledger: dict[int, list[dt.datetime]] = {row["id"]: [] for row in members}
        for line in rows("member_ledger"):
            ledger[line["member_id"]].append(instant(line["created_at"]))
        offers = rows("offers")
        archived = sum(1 for row in offers if row["status"] == "archived")
        return cls(
            venue_days=[london_day(row["created_at"]) for row in rows("venues")],
            guest_days=[london_day(row["visited_at"]) for row in rows("guests")],
            members=len(members),
            ledger_lines=ledger,
            rewards=[instant(row["issued_at"]) for row in rows("rewards")],
            redemptions=[instant(row["created_at"]) for row in rows("redemptions")],
            offers_archived=archived,
            offers_other=len(offers) - archived,
            longest_validity=max(row["valid_days_after_issue"] for row in offers),
        )

    def first_sync(self, settings: Mapping[str, Any], today: dt.date) -> dict[str, int]:
        """Requests per endpoint bucket (request_count.bucket's names) by RULES."""
        start = dt.date.fromisoformat(settings.get("start_date") or dt.date.min.isoformat())
        since = day_start(start) if start > dt.date.min else None
        validity = dt.timedelta(days=self.longest_validity)
        rewards_since = None if since is None else since.astimezone(dt.timezone.utc) - validity
        history = settings.get("stats_history_days")
        stats_first = today - dt.timedelta(days=history - 1) if history else dt.date.min

        def after(instants: Iterable[dt.datetime], first: dt.datetime | None = since) -> int:
            return sum(1 for moment in instants if first is None or moment >= first)

        return {
            "account": 1,
            "venues": 1,
            "programme": 1,
            "offers": pages(self.offers_other) + pages(self.offers_archived),
            "offer_stats": self.offers_other + self.offers_archived,
            "guests": pages(sum(1 for day in self.guest_days if day >= start)),
            "members": pages(self.members),
            "member_ledger": sum(pages(len(lines)) for lines in self.ledger_lines.values()),
            "rewards": pages(after(self.rewards, rewards_since)),
            "redemptions": pages(after(self.redemptions)),
            "daily_stats": sum(
                days_from(max(first, start, stats_first), today) for first in self.venue_days
            ),
            "daily_account_stats": days_from(max(min(self.venue_days), start, stats_first), today),
        }


# ----------------------------------------------------------------------------- measured


def measured_first_sync(server: Any, settings: Mapping[str, Any], label: str) -> dict[str, int]:
    """The real tap, every stream, no state: requests per bucket from the sandbox's log."""
    with harness.scratch_dir("first-sync-cost") as scratch:
        config = harness.tap_config(server, extra=dict(settings))
        if "start_date" not in settings:
            config.pop("start_date")  # a first run without the setting
        tap = harness.prepare_tap(scratch, config, None)
        server.clear_requests()
        harness.run_measured(label, tap.argv())
        log = server.requests_log()
    statuses = Counter(entry["status"] for entry in log)
    if set(statuses) != {200}:
        sys.exit(f"{label}: answers other than 200 ({dict(statuses)}); counts not comparable")
    return dict(Counter(bucket(entry) for entry in log))


# ----------------------------------------------------------------------------- report


def hours(requests: int, keys: int) -> float:
    per_minute = min(PER_KEY_PER_MINUTE * keys, PER_ADDRESS_PER_MINUTE)
    return requests / per_minute / 60


def duration(value: float) -> str:
    if value < 1:
        return f"{math.ceil(value * 60)} min"
    return f"{value:.1f} h"


def markdown_label(label: str) -> str:
    for setting in ("start_date", "stats_history_days"):
        label = label.replace(setting, f"`{setting}`")
    return label


def main() -> None:
    parser = harness.base_parser(__doc__.splitlines()[0], default_size="small")
    parser.add_argument("--sizes", default="small,medium,large")
    parser.add_argument("--measure", default="small", help="sizes the real tap also syncs")
    parser.add_argument("--start-days", type=int, default=90)
    parser.add_argument("--history-days", type=int, default=30)
    args = parser.parse_args()
    key = OWNER_KEYS[0]
    today = dt.datetime.now(LONDON).date()
    plans = scenarios(today, args.start_days, args.history_days)
    computed: dict[str, dict[str, dict[str, int]]] = {}
    mismatches: list[str] = []
    measured_sizes: list[str] = []
    for size in args.sizes.split(","):
        with harness.sandbox(size, args.seed, limits=False) as server:
            shape = AccountShape.read(server, key)
            computed[size] = {plan.label: shape.first_sync(plan.settings, today) for plan in plans}
            if size not in args.measure.split(","):
                continue
            measured_sizes.append(size)
            for plan in plans:
                actual = measured_first_sync(server, plan.settings, f"{size}: {plan.label}")
                expected = {name: count for name, count in computed[size][plan.label].items()}
                if actual != expected:
                    differing = {
                        name: (actual.get(name, 0), expected.get(name, 0))
                        for name in sorted(set(actual) | set(expected))
                        if actual.get(name, 0) != expected.get(name, 0)
                    }
                    mismatches.append(f"{size} {plan.label}: (tap, computed) {differing}")
    report(args, plans, computed, measured_sizes, mismatches)
    if mismatches:
        sys.exit(1)


def report(
    args: Any,
    plans: list[Scenario],
    computed: dict[str, dict[str, dict[str, int]]],
    measured_sizes: list[str],
    mismatches: list[str],
) -> None:
    sizes = list(computed)
    print(f"\nfirst-sync cost, seed={args.seed}, sizes {', '.join(sizes)}")
    print(RULES)
    everything = plans[0].label
    streams = list(computed[sizes[0]][everything])
    print("\nrequests per endpoint, everything (defaults):\n")
    harness.print_table(
        ["endpoint", *sizes],
        [
            (name, *(computed[size][everything][name] for size in sizes))
            for name in [*streams, "TOTAL"]
            if name != "TOTAL"
        ]
        + [("TOTAL", *(sum(computed[size][everything].values()) for size in sizes))],
    )
    print("\nmarkdown (docs/tap.md, 'Cost of a first sync'):\n")
    header = ["settings", *sizes, "what you do not get"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for plan in plans:
        cells = [markdown_label(plan.label)]
        for size in sizes:
            total = sum(computed[size][plan.label].values())
            cells.append(f"{total:,}: {duration(hours(total, 1))} / {duration(hours(total, 5))}")
        print("| " + " | ".join([*cells, plan.costs]) + " |")
    print()
    if measured_sizes:
        verdict = "MISMATCH" if mismatches else "equal, stream by stream, for every setting"
        print(f"real tap vs computed ({', '.join(measured_sizes)}): {verdict}")
    for mismatch in mismatches:
        print(f"  {mismatch}")
    harness.save_results(
        "first_sync_cost",
        {
            "seed": args.seed,
            "rules": RULES,
            "scenarios": {plan.label: plan.settings for plan in plans},
            "computed": computed,
            "measured_sizes": measured_sizes,
            "mismatches": mismatches,
        },
    )


if __name__ == "__main__":
    main()
