"""Reliability suite: every test is checked for leaked API keys after it ran."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.reliability import LEAK_WATCH


@pytest.fixture(autouse=True)
def no_key_leaks() -> Iterator[None]:
    """Fails the test if any API key appears in any tap output, log or exception text it saw."""
    LEAK_WATCH.reset()
    yield
    found = LEAK_WATCH.leaks()
    if found:
        pytest.fail("API key leaked: " + "; ".join(found[:10]), pytrace=False)
