"""meltano.yml declares the tap as the tap describes itself: every setting, secrets sensitive.

The comparison is the plugin definition's (scripts/plugin_definition.py), with two allowances:
the SDK's built-in settings may be left out, and the descriptions are meltano.yml's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from plugin_definition import cli_about, disagreements

ROOT = Path(__file__).resolve().parent.parent
# Built into every SDK tap; Meltano's own plugin definition covers them.
SDK_BUILT_INS = frozenset(
    {
        "stream_maps",
        "stream_map_config",
        "faker_config",
        "flattening_enabled",
        "flattening_max_depth",
        "flattening_max_key_length",
        "flattening_separator",
        "batch_config",
    }
)


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "meltano.yml").read_text())
    return loaded


def test_meltano_yml_declares_every_tap_setting_with_the_tap_schemas_kind_and_default(
    project: dict[str, Any],
) -> None:
    """The schema is the one source of defaults; meltano.yml shows the same values."""
    extractor = next(
        plugin for plugin in project["plugins"]["extractors"] if plugin["name"] == "tap-guestdata"
    )
    problems = disagreements(
        cli_about(), extractor["settings"], optional=SDK_BUILT_INS, own_descriptions=True
    )
    assert problems == []


def test_the_prod_environment_holds_no_key(project: dict[str, Any]) -> None:
    assert "api_key" not in json.dumps(project["environments"][1])
