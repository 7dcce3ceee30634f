"""The README is the front door and the docs site the reference: the quick start comes first and
works, the README stays short and copies no docs page, its figures fit a line each and link to
their story, its links land, the site has every page by task and no page a reader cannot
finish, and its settings page is the tap's own `--about`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown.extensions.toc import slugify
from mkdocs.config import load_config

import build_docs
from tap_guestdata.run import catalog

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def quick_start_commands() -> list[str]:
    readme = README.read_text()
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "the Quick start section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_exactly_the_demo_then_the_tests() -> None:
    assert quick_start_commands() == ["scripts/demo", "scripts/test"]
    for command in quick_start_commands():
        assert (ROOT / command).stat().st_mode & 0o111, f"{command} is not executable"


def test_the_quick_start_is_the_first_section() -> None:
    sections = re.findall(r"^## (.+)$", README.read_text(), re.MULTILINE)
    assert sections[0] == "Quick start", sections


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec scripts/test\b", ci, re.MULTILINE), ci


def test_the_readme_is_at_most_300_lines() -> None:
    assert len(README.read_text().splitlines()) <= 300


FIGURES_MAX_ROWS = 8
FIGURES_MAX_WORDS = 25  # a cell read at a glance: one or two figures, not a run log
DOCS_PAGE_MAX_LINES = 400  # a page a reader finishes (STYLE.md: no file over ~400 lines)
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def figures_rows(readme: str) -> list[list[str]]:
    """The "In figures" table's rows (header and separator left out), as lists of cells."""
    section = readme.split("## In figures", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    assert len(rows) >= 3, "the In figures section has no table"
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def words_of(cell: str) -> int:
    """Words as a reader sees them: a markdown link counts as its text."""
    return len(LINK.sub(r"\1", cell).split())


def figures_problems(readme: str) -> list[str]:
    rows = figures_rows(readme)
    problems = [f"{len(rows)} rows"] if len(rows) > FIGURES_MAX_ROWS else []
    for row in rows:
        problems += [
            f"{words_of(cell)} words: {cell}" for cell in row if words_of(cell) > FIGURES_MAX_WORDS
        ]
        # Each figure links to the section that gives its method, date and history.
        if not any(
            re.match(r"docs/bench[\w-]*\.md#", target) for _, target in LINK.findall(row[-1])
        ):
            problems.append(f"no link to a benchmarks section: {row[0]}")
    return problems


def test_in_figures_is_a_short_table_whose_rows_link_to_their_story() -> None:
    assert figures_problems(README.read_text()) == []


def test_a_long_or_unlinked_figure_is_caught() -> None:
    readme = README.read_text()
    long_cell = " ".join(["word"] * 26)
    grown = readme.replace(
        "| what | figures |\n|---|---|\n", f"| what | figures |\n|---|---|\n| x | {long_cell} |\n"
    )
    assert grown != readme
    problems = figures_problems(grown)
    assert problems[0] == "9 rows" and any(problem.startswith("26 words") for problem in problems)
    assert "no link to a benchmarks section: x" in problems
    assert words_of("[a b c](docs/bench.md#x) d") == 4


def test_every_docs_page_is_at_most_400_lines() -> None:
    lengths = {page.name: len(page.read_text().splitlines()) for page in DOCS.glob("*.md")}
    assert {name: n for name, n in lengths.items() if n > DOCS_PAGE_MAX_LINES} == {}


def prose_paragraphs(text: str) -> list[str]:
    """Paragraphs outside code blocks, whitespace collapsed (a command may well be in both)."""
    without_code = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    paragraphs = (" ".join(block.split()) for block in re.split(r"\n\s*\n", without_code))
    return [paragraph for paragraph in paragraphs if paragraph]


def copied_from_docs(readme: str) -> list[str]:
    """The README's paragraphs of more than a line that a docs page holds word for word."""
    pages = [" ".join(page.read_text().split()) for page in DOCS.glob("*.md")]
    return [
        paragraph
        for paragraph in prose_paragraphs(readme)
        if len(paragraph) > 80 and any(paragraph in page for page in pages)
    ]


def test_the_readme_copies_no_docs_page() -> None:
    assert copied_from_docs(README.read_text()) == []


def test_a_paragraph_copied_from_the_docs_is_caught() -> None:
    paragraph = prose_paragraphs((DOCS / "tap.md").read_text())[3]
    assert copied_from_docs(README.read_text() + "\n\n" + paragraph + "\n") == [paragraph]


def test_the_readmes_links_land_on_a_file_and_heading() -> None:
    """What GitHub and PyPI show must not 404: every relative link names a file of this
    repository, and a `#fragment` one of that page's headings."""
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 10, local
    broken = []
    for link in local:
        path, _, fragment = link.partition("#")
        target = ROOT / path
        if not target.exists():
            broken.append(link)
        elif fragment:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            if fragment not in {slugify(heading, "-") for heading in headings}:
                broken.append(link)
    assert broken == []


def nav_titles(nav: list[Any]) -> dict[str, str]:
    """Every page of the site's navigation, title -> file, sections flattened."""
    titles: dict[str, str] = {}
    for entry in nav:
        ((title, target),) = entry.items()
        titles |= nav_titles(target) if isinstance(target, list) else {title: target}
    return titles


def test_the_site_has_a_page_per_task_and_every_doc_is_in_it() -> None:
    config = load_config(str(ROOT / "mkdocs.yml"))
    pages = nav_titles(config["nav"])
    tasks = {
        "Getting started",
        "Configuration",
        "Streams",
        "Meltano",
        "Schedule a project",
        "Many accounts",
        "Deploy into your Airflow",
        "Re-load a period",
        "Airflow reference",
        "Scale-out",
        "Warehouse models",
        "Security and erasure",
        "Snowflake",
        "Development",
        "API notes",
    }
    assert tasks <= set(pages), tasks - set(pages)
    assert sorted(pages.values()) == sorted(page.name for page in DOCS.glob("*.md"))


def test_the_configuration_page_is_the_taps_about_output() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_setting_missing_from_the_configuration_page_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    about = build_docs.cli_about()
    page = tmp_path / "configuration.md"
    lines = build_docs.PAGE.read_text().splitlines(keepends=True)
    page.write_text("".join(line for line in lines if not line.startswith("| `max_retries` |")))
    monkeypatch.setattr(build_docs, "PAGE", page)
    assert "| `max_retries` |" in build_docs.build(about)
    assert build_docs.build(about) != page.read_text()


def test_a_stream_missing_from_the_stream_groups_table_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "tap.md"
    lines = build_docs.STREAMS_PAGE.read_text().splitlines(keepends=True)
    page.write_text(
        "".join(line for line in lines if not line.startswith("| `rewards` | `redemptions` |"))
    )
    monkeypatch.setattr(build_docs, "STREAMS_PAGE", page)
    assert "| `rewards` | `redemptions` | yes |" in build_docs.build_streams_page()
    assert build_docs.build_streams_page() != page.read_text()


def test_the_dbt_macro_of_personal_fields_is_the_catalogs(monkeypatch: pytest.MonkeyPatch) -> None:
    """transform/macros/personal_fields.sql is written from the catalog; a stale one fails."""
    assert build_docs.DBT_MACRO.read_text() == build_docs.personal_fields_macro()
    assert "'members': {'first_name': 'placeholder', 'last_name': none," in (
        build_docs.personal_fields_macro()
    )
    monkeypatch.setattr(catalog, "ERASED_TO_NULL", frozenset({"date_of_birth"}))
    assert "'last_name': 'placeholder'" in build_docs.personal_fields_macro()
    assert build_docs.personal_fields_macro() != build_docs.DBT_MACRO.read_text()
