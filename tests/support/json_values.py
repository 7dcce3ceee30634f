"""Comparing a record the tap emitted with the sandbox's JSON: one rule for every test suite."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)$")


def parse_instant(value: Any) -> dt.datetime | None:
    """An ISO 8601 instant with an offset, else None (dates and naive values are not instants)."""
    if not isinstance(value, str) or not INSTANT.match(value):
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def same_value(expected: Any, actual: Any) -> bool:
    """Equal JSON values; instants compare as instants whatever their offset."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, str) and isinstance(actual, str):
        left, right = parse_instant(expected), parse_instant(actual)
        if left is not None and right is not None:
            return left == right
        return expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            same_value(value, actual[name]) for name, value in expected.items()
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            same_value(left, right) for left, right in zip(expected, actual, strict=True)
        )
    return expected == actual
