"""The dbt project's files keep their promises without a database: sources follow the tap's
schemas, warehouse-specific SQL lives only in dispatched macros, London dates in one macro."""

from __future__ import annotations

import json
import re

import yaml

from support.dbt import MARTS, PROJECT_ROOT, TRANSFORM

SCHEMAS = PROJECT_ROOT / "tap_guestdata" / "schemas"
STAGING = TRANSFORM / "models" / "staging"
# SQL that differs between PostgreSQL and Snowflake, and must stay inside dispatched macros.
WAREHOUSE_SPECIFIC = re.compile(
    r"at time zone|convert_timezone|Europe/London|->>|::|cardinality\(|array_size\(|array_agg\(",
    re.IGNORECASE,
)


JINJA = re.compile(r"\{\{.*?\}\}|\{#.*?#\}", re.DOTALL)  # macro calls and comments


def source_tables() -> dict[str, dict]:
    sources = yaml.safe_load((STAGING / "_sources.yml").read_text())["sources"]
    return {table["name"]: table for table in sources[0]["tables"]}


# Sources the models read through macros only, with no staging model: the tap's bookkeeping.
BOOKKEEPING_SOURCES = {"read_windows"}  # macros/source_deletions.sql
# Staging models of no one stream: read_windows' reads of guests, with whether each is trusted.
DERIVED_STAGING = {"stg_guestdata__guest_reads"}


def test_sources_are_the_streams_with_every_schema_column_in_order() -> None:
    tables = source_tables()
    assert sorted(tables) == sorted(path.stem for path in SCHEMAS.glob("*.json"))
    for name, table in tables.items():
        properties = list(json.loads((SCHEMAS / f"{name}.json").read_text())["properties"])
        assert [column["name"] for column in table["columns"]] == properties, name
        assert all(column["description"] for column in table["columns"]), name


def test_every_stream_has_one_staging_model_and_the_marts_have_their_names() -> None:
    staged = sorted(
        path.stem
        for path in STAGING.glob("stg_guestdata__*.sql")
        if path.stem not in DERIVED_STAGING
    )
    data_sources = set(source_tables()) - BOOKKEEPING_SOURCES
    assert staged == sorted(f"stg_guestdata__{name}" for name in data_sources)
    marts = sorted(path.stem for path in (TRANSFORM / "models" / "marts").glob("*.sql"))
    assert marts == sorted(MARTS)


def test_warehouse_specific_sql_lives_only_in_dispatched_macros() -> None:
    paths = [*(TRANSFORM / "models").rglob("*.sql"), *(TRANSFORM / "tests").glob("*.sql")]
    for path in paths:
        found = WAREHOUSE_SPECIFIC.findall(JINJA.sub("", path.read_text()))
        assert not found, f"{path.name}: {found} (use a macro from transform/macros)"


def test_each_dispatched_macro_has_a_postgres_and_a_default_implementation() -> None:
    macros = "\n".join(path.read_text() for path in (TRANSFORM / "macros").glob("*.sql"))
    dispatched = re.findall(r"adapter\.dispatch\('(\w+)', 'guestdata'\)", macros)
    assert set(dispatched) >= {"london_date", "json_text", "array_size", "seconds_between"}
    for name in dispatched:
        assert f"macro postgres__{name}(" in macros, name
        assert f"macro default__{name}(" in macros, name
    # One macro turns instants into London dates.
    assert macros.count("'Europe/London'") == 2  # its postgres__ and default__ forms


def test_the_models_need_no_package_download() -> None:
    """dbt deps would reach hub.getdbt.com; CI and most warehouses' runners cannot."""
    assert not (TRANSFORM / "packages.yml").exists()
    assert not (TRANSFORM / "dependencies.yml").exists()


def test_every_test_names_the_failing_account_and_the_status_follows_every_staging_model() -> None:
    """macros/account_status.sql holds an account from its tests' kept failing rows: each
    generic test is one of the project's (source_relation first; dbt's own name no account),
    each singular test selects source_relation, and guestdata_account_status comes after every
    staging model (so after every staging test)."""
    generic: set[str] = set()
    for path in (TRANSFORM / "models").rglob("_*.yml"):
        for model in yaml.safe_load(path.read_text()).get("models", []):
            for column in [model, *model.get("columns", [])]:
                for test in column.get("data_tests", []):
                    generic.add(test if isinstance(test, str) else next(iter(test)))
    assert generic and all(name.startswith("guestdata_") for name in generic), generic
    for path in (TRANSFORM / "tests").glob("*.sql"):
        selects = re.findall(r"^select\s+(\S+)", JINJA.sub("", path.read_text()), re.MULTILINE)
        assert selects and all(s.endswith("source_relation,") for s in selects), path.name
    status = (TRANSFORM / "models" / "monitor" / "guestdata_account_status.sql").read_text()
    assert {path.stem for path in STAGING.glob("*.sql")} <= set(re.findall(r"'(stg_\w+)'", status))
