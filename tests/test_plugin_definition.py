"""The Meltano plugin definitions users add with --from-ref (plugin/) are what the tap says,
and pass Meltano Hub's own schema check.

plugin/extractors/tap-guestdata.yml is generated from `tap-guestdata --about --format=json` by
scripts/plugin_definition.py; a setting added, changed or dropped in the tap without
regenerating fails here. Both files are validated with the Hub's Draft 7 schemas, re-derived in
tests/data/hub_schemas/ (README.md there names the Hub files and commits).
"""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator
from meltano.core.setting_definition import SettingDefinition
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

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
    own = {key: value for key, value in definition.items() if key not in ("variant", "quality")}
    own["settings"] = [entry for entry in definition["settings"] if "env" not in entry]
    assert own == {key: value for key, value in loader.items() if key not in ("config", "env")}
    assert loader["env"] == {"PGTZ": "UTC"}


def test_the_loader_pins_the_session_to_utc_as_meltano_runs_it() -> None:
    """meltano.yml's `env: PGTZ: UTC` has no place in the Hub's format; a setting with `env`
    does, and Meltano exports its value under that name whenever it runs the loader."""
    definition = yaml.safe_load(LOADER_FILE.read_text())
    (entry,) = [entry for entry in definition["settings"] if entry.get("env")]
    setting = SettingDefinition.parse(entry)
    written = [var.key for var in setting.env_vars(["target-postgres"], for_writing=True)]
    assert "PGTZ" in written
    assert setting.value == "UTC"  # date-times stored as UTC


# ------------------------------------------------------------------ Meltano Hub's schemas

HUB_SCHEMAS = Path(__file__).parent / "data" / "hub_schemas"


def hub_validator(plugin_type: str) -> Draft7Validator:
    """The Hub's schema for `plugin_type` (extractors, loaders), its `$ref`s resolved among the
    files beside it."""
    registry: Registry = Registry()
    for path in HUB_SCHEMAS.glob("*.schema.json"):
        resource = Resource.from_contents(
            json.loads(path.read_text()), default_specification=DRAFT7
        )
        registry = registry.with_resource(path.as_uri(), resource)
    path = HUB_SCHEMAS / f"{plugin_type}.schema.json"
    schema = {**json.loads(path.read_text()), "$id": path.as_uri()}
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema, registry=registry)


def hub_errors(plugin_type: str, definition: dict[str, Any]) -> list[str]:
    errors = hub_validator(plugin_type).iter_errors(definition)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in errors]


def required_fields(schema: Any) -> set[str]:
    """Every field a `required` of `schema` names, at any depth of its allOf."""
    fields = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        ref = part.get("$ref")
        part = json.loads((HUB_SCHEMAS / ref).read_text()) if ref else part
        fields |= required_fields(part)
    return fields


DEFINITIONS = {"extractors": EXTRACTOR_FILE, "loaders": LOADER_FILE}
REQUIRED = {
    plugin_type: sorted(
        required_fields(json.loads((HUB_SCHEMAS / f"{plugin_type}.schema.json").read_text()))
    )
    for plugin_type in DEFINITIONS
}


@pytest.mark.parametrize("plugin_type", DEFINITIONS)
def test_the_definition_passes_the_hubs_schema(plugin_type: str) -> None:
    definition = yaml.safe_load(DEFINITIONS[plugin_type].read_text())
    assert hub_errors(plugin_type, definition) == []


def test_the_hub_requires_name_namespace_variant_and_quality() -> None:
    """What the next test removes, one at a time: read from the schemas, checked here so an
    empty list could not make it pass vacuously."""
    assert {
        plugin_type: ["name", "namespace", "quality", "variant"] for plugin_type in DEFINITIONS
    } == REQUIRED


@pytest.mark.parametrize(
    ("plugin_type", "field"),
    [(plugin_type, field) for plugin_type, fields in REQUIRED.items() for field in fields],
)
def test_the_hubs_schema_rejects_a_definition_without_a_required_field(
    plugin_type: str, field: str
) -> None:
    definition = yaml.safe_load(DEFINITIONS[plugin_type].read_text())
    del definition[field]
    assert hub_errors(plugin_type, definition) == [f": '{field}' is a required property"]


@pytest.mark.parametrize(
    ("plugin_type", "change", "complaint"),
    [
        (
            "loaders",
            {"env": {"PGTZ": "UTC"}},
            ": Additional properties are not allowed ('env' was unexpected)",
        ),
        ("extractors", {"quality": "excellent"}, "quality: 'excellent' is not one of"),
        (
            "extractors",
            {"capabilities": ["state", "log_based"]},
            "capabilities/1: 'log_based' is not one of",
        ),
        ("loaders", {"settings": [{"label": "Host"}]}, "settings/0: 'name' is a required property"),
        (
            "extractors",
            {"settings": [{"name": "x", "secret": True}]},
            "settings/0: Additional properties are not allowed ('secret' was unexpected)",
        ),
    ],
)
def test_the_hubs_schema_rejects_what_the_hub_does_not_accept(
    plugin_type: str, change: dict[str, Any], complaint: str
) -> None:
    """Among them, what the loader's definition had before: a plugin-level `env`."""
    definition = yaml.safe_load(DEFINITIONS[plugin_type].read_text()) | change
    errors = hub_errors(plugin_type, definition)
    assert [error for error in errors if error.startswith(complaint)], errors
