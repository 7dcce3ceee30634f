"""Rebuild README.md: its hand-written head, then the sections kept in docs/*.md, in reading order.

The settings table is the tap's own `--about --format=markdown` output, put where docs/tap.md
holds the ABOUT marker, so the README cannot drift from the code. `--check` exits 1 if
README.md is not what this script would write (tests/test_readme.py runs it).

    .venv/bin/python scripts/build_readme.py [--check]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = "<!-- SECTIONS BELOW ARE ASSEMBLED FROM docs/*.md -->"
ABOUT_MARKER = "<!-- ABOUT: tap-guestdata --about --format=markdown -->"
SECTIONS = (
    "tap.md",
    "meltano.md",
    "transform.md",
    "snowflake.md",
    "airflow.md",
    "scale-out.md",
    "security.md",
    "sandbox.md",
    "bench.md",
)
TAP = Path(sys.executable).parent / "tap-guestdata"


def about_markdown() -> str:
    output = subprocess.run(
        [str(TAP), "--about", "--format=markdown"], capture_output=True, text=True, check=True
    ).stdout
    # The SDK's page starts with the tap's name as a top heading; the README has its own.
    lines = [line for line in output.strip().splitlines() if not line.startswith("# ")]
    # Its headings sit one level below ours.
    return "\n".join("#" + line if line.startswith("## ") else line for line in lines).strip()


def build() -> str:
    head = README.read_text().split(MARKER)[0].rstrip()
    parts = [head, "", MARKER, ""]
    for name in SECTIONS:
        text = (ROOT / "docs" / name).read_text().strip()
        if ABOUT_MARKER in text:
            text = text.replace(ABOUT_MARKER, about_markdown())
        parts += [text, ""]
    return "\n".join(parts)


def main() -> int:
    text = build()
    if "--check" in sys.argv[1:]:
        if README.read_text() != text:
            print("README.md is stale: run .venv/bin/python scripts/build_readme.py")
            return 1
        return 0
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
