"""The package as a user gets it: `scripts/release --check` once per test session (sdist and
wheel built, twine-checked, installed into a fresh virtualenv and run), the files kept.

A pytest plugin (tests/conftest.py): the `release` fixture. `fresh_venv` makes a virtualenv
away from this checkout with uv, pinned by constraints.txt.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


@dataclass(frozen=True)
class Release:
    """What `scripts/release --check --out-dir DIR` left in DIR, and what it printed."""

    out_dir: Path
    output: str

    @property
    def wheel(self) -> Path:
        (wheel,) = self.out_dir.glob("tap_guestdata-*.whl")
        return wheel

    @property
    def sdist(self) -> Path:
        (sdist,) = self.out_dir.glob("tap_guestdata-*.tar.gz")
        return sdist


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    out_dir = tmp_path_factory.mktemp("release")
    result = subprocess.run(
        [str(ROOT / "scripts" / "release"), "--check", "--out-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return Release(out_dir, result.stdout)


def fresh_venv(path: Path, *requirements: str) -> Path:
    """A new virtualenv at `path` with `requirements` (pinned by constraints.txt); its python."""
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(path)], check=True)
    python = path / "bin" / "python"
    pins = ["--constraint", str(ROOT / "constraints.txt")]
    install = [str(UV), "pip", "install", "--quiet", "--python", str(python), *pins]
    subprocess.run([*install, *requirements], check=True, timeout=600)
    return python
