"""The Meltano plugin definitions users add with --from-ref (plugin/) are what the tap says.

plugin/extractors/tap-guestdata.yml is generated from `tap-guestdata --about --format=json` by
scripts/plugin_definition.py; a setting added, changed or dropped in the tap without
regenerating fails here.
"""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout
from typing import Any

import pytest
import yaml

import plugin_definition
from plugin_definition import EXTRACTOR_FILE, LOADER_FILE, disagreements, stale_files
from tap_guestdata.tap import TapGuestData


@pytest.fixture(scope="module")
def about() -> dict[str, Any]:
    return plugin_definition.cli_about()


def about_in_process(tap_class: type[TapGuestData] = TapGuestData) -> dict[str, Any]:
    """What `--about --format=json` prints, from the class in this process (patchable)."""
    output = io.StringIO()
    with redirect_stdout(output):
        tap_class.print_about("json")
    result: dict[str, Any] = json.loads(output.getvalue())
    return result


def committed_extractor() -> dict[str, Any]:
    definition: dict[str, Any] = yaml.safe_load(EXTRACTOR_FILE.read_text())
    return definition


def test_committed_definitions_are_what_the_generator_writes(about: dict[str, Any]) -> None:
    assert stale_files(about) == [], f"run .venv/bin/python {plugin_definition.SCRIPT}"


def test_every_tap_setting_is_in_the_definition_with_its_kind_default_and_description(
    about: dict[str, Any],
) -> None:
    definition = committed_extractor()
    assert disagreements(about, definition["settings"]) == []
    properties = about["settings"]["properties"]
    secrets = {name for name, schema in properties.items() if schema.get("secret")}
    sensitive = {entry["name"] for entry in definition["settings"] if entry.get("sensitive")}
    assert secrets == sensitive == {"api_key", "api_keys"}
    assert all(entry["label"] for entry in definition["settings"])
    assert definition["capabilities"] == sorted(about["capabilities"])
    assert definition["pip_url"] == f"tap-guestdata=={about['version']}"
    assert (definition["name"], definition["namespace"], definition["executable"]) == (
        "tap-guestdata",
        "tap_guestdata",
        "tap-guestdata",
    )
    # A first run needs a key (or a pool of keys) and the API root.
    assert definition["settings_group_validation"] == [
        ["api_key", "base_url"],
        ["api_keys", "base_url"],
    ]


def test_the_in_process_about_is_the_clis(about: dict[str, Any]) -> None:
    """So the next test, which patches the class, shows what the CLI would print."""
    assert about_in_process() == about


def extended(change: str) -> type[TapGuestData]:
    schema = copy.deepcopy(TapGuestData.config_jsonschema)
    properties = schema["properties"]
    if change == "added":
        properties["venue_filter"] = {"type": ["string", "null"], "description": "New."}
    elif change == "default changed":
        properties["max_retries"]["default"] = 9
    elif change == "description changed":
        properties["base_url"]["description"] += " Changed."
    elif change == "made secret":
        properties["start_date"]["secret"] = True
    return type("ChangedTap", (TapGuestData,), {"config_jsonschema": schema})


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ("added", "venue_filter: a setting of the tap, not declared"),
        ("default changed", "max_retries: value 8, the tap says 9"),
        ("description changed", "base_url: description"),
        ("made secret", "start_date: sensitive None, the tap says True"),
    ],
)
def test_a_tap_setting_changed_without_regenerating_fails(change: str, complaint: str) -> None:
    about = about_in_process(extended(change))
    problems = disagreements(about, committed_extractor()["settings"])
    assert any(problem.startswith(complaint) for problem in problems), problems
    assert EXTRACTOR_FILE in stale_files(about)


def test_the_loader_definition_is_the_projects_target_postgres() -> None:
    project = yaml.safe_load((plugin_definition.ROOT / "meltano.yml").read_text())
    (loader,) = [p for p in project["plugins"]["loaders"] if p["name"] == "target-postgres"]
    definition = yaml.safe_load(LOADER_FILE.read_text())
    assert definition == {key: value for key, value in loader.items() if key != "config"}
    assert definition["env"] == {"PGTZ": "UTC"}  # date-times stored as UTC
