"""Rebuild the generated parts of the docs from the code, so they cannot drift from it.

- docs/configuration.md is hand-written down to its marker; below it, the settings table, the
  capabilities and the supported Python versions are `tap-guestdata --about --format=json`.
- docs/tap.md's "Stream groups" table, between its begin and end markers, is the catalog of
  streams (tap_guestdata/run/catalog.py): each stream's group, window, weekly refresh and personal
  fields, the facts the DAGs, the reloads and the dbt project read from the same place.
- transform/macros/personal_fields.sql, whole, is the catalog's personal fields for dbt (which
  cannot import Python): each stream's, and what erasure leaves in each.

`--check` exits 1 if a page is not what this script would write (tests/test_readme.py runs it).

    .venv/bin/python scripts/build_docs.py [--check]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from plugin_definition import cli_about  # the tap's own --about, one reader for both files
from tap_guestdata.run import catalog

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"
MARKER = (
    "<!-- Generated below by scripts/build_docs.py from `tap-guestdata --about --format=json`;"
    " edit above this line only. -->"
)
STREAMS_PAGE = ROOT / "docs" / "tap.md"
STREAMS_BEGIN = (
    "<!-- Generated from tap_guestdata/run/catalog.py by scripts/build_docs.py, down to the end"
    " marker. -->"
)
STREAMS_END = "<!-- End of the generated stream groups. -->"
DBT_MACRO = ROOT / "transform" / "macros" / "personal_fields.sql"


def json_types(schema: Mapping[str, Any]) -> list[str]:
    """The non-null JSON types a (sub)schema allows, in order, `anyOf`/`oneOf` included."""
    if "const" in schema:
        return [f"`{schema['const']}`"]
    declared = schema.get("type", [])
    types = [declared] if isinstance(declared, str) else list(declared)
    for alternative in [*schema.get("anyOf", []), *schema.get("oneOf", [])]:
        if isinstance(alternative, Mapping):
            types += json_types(alternative)
    return list(dict.fromkeys(kind for kind in types if kind != "null"))


def type_cell(schema: Mapping[str, Any]) -> str:
    kinds = ", ".join(json_types(schema)) or "any"
    if kinds == "array" and "items" in schema:
        kinds += " of " + ", ".join(json_types(schema["items"]))
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        )
        if key in schema
    ]
    return kinds + (f" ({', '.join(bounds)})" if bounds else "")


def cell(text: str) -> str:
    # A pipe would end the table cell; a line break would end the row.
    return " ".join(text.split()).replace("|", "\\|")


def rows(properties: Mapping[str, Any], required: list[str], prefix: str = "") -> Iterator[str]:
    """One table row per setting, then its nested settings (`batch_config.encoding`, ...)."""
    for name, schema in properties.items():
        notes = []
        if name in required and not prefix:
            notes.append("**Required.**")
        if schema.get("secret"):
            notes.append("Secret.")
        default = f"`{json.dumps(schema['default'])}`" if "default" in schema else ""
        description = " ".join([*notes, cell(schema.get("description", ""))]).strip()
        yield f"| `{prefix}{name}` | {type_cell(schema)} | {default} | {description} |"
        yield from rows(schema.get("properties", {}), [], f"{prefix}{name}.")


def generated(about: Mapping[str, Any]) -> str:
    settings = about["settings"]
    return "\n".join(
        [
            "## Every setting",
            "",
            "| setting | type | default | description |",
            "|---|---|---|---|",
            *rows(settings["properties"], settings.get("required", [])),
            "",
            "## Capabilities",
            "",
            ", ".join(f"`{capability}`" for capability in about["capabilities"]) + ".",
            "",
            "## Supported Python versions",
            "",
            ", ".join(about["supported_python_versions"])
            + f" (tap-guestdata {about['version']}, singer-sdk {about['sdk_version']}).",
            "",
        ]
    )


def build(about: Mapping[str, Any]) -> str:
    head = PAGE.read_text().split(MARKER)[0].rstrip()
    return f"{head}\n\n{MARKER}\n\n{generated(about)}"


def stream_groups() -> str:
    """The catalog as a table: a row per stream, in the order the daily DAG loads the groups."""
    lines = [
        "| group | stream | reload reads a period | weekly full refresh | personal fields |",
        "|---|---|---|---|---|",
    ]
    for group in catalog.GROUPS:
        for name in catalog.streams_of_group(group):
            facts = catalog.BY_NAME[name]
            personal = ", ".join(f"`{field}`" for field in facts.personal_fields)
            lines.append(
                f"| `{group}` | `{name}` | {'yes' if facts.windowed else ''} "
                f"| {'yes' if facts.refreshed_weekly else ''} | {personal} |"
            )
    return "\n".join(lines)


def build_streams_page() -> str:
    """docs/tap.md with its stream groups table rebuilt between the two markers."""
    text = STREAMS_PAGE.read_text()
    head, rest = text.split(STREAMS_BEGIN)
    _, tail = rest.split(STREAMS_END)
    return f"{head}{STREAMS_BEGIN}\n\n{stream_groups()}\n\n{STREAMS_END}{tail}"


def personal_fields_macro() -> str:
    """The dbt macro `personal_fields()`: each stream's personal fields and what erasing leaves
    in each (the placeholder, or null: catalog.ERASED_TO_NULL)."""
    streams = []
    for stream, fields in catalog.personal_fields().items():
        erased = ", ".join(
            f"'{field}': {'none' if field in catalog.ERASED_TO_NULL else repr('placeholder')}"
            for field in fields
        )
        streams.append(f"      '{stream}': {{{erased}}},")
    return "\n".join(
        [
            "{#- Generated from tap_guestdata/run/catalog.py by scripts/build_docs.py; do not edit",
            "    (its --check, run by tests/test_readme.py, fails when it is out of step). Each",
            "    stream that holds a person's contact, and what erasure and source deletions",
            "    leave in each of its fields: the placeholder (erasure_placeholder) or null. -#}",
            "{% macro personal_fields() %}",
            "  {{ return({",
            *streams,
            "  }) }}",
            "{% endmacro %}",
            "",
        ]
    )


def main() -> int:
    pages = {
        PAGE: build(cli_about()),
        STREAMS_PAGE: build_streams_page(),
        DBT_MACRO: personal_fields_macro(),
    }
    if "--check" in sys.argv[1:]:
        stale = [page for page, text in pages.items() if page.read_text() != text]
        for page in stale:
            print(f"{page.relative_to(ROOT)} is stale: run .venv/bin/python scripts/build_docs.py")
        return 1 if stale else 0
    for page, text in pages.items():
        page.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
