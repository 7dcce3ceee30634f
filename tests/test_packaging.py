"""What each distribution ships, and the release check that builds, checks and tries the tap's.

A user who installs tap-guestdata gets the tap, its schemas and the Airflow helpers (whose
dependency is the `airflow` extra), not a test server and not test code; a registry shows its
keywords, classifiers, project URLs and the README.
"""

from __future__ import annotations

import email
import email.message
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.release import Release

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
def tap_wheel(release: Release) -> zipfile.ZipFile:
    return zipfile.ZipFile(release.wheel)


@pytest.fixture(scope="module")
def sandbox_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return build_wheel(SANDBOX, tmp_path_factory.mktemp("sandbox-wheel"))


def entry_points(wheel: zipfile.ZipFile) -> str:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    return wheel.read(name).decode()


def metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    (name,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def test_release_check_builds_twine_checks_installs_and_runs_the_tap(release: Release) -> None:
    output = release.output
    assert f"Checking {release.wheel}: PASSED" in output
    assert f"Checking {release.sdist}: PASSED" in output
    assert "tap-guestdata v0.1.0, Meltano SDK v" in output  # --version, in the fresh venv
    assert "--about: tap-guestdata 0.1.0" in output
    assert f"files, {release.wheel.stat().st_size / 1024:.1f} KiB" in output  # the listing
    assert "release check passed" in output


def test_tap_wheel_ships_the_tap_its_schemas_and_every_module(
    tap_wheel: zipfile.ZipFile,
) -> None:
    names = set(tap_wheel.namelist())
    assert {"tap_guestdata/tap.py", "tap_guestdata/py.typed"} <= names
    schemas = {
        f"tap_guestdata/schemas/{path.name}" for path in ROOT.glob("tap_guestdata/schemas/*")
    }
    assert schemas and schemas <= names
    # Every module of every layer's folder (stream/, run/, http/, streams/, airflow/).
    modules = {str(path.relative_to(ROOT)) for path in ROOT.glob("tap_guestdata/**/*.py")}
    assert {"tap_guestdata/airflow/dags.py", "tap_guestdata/stream/base.py"} <= modules
    assert modules <= names, sorted(modules - names)
    assert "tap-guestdata = tap_guestdata.tap:TapGuestData.cli" in entry_points(tap_wheel)
    # Airflow's plugin registry finds the load tasks' priority (daily runs before backfills).
    assert "[airflow.plugins]\ntap_guestdata = tap_guestdata.airflow.priority:GuestdataPlugin" in (
        entry_points(tap_wheel)
    )


def test_tap_wheel_ships_no_sandbox_and_no_test_code(tap_wheel: zipfile.ZipFile) -> None:
    names = tap_wheel.namelist()
    assert [name for name in names if "sandbox" in name.split("/")[0]] == []
    assert "guestdata-sandbox" not in entry_points(tap_wheel)
    top_level = {
        name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
    }
    assert top_level == {"tap_guestdata"}
    parts = {part for name in names for part in name.split("/")}
    assert not {"tests", "support", "conftest.py", "dags"} & parts
    assert not [part for part in parts if part.startswith("test_")]


def test_a_registry_shows_keywords_classifiers_urls_and_the_readme(
    tap_wheel: zipfile.ZipFile,
) -> None:
    meta = metadata(tap_wheel)
    assert {"meltano", "singer-io", "singer-tap"} <= set(meta["Keywords"].split(","))
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.10" in classifiers
    assert "Framework :: Apache Airflow" in classifiers
    urls = dict(url.split(", ", 1) for url in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Repository", "Documentation", "Changelog", "Issues"} <= set(urls)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# tap-guestdata\n")  # the README
    # Airflow is an extra: the tap's own dependencies do not pull it in.
    requirements = meta.get_all("Requires-Dist") or []
    assert 'apache-airflow<4,>=3.3; extra == "airflow"' in requirements
    airflow = [line for line in requirements if line.startswith("apache-airflow")]
    assert all("; extra == " in line for line in airflow)
    assert "airflow" in (meta.get_all("Provides-Extra") or [])


def test_the_tap_and_its_cli_never_import_airflow() -> None:
    """Airflow is installed here (the test extra), so an import of it would show."""
    code = (
        "import sys, tap_guestdata, tap_guestdata.tap, tap_guestdata.airflow.accounts\n"
        "from tap_guestdata.tap import TapGuestData\n"
        "TapGuestData.print_about('json')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'airflow')\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_sandbox_is_its_own_distribution(sandbox_wheel: zipfile.ZipFile) -> None:
    names = set(sandbox_wheel.namelist())
    modules = {f"guestdata_sandbox/{path.name}" for path in SANDBOX.glob("guestdata_sandbox/*.py")}
    assert "guestdata_sandbox/cli.py" in modules and modules <= names
    assert not any(name.startswith("tap_guestdata") for name in names)
    assert "guestdata-sandbox = guestdata_sandbox.cli:main" in entry_points(sandbox_wheel)
