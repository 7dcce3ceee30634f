"""Issue #25 under dbt-snowflake against fakesnow: guests deleted in the API inside a refresh's
window are flagged, whatever start_date, with the same macros as on PostgreSQL.

On the module's load and build (`built`): two guests picked from the data (support/deletions.py)
are deleted in the sandbox, then the weekly refresh runs with a start_date after the account's
first day (no whole-history ACTIVATE_VERSION is possible), followed by dbt build. Both raw rows are
flagged and lose their contact, no other row changes, staging leaves them out, every model
builds and every test passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.dbt import assert_every_model_built_and_every_test_passed
from support.deletions import DeletionCase, assert_contact_removed
from support.pipeline import business
from support.snowflake_pipeline import DBT_UTILITY, LOADER, SCHEMA, SnowflakePipeline
from support.streams import truth_rows

pytestmark = pytest.mark.snowflake

REFRESH_AND_BUILD = (
    "--environment=dev",
    "run",
    "--full-refresh",
    "tap-guestdata--refresh",
    LOADER,
    f"{DBT_UTILITY}:build",
)
STAGING = f"{SCHEMA}_ANALYTICS_STAGING"


def raw_guests(pipeline: SnowflakePipeline) -> dict[int, dict[str, Any]]:
    (rows,) = pipeline.warehouse.query(f"SELECT * FROM {SCHEMA}.GUESTS")
    return {row["ID"]: {name.lower(): value for name, value in row.items()} for row in rows}


def test_a_refresh_with_start_date_flags_guests_deleted_inside_its_window_under_fakesnow(
    built: SnowflakePipeline,
    module_sandbox: SandboxProcess,
    module_truth: Callable[[], dict],
    dbt_target: Any,
) -> None:
    before = raw_guests(built)
    case = DeletionCase.pick(module_truth())
    assert set(before) == {row["id"] for row in truth_rows(module_truth(), "guests")}
    for guest_id in case.ids:
        module_sandbox.mutate("delete_guest", guest_id=guest_id)

    already = built.log_path.read_text()
    built.env["TAP_GUESTDATA_START_DATE"] = case.refresh_start.isoformat()
    try:
        built.run(*REFRESH_AND_BUILD)
    finally:
        del built.env["TAP_GUESTDATA_START_DATE"]
    output = built.log_path.read_text()[len(already) :]
    assert "Deletions: guests: every row from " + case.refresh_start.isoformat() in output
    assert "source deletions: rows the API no longer returns, newly flagged: guests=2" in output

    after = raw_guests(built)
    assert {gid for gid, row in after.items() if row["_sdc_deleted_at"] is not None} == case.ids
    assert set(after) == set(before)
    changed = [
        gid for gid in set(before) - case.ids if business(after[gid]) != business(before[gid])
    ]
    assert not changed, changed[:10]
    for guest_id in case.ids:
        row = after[guest_id]
        assert_contact_removed(row)
    (staged,) = built.warehouse.query(f"SELECT guest_visit_id FROM {STAGING}.STG_GUESTDATA__GUESTS")
    assert {row["GUEST_VISIT_ID"] for row in staged} == set(before) - case.ids
    assert_every_model_built_and_every_test_passed(dbt_target)
