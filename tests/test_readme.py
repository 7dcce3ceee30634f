"""The README is part of the product: its quick start, its sections and CI's entry point agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "the Quick start section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_exactly_the_demo_then_the_tests() -> None:
    assert quick_start_commands() == ["scripts/demo", "scripts/test"]
    for command in quick_start_commands():
        assert (ROOT / command).stat().st_mode & 0o111, f"{command} is not executable"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec scripts/test\b", ci, re.MULTILINE), ci


def test_readme_sections_are_current_with_docs_and_the_taps_about_output() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_readme.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
