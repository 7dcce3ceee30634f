"""The soak test (test_soak.py): a nightly job, not part of scripts/test.

It registers its marker here. scripts/test leaves tests/soak out (`--ignore`): nothing is
skipped there, the nightly job runs it. Its fixtures (`pg_server`, `meltano_installed`) are
support.pipeline's, registered in tests/conftest.py.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "soak: the nightly soak test, 14 simulated days of the accounts DAG (scripts/soak)",
    )
