"""The dbt models of transform/ under dbt-snowflake, against fakesnow (no account).

The job users run without an account, `guestdata-to-snowflake-fakesnow-dbt`: the sandbox loaded
by target-snowflake--fakesnow, then `dbt build --target snowflake` by the dbt-snowflake--fakesnow
utility on the same databases (the session's load and build, conftest.py). In order: every
model builds and every test passes; every dispatched macro took its Snowflake form (the
compiled SQL); the marts equal the sandbox's ground truth, which needs the London day, the JSON
fields and the arrays computed right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.dbt import (
    MARTS,
    MODEL_COUNT,
    OFFER_FUNNEL,
    TRANSFORM,
    assert_every_model_built_and_every_test_passed,
    expected_audience,
    expected_members,
    expected_offer_funnel,
    expected_rewards,
    expected_venue_daily,
    instant,
)
from support.snowflake_pipeline import (
    MODELS,
    SnowflakePipeline,
    built_members,
    built_offers,
    built_rewards,
    mart_rows,
)
from support.streams import truth_today

pytestmark = pytest.mark.snowflake

# macro -> (its Snowflake form, its PostgreSQL form) as they appear in compiled SQL.
DISPATCHED = {
    "london_date": (r"convert_timezone\('Europe/London', ", r"at time zone"),
    "json_text": (r"\bget\(\w+, '\w+'\)", r"->>"),
    "array_size": (r"\barray_size\(", r"\bcardinality\("),
    "array_agg_distinct_sorted": (
        r"array_agg\(distinct [^()]+\) within group \(order by ",
        r"array_agg\(distinct [^()]+ order by ",
    ),
    "seconds_between": (r"\bdatediff\(second, ", r"extract\(epoch"),
}


def compiled_models(dbt_target: Path) -> dict[str, str]:
    """Model name -> the SQL dbt-snowflake compiled for it."""
    folder = dbt_target / "compiled" / "guestdata" / "models"
    return {path.stem: path.read_text() for path in folder.rglob("*.sql")}


def test_the_job_builds_every_model_and_passes_every_test_under_fakesnow(
    built: SnowflakePipeline, dbt_target: Path
) -> None:
    assert_every_model_built_and_every_test_passed(dbt_target)
    # dbt-snowflake's own DDL reached fakesnow (not dbt-postgres's).
    assert any(
        re.match(r"\s*create or replace\s+transient\s+table", statement, re.I)
        for statement in built.statements()
    )
    for mart in MARTS:
        assert mart_rows(built, f"SELECT count(*) AS n FROM {MODELS}.{mart}")[0]["N"] > 0, mart
    # the build took the models schema's lock and let it go (macros/build_lock.sql)
    lock = mart_rows(built, f"SELECT lock_name, holder FROM {MODELS}.guestdata_build_lock")
    assert lock == [{"LOCK_NAME": MODELS, "HOLDER": None}]


def test_every_dispatched_macro_compiles_to_its_snowflake_form(
    built: SnowflakePipeline, dbt_target: Path
) -> None:
    compiled = compiled_models(dbt_target)
    assert len(compiled) >= MODEL_COUNT
    sources = {path.stem: path.read_text() for path in (TRANSFORM / "models").rglob("*.sql")}
    for macro, (snowflake_form, postgres_form) in DISPATCHED.items():
        callers = {name for name, text in sources.items() if re.search(rf"\b{macro}\(", text)}
        assert callers, f"no model calls {macro}"
        with_snowflake_form = {
            name for name, sql in compiled.items() if re.search(snowflake_form, sql)
        }
        assert callers <= with_snowflake_form, (macro, callers - with_snowflake_form)
        with_postgres_form = {
            name for name, sql in compiled.items() if re.search(postgres_form, sql)
        }
        assert not with_postgres_form, (macro, with_postgres_form)


def test_fct_venue_daily_equals_the_ground_truth_per_venue_and_london_day(
    built: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> None:
    truth = module_truth()
    expected = expected_venue_daily(truth)
    today = truth_today(truth)  # as_of_the_truth
    built_rows = mart_rows(
        built,
        "SELECT venue_id, date, visits, unique_guests, marketing_opt_ins, api_visits "
        f"FROM {MODELS}.fct_venue_daily WHERE date <= '{today}'",
    )
    assert {
        (row["VENUE_ID"], row["DATE"].isoformat()): (
            row["VISITS"],
            row["UNIQUE_GUESTS"],
            row["MARKETING_OPT_INS"],
        )
        for row in built_rows
    } == expected
    assert all(row["VISITS"] == row["API_VISITS"] for row in built_rows)
    assert sum(row["VISITS"] for row in built_rows) == len(truth["guests"]) > 1000


def test_marketing_audience_holds_exactly_the_people_the_truth_allows(
    built: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> None:
    expected = expected_audience(module_truth())
    allowed, visits = expected.allowed, expected.visits
    audience = mart_rows(
        built, f"SELECT contact_key, visits, venue_ids FROM {MODELS}.marketing_audience"
    )
    assert {row["CONTACT_KEY"] for row in audience} == allowed
    assert len(allowed) < len(visits), "some people said no"
    for row in audience:
        # venue_ids: array_agg_distinct_sorted, an ARRAY the connector hands back as JSON text.
        venue_ids = json.loads(row["VENUE_IDS"])
        contact = row["CONTACT_KEY"]
        assert (row["VISITS"], venue_ids) == (len(visits[contact]), sorted(set(visits[contact])))


def test_members_rewards_and_offers_equal_the_ground_truth(
    built: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> None:
    truth = module_truth()
    assert built_members(built) == expected_members(truth)
    assert built_rewards(built) == expected_rewards(truth)
    assert built_offers(built, OFFER_FUNNEL) == expected_offer_funnel(truth)
    whole = built_offers(built, ["has_whole_funnel"])
    assert all(row == (True,) for row in whole.values()), "the whole history was read"


def test_json_array_and_interval_helpers_give_the_truths_values(
    built: SnowflakePipeline, module_truth: Callable[[], dict[str, Any]]
) -> None:
    truth = module_truth()
    programme = truth["programme"]
    (staged,) = mart_rows(
        built,
        "SELECT brand_programme_name, service_opens, service_closes "
        f"FROM {MODELS}_STAGING.stg_guestdata__programme",
    )
    # json_text is cast(get(col, 'key') as varchar): on Snowflake the bare string. fakesnow
    # 0.12.1 translates it to DuckDB's CAST(col -> '$.key' AS TEXT), which keeps the JSON
    # quotes ('"Harbour Club"'); its `col:key::varchar` would not, but that is not our SQL.
    # So the values are compared as JSON here (docs/snowflake.md lists the difference).
    assert [
        json.loads(staged[column])
        for column in ("BRAND_PROGRAMME_NAME", "SERVICE_OPENS", "SERVICE_CLOSES")
    ] == [
        programme["brand"]["programme_name"],
        programme["service_hours"]["open"],
        programme["service_hours"]["close"],
    ]
    assert staged["BRAND_PROGRAMME_NAME"] == json.dumps(programme["brand"]["programme_name"])

    offers = mart_rows(
        built,
        "SELECT offer_id, valid_venue_count, channel_count "
        f"FROM {MODELS}_STAGING.stg_guestdata__offers",
    )
    expected_counts = {
        offer["id"]: (
            None if offer["site_ids"] is None else len(offer["site_ids"]),
            len(offer["channels"]),
        )
        for offer in truth["offers"]
    }
    assert {
        row["OFFER_ID"]: (row["VALID_VENUE_COUNT"], row["CHANNEL_COUNT"]) for row in offers
    } == (expected_counts)
    assert None in {count for count, _ in expected_counts.values()}, "an offer valid everywhere"

    # fct_rewards joins a reward's newest redemption (by created_at, then id).
    newest: dict[int, dict[str, Any]] = {}
    for redemption in sorted(
        truth["redemptions"], key=lambda r: (instant(r["created_at"]), r["id"])
    ):
        newest[redemption["member_reward_id"]] = redemption
    expected_seconds = {
        reward["id"]: epoch_second(newest[reward["id"]]["created_at"])
        - epoch_second(reward["issued_at"])
        if reward["id"] in newest
        else None
        for reward in truth["rewards"]
    }
    seconds = mart_rows(built, f"SELECT reward_id, seconds_to_redeem FROM {MODELS}.fct_rewards")
    assert {row["REWARD_ID"]: row["SECONDS_TO_REDEEM"] for row in seconds} == expected_seconds
    assert any(value for value in expected_seconds.values())


def test_a_column_two_adjacent_schemas_lack_reads_null_of_its_type_under_fakesnow(
    built: SnowflakePipeline,
) -> None:
    """The typed union (macros/accounts.sql) on Snowflake's catalog: three copies of the
    account, two of them (paired in the union's tree) without the guests' VENUE_ID. Each
    account's select a view of its own (a batch of 1 byte), dropped once the model is built."""
    schemas = ("GUESTDATA_TYPED_A", "GUESTDATA_TYPED_B", "GUESTDATA_TYPED_C")
    models = "GUESTDATA_TYPED_MODELS"
    try:
        built.warehouse.query(
            *(f"CREATE SCHEMA {schema}" for schema in schemas),
            *(
                f"CREATE TABLE {schema}.{table} AS SELECT * FROM GUESTDATA.{table}"
                for schema in schemas
                for table in ("ACCOUNT", "GUESTS")
            ),
            *(f"ALTER TABLE {schema}.GUESTS DROP COLUMN VENUE_ID" for schema in schemas[1:]),
        )
        # No LIKE escape on Snowflake: `_` matches any character, and the models' own schemas
        # hold no ACCOUNT table.
        logged_before = len(built.statements())
        built.invoke_dbt(
            "run",
            "--select",
            "stg_guestdata__account stg_guestdata__guests",
            GUESTDATA_RAW_SCHEMAS="GUESTDATA_TYPED%",
            GUESTDATA_DBT_SCHEMA=models,
            GUESTDATA_STATEMENT_BATCH_BYTES="1",
        )
        views = [
            statement.split(" as\n")[0]
            for statement in built.statements()[logged_before:]
            if statement.startswith("create or replace view")
        ]
        assert [view.rsplit(".", 1)[1] for view in views if "GUESTS__UNION" in view.upper()] == [
            f"stg_guestdata__guests__union_guests_{number}" for number in (1, 2, 3)
        ], views
        (left,) = built.warehouse.query(
            f"SELECT table_name FROM information_schema.views WHERE table_schema LIKE '{models}%'"
        )
        assert left == []
        venues = mart_rows(
            built,
            "SELECT lower(source_relation) AS relation, count(venue_id) AS venues, count(*) AS n"
            f" FROM {models}_STAGING.stg_guestdata__guests GROUP BY 1 ORDER BY 1",
        )
        arrivals = venues[0]["N"]
        assert arrivals > 0
        assert [(row["RELATION"], row["VENUES"], row["N"]) for row in venues] == [
            (schemas[0].lower(), arrivals, arrivals),
            (schemas[1].lower(), 0, arrivals),
            (schemas[2].lower(), 0, arrivals),
        ]
    finally:
        built.warehouse.query(
            *(
                f"DROP SCHEMA IF EXISTS {schema} CASCADE"
                for schema in (*schemas, f"{models}_STAGING", models)
            )
        )


def rows_per_model(pipeline: SnowflakePipeline, account: str) -> dict[str, int]:
    """Every model's (staging and marts) rows of one account (source_relation), by table."""
    (tables,) = pipeline.warehouse.query(
        "SELECT table_schema || '.' || table_name AS name FROM information_schema.columns"
        f" WHERE table_schema IN ('{MODELS}', '{MODELS}_STAGING')"
        " AND upper(column_name) = 'SOURCE_RELATION'"
    )
    counts = pipeline.warehouse.query(
        *(
            f"SELECT count(*) AS n FROM {table['NAME']} WHERE source_relation = '{account}'"
            for table in tables
        )
    )
    return {
        table["NAME"]: n for table, ((row,)) in zip(tables, counts, strict=True) if (n := row["N"])
    }


def test_an_account_seen_late_is_read_in_full_and_an_offboarded_one_leaves_under_fakesnow(
    built: SnowflakePipeline,
) -> None:
    """A copy of the account in a schema of its own, first seen by a build after the first one
    (lookback 0 h): its own watermark reads it in full, every model holding what the first
    account's holds. Its schema dropped (offboarded): the next build leaves none of its rows.
    `dbt run`: the rows are the point here; the tests' nodes are the whole build's (above)."""
    second = "GUESTDATA_SECOND"
    every_account = {
        "GUESTDATA_RAW_SCHEMAS": "GUESTDATA%",
        "GUESTDATA_INCREMENTAL_LOOKBACK_HOURS": "0",
    }
    (tables,) = built.warehouse.query(
        "SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'GUESTDATA'"
    )
    try:
        built.warehouse.query(
            f"CREATE SCHEMA {second}",
            *(
                f"CREATE TABLE {second}.{table['NAME']} AS SELECT * FROM GUESTDATA.{table['NAME']}"
                for table in tables
            ),
        )
        built.invoke_dbt("run", **every_account)
        first = rows_per_model(built, "guestdata")
        assert first and rows_per_model(built, second.lower()) == first
        built.warehouse.query(f"DROP SCHEMA {second} CASCADE")
        built.invoke_dbt("run", **every_account)
        assert rows_per_model(built, second.lower()) == {}
        assert rows_per_model(built, "guestdata") == first
    finally:
        built.warehouse.query(f"DROP SCHEMA IF EXISTS {second} CASCADE")


def epoch_second(text: str) -> int:
    """The instant's whole second: datediff(second, ...) counts second boundaries crossed."""
    return int(instant(text).timestamp() // 1)
