"""meltano.yml declares the tap as the tap describes itself: every setting, secrets sensitive."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from support.tap_process import run_tap

ROOT = Path(__file__).resolve().parent.parent
# Built into every SDK tap; Meltano's own plugin definition covers them.
SDK_BUILT_INS = {
    "stream_maps",
    "stream_map_config",
    "faker_config",
    "flattening_enabled",
    "flattening_max_depth",
    "flattening_max_key_length",
    "flattening_separator",
    "batch_config",
}


def test_meltano_yml_declares_every_tap_setting_and_marks_secrets_sensitive() -> None:
    about = run_tap({}, args=("--about", "--format=json"))
    assert about.returncode == 0, about.stderr[-2000:]
    properties = json.loads(about.stdout)["settings"]["properties"]
    project = yaml.safe_load((ROOT / "meltano.yml").read_text())
    extractor = next(
        plugin for plugin in project["plugins"]["extractors"] if plugin["name"] == "tap-guestdata"
    )
    declared = {setting["name"]: setting for setting in extractor["settings"]}

    assert set(properties) - SDK_BUILT_INS <= set(declared), set(properties) - set(declared)
    assert set(declared) <= set(properties), set(declared) - set(properties)
    for name, schema in properties.items():
        if schema.get("secret"):
            assert declared[name].get("sensitive") is True, name
    for name, setting in declared.items():
        assert setting.get("description"), f"{name} has no description"
    assert "api_key" not in json.dumps(project["environments"][1])  # prod holds no key


MELTANO_KINDS = {  # JSON schema type -> Meltano setting kind
    "string": {"string", "options"},
    "integer": {"integer"},
    "number": {"decimal"},
    "boolean": {"boolean"},
    "array": {"array"},
    "object": {"object"},
}


def test_meltano_yml_defaults_and_kinds_agree_with_the_tap_schema() -> None:
    """The schema is the one source of defaults; meltano.yml shows the same values."""
    about = run_tap({}, args=("--about", "--format=json"))
    properties = json.loads(about.stdout)["settings"]["properties"]
    project = yaml.safe_load((ROOT / "meltano.yml").read_text())
    extractor = next(
        plugin for plugin in project["plugins"]["extractors"] if plugin["name"] == "tap-guestdata"
    )
    for setting in extractor["settings"]:
        schema = properties[setting["name"]]
        if "default" in schema:
            assert setting.get("value") == schema["default"], setting["name"]
        else:
            assert "value" not in setting, f"{setting['name']}: no default in the tap's schema"
        json_type = next(kind for kind in schema["type"] if kind != "null")
        assert setting["kind"] in MELTANO_KINDS[json_type], setting["name"]
