"""Many accounts, for real: `dag.test()` of the daily DAG built from an accounts configuration.

Eight sandbox accounts in one DAG, two queues, and Airflow's `max_map_length` at 3: Growth with
Rewards (two keys), three more owner keys of it as accounts of their own, limited access
(contacts masked), Rewards off (its Rewards streams are skipped), a plan without Rewards (core
alone), and one whose key is revoked. Each queue's plan returns its accounts in batches (never
more than 3), each batch one mapped task labelled with its accounts' names. Each account loads
into its own schema with its own state ids and equals its own ground truth; the revoked one
fails its batch's task, which names it, and the task's retry runs it alone: every other account
is loaded once. Stream groups: harbour every one (so the models have every raw table),
saltmarsh and northgate core and rewards, the others core (small accounts: all groups in one
Meltano run, every key of the account).

Then the run's one `dbt build` (after every load, the revoked one's failure included) builds
every account's models into one schema: each loaded account's `fct_venue_daily` equals its
truth; the revoked account, never loaded, is not in them; saltmarsh, loaded outside the
`guestdata_` schemas, is not either, and the build's log says so. The run fails (its load did).

The same run, with the OpenLineage provider's file transport, is the lineage test: every
task's events rebuild from openlineage-python's classes; each account's endpoints lead to its
raw tables (schema facet, rows), and its raw tables to every mart. docs/airflow-lineage.md's
example DAG, scheduled on `fct_venue_daily`'s Asset, is then due to run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from dag_testing import (
    DAG_TEST_PYTEST_TIMEOUT,
    DAGS_FOLDER,
    PROJECT_ROOT,
    Airflow,
    AirflowFactory,
    demo_pipeline,
    state_ids,
)
from guestdata_sandbox.accounts import (
    LIMITED_ACCESS_KEY,
    NO_REWARDS_PLAN_KEY,
    OWNER_KEYS,
    REVOKED_KEY,
    REWARDS_OFF_KEY,
)
from guestdata_sandbox.testing import SandboxProcess
from support.streams import assert_tables_equal_truth, truth_today
from tap_guestdata.airflow.lineage import json_schema

pytestmark = [pytest.mark.airflow, DAG_TEST_PYTEST_TIMEOUT]

STREAMS = {
    "core": ("account", "venues", "guests"),
    "rewards": ("rewards", "redemptions"),
}
BOOKKEEPING = {"core": ("read_windows",)}  # the complete reads of guests (stream/deletions.py)
# account name -> the keys behind its key variables
KEYS = {
    "harbour": [OWNER_KEYS[0], OWNER_KEYS[1]],
    "saltmarsh": [LIMITED_ACCESS_KEY],
    "northgate": [REWARDS_OFF_KEY],
    "revoked": [REVOKED_KEY],
    "quay": [OWNER_KEYS[2]],
    "pier": [OWNER_KEYS[3]],
    "dock": [OWNER_KEYS[4]],
    "meadow": [NO_REWARDS_PLAN_KEY],
}
# harbour loads every group: the models need each raw table in some account's schema. An
# account with rewards but not members and offers would fail the models' relationship tests.
GROUPS_OF = {
    "harbour": ["core", "members", "rewards", "offers", "stats"],
    "saltmarsh": ["core", "rewards"],
    "northgate": ["core", "rewards"],
}
FULL = "harbour"
MODELS_SCHEMA = "guestdata_analytics"  # the one build's (plan.MODELS_SCHEMA)
GOOD = tuple(name for name in KEYS if name != "revoked")
MAX_MAP_LENGTH = 3


def accounts_document(base_url: str) -> dict[str, Any]:
    def entry(name: str, **extra: Any) -> dict[str, Any]:
        keys = [f"guestdata_{name}_key_{n}" for n in range(1, len(KEYS[name]) + 1)]
        groups = GROUPS_OF.get(name, ["core"])
        return {"name": name, "keys": keys, "groups": groups, **extra}

    return {
        "queues": ["worker_1", "worker_2"],
        "accounts": [
            entry("harbour", base_url=base_url, size="small"),
            entry("saltmarsh", target_schema="raw_saltmarsh"),
            entry("northgate"),
            entry("revoked"),
            entry("quay"),
            entry("pier"),
            entry("dock"),
            entry("meadow"),
        ],
    }


def groups_of(name: str) -> list[str]:
    """The groups checked against the truth (harbour's others: through the models)."""
    return [group for group in GROUPS_OF.get(name, ["core"]) if group in STREAMS]


def key_variables() -> dict[str, str]:
    """Every key in an Airflow Variable (AIRFLOW_VAR_<NAME>), as an operator would set them."""
    return {
        f"AIRFLOW_VAR_GUESTDATA_{name.upper()}_KEY_{n}": key
        for name, keys in KEYS.items()
        for n, key in enumerate(keys, 1)
    }


def schema_of(name: str) -> str:
    return "raw_saltmarsh" if name == "saltmarsh" else f"guestdata_{name}"


@pytest.fixture(scope="module")
def sandbox(module_sandbox: SandboxProcess) -> SandboxProcess:
    return module_sandbox  # this module's own small sandbox (tests/conftest.py)


MARTS = sorted(path.stem for path in (PROJECT_ROOT / "transform/models/marts").glob("*.sql"))
EXAMPLE_DAG_ID = "venue_daily_report"


def example_dag(database: str) -> str:
    """docs/airflow-lineage.md's DAG scheduled on fct_venue_daily, on this test's warehouse."""
    page = (PROJECT_ROOT / "docs/airflow-lineage.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)\n```", page, re.DOTALL)
    assert "warehouse.internal:5432/analytics/" in block
    return block.replace("warehouse.internal:5432/analytics/", f"127.0.0.1:5432/{database}/")


@pytest.fixture(scope="module")
def lineage_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("openlineage") / "events.jsonl"


@pytest.fixture(scope="module")
def airflow(
    sandbox: SandboxProcess,
    airflow_for: AirflowFactory,
    database: str,
    lineage_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Airflow:
    # This repository's DAG file beside a user's DAG scheduled on a mart.
    dags = tmp_path_factory.mktemp("dags")
    (dags / "guestdata_meltano.py").symlink_to(DAGS_FOLDER / "guestdata_meltano.py")
    (dags / "venue_daily_report.py").write_text(example_dag(database))
    settings = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "guestdata_test",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(lineage_file), "append": True}
        ),
        "GUESTDATA_ACCOUNTS": json.dumps(accounts_document(sandbox.base_url)),
        **key_variables(),
        "AIRFLOW__CORE__MAX_MAP_LENGTH": str(MAX_MAP_LENGTH),
        # One retry, at once: a failed batch's retry runs its failed accounts alone.
        "GUESTDATA_RETRIES": "1",
        "GUESTDATA_RETRY_DELAY_MINUTES": "0",
    }
    return airflow_for(sandbox.base_url, settings)


def tables_in(database_url: str, schema: str) -> set[str]:
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
        return {name for (name,) in rows}


def test_accounts_load_in_batches_and_a_revoked_key_fails_only_its_account(
    airflow: Airflow,
    sandbox: SandboxProcess,
    database_url: str,
    database: str,
    lineage_file: Path,
) -> None:
    sandbox.clear_requests()
    run = airflow.dag_test("guestdata_meltano", check=False)

    assert run["state"] == "failed", run
    # Per queue at most MAX_MAP_LENGTH mapped batches, labelled with their accounts' names.
    batches = [
        label.removesuffix(".load").split(", ") for label in run["labels"] if ".load" in label
    ]
    assert sorted(name for batch in batches for name in batch) == sorted(KEYS)
    assert len(batches) <= 2 * MAX_MAP_LENGTH and max(map(len, batches)) > 1, batches
    (failed_batch,) = [batch for batch in batches if "revoked" in batch]
    assert len(failed_batch) > 1, "the revoked account shares its batch: it fails it alone"
    for batch in batches:
        label = run["labels"][f"{', '.join(batch)}.load"]
        assert batch == failed_batch or label == ", ".join(batch), run["labels"]
    # The failed batch's task, and only it, fails; the one build still runs after every load,
    # and all_loaded fails the run.
    assert run["accounts"] == {
        name: {"load": "failed" if name in failed_batch else "success"} for name in KEYS
    }, run
    assert run["tasks"] == {
        "worker_1.plan": "success",
        "worker_2.plan": "success",
        "dbt_build": "success",
        "all_loaded": "upstream_failed",
    }, run
    assert run["assets_published"].count("guestdata_models") == 1, run
    # The task names the failed account; its retry ran it alone (the others: done).
    output = airflow.output()
    assert (
        "1 of 2 failed: revoked" in output or f"1 of {len(failed_batch)} failed: revoked" in output
    )
    account_reads: dict[str, int] = {}
    for request in sandbox.requests_log():
        if request["path"] == "/me":
            account_reads[request["key"]] = account_reads.get(request["key"], 0) + 1
    for name in GOOD:
        reads = sum(account_reads.get(key, 0) for key in KEYS[name])
        assert reads == 1, f"{name}: loaded {reads} times"
    for partner in set(failed_batch) - {"revoked"}:
        assert f"{partner}: done by an earlier try of this task" in output, "retried alone"
    # The build heard of the failed load; with no schema of its own it has nothing to hold.
    assert "loads failed in this run, their marts held: guestdata_revoked" in output
    # What the retry read (the batch's done accounts) is gone once no try is left to read it.
    assert not [key for key in run["variables"] if key.startswith("guestdata_done_")], run
    # Each good account its own state id; the revoked account's failed run may leave one of
    # its own (Meltano records the failed job), never anyone else's.
    ids = set(state_ids(airflow))
    good = {f"dev:tap-guestdata-to-target-postgres:{name}" for name in GOOD}
    assert good <= ids and ids - good <= {"dev:tap-guestdata-to-target-postgres:revoked"}, ids
    assert not tables_in(database_url, "guestdata_revoked")
    assert not tables_in(database_url, "guestdata"), "nothing in the single-account schema"

    for name in GOOD:
        truth = sandbox.truth(KEYS[name][0])
        with psycopg.connect(database_url) as connection:
            tables = {
                stream: demo_pipeline.database_rows(connection, schema_of(name), stream)
                for group in groups_of(name)
                for stream in STREAMS[group]
            }
        checks = assert_tables_equal_truth(tables, truth, label=name)
        assert checks[2].rows_in_database > 0, f"{name}: no guests loaded"
        # Only the selected groups' tables, in the account's own schema.
        loaded = tables_in(database_url, schema_of(name))
        allowed = {
            s for group in groups_of(name) for s in (*STREAMS[group], *BOOKKEEPING.get(group, ()))
        }
        assert loaded <= allowed or name == FULL, loaded
        assert name != FULL or {"members", "offers", "daily_stats"} <= loaded, loaded
    # Rewards off: the streams are skipped (empty tables, as its truth has none), its core loads.
    with psycopg.connect(database_url) as connection:
        for schema, rewards in (("guestdata_northgate", 0), ("guestdata_harbour", None)):
            count = connection.execute(f'SELECT count(*) FROM "{schema}".rewards').fetchone()[0]
            assert count == rewards if rewards is not None else count > 0, (schema, count)

    # Each account's requests carried only its own keys; harbour's one task, both its keys.
    keys_used: dict[str, set[str]] = {}
    for request in sandbox.requests_log():
        keys_used.setdefault(request["key"], set()).add(request["path"])
    assert set(keys_used) == {key for keys in KEYS.values() for key in keys}
    assert OWNER_KEYS[1] not in airflow.output()
    check_models(database_url, sandbox, output)
    check_lineage(lineage_file, database_url, database, sandbox)
    # The user's DAG scheduled on fct_venue_daily's Asset: the scheduler would start it now.
    assert run["asset_triggered"] == [EXAMPLE_DAG_ID], run
    print(f"\ndag.test() of eight accounts in {len(batches)} batches: {run['seconds']:.1f} s")


def check_models(database_url: str, sandbox: SandboxProcess, output: str) -> None:
    """The one build: every loaded account of the pattern in one models schema, as its truth;
    the revoked account (its load failed, nothing earlier) and saltmarsh (outside) absent."""
    with psycopg.connect(database_url) as connection:
        query = sql.SQL("SELECT account_name, venue_id, date::text, visits FROM {}").format(
            sql.Identifier(MODELS_SCHEMA, "fct_venue_daily")
        )
        built: dict[str | None, dict[tuple[str, str], int]] = {}
        for account, venue, day, visits in connection.execute(query):
            built.setdefault(account, {})[(venue, day)] = visits
    modelled = [name for name in GOOD if schema_of(name).startswith("guestdata_")]
    assert sorted(built, key=str) == sorted(modelled), "every loaded account, the others not"
    for name in modelled:
        truth = sandbox.truth(KEYS[name][0])
        expected = {(row["venue_id"], row["date"]): row["visits"] for row in truth["daily_stats"]}
        today = truth_today(truth)  # as_of_the_truth
        assert {key: n for key, n in built[name].items() if key[1] <= today} == expected, name
    # The models' schemas match the pattern too: the build did not read them as raw.
    assert "not in the models (their raw schema is outside guestdata\\_%): saltmarsh" in output
    assert "dbt build" in output or "dbt-postgres" in output


def rebuilt(event: dict[str, Any]) -> Any:
    """The event from openlineage-python's classes (generated from the OpenLineage JSON
    schema; the wheel ships no schema file): their validators check the event's time, run id,
    producer and schema URLs, and our datasets' facets must serialise back as sent."""
    from openlineage.client.event_v2 import (
        InputDataset,
        Job,
        OutputDataset,
        Run,
        RunEvent,
        RunState,
    )
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )
    from openlineage.client.generated.schema_dataset import (
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )

    def fields(items: list[dict[str, Any]]) -> list[SchemaDatasetFacetFields]:
        return [
            SchemaDatasetFacetFields(
                name=item["name"],
                type=item.get("type"),
                description=item.get("description"),
                ordinal_position=item.get("ordinal_position"),
                fields=fields(item.get("fields", [])),
            )
            for item in items
        ]

    def output(dataset: dict[str, Any]) -> OutputDataset:
        facets, more = dataset.get("facets", {}), dataset.get("outputFacets", {})
        return OutputDataset(
            dataset["namespace"],
            dataset["name"],
            facets={"schema": SchemaDatasetFacet(fields=fields(facets["schema"]["fields"]))}
            if "schema" in facets
            else {},
            outputFacets={
                "outputStatistics": OutputStatisticsOutputDatasetFacet(
                    rowCount=more["outputStatistics"]["rowCount"]
                )
            }
            if "outputStatistics" in more
            else {},
        )

    return RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"]),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
        producer=event["producer"],
        inputs=[InputDataset(d["namespace"], d["name"]) for d in event.get("inputs", [])],
        outputs=[output(d) for d in event.get("outputs", [])],
    )


def without_producers(value: Any) -> Any:
    """A facet's `_producer` names the code that made it: theirs and ours differ."""
    if isinstance(value, dict):
        return {k: without_producers(v) for k, v in value.items() if k != "_producer"}
    if isinstance(value, list):
        return [without_producers(v) for v in value]
    return value


def check_lineage(events_file: Path, database_url: str, database: str, sandbox: Any) -> None:
    """Every load's and the build's COMPLETE event: each account's endpoints -> its raw tables
    (schema facet, rows as in the warehouse) -> every mart."""
    from openlineage.client.serde import Serde

    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    assert events, "no OpenLineage event"
    for event in events:
        again = Serde.to_dict(rebuilt(event))
        for side in ("inputs", "outputs"):
            for sent, back in zip(event.get(side, []), again.get(side, []), strict=True):
                assert (sent["namespace"], sent["name"]) == (back["namespace"], back["name"])
                for kind, facet in (("facets", "schema"), ("outputFacets", "outputStatistics")):
                    if facet in sent.get(kind, {}):
                        assert without_producers(back[kind][facet]) == without_producers(
                            sent[kind][facet]
                        ), (event["job"]["name"], sent["name"], facet)
    complete = [event for event in events if event["eventType"] in ("COMPLETE", "FAIL")]
    loads = [e for e in complete if e["job"]["name"].endswith(".accounts.load")]
    (build,) = [e for e in complete if e["job"]["name"].endswith(".dbt_build")]
    assert build["eventType"] == "COMPLETE"
    namespace = "postgres://127.0.0.1:5432"
    written = {(d["namespace"], d["name"]): d for e in loads for d in e.get("outputs", [])}
    read = {(d["namespace"], d["name"]) for e in loads for d in e.get("inputs", [])}
    built = {(d["namespace"], d["name"]) for d in build.get("outputs", [])}
    modelled = {(d["namespace"], d["name"]) for d in build.get("inputs", [])}
    for name in GOOD:
        schema = schema_of(name)
        for stream in tables_in(database_url, schema):
            with psycopg.connect(database_url) as connection:
                rows = connection.execute(
                    sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, stream))
                ).fetchone()[0]
            key = (namespace, f"{database}.{schema}.{stream}")
            if schema.startswith("guestdata_"):  # in the models' union: the build read it
                assert key in modelled, (name, stream)
            if not rows:  # a stream the account cannot read (skipped): no output
                continue
            table = written[key]
            columns = {field["name"] for field in table["facets"]["schema"]["fields"]}
            assert columns == set(json_schema(stream)["properties"]), (stream, columns)
            if stream in STREAMS["core"]:  # a first load: the tap's records are the rows
                assert table["outputFacets"]["outputStatistics"]["rowCount"] == rows, table
        assert (sandbox.base_url, f"{name}/venues") in read, (name, sorted(read))
    assert not [n for _, n in written if "guestdata_revoked" in n], "the revoked wrote nothing"
    for mart in MARTS:
        assert (namespace, f"{database}.{MODELS_SCHEMA}.{mart}") in built, mart
    assert not [n for _, n in modelled if MODELS_SCHEMA in n], "no model is an input"
