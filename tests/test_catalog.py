"""The catalog of streams (tap_guestdata/run/catalog.py) agrees with the tap it describes."""

from __future__ import annotations

import json
from pathlib import Path

from tap_guestdata.run import catalog
from tap_guestdata.tap import STREAM_TYPES

SCHEMAS = Path(catalog.__file__).parents[1] / "schemas"


def test_the_catalog_names_every_stream_of_the_tap_once() -> None:
    assert [facts.name for facts in catalog.STREAMS] != []
    assert sorted(facts.name for facts in catalog.STREAMS) == sorted(s.name for s in STREAM_TYPES)
    assert len(catalog.BY_NAME) == len(catalog.STREAMS)


def test_every_group_loads_streams_and_every_stream_has_a_known_group() -> None:
    assert {facts.group for facts in catalog.STREAMS} == set(catalog.GROUPS)
    assert catalog.streams_of_group("stats") == ("daily_stats", "daily_account_stats")


def test_personal_fields_are_fields_of_the_stream_schema() -> None:
    fields = catalog.personal_fields()
    assert set(fields) == {"guests", "members"}
    for stream, names in fields.items():
        properties = json.loads((SCHEMAS / f"{stream}.json").read_text())["properties"]
        assert set(names) <= set(properties), stream


def test_refreshed_and_windowed_streams() -> None:
    assert set(catalog.refreshed_weekly()) <= set(catalog.windowed_streams())
    assert catalog.windowed_streams("offers") == ()
