"""The demo (`scripts/demo`) and the checks it prints, including its embedded PostgreSQL."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from demo_pipeline import compare_stream, same_value
from support.streams import STREAM_KEYS

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_demo_loads_the_embedded_postgres_and_every_table_matches(tmp_path: Path) -> None:
    """The fallback for machines with no server: real PostgreSQL, checked value for value."""
    result = subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "scripts" / "demo_pipeline.py"),
            "--embedded",
            "--embedded-pgdata",
            str(tmp_path / "pgdata"),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "embedded PostgreSQL 16 (pgserver)" in output
    table = [line.split() for line in result.stdout.splitlines() if line.strip()]
    rows = {cells[0]: cells for cells in table if cells[0] in STREAM_KEYS}
    assert set(rows) == set(STREAM_KEYS)  # every stream of the tap
    for stream, cells in rows.items():
        assert cells[1] == cells[2] and cells[3] == "yes", (stream, cells)
        assert int(cells[1]) > 0, f"{stream}: the demo should load rows"
    assert "differing: 0" in result.stdout
    # dbt built the models (the job's last step) and the report reads the marts.
    report = result.stdout.split("Report from the marts")[1]
    for heading in ("busiest venues", "opt-in rate", "member tier mix", "redemption rate"):
        assert heading in report, heading
    assert "people may be sent marketing now" in report


# The demo's verdict is only worth something if it catches what a loader can get wrong.


def test_check_flags_a_missing_row_a_duplicate_and_a_changed_value() -> None:
    expected = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    loaded = [{"id": 1, "name": "a"}, {"id": 1, "name": "a"}, {"id": 3, "name": "C"}]
    check = compare_stream("venues", loaded, expected)
    assert not check.matches
    assert check.missing_keys == [(2,)]
    assert check.duplicate_keys == 1
    assert check.value_mismatches == [((3,), "name", "c", "C")]


def test_check_rejects_naive_or_shifted_timestamps() -> None:
    instant = "2026-06-01T10:00:00+01:00"
    assert same_value(instant, dt.datetime(2026, 6, 1, 9, tzinfo=dt.timezone.utc))
    # What target-duckdb 0.8.0 and a naive column give: wall time with the offset lost.
    assert not same_value(instant, dt.datetime(2026, 6, 1, 10))
    assert not same_value(instant, dt.datetime(2026, 6, 1, 10, tzinfo=dt.timezone.utc))


@pytest.mark.parametrize(
    ("expected", "loaded", "equal"),
    [
        ("2026-11-01", dt.date(2026, 11, 1), True),
        (1.5, Decimal("1.5"), True),
        (2, Decimal("2"), True),
        (True, True, True),
        (1, True, False),
        ({"open": "09:00"}, {"open": "09:00"}, True),
        ([1, 2], [1, 2], True),
        (None, None, True),
        (None, "", False),
    ],
)
def test_check_compares_json_values_with_postgres_values(expected, loaded, equal: bool) -> None:
    assert same_value(expected, loaded) is equal
