"""The schema watch (stream/drift.py) on a stand-in stream: undeclared fields dropped or refused,
contradicting types refused, and declared fields that never came reported."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from tap_guestdata.stream.drift import SchemaDriftError, SchemaWatch

SCHEMA = {
    "properties": {
        "id": {"type": ["integer"]},
        "email": {"type": ["string", "null"]},
        "score": {"type": ["number", "null"]},
    }
}


def stream(logger_name: str = "test.drift") -> Any:
    return SimpleNamespace(
        name="guests",
        selected=True,
        effective_schema=SCHEMA,
        mask={("properties", name): True for name in SCHEMA["properties"]},
        primary_keys=("id",),
        logger=logging.getLogger(logger_name),
    )


def test_an_undeclared_field_is_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    watch = SchemaWatch(stream(), "drop")
    rows = [{"id": 1, "email": None, "score": 1, "tier": "gold"}, {"id": 2, "tier": "silver"}]
    with caplog.at_level(logging.WARNING):
        for row in rows:
            watch.check(row)
    assert rows == [{"id": 1, "email": None, "score": 1}, {"id": 2}]
    assert [record.message.count("'tier'") for record in caplog.records] == [1]


def test_an_undeclared_field_stops_the_run_when_drift_fails() -> None:
    watch = SchemaWatch(stream(), "fail")
    with pytest.raises(SchemaDriftError, match=r"field 'tier'.*record id=3"):
        watch.check({"id": 3, "tier": "gold"})


def test_a_contradicting_type_stops_the_run_and_an_int_is_a_number() -> None:
    watch = SchemaWatch(stream(), "include")
    watch.check({"id": 1, "email": "a@b", "score": 2})  # an integer where a number is declared
    with pytest.raises(
        SchemaDriftError, match=r"id=True \(boolean\) where the schema declares integer"
    ):
        watch.check({"id": True})


def test_declared_fields_that_never_came_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    watch = SchemaWatch(stream(), "include")
    watch.check({"id": 1, "email": None})
    with caplog.at_level(logging.WARNING):
        watch.report_missing()
    assert "declared field(s) score never arrived in 1 records" in caplog.text
