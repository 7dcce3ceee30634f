"""tap-guestdata is an Airflow provider: `airflow providers list` shows it, and the `guestdata`
connection type has its hook, its form and its test (tests/airflow/test_connections.py runs it).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points, version
from pathlib import Path

import pytest

from dag_testing import airflow_env
from tap_guestdata.airflow.provider import get_provider_info

pytestmark = pytest.mark.airflow

AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def test_the_entry_point_gives_the_package_its_version_and_the_connection_type() -> None:
    providers = entry_points(group="apache_airflow_provider")
    (entry,) = [e for e in providers if e.value.startswith("tap_guestdata.")]
    info = entry.load()()
    assert info == get_provider_info()
    assert info["package-name"] == "tap-guestdata"
    assert info["versions"] == [version("tap-guestdata")]
    (connection_type,) = info["connection-types"]
    assert connection_type["connection-type"] == "guestdata"
    module, _, name = connection_type["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert (hook.conn_type, hook.default_conn_name) == ("guestdata", "guestdata_default")
    assert hook.conn_name_attr == "guestdata_conn_id"


def test_the_form_asks_for_a_base_url_and_an_api_key() -> None:
    from tap_guestdata.airflow.connection import GuestDataHook

    form = GuestDataHook.get_ui_field_behaviour()
    assert form["relabeling"] == {"host": "Base URL", "password": "API key"}
    assert {"login", "schema", "port"} <= set(form["hidden_fields"])
    assert "api_keys" in form["placeholders"]["extra"]


def test_airflow_providers_list_shows_the_package(tmp_path: Path) -> None:
    result = subprocess.run(
        [AIRFLOW, "providers", "list", "--output", "plain"],
        env=airflow_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if "tap-guestdata" in line]
    assert version("tap-guestdata") in line
    assert "Guest Data" in line
