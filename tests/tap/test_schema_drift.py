"""Issue #10, point 3: schema drift announced and not lost. The sandbox's `add_field` and
`remove_field` mutations change the rows of a path as a vendor would (docs/sandbox.md)."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import tap_config
from support.tap_process import TapRun, discover, run_tap, select_streams
from support.tap_suite import Sync, sync

FIELD = "loyalty_segment"
GUEST_VALUES = [None, None, "gold", "silver"]  # by guest id: some rows' first values are null
DRIFT_WARNING = re.compile(r"WARNING.*Schema drift")


def singer_messages(run: TapRun) -> list[dict[str, Any]]:
    """stdout's Singer messages in the order written."""
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"type"')]


def drift_warnings(run: TapRun) -> list[str]:
    return [line for line in run.stderr.splitlines() if DRIFT_WARNING.search(line)]


def failure_lines(run: TapRun) -> list[str]:
    return [line for line in run.stderr.splitlines() if "Sync failed:" in line]


def drift_sync(server: SandboxProcess, streams: list[str], **settings: Any) -> Sync:
    config = tap_config(server, **settings)
    return sync(server, config, catalog=select_streams(discover(config), streams))


def assert_declared_before_first_value(run: TapRun, stream: str, field: str) -> dict[str, Any]:
    """The stream's SCHEMA gains `field` before the first record carrying a value for it, and no
    record before that carries the field at all. Returns the property the SCHEMA declares."""
    declared: dict[str, Any] | None = None
    carried = 0
    for message in singer_messages(run):
        if message.get("stream") != stream:
            continue
        if message["type"] == "SCHEMA":
            declared = message["schema"]["properties"].get(field, declared)
        elif message["type"] == "RECORD" and field in message["record"]:
            assert declared is not None, f"{stream}: a record carried {field} before its SCHEMA"
            carried += 1
    assert declared is not None and carried, f"{stream}: {field} never declared or never carried"
    return declared


def test_a_new_field_warns_once_and_is_declared_before_its_first_value(
    fresh_sandbox: SandboxProcess,
) -> None:
    server = fresh_sandbox
    server.mutate("add_field", path="/guests", field=FIELD, values=GUEST_VALUES)
    server.mutate("add_field", path="/rewards/members/{id}/ledger", field="channel", value=7)
    result = drift_sync(server, ["guests", "members", "member_ledger"])
    run = result.run
    assert run.returncode == 0, run.stderr[-3000:]

    warnings = drift_warnings(run)
    assert len(warnings) == 2, warnings
    assert any("guests" in line and f"'{FIELD}'" in line for line in warnings), warnings
    assert any("member_ledger" in line and "'channel'" in line for line in warnings), warnings

    assert assert_declared_before_first_value(run, "guests", FIELD) == {"type": ["string", "null"]}
    assert assert_declared_before_first_value(run, "member_ledger", "channel") == {
        "type": ["integer", "null"]
    }
    # Every value reached the records: a record lacks the field only where the API sent null.
    truth = {row["id"]: row[FIELD] for row in result.truth["guests"]}
    records = result.records("guests")
    assert len(records) == len(truth)
    assert all(record.get(FIELD) == truth[record["id"]] for record in records)
    assert {record.get(FIELD) for record in records} == {None, "gold", "silver"}
    assert {line["channel"] for line in result.records("member_ledger")} == {7}
    # One SCHEMA more per changed stream (a child's per-parent repeats stay dropped); streams
    # the sandbox left alone send one, unchanged.
    schemas = Counter(m["stream"] for m in singer_messages(run) if m["type"] == "SCHEMA")
    assert schemas == {"guests": 2, "member_ledger": 2, "members": 1}, schemas


def test_a_new_field_reaches_the_stream_maps_alias(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    server.mutate("add_field", path="/guests", field=FIELD, value="gold")
    maps = {"guests": {"__alias__": "visitors", "email": "__NULL__"}}
    run = drift_sync(server, ["guests"], stream_maps=maps).run
    assert run.returncode == 0, run.stderr[-3000:]
    assert "guests" not in run.records
    assert assert_declared_before_first_value(run, "visitors", FIELD)["type"][0] == "string"
    assert {record[FIELD] for record in run.records["visitors"]} == {"gold"}
    assert all("email" not in record for record in run.records["visitors"])


def test_drop_mode_leaves_the_field_out_with_one_warning(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    server.mutate("add_field", path="/guests", field=FIELD, values=GUEST_VALUES)
    run = drift_sync(server, ["guests"], schema_drift="drop").run
    assert run.returncode == 0, run.stderr[-3000:]
    warnings = drift_warnings(run)
    assert len(warnings) == 1 and "schema_drift=drop" in warnings[0], warnings
    assert run.records["guests"]
    assert all(FIELD not in record for record in run.records["guests"])
    assert FIELD not in run.schemas["guests"]["properties"]


def test_fail_mode_stops_the_run_with_one_line(fresh_sandbox: SandboxProcess) -> None:
    server = fresh_sandbox
    server.mutate("add_field", path="/guests", field=FIELD, value="gold")
    run = drift_sync(server, ["guests"], schema_drift="fail").run
    assert run.returncode != 0
    failures = failure_lines(run)
    assert len(failures) == 1, run.stderr[-3000:]
    assert "guests" in failures[0] and f"'{FIELD}'" in failures[0], failures
    assert "schema_drift=fail" in failures[0]
    assert "Traceback" not in run.stderr
    assert not run.records.get("guests")


@pytest.mark.parametrize(
    ("path", "stream", "field", "value", "expected", "found"),
    [
        ("/guests", "guests", "venue_id", "V12", "integer", "string"),
        ("/rewards/members", "members", "visits_count", True, "integer", "boolean"),
        ("/rewards/redemptions", "redemptions", "status", 3, "string", "integer"),
    ],
)
def test_a_value_of_another_type_stops_the_run_naming_record_field_and_types(
    fresh_sandbox: SandboxProcess,
    path: str,
    stream: str,
    field: str,
    value: Any,
    expected: str,
    found: str,
) -> None:
    server = fresh_sandbox
    newest = server.truth("gd_owner_growth_1", resource=stream)[0]["id"]  # newest first
    server.mutate("add_field", path=path, field=field, value=value)
    run = drift_sync(server, [stream]).run
    assert run.returncode != 0
    failures = failure_lines(run)
    assert len(failures) == 1, run.stderr[-3000:]
    line = failures[0]
    for part in (f"{stream}:", f"id={newest}", f"{field}=", f"({found})", f"declares {expected}"):
        assert part in line, (part, line)


def test_a_deselected_field_of_another_type_does_not_stop_the_run(
    fresh_sandbox: SandboxProcess,
) -> None:
    """The way out the failure line names: deselect the field, the rest syncs."""
    server = fresh_sandbox
    server.mutate("add_field", path="/guests", field="venue_id", value="V12")
    config = tap_config(server)
    catalog = select_streams(discover(config), ["guests"])
    entry = next(entry for entry in catalog["streams"] if entry["tap_stream_id"] == "guests")
    for metadata in entry["metadata"]:
        if metadata["breadcrumb"] == ["properties", "venue_id"]:
            metadata["metadata"]["selected"] = False
    run = sync(server, config, catalog=catalog).run
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.records["guests"] and all("venue_id" not in row for row in run.records["guests"])


def test_a_declared_field_that_never_arrives_warns_once_at_the_end(
    fresh_sandbox: SandboxProcess,
) -> None:
    server = fresh_sandbox
    server.mutate("remove_field", path="/guests", field="phone")
    run = drift_sync(server, ["guests"]).run
    assert run.returncode == 0, run.stderr[-3000:]
    warnings = drift_warnings(run)
    assert len(warnings) == 1, warnings
    assert "guests" in warnings[0] and "phone" in warnings[0] and "never arrived" in warnings[0]
    assert f"in {len(run.records['guests']):,} records" in warnings[0]
    assert all("phone" not in record for record in run.records["guests"])


def test_an_unchanged_api_gives_no_drift_warning(owner_full_sync: Sync) -> None:
    """Every stream of a full sync matches its schema: no false alarm."""
    assert owner_full_sync.run.records, "the full sync emitted nothing"
    assert drift_warnings(owner_full_sync.run) == []
    assert "Schema drift" not in owner_full_sync.run.stderr


def test_an_unselected_parent_is_not_watched(fresh_sandbox: SandboxProcess) -> None:
    """members is read for its ledgers but not written: its rows raise no drift."""
    server = fresh_sandbox
    server.mutate("add_field", path="/rewards/members", field="visits_count", value="many")
    run = drift_sync(server, ["member_ledger"]).run
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.records["member_ledger"] and "members" not in run.records
    assert drift_warnings(run) == []


def test_schema_drift_setting_refuses_unknown_modes(fresh_sandbox: SandboxProcess) -> None:
    run = run_tap(tap_config(fresh_sandbox, schema_drift="ignore"))
    assert run.returncode != 0
    assert "schema_drift" in run.stderr
