"""Issue #7.9: the personal-data recipes of docs/security.md work. The in-tap SDK `stream_maps`
recipe, and the `hash-pii` mapping of meltano.yml applied the same way, turn emails and phone
numbers into SHA-256 digests and drop names and birthdays, in records and in schemas, so no raw
value leaves the tap; an anonymised member's later row replaces the earlier one by primary key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from guestdata_sandbox.accounts import LIMITED_ACCESS_KEY
from guestdata_sandbox.testing import SandboxProcess
from support.reliability import (
    assert_records_match,
    by_key,
    catalog_for,
    reliability_config,
    row_differences,
    run,
)
from support.sandbox import OWNER_KEY
from support.streams import truth_rows

ROOT = Path(__file__).resolve().parents[2]
DROPPED = {
    "guests": {"name", "first_name", "last_name"},
    "members": {"first_name", "last_name", "date_of_birth"},
}
HASHED = {"guests": {"email", "phone"}, "members": {"email", "phone_e164"}}

# The recipe of docs/security.md, as the tap's own `stream_maps` setting.
IN_TAP_STREAM_MAPS: dict[str, dict[str, Any]] = {
    "guests": {
        "email": "sha256(email.strip().lower()) if email else None",
        "phone": "sha256(phone.replace(' ', '')) if phone else None",
        "name": "__NULL__",
        "first_name": "__NULL__",
        "last_name": "__NULL__",
    },
    "members": {
        "email": "sha256(email.strip().lower()) if email else None",
        "phone_e164": "sha256(phone_e164) if phone_e164 else None",
        "first_name": "__NULL__",
        "last_name": "__NULL__",
        "date_of_birth": "__NULL__",
    },
}


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def expected_row(stream: str, row: dict) -> dict:
    """A truth row as the recipe should emit it."""
    result = {name: value for name, value in row.items() if name not in DROPPED[stream]}
    if row.get("email"):
        result["email"] = sha256(row["email"].strip().lower())
    phone_field = "phone" if stream == "guests" else "phone_e164"
    if row.get(phone_field):
        result[phone_field] = (
            sha256(row[phone_field].replace(" ", ""))
            if stream == "guests"
            else sha256(row[phone_field])
        )
    return result


def meltano_hash_pii_maps() -> dict[str, Any]:
    project = yaml.safe_load((ROOT / "meltano.yml").read_text())
    mapper = next(
        plugin
        for plugin in project["plugins"]["mappers"]
        if plugin["name"] == "meltano-map-transformer"
    )
    mapping = next(item for item in mapper["mappings"] if item["name"] == "hash-pii")
    return mapping["config"]["stream_maps"]


def personal_values(rows: list[dict], stream: str) -> set[str]:
    fields = DROPPED[stream] | HASHED[stream]
    return {row[name] for row in rows for name in fields if isinstance(row.get(name), str)}


@pytest.mark.parametrize("recipe", ["in-tap", "meltano-hash-pii"])
@pytest.mark.parametrize("key", [OWNER_KEY, LIMITED_ACCESS_KEY], ids=["owner", "masked"])
def test_pii_recipe_hashes_contacts_and_drops_names_before_output(
    recipe: str, key: str, sandbox: SandboxProcess
) -> None:
    maps = IN_TAP_STREAM_MAPS if recipe == "in-tap" else meltano_hash_pii_maps()
    config = reliability_config(sandbox, key=key, stream_maps=maps)
    streams = ["guests", "members"]

    tap_run = run(config, catalog=catalog_for(config, streams))

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    for stream in streams:
        truth = truth_rows(sandbox.truth(key), stream)
        assert truth, f"no {stream} in the truth: the test proves nothing"
        assert_records_match(
            stream,
            tap_run.records.get(stream, []),
            [expected_row(stream, row) for row in truth],
        )
        properties = tap_run.schemas[stream]["properties"]
        assert not DROPPED[stream] & set(properties), f"{stream} schema still declares names"
        assert HASHED[stream] <= set(properties)
        # No raw personal value anywhere in what the tap printed.
        raw = {value for value in personal_values(truth, stream) if len(value) >= 4}
        leaked = [value for value in raw if value in tap_run.stdout]
        assert not leaked, f"{len(leaked)} raw personal values in the output, e.g. {leaked[:3]}"


def test_in_tap_recipe_equals_the_meltano_mapping() -> None:
    """docs/security.md gives one recipe for both places; they must not drift apart."""
    assert meltano_hash_pii_maps() == IN_TAP_STREAM_MAPS


def test_anonymised_member_row_replaces_the_earlier_one_by_key(
    fresh_sandbox: SandboxProcess,
) -> None:
    server = fresh_sandbox
    config = reliability_config(server)
    catalog = catalog_for(config, ["members"])
    first = run(config, catalog=catalog)
    assert first.returncode == 0, first.stderr[-3000:]
    member = first.records["members"][0]
    assert member["anonymised_at"] is None and member["email"]

    server.mutate("update_member", member_id=member["id"], fields={"anonymise": True})
    second = run(config, catalog=catalog, state=first.final_state)

    assert second.returncode == 0, second.stderr[-3000:]
    later = [row for row in second.records.get("members", []) if row["id"] == member["id"]]
    assert later, "the anonymised member was not re-emitted by the incremental run"
    assert later[-1]["anonymised_at"] is not None
    assert later[-1]["email"] != member["email"]
    # What an upserting target keeps: the last row per primary key.
    table = {key: rows[-1] for key, rows in by_key("members", first.records["members"]).items()}
    table.update(by_key_last(second.records["members"]))
    truth = truth_rows(server.truth(OWNER_KEY), "members")
    assert_records_match("members", list(table.values()), truth)
    erased = next(row for row in truth if row["id"] == member["id"])
    assert not row_differences(erased, table[(member["id"],)])


def by_key_last(rows: list[dict]) -> dict[tuple, dict]:
    return {key: copies[-1] for key, copies in by_key("members", rows).items()}


def test_salted_hash_recipe_uses_a_secret_from_stream_map_config(sandbox: SandboxProcess) -> None:
    salt = "pepper-from-the-secret-store"
    maps = {
        "guests": {
            "email": "sha256(config['pii_salt'] + email.strip().lower()) if email else None",
            "phone": "__NULL__",
        }
    }
    config = reliability_config(sandbox, stream_maps=maps, stream_map_config={"pii_salt": salt})

    tap_run = run(config, catalog=catalog_for(config, ["guests"]))

    assert tap_run.returncode == 0, tap_run.stderr[-3000:]
    truth = {row["id"]: row for row in truth_rows(sandbox.truth(OWNER_KEY), "guests")}
    records = tap_run.records["guests"]
    assert len(records) == len(truth)
    for record in records:
        expected = sha256(salt + truth[record["id"]]["email"].strip().lower())
        assert record["email"] == expected
        assert "phone" not in record
    assert salt not in tap_run.stdout
