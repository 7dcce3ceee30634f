"""Reading fakesnow databases and running the fakesnow Meltano job: shared by the Snowflake tests.

`FakesnowWarehouse` queries the DuckDB files fakesnow keeps, through fakesnow itself (in the
loader's plugin venv), so statements are Snowflake SQL and types are Snowflake's.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import demo_pipeline

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOADER = "target-snowflake--fakesnow"
PLUGINS = ("tap-guestdata", LOADER)
JOB = ("--environment=dev", "run", "guestdata-to-snowflake-fakesnow")
# The same load, then dbt build by dbt-snowflake under fakesnow.
DBT_UTILITY = "dbt-snowflake--fakesnow"
DBT_JOB = ("--environment=dev", "run", "guestdata-to-snowflake-fakesnow-dbt")
DATABASE = "RAW"  # meltano.yml: target-snowflake--fakesnow's database
SCHEMA = "GUESTDATA"  # meltano.yml: target-snowflake's default_target_schema
STATEMENT_LOG = "GUESTDATA_FAKESNOW_STATEMENT_LOG"
# The connector hands VARIANT, OBJECT and ARRAY values back as JSON text.
SEMI_STRUCTURED = {"VARIANT", "OBJECT", "ARRAY"}


@dataclass
class FakesnowWarehouse:
    """fakesnow databases in `db_path`, queried with Snowflake SQL through the plugin venv."""

    db_path: Path
    venv: Path
    database: str = DATABASE

    def query(self, *statements: str) -> list[list[dict[str, Any]]]:
        """Each statement's rows, as the Snowflake connector returns them (DictCursor)."""
        command = [str(self.venv / "bin" / "guestdata-fakesnow"), "query"]
        command += ["--db-path", str(self.db_path), "--database", self.database, *statements]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return [json.loads(line, object_hook=decode) for line in result.stdout.splitlines()]

    def column_types(self, schema: str = SCHEMA) -> dict[tuple[str, str], str]:
        """(TABLE, COLUMN) -> Snowflake data type, from INFORMATION_SCHEMA."""
        (rows,) = self.query(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = '{schema}'"
        )
        return {(row["TABLE_NAME"], row["COLUMN_NAME"]): row["DATA_TYPE"] for row in rows}

    def tables(self, names: Sequence[str], schema: str = SCHEMA) -> dict[str, list[dict]]:
        """Every row of each table (one query run), keys lower case as the tap named them,
        semi-structured values parsed, rows soft-deleted by the target left out."""
        types = self.column_types(schema)
        results = self.query(*(f'SELECT * FROM {schema}."{name.upper()}"' for name in names))
        tables = {}
        for name, rows in zip(names, results, strict=True):
            parsed = []
            for row in rows:
                parsed_row = {}
                for column, value in row.items():
                    if types[(name.upper(), column)] in SEMI_STRUCTURED and value is not None:
                        value = json.loads(value)
                    parsed_row[column.lower()] = value
                parsed.append(parsed_row)
            tables[name] = [row for row in parsed if row.get("_sdc_deleted_at") is None]
        return tables


def decode(value: dict[str, Any]) -> Any:
    """The inverse of guestdata_fakesnow.encode: tagged JSON back to datetimes, dates, decimals."""
    if len(value) == 1:
        ((tag, text),) = value.items()
        if tag == "$datetime":
            return dt.datetime.fromisoformat(text)
        if tag == "$date":
            return dt.date.fromisoformat(text)
        if tag == "$decimal":
            return decimal.Decimal(text)
    return value


@dataclass
class SnowflakePipeline:
    """`meltano run` of the fakesnow job, against one sandbox and one folder of databases."""

    env: dict[str, str]
    log_path: Path
    warehouse: FakesnowWarehouse
    statement_log: Path
    runs: int = field(default=0)

    def run(self, *args: str) -> None:
        demo_pipeline.run_meltano(args or JOB, self.env, self.log_path)
        self.runs += 1

    def invoke_dbt(self, *args: str, **extra_env: str) -> str:
        """`meltano invoke dbt-snowflake--fakesnow ARGS` on these databases; its whole output."""
        log = self.log_path.with_name(f"invoke-{time.time_ns()}.log")
        command = ["--environment=dev", "invoke", DBT_UTILITY, *args]
        demo_pipeline.run_meltano(command, {**self.env, **extra_env}, log)
        return log.read_text()

    def statements(self) -> list[str]:
        """Every statement the target sent to 'Snowflake' so far, in order."""
        if not self.statement_log.exists():
            return []
        lines = self.statement_log.read_text().splitlines()
        return [json.loads(line)["statement"] for line in lines]
