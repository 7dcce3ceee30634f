"""The names lineage and Assets give each table (tap_guestdata/airflow/lineage.py), on both
warehouses, and what a load and a build report from the tap's lines and dbt's run results.
The accounts DAG's real run (test_accounts_dag_run.py) checks the events end to end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tap_guestdata.airflow.lineage import (
    LoadedAccount,
    StreamCounts,
    built_models,
    endpoints,
    load_lineage,
    loaded_tables,
    models_lineage,
    raw_schema_of,
    warehouse_of,
)
from tap_guestdata.airflow.operators import GuestDataLoadOperator

pytestmark = pytest.mark.airflow

POSTGRES_ENV = {
    "TARGET_POSTGRES_HOST": "warehouse.internal",
    "TARGET_POSTGRES_DATABASE": "analytics",
    "TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": "guestdata_harbour",
}
SNOWFLAKE_ENV = {"TARGET_SNOWFLAKE_ACCOUNT": "MyOrg-Acct1", "TARGET_SNOWFLAKE_DATABASE": "raw"}


@pytest.mark.parametrize(
    ("env", "snowflake", "namespace", "dataset", "uri"),
    [
        (
            POSTGRES_ENV,
            False,
            "postgres://warehouse.internal:5432",
            "analytics.guestdata_harbour.guests",
            "postgres://warehouse.internal:5432/analytics/guestdata_harbour/guests",
        ),
        (
            SNOWFLAKE_ENV,
            True,
            "snowflake://myorg-acct1",
            "RAW.GUESTDATA.GUESTS",
            "snowflake://myorg-acct1/RAW/GUESTDATA/GUESTS",
        ),
    ],
    ids=["postgres", "snowflake"],
)
def test_a_table_has_one_name_in_openlineage_and_in_airflow(
    env: dict[str, str], snowflake: bool, namespace: str, dataset: str, uri: str
) -> None:
    warehouse = warehouse_of(env, snowflake=snowflake)
    assert warehouse is not None
    guests = warehouse.table(raw_schema_of(env, snowflake=snowflake), "guests")
    assert (warehouse.namespace, guests.dataset_name) == (namespace, dataset)
    assert guests.asset().uri == uri
    assert guests.asset().name == guests.asset().uri  # as `Asset("postgres://...")` declares it


def test_no_name_is_made_up_without_a_host_and_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert warehouse_of({"TARGET_POSTGRES_HOST": "h"}, snowflake=False) is None
    assert warehouse_of(POSTGRES_ENV, snowflake=True) is None
    # A task of many accounts says so once, not once per account.
    load = GuestDataLoadOperator(task_id="load", accounts=[], project_root=str(tmp_path))
    warnings: list[str] = []
    logged = SimpleNamespace(warning=lambda message, *args: warnings.append(message % args))
    monkeypatch.setattr(GuestDataLoadOperator, "log", property(lambda _: logged))
    assert load.warehouse({}) is None and load.warehouse({}) is None
    assert load.warehouse(POSTGRES_ENV) is not None
    assert len(warnings) == 1 and "no warehouse host and database" in warnings[0]


def test_a_load_reports_each_endpoint_read_and_each_table_written_with_its_rows() -> None:
    counts = StreamCounts()
    for line in (
        "tap-guestdata | Stream summary: guests: 1204 records, 7 requests, 0 retries, "
        "0 rate-limited (429)",
        "Stream summary: member_ledger: 0 records, 3 requests, 0 retries, 0 rate-limited (429)",
        "Stream summary: rewards: skipped (the plan has no Rewards: 403 PLAN_FEATURE_DISABLED)",
        "Progress: guests: 7 requests",
    ):
        counts.watch(line)
    assert counts.records == {"guests": 1204, "member_ledger": 0}
    assert counts.skipped == {"rewards"}
    warehouse = warehouse_of(POSTGRES_ENV, snowflake=False)
    assert warehouse is not None
    api = "https://api.example.com/api/v1/customer"
    account = LoadedAccount(
        "harbour", api, loaded_tables(warehouse, "guestdata_harbour", counts), counts.records
    )
    lineage = load_lineage([account])

    assert sorted((d.namespace, d.name) for d in lineage.inputs) == [
        (api, "harbour/guests"),
        (api, "harbour/rewards/members/{member_id}/ledger"),
    ]
    outputs = {d.name: d for d in lineage.outputs}
    assert sorted(outputs) == [
        "analytics.guestdata_harbour.guests",
        "analytics.guestdata_harbour.member_ledger",
    ]
    guests = outputs["analytics.guestdata_harbour.guests"]
    assert guests.outputFacets["outputStatistics"].rowCount == 1204
    fields = {field.name: field for field in guests.facets["schema"].fields}
    assert fields["id"].type == "integer"
    assert fields["visited_at"].type == "string(date-time)"
    assert endpoints()["read_windows"] == endpoints()["guests"] == "/guests"


def test_a_build_reports_the_models_it_built_and_the_raw_tables_they_read(
    tmp_path: Path,
) -> None:
    staging = (
        '(select ... from "analytics"."guestdata_harbour"."guests" offset 0) union all '
        '(select ... from "analytics"."guestdata_quay"."guests" offset 0)'
    )
    results = [
        {
            "unique_id": "model.guestdata.stg_guestdata__guests",
            "status": "success",
            "relation_name": '"analytics"."guestdata_analytics_staging"."stg_guestdata__guests"',
            "compiled_code": staging,
            "adapter_response": {"rows_affected": 12},
        },
        {
            "unique_id": "model.guestdata.fct_venue_daily",
            "status": "success",
            "relation_name": '"analytics"."guestdata_analytics"."fct_venue_daily"',
            "compiled_code": 'select * from "analytics"."guestdata_analytics_staging"."stg_x"',
            "adapter_response": {},
        },
        {
            "unique_id": "model.guestdata.fct_rewards",
            "status": "error",
            "relation_name": '"analytics"."guestdata_analytics"."fct_rewards"',
            "compiled_code": "",
        },
        {
            "unique_id": "test.guestdata.guestdata_not_null_x",
            "status": "warn",
            "relation_name": '"analytics"."guestdata_analytics_dbt_test__audit"."nn_x"',
        },
        {
            "unique_id": "model.guestdata.guestdata_account_status",
            "status": "success",
            "relation_name": '"analytics"."guestdata_analytics"."guestdata_account_status"',
            "compiled_code": "select 1 from "
            '"analytics"."guestdata_analytics_dbt_test__audit"."nn_x"',
        },
    ]
    path = tmp_path / "run_results.json"
    path.write_text(json.dumps({"results": results}))
    warehouse = warehouse_of(POSTGRES_ENV, snowflake=False)
    assert warehouse is not None

    lineage = models_lineage(built_models(path, warehouse))

    assert sorted(d.name for d in lineage.outputs) == [
        "analytics.guestdata_analytics.fct_venue_daily",  # fct_rewards failed: not built
        "analytics.guestdata_analytics.guestdata_account_status",
        "analytics.guestdata_analytics_staging.stg_guestdata__guests",
    ]
    (staged,) = [d for d in lineage.outputs if d.name.endswith("stg_guestdata__guests")]
    assert staged.outputFacets["outputStatistics"].rowCount == 12
    # The raw tables: not the build's own models, nor its stored test failures.
    assert sorted(d.name for d in lineage.inputs) == [
        "analytics.guestdata_harbour.guests",
        "analytics.guestdata_quay.guests",
    ]
