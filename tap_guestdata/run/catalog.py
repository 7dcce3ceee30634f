"""The catalog of streams: each stream's group, window and personal fields, stated once.

The tap's stream list, the Airflow DAGs (their stream groups, the weekly refresh, reloads), the
docs' tables and the dbt layer (erasure, source deletions) take these facts from here: the docs
and dbt through files scripts/build_docs.py writes from it (dbt: transform/macros/
personal_fields.sql), which its `--check` keeps in step. Pure data and standard library only: the
DAG file imports it at every parse.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamFacts:
    """What the rest of the pipeline needs to know of one stream, without importing the tap."""

    name: str
    group: str  # the daily stream group that loads it: one Airflow task, one state id
    windowed: bool  # reads inside [start_date, end_date]: a reload can re-read a period
    refreshed_weekly: bool = False  # the weekly full refresh re-reads it (late changes, deletions)
    personal_fields: tuple[str, ...] = ()  # a person's contact: what erasure removes (spec 3)


GROUPS: tuple[str, ...] = ("core", "members", "rewards", "offers", "stats")  # daily task order

STREAMS: tuple[StreamFacts, ...] = (
    StreamFacts("account", "core", windowed=False),
    StreamFacts("venues", "core", windowed=False),
    StreamFacts(
        "guests",
        "core",
        windowed=True,
        refreshed_weekly=True,
        personal_fields=("name", "first_name", "last_name", "email", "phone"),
    ),
    StreamFacts("read_windows", "core", windowed=True, refreshed_weekly=True),
    StreamFacts(
        "members",
        "members",
        windowed=True,
        personal_fields=("first_name", "last_name", "email", "phone_e164", "date_of_birth"),
    ),
    StreamFacts("member_ledger", "members", windowed=True),
    StreamFacts("rewards", "rewards", windowed=True),
    StreamFacts("redemptions", "rewards", windowed=True),
    StreamFacts("programme", "offers", windowed=False),
    StreamFacts("programme_venues", "offers", windowed=False),
    StreamFacts("tiers", "offers", windowed=False),
    StreamFacts("offers", "offers", windowed=False),
    StreamFacts("offer_stats", "offers", windowed=False),
    StreamFacts("daily_stats", "stats", windowed=True, refreshed_weekly=True),
    StreamFacts("daily_account_stats", "stats", windowed=True, refreshed_weekly=True),
)

# What erasure and source deletions leave in a personal field: the placeholder, or null where a
# placeholder cannot stand (a date) or would repeat (a last name beside the erased first name).
ERASED_TO_NULL: frozenset[str] = frozenset({"last_name", "date_of_birth"})

BY_NAME: dict[str, StreamFacts] = {facts.name: facts for facts in STREAMS}


def streams_of_group(group: str) -> tuple[str, ...]:
    """The streams a daily group loads, in catalog order (KeyError names an unknown group)."""
    if group not in GROUPS:
        raise KeyError(f"unknown stream group {group!r}; the groups are {', '.join(GROUPS)}")
    return tuple(facts.name for facts in STREAMS if facts.group == group)


def windowed_streams(group: str | None = None) -> tuple[str, ...]:
    """The streams read inside [start_date, end_date], of one group or of all."""
    return tuple(
        facts.name
        for facts in STREAMS
        if facts.windowed and (group is None or facts.group == group)
    )


def refreshed_weekly() -> tuple[str, ...]:
    """The streams the weekly full refresh re-reads."""
    return tuple(facts.name for facts in STREAMS if facts.refreshed_weekly)


def personal_fields() -> dict[str, tuple[str, ...]]:
    """Each stream that holds a person's contact, and those fields."""
    return {facts.name: facts.personal_fields for facts in STREAMS if facts.personal_fields}
