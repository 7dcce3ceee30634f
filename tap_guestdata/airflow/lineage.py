"""What the tasks read and wrote, each named once: OpenLineage datasets and Airflow Assets.

Names follow the OpenLineage naming spec (openlineage.io/docs/spec/naming):
- the API: namespace the account's base URL, name `<account>/<endpoint>` (`harbour/venues`,
  `harbour/rewards/members/{member_id}/ledger`);
- PostgreSQL: namespace `postgres://host:port`, name `database.schema.table`;
- Snowflake: namespace `snowflake://<account>`, name `DATABASE.SCHEMA.TABLE`.
An Airflow Asset of a table has the URI Airflow's own providers give it (`postgres://host:port/
database/schema/table`, `snowflake://account/database/schema/table`), which the OpenLineage
provider turns into the same namespace and name: a DAG scheduled on a mart and a lineage graph
name it alike.

The loads count their rows from the tap's `Stream summary:` lines (tap_guestdata/run/runtime.py);
the build reads dbt's run_results.json. Nothing here needs the OpenLineage provider: without it,
`OperatorLineage` is never asked for (the facets are imported when it is).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

ASSET_GROUP = "guestdata"
# The tap's end-of-run line per stream (tap_guestdata/run/runtime.py, StreamCounters.line).
SUMMARY = re.compile(r"Stream summary: (?P<stream>\w+): (?:(?P<records>\d+) records|skipped)")
# A relation in dbt's compiled SQL: three parts, each quoted or bare (union_raw's branches).
PART = r'(?:"[^"]+"|[A-Za-z_][\w$]*)'
RELATION = re.compile(rf"\bfrom\s+({PART}\.{PART}\.{PART})", re.IGNORECASE)
# Meltano's configured raw schema when no env names one (meltano.yml, the loaders' config).
DEFAULT_RAW_SCHEMA = {"postgres": "guestdata", "snowflake": "GUESTDATA"}


@dataclass(frozen=True)
class Warehouse:
    """Where the tables are: `postgres` (host:port) or `snowflake` (account), and a database."""

    scheme: str
    authority: str
    database: str

    @property
    def namespace(self) -> str:
        return f"{self.scheme}://{self.authority}"

    def case(self, identifier: str) -> str:
        """Snowflake stores unquoted identifiers upper case (the loader's and dbt's)."""
        return identifier.upper() if self.scheme == "snowflake" else identifier

    def table(self, schema: str, table: str) -> Table:
        return Table(self, self.case(schema), self.case(table))


@dataclass(frozen=True)
class Table:
    warehouse: Warehouse
    schema: str
    name: str

    @property
    def dataset_name(self) -> str:
        return f"{self.warehouse.case(self.warehouse.database)}.{self.schema}.{self.name}"

    @property
    def uri(self) -> str:
        database = self.warehouse.case(self.warehouse.database)
        return f"{self.warehouse.namespace}/{database}/{self.schema}/{self.name}"

    def asset(self) -> Asset:
        """Its Airflow Asset: the name is the URI, as `Asset("postgres://...")` declares it."""
        return Asset(uri=self.uri, group=ASSET_GROUP)


def warehouse_of(env: Mapping[str, str], *, snowflake: bool) -> Warehouse | None:
    """The warehouse the run's environment names (the loader's settings, which dbt shares:
    meltano.yml); None when it names no host or database (Meltano's own configuration)."""
    if snowflake:
        account, database = (
            env.get("TARGET_SNOWFLAKE_ACCOUNT"),
            env.get("TARGET_SNOWFLAKE_DATABASE"),
        )
        if not account or not database:
            return None
        return Warehouse("snowflake", account.lower(), database)
    host, database = env.get("TARGET_POSTGRES_HOST"), env.get("TARGET_POSTGRES_DATABASE")
    if not host or not database:
        return None
    return Warehouse("postgres", f"{host}:{env.get('TARGET_POSTGRES_PORT') or 5432}", database)


def raw_schema_of(env: Mapping[str, str], *, snowflake: bool) -> str:
    """The loader's schema the run's environment names, else meltano.yml's."""
    loader = "SNOWFLAKE" if snowflake else "POSTGRES"
    fallback = DEFAULT_RAW_SCHEMA["snowflake" if snowflake else "postgres"]
    return env.get(f"TARGET_{loader}_DEFAULT_TARGET_SCHEMA") or fallback


# Streams with no endpoint of their own, and the stream whose answers they come from: the
# guests reads a run made (core.ReadWindows), the programme answer's meta.venues and tiers.
FROM_STREAM = {"read_windows": "guests", "programme_venues": "programme", "tiers": "programme"}


@cache
def endpoints() -> dict[str, str]:
    """Each stream's endpoint: its path, or the path of the stream it comes from."""
    from tap_guestdata.streams import STREAM_TYPES

    paths = {
        # The SDK declares `name` on instances; each stream class sets its own.
        stream.name: str(getattr(stream, "path", ""))  # type: ignore[misc]
        for stream in STREAM_TYPES
        if stream.name not in FROM_STREAM  # type: ignore[misc]
    }
    return {**paths, **{name: paths[source] for name, source in FROM_STREAM.items()}}


@cache
def json_schema(stream: str) -> dict[str, Any]:
    text = (resources.files("tap_guestdata") / "schemas" / f"{stream}.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


@dataclass
class StreamCounts:
    """A load's streams from the tap's summary lines: rows written, and those skipped."""

    records: dict[str, int] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)

    def watch(self, line: str) -> None:
        match = SUMMARY.search(line)
        if match is None:
            return
        if match["records"] is None:
            self.skipped.add(match["stream"])
        else:  # a split account's groups count apart; a stream is in one group
            self.records[match["stream"]] = int(match["records"])


@dataclass(frozen=True)
class LoadedAccount:
    """One account's load, as lineage sees it."""

    name: str
    api: str  # the base URL: the API datasets' namespace
    tables: dict[str, Table]  # stream -> its raw table
    records: dict[str, int]


def loaded_tables(warehouse: Warehouse, schema: str, counts: StreamCounts) -> dict[str, Table]:
    """The raw table of each stream the tap summarised (a skipped one wrote none)."""
    return {stream: warehouse.table(schema, stream) for stream in sorted(counts.records)}


def schema_facet_fields(stream: str) -> list[Any]:
    """The stream's JSON schema as OpenLineage schema fields (nested objects nest)."""
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacetFields

    def fields(properties: Mapping[str, Any]) -> list[SchemaDatasetFacetFields]:
        out = []
        for position, (name, prop) in enumerate(properties.items(), 1):
            types = prop.get("type", "string")
            types = [types] if isinstance(types, str) else [t for t in types if t != "null"]
            kind = types[0] if types else "null"
            if prop.get("format"):
                kind = f"{kind}({prop['format']})"
            out.append(
                SchemaDatasetFacetFields(
                    name=name,
                    type=kind,
                    description=prop.get("description"),
                    ordinal_position=position,
                    fields=fields(prop.get("properties", {})),
                )
            )
        return out

    return fields(json_schema(stream).get("properties", {}))


def load_lineage(accounts: Iterable[LoadedAccount]) -> Any:
    """`OperatorLineage` of a load task: each account's API endpoints in, its raw tables out,
    with their schema (the tap's JSON schemas) and the rows the tap wrote."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet

    inputs: dict[tuple[str, str], Any] = {}
    outputs = []
    for account in accounts:
        for stream, table in account.tables.items():
            name = f"{account.name}{endpoints()[stream]}"
            inputs.setdefault((account.api, name), InputDataset(account.api, name))
            outputs.append(
                OutputDataset(
                    table.warehouse.namespace,
                    table.dataset_name,
                    facets={"schema": SchemaDatasetFacet(fields=schema_facet_fields(stream))},
                    outputFacets={
                        "outputStatistics": OutputStatisticsOutputDatasetFacet(
                            rowCount=account.records.get(stream, 0)
                        )
                    },
                )
            )
    return OperatorLineage(inputs=list(inputs.values()), outputs=outputs)


@dataclass(frozen=True)
class BuiltModels:
    """A dbt build's run_results.json: the models built, and the raw tables their SQL read."""

    built: list[Table]
    read: list[Table]
    rows: dict[str, int]  # model table's dataset name -> rows affected, where dbt gave them


def relation_parts(text: str) -> tuple[str, str, str]:
    database, schema, table = re.findall(PART, text)
    return database.strip('"'), schema.strip('"'), table.strip('"')


def built_models(run_results: Path, warehouse: Warehouse) -> BuiltModels:
    """The models (and seeds, snapshots) that succeeded, and every relation their compiled
    SQL selects from that no model of the build is: the raw tables across accounts."""
    results = json.loads(run_results.read_text()).get("results", [])
    built: list[Table] = []
    rows: dict[str, int] = {}
    read: dict[str, Table] = {}
    # The build's own schemas (its models', and the stored test failures' the status model
    # reads), built or not: a relation there is the build's, not a raw table.
    own_schemas = {
        relation_parts(result["relation_name"])[1].lower()
        for result in results
        if result.get("relation_name")
    }
    for result in results:
        kind = str(result.get("unique_id", "")).split(".", 1)[0]
        if kind not in ("model", "seed", "snapshot") or not result.get("relation_name"):
            continue
        _, schema, name = relation_parts(result["relation_name"])
        if result.get("status") == "success":
            table = Table(warehouse, schema, name)
            built.append(table)
            affected = (result.get("adapter_response") or {}).get("rows_affected")
            if isinstance(affected, int) and affected >= 0:
                rows[table.dataset_name] = affected
        for relation in RELATION.findall(result.get("compiled_code") or ""):
            _, schema, name = relation_parts(relation)
            table = Table(warehouse, schema, name)
            read.setdefault(table.dataset_name.lower(), table)
    sources = [t for _, t in sorted(read.items()) if t.schema.lower() not in own_schemas]
    return BuiltModels(built, sources, rows)


def models_lineage(models: BuiltModels) -> Any:
    """`OperatorLineage` of the build: the raw tables in, the models out."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.generated.base import OutputDatasetFacet
    from openlineage.client.generated.output_statistics_output_dataset import (
        OutputStatisticsOutputDatasetFacet,
    )

    outputs = []
    for table in models.built:
        facets: dict[str, OutputDatasetFacet] = {}
        if table.dataset_name in models.rows:
            facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=models.rows[table.dataset_name]
            )
        outputs.append(
            OutputDataset(table.warehouse.namespace, table.dataset_name, outputFacets=facets)
        )
    inputs = [InputDataset(t.warehouse.namespace, t.dataset_name) for t in models.read]
    return OperatorLineage(inputs=inputs, outputs=outputs)
