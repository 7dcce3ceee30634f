"""Every "spec N.N" citation in the code and the docs names a heading of docs/api.md (part 2,
the resources, in docs/api-resources.md).

Comments cite the vendor's API specification by section ("spec 4.4.2", "spec part 7",
"spec 4.5.8-9", "spec 2.3/2.8", "spec 8 rule 3" = 8.3). docs/api.md restates those rules under the
same numbers, so each citation must resolve to one of its headings. Files are found by globbing
the source folders (and any `guestdata_sandbox` package one level down), so a moved package is
still scanned.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API_DOCS = (ROOT / "docs" / "api.md", ROOT / "docs" / "api-resources.md")  # parts 1, 3-9; 2
SOURCE_DIRS = (
    "tap_guestdata",
    "guestdata_sandbox",
    "sandbox",
    "tests",
    "transform",
    "dags",
    "scripts",
    "bench",
    "docs",
)
SKIP_DIRS = {
    ".venv",
    "venv",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".meltano",
    "node_modules",
    "target",
    "logs",
    "dbt_packages",
    "results",
    "output",
    "plugins",
}
TEXT_SUFFIXES = {".py", ".sql", ".yml", ".yaml", ".md", ".toml", ".sh", ".cfg", ".ini", ".txt", ""}

NUMBER = r"\d+(?:\.\d+)*"
KEYWORD = r"(?:(?:parts?|sections?)\s+)?"
# After a separator a citation may go on in the next line of a `#` or `--` comment.
GAP = r"\s*(?:(?:#|--)\s*)?"
SEPARATOR = rf"(?:\s*[,/&]{GAP}|\s*[-\u2013]\s*|{GAP}and\s+)"
CITATION = re.compile(
    rf"\bspec\s+{KEYWORD}{NUMBER}(?:{SEPARATOR}{KEYWORD}{NUMBER})*(?:\s+rule\s+\(?\d+\)?)?",
    re.IGNORECASE,
)
HEADING = re.compile(rf"^#{{1,6}}\s+({NUMBER})\.?\s", re.MULTILINE)


def expand(first: str, last: str) -> list[str]:
    """A range: "4.5.8" to "9" is 4.5.8 and 4.5.9; "4.1" to "4.3" is 4.1, 4.2 and 4.3."""
    head, tail = first.split("."), last.split(".")
    if len(tail) < len(head):
        tail = head[: len(head) - len(tail)] + tail
    if head[:-1] == tail[:-1] and int(head[-1]) <= int(tail[-1]):
        return [".".join([*head[:-1], str(n)]) for n in range(int(head[-1]), int(tail[-1]) + 1)]
    return [first, ".".join(tail)]


def cited_numbers(citation: str) -> list[str]:
    """The section numbers one citation names."""
    numbers: list[str] = []
    rule = re.search(r"\s+rule\s+\(?(\d+)\)?$", citation, re.IGNORECASE)
    body = citation[: rule.start()] if rule else citation
    pieces = re.findall(rf"({NUMBER})|([-\u2013])", body)
    pending_range = False
    for number, dash in pieces:
        if dash:
            pending_range = bool(numbers)
        elif pending_range:
            numbers[-1:] = expand(numbers[-1], number)
            pending_range = False
        else:
            numbers.append(number)
    if rule and numbers:
        numbers[-1] = f"{numbers[-1]}.{rule.group(1)}"
    return numbers


def citations(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, citation as written, number) for every section number the text cites."""
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for number in cited_numbers(match.group(0)):
            yield line, " ".join(match.group(0).split()), number


@cache
def source_files() -> tuple[Path, ...]:
    roots = [ROOT / name for name in SOURCE_DIRS]
    roots += [path for path in ROOT.glob("*/guestdata_sandbox") if path.is_dir()]
    found: set[Path] = set()
    for base in roots:
        if not base.is_dir():
            continue
        for path in base.rglob("*"):
            parts = path.relative_to(ROOT).parts
            if SKIP_DIRS.intersection(parts) or not path.is_file():
                continue
            if path.suffix in TEXT_SUFFIXES:
                found.add(path)
    return tuple(sorted(found))


@cache
def cited_sites() -> dict[str, list[str]]:
    """Section number -> the places citing it ("path:line: spec ...")."""
    sites: dict[str, list[str]] = defaultdict(list)
    for path in source_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for line, written, number in citations(text):
            sites[number].append(f"{path.relative_to(ROOT)}:{line}: {written}")
    return dict(sites)


def headings() -> list[str]:
    return [heading for page in API_DOCS for heading in HEADING.findall(page.read_text("utf-8"))]


def test_every_spec_citation_is_a_heading_of_docs_api_md() -> None:
    known = set(headings())
    missing = {number: where for number, where in cited_sites().items() if number not in known}
    report = "\n".join(
        f"spec {number}: no heading '{number}' in docs/api.md or api-resources.md, cited at\n  "
        + "\n  ".join(where)
        for number, where in sorted(missing.items())
    )
    assert not missing, report


def test_the_scan_finds_the_citations() -> None:
    """Guards the test above against passing because the scan found nothing."""
    sites = cited_sites()
    assert sum(len(where) for where in sites.values()) > 100, sorted(sites)
    assert {"2.3", "4.4.2", "4.5.8", "7", "8"} <= set(sites), sorted(sites)
    sandbox = [path for path in source_files() if path.parent.name == "guestdata_sandbox"]
    assert sandbox, "the sandbox package was not scanned"


def test_citation_forms() -> None:
    def numbers(text: str) -> list[str]:
        return [number for _, _, number in citations(text)]

    assert numbers("bare dates (spec 4.4.2), see Spec part 7.") == ["4.4.2", "7"]
    assert numbers("(spec 4.5.8-9) and (spec 4.1-4.3)") == ["4.5.8", "4.5.9", "4.1", "4.2", "4.3"]
    assert numbers("spec 2.3/2.8, spec 5.4 and 7, spec 1, 5.5") == [
        "2.3",
        "2.8",
        "5.4",
        "7",
        "1",
        "5.5",
    ]
    assert numbers("Spec 4.5, part 5 and part 7") == ["4.5", "5", "7"]
    assert numbers("Retry-After (spec 8 rule 4)") == ["8.4"]
    assert numbers("from/to (spec 4.1,\n    # 4.4.2), the spec's 120 a minute") == ["4.1", "4.4.2"]
    assert numbers("the specification, a spec-faithful sandbox") == []


def test_docs_api_md_headings_are_unique() -> None:
    numbers = headings()
    assert len(numbers) == len(set(numbers)), sorted(n for n in numbers if numbers.count(n) > 1)
