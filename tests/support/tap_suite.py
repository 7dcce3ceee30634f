"""Helpers of the tap behaviour tests (tests/tap): truth comparison, request-log and log reading.

Written from the spec (`/work/shared/guest-data-api.md`), the sandbox contract (docs/sandbox.md)
and the lead's tap contract, not from the tap's code.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema

from guestdata_sandbox.testing import SandboxProcess
from support.json_values import same_value
from support.sandbox import OWNER_KEY, last_seq
from support.streams import key_of, truth_rows
from support.tap_process import TapRun, run_tap

LONDON = ZoneInfo("Europe/London")

# The request paths each stream (or group of streams sharing one endpoint) reads.
PATH_GROUPS: dict[tuple[str, ...], re.Pattern[str]] = {
    ("account",): re.compile(r"^/me$"),
    ("venues",): re.compile(r"^/venues$"),
    ("guests",): re.compile(r"^/guests$"),
    ("daily_stats", "daily_account_stats"): re.compile(r"^/stats$"),
    ("programme", "programme_venues", "tiers"): re.compile(r"^/rewards/programme$"),
    ("members",): re.compile(r"^/rewards/members$"),
    ("member_ledger",): re.compile(r"^/rewards/members/\d+/ledger$"),
    ("rewards",): re.compile(r"^/rewards/rewards$"),
    ("redemptions",): re.compile(r"^/rewards/redemptions$"),
    ("offers",): re.compile(r"^/rewards/offers$"),
    ("offer_stats",): re.compile(r"^/rewards/offers/\d+$"),
}
# Paged lists (spec 4.3): every call should ask for the maximum page size.
PAGED_LIST_PATH = re.compile(
    r"^/(guests|rewards/members|rewards/members/\d+/ledger|rewards/rewards"
    r"|rewards/redemptions|rewards/offers)$"
)
LEDGER_PATH = re.compile(r"^/rewards/members/(\d+)/ledger$")

SUMMARY_COUNTS = re.compile(
    r"Stream summary: (?P<stream>\w+): (?P<records>\d+) records, (?P<requests>\d+) requests, "
    r"(?P<retries>\d+) retries, (?P<limited>\d+) rate-limited \(429\)"
)
SUMMARY_SKIPPED = re.compile(r"Stream summary: (?P<stream>\w+): skipped \((?P<reason>.*)\)")

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# ------------------------------------------------------------------------------ truth


def duplicate_keys(stream: str, records: Iterable[Mapping[str, Any]]) -> list[tuple]:
    counts = Counter(key_of(stream, record) for record in records)
    return sorted((key for key, count in counts.items() if count > 1), key=repr)


def stream_problems(
    stream: str,
    records: Sequence[Mapping[str, Any]],
    expected: Sequence[Mapping[str, Any]],
    *,
    limit: int = 10,
) -> list[str]:
    """Everything wrong with `records` against the truth rows: duplicates, missing or unexpected
    keys, fields missing, extra or different. Empty when they are the same table."""
    problems: list[str] = []
    dupes = duplicate_keys(stream, records)
    if dupes:
        problems.append(f"{len(dupes)} duplicate keys, e.g. {dupes[:5]}")
    got = {key_of(stream, record): record for record in records}
    want = {key_of(stream, row): row for row in expected}
    missing = sorted(set(want) - set(got), key=repr)
    unexpected = sorted(set(got) - set(want), key=repr)
    if missing:
        problems.append(f"{len(missing)} of {len(want)} truth rows missing, e.g. {missing[:5]}")
    if unexpected:
        problems.append(f"{len(unexpected)} rows not in truth, e.g. {unexpected[:5]}")
    mismatches: list[str] = []
    for key, row in want.items():
        record = got.get(key)
        if record is None:
            continue
        if record.keys() != row.keys():
            mismatches.append(
                f"{key}: fields missing {sorted(row.keys() - record.keys())}, "
                f"extra {sorted(record.keys() - row.keys())}"
            )
            continue
        for name, value in row.items():
            if not same_value(value, record[name]):
                mismatches.append(f"{key}.{name}: truth {value!r}, tap {record[name]!r}")
    if mismatches:
        problems.append(f"{len(mismatches)} value mismatches: " + "; ".join(mismatches[:limit]))
    return [f"{stream}: {problem}" for problem in problems]


def upsert(stream: str, *batches: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """What an upserting target holds after loading `batches` in order (last write wins)."""
    table: dict[tuple, Mapping[str, Any]] = {}
    for batch in batches:
        for record in batch:
            table[key_of(stream, record)] = record
    return list(table.values())


def schema_errors(schema: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> list[str]:
    validator_class = jsonschema.validators.validator_for(schema, jsonschema.Draft7Validator)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    errors = []
    for record in records:
        for error in validator.iter_errors(record):
            path = "/".join(str(part) for part in error.absolute_path)
            errors.append(f"{path}: {error.message}")
    return errors


# ------------------------------------------------------------------------------ request log


def timestamp(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def raw_params(entry: Mapping[str, Any]) -> dict[str, list[str]]:
    """The raw (still percent-encoded) values of each query parameter of a logged request."""
    params: dict[str, list[str]] = {}
    query = entry.get("query") or ""
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        params.setdefault(urllib.parse.unquote_plus(name), []).append(value)
    return params


def param(entry: Mapping[str, Any], name: str) -> str | None:
    """A decoded query parameter (`+` is not decoded to a space: a raw `+` stays a `+`)."""
    values = raw_params(entry).get(name)
    return urllib.parse.unquote(values[-1]) if values else None


def paths_of(streams: Sequence[str]) -> list[re.Pattern[str]]:
    return [pattern for group, pattern in PATH_GROUPS.items() if set(group) & set(streams)]


def requests_for(log: Iterable[Mapping[str, Any]], pattern: re.Pattern[str]) -> list[dict]:
    return [dict(entry) for entry in log if pattern.match(entry["path"])]


# ------------------------------------------------------------------------------ runs


@dataclass
class Sync:
    """One tap run against a sandbox, with what the sandbox saw and held around it."""

    run: TapRun
    log: list[dict[str, Any]]
    truth: dict[str, Any]
    started: float
    finished: float
    config: dict[str, Any] = field(default_factory=dict)

    def records(self, stream: str) -> list[dict[str, Any]]:
        return self.run.records.get(stream, [])

    def bookmark(self, stream: str) -> Any:
        state = self.run.final_state or {}
        return (state.get("bookmarks", {}).get(stream) or {}).get("replication_key_value")


@dataclass
class IncrementalScenario:
    """A full sync, then changes of every kind issue #3 names, then a run with the full sync's
    final state. `changed` holds the ids the mutations touched."""

    full: Sync
    incremental: Sync
    changed: dict[str, Any] = field(default_factory=dict)


def sync(
    server: SandboxProcess,
    config: Mapping[str, Any],
    *,
    state: Mapping[str, Any] | None = None,
    catalog: Mapping[str, Any] | None = None,
    truth_key: str | None = None,
    timeout: float = 600,
) -> Sync:
    """Run the tap, then read the sandbox's request log of the run and its truth."""
    after = last_seq(server)
    started = time.time()
    run = run_tap(config, state=state, catalog=catalog, timeout=timeout)
    finished = time.time()
    log = server.requests_log(after=after)
    key = truth_key or config.get("api_key") or (config.get("api_keys") or [OWNER_KEY])[0]
    truth = server.truth(key)
    return Sync(run, log, truth, started, finished, dict(config))


def assert_synced_as_truth(result: Sync, stream: str) -> None:
    """The run succeeded and emitted exactly the truth's rows of `stream` (read after it)."""
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    problems = stream_problems(stream, result.records(stream), truth_rows(result.truth, stream))
    assert not problems, problems


def summaries(run: TapRun) -> dict[str, list[dict[str, Any]]]:
    """The end-of-run summary lines, by stream (a list, to catch a stream reported twice)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for line in run.summary_lines():
        counts = SUMMARY_COUNTS.search(line)
        skipped = SUMMARY_SKIPPED.search(line)
        if counts:
            entry: dict[str, Any] = {
                name: int(value) for name, value in counts.groupdict().items() if name != "stream"
            }
            found.setdefault(counts["stream"], []).append(entry)
        elif skipped:
            found.setdefault(skipped["stream"], []).append({"skipped": skipped["reason"]})
        else:
            found.setdefault("<unparsed>", []).append({"line": line})
    return found


def london_date(moment: float | dt.datetime) -> dt.date:
    if isinstance(moment, int | float):
        moment = dt.datetime.fromtimestamp(moment, dt.timezone.utc)
    return moment.astimezone(LONDON).date()


def stderr_tail(run: TapRun, chars: int = 3000) -> str:
    return run.stderr[-chars:]
