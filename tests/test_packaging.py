"""What each wheel ships: the tap without the sandbox, and the sandbox as its own distribution.

A user who installs tap-guestdata gets the tap and its schemas, not a test server.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SANDBOX = ROOT / "sandbox"


def build_wheel(project: Path, out_dir: Path) -> zipfile.ZipFile:
    uv = Path(sys.executable).with_name("uv")
    command = [str(uv if uv.exists() else shutil.which("uv") or "uv"), "build", "--wheel"]
    subprocess.run(
        [*command, "--quiet", "--out-dir", str(out_dir), str(project)],
        check=True,
        timeout=120,
    )
    (wheel,) = out_dir.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def tap_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return build_wheel(ROOT, tmp_path_factory.mktemp("tap-wheel"))


@pytest.fixture(scope="module")
def sandbox_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return build_wheel(SANDBOX, tmp_path_factory.mktemp("sandbox-wheel"))


def entry_points(wheel: zipfile.ZipFile) -> str:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    return wheel.read(name).decode()


def test_tap_wheel_ships_the_tap_and_its_schemas(tap_wheel: zipfile.ZipFile) -> None:
    names = set(tap_wheel.namelist())
    assert "tap_guestdata/tap.py" in names
    schemas = {
        f"tap_guestdata/schemas/{path.name}" for path in ROOT.glob("tap_guestdata/schemas/*")
    }
    assert schemas and schemas <= names
    assert "tap-guestdata = tap_guestdata.tap:TapGuestData.cli" in entry_points(tap_wheel)


def test_tap_wheel_ships_no_sandbox(tap_wheel: zipfile.ZipFile) -> None:
    names = tap_wheel.namelist()
    assert [name for name in names if "sandbox" in name.split("/")[0]] == []
    assert "guestdata-sandbox" not in entry_points(tap_wheel)
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"tap_guestdata"}


def test_sandbox_is_its_own_distribution(sandbox_wheel: zipfile.ZipFile) -> None:
    names = set(sandbox_wheel.namelist())
    modules = {f"guestdata_sandbox/{path.name}" for path in SANDBOX.glob("guestdata_sandbox/*.py")}
    assert "guestdata_sandbox/cli.py" in modules and modules <= names
    assert not any(name.startswith("tap_guestdata") for name in names)
    assert "guestdata-sandbox = guestdata_sandbox.cli:main" in entry_points(sandbox_wheel)
