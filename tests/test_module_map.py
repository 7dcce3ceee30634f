"""docs/development.md opens with the module map, and the map is the tree: every folder and
top-level module of tap_guestdata/ has its row with its layer, every module a row names is in
that folder, and every path the map names exists. A move in the package that the map does not
follow fails here, so the first page a new engineer reads stays true."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tap_guestdata"
DEVELOPMENT = ROOT / "docs" / "development.md"
OPTIONAL = {f"{PACKAGE}/schemas/"}  # data, not code: the map may list it
SKIPPED = {"__pycache__"}
TABLE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", re.MULTILINE)
MODULE = re.compile(r"`([\w/]+\.py)`")


def module_map(page: str) -> str:
    """The page's first `##` section, which must be the module map."""
    sections = re.split(r"^## ", page, flags=re.MULTILINE)
    assert len(sections) > 1, "docs/development.md has no sections"
    title, _, body = sections[1].partition("\n")
    assert title.strip() == "Module map", f"docs/development.md opens with {title!r}"
    return body


def map_rows(section: str) -> dict[str, list[str]]:
    """Path in the first column -> the row's other cells."""
    return {
        path: [cell.strip() for cell in rest.split("|")]
        for path, rest in TABLE_ROW.findall(section)
    }


def package_entries(root: Path) -> set[str]:
    """The package's folders (`tap_guestdata/stream/`) and top-level modules (`.../tap.py`)."""
    package = root / PACKAGE
    folders = {
        f"{PACKAGE}/{path.name}/"
        for path in package.iterdir()
        if path.is_dir() and path.name not in SKIPPED
    }
    modules = {
        f"{PACKAGE}/{path.name}" for path in package.glob("*.py") if path.name != "__init__.py"
    }
    return folders | modules


def modules_of(folder: Path) -> set[str]:
    return {path.name for path in folder.glob("*.py") if path.name != "__init__.py"}


def problems(page: str, root: Path) -> list[str]:
    rows = map_rows(module_map(page))
    found = [
        f"not on the map: {entry}" for entry in sorted(package_entries(root) - set(rows) - OPTIONAL)
    ]
    for path, cells in rows.items():
        if not (root / path).exists():
            found.append(f"on the map, not in the tree: {path}")
            continue
        if not path.startswith(f"{PACKAGE}/"):
            continue
        layer, what = [*cells, "", ""][:2]
        if not layer:
            found.append(f"no layer: {path}")
        # `base.py` in a folder's row is that folder's; `run/catalog.py` is the package's.
        elsewhere = [name for name in MODULE.findall(what) if "/" in name]
        found += [
            f"named, not in {PACKAGE}/: {name}"
            for name in elsewhere
            if not (root / PACKAGE / name).exists()
        ]
        if path.endswith("/"):
            named = {name for name in MODULE.findall(what) if "/" not in name}
            found += [
                f"named, not in {path}: {name}" for name in sorted(named - modules_of(root / path))
            ]
            found += [
                f"in {path}, not named: {name}" for name in sorted(modules_of(root / path) - named)
            ]
    return found


def test_the_development_page_opens_with_the_module_map() -> None:
    assert map_rows(module_map(DEVELOPMENT.read_text()))


def test_the_module_map_is_the_tree() -> None:
    assert problems(DEVELOPMENT.read_text(), ROOT) == []


def test_the_map_names_the_layers_top_down() -> None:
    """tap over streams over stream over run over http, the order of the import contract."""
    rows = map_rows(module_map(DEVELOPMENT.read_text()))
    order = [f"{PACKAGE}/tap.py"] + [
        f"{PACKAGE}/{name}/" for name in ("streams", "stream", "run", "http")
    ]
    assert [path for path in rows if path in order] == order


def test_a_tree_the_map_does_not_follow_is_caught(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    (package / "stream").mkdir(parents=True)
    (package / "tap.py").write_text("")
    (package / "stream" / "base.py").write_text("")
    (package / "stream" / "extra.py").write_text("")
    (package / "orphan").mkdir()
    page = (
        "# Title\n\n## Module map\n\n| path | layer | what |\n|---|---|---|\n"
        f"| `{PACKAGE}/tap.py` | tap | the tap |\n"
        f"| `{PACKAGE}/stream/` | stream | `base.py`, `window.py`; time: `run/clock.py` |\n"
        f"| `{PACKAGE}/gone/` | | nothing |\n\n## Next\n"
    )
    assert problems(page, tmp_path) == [
        f"not on the map: {PACKAGE}/orphan/",
        f"named, not in {PACKAGE}/: run/clock.py",
        f"named, not in {PACKAGE}/stream/: window.py",
        f"in {PACKAGE}/stream/, not named: extra.py",
        f"on the map, not in the tree: {PACKAGE}/gone/",
    ]
