"""Issue #3, point 1: a full sync is lossless, schema-valid, duplicate-free, and uses the API
well."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from support.streams import ALL_STREAMS, BOOKKEEPING_STREAMS, STREAM_KEYS, truth_rows
from support.tap_suite import (
    PAGED_LIST_PATH,
    Sync,
    duplicate_keys,
    param,
    schema_errors,
    stream_problems,
)

MASKED_KEYS = ("gd_limited_access", "gd_team_some_venues")


def catalog_entry(catalog: dict, stream: str) -> dict:
    entries = [entry for entry in catalog["streams"] if entry["tap_stream_id"] == stream]
    assert len(entries) == 1, f"{stream} appears {len(entries)} times in the catalog"
    return entries[0]


def test_catalog_has_every_stream_with_its_primary_key(owner_catalog: dict) -> None:
    streams = {entry["tap_stream_id"]: entry for entry in owner_catalog["streams"]}
    assert set(streams) == set(ALL_STREAMS) | set(BOOKKEEPING_STREAMS)
    for stream, key in STREAM_KEYS.items():
        entry = streams[stream]
        assert tuple(entry.get("key_properties") or ()) == key, stream
        root = next(m["metadata"] for m in entry["metadata"] if not m["breadcrumb"])
        assert tuple(root.get("table-key-properties") or ()) == key, stream


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_full_sync_equals_ground_truth(owner_full_sync: Sync, stream: str) -> None:
    expected = truth_rows(owner_full_sync.truth, stream)
    assert expected, f"the sandbox truth has no {stream} rows: the test would prove nothing"
    problems = stream_problems(stream, owner_full_sync.records(stream), expected)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_full_sync_has_no_duplicate_primary_keys(owner_full_sync: Sync, stream: str) -> None:
    records = owner_full_sync.records(stream)
    assert records
    assert duplicate_keys(stream, records) == []


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_records_validate_against_discovered_schema(
    owner_full_sync: Sync, owner_catalog: dict, stream: str
) -> None:
    records = owner_full_sync.records(stream)
    assert records
    schema = catalog_entry(owner_catalog, stream)["schema"]
    errors = schema_errors(schema, records)
    assert not errors, f"{len(errors)} errors, e.g. {errors[:10]}"
    # The SCHEMA message the sync sent validates them too.
    errors = schema_errors(owner_full_sync.run.schemas[stream], records)
    assert not errors, f"{len(errors)} errors against the SCHEMA message, e.g. {errors[:10]}"


def test_full_sync_includes_archived_offers(owner_full_sync: Sync) -> None:
    archived = {row["id"] for row in owner_full_sync.truth["offers"] if row["status"] == "archived"}
    assert archived, "the sandbox truth has no archived offer"
    assert archived <= set(owner_full_sync.run.ids("offers"))
    assert archived <= set(owner_full_sync.run.ids("offer_stats", "offer_id"))


def test_every_list_request_asks_for_200_per_page(owner_full_sync: Sync) -> None:
    listed = [entry for entry in owner_full_sync.log if PAGED_LIST_PATH.match(entry["path"])]
    assert listed
    wrong = [
        (entry["path"], entry["query"]) for entry in listed if param(entry, "per_page") != "200"
    ]
    assert not wrong, f"{len(wrong)} of {len(listed)} list requests, e.g. {wrong[:5]}"


def test_full_sync_draws_no_422_and_no_error(owner_full_sync: Sync) -> None:
    statuses = Counter(entry["status"] for entry in owner_full_sync.log)
    assert statuses[422] == 0, statuses
    assert set(statuses) == {200}, statuses
    assert all(entry["key"] == owner_full_sync.config["api_key"] for entry in owner_full_sync.log)


@pytest.mark.parametrize("key", MASKED_KEYS)
def test_masked_rows_full_sync_equals_truth_and_validates(
    full_sync_for: Callable[[str], Sync], owner_catalog: dict, key: str
) -> None:
    result = full_sync_for(key)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    problems = []
    for stream in ALL_STREAMS:
        expected = truth_rows(result.truth, stream)
        records = result.records(stream)
        problems += stream_problems(stream, records, expected)
        schema = catalog_entry(owner_catalog, stream)["schema"]
        problems += [f"{stream}: {error}" for error in schema_errors(schema, records)[:5]]
    assert not problems, "\n".join(problems)
    assert set(Counter(entry["status"] for entry in result.log)) == {200}


@pytest.mark.parametrize("key", MASKED_KEYS)
def test_masked_member_rows_are_synced_as_masked(
    full_sync_for: Callable[[str], Sync], key: str
) -> None:
    """The masked rows really are in the sync (spec 2.8: asterisks, nulled last name and birth
    date), so the comparison above covers them."""
    members = full_sync_for(key).records("members")
    masked = [row for row in members if "*" in (row.get("email") or "")]
    assert masked, f"no masked member rows synced with {key}"
    assert all(row["last_name"] is None and row["date_of_birth"] is None for row in masked)
