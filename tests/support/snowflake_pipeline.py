"""Reading fakesnow databases and running the fakesnow Meltano job: shared by the Snowflake tests.

`FakesnowWarehouse` queries the DuckDB files fakesnow keeps, through fakesnow itself (in the
loader's plugin venv), so statements are Snowflake SQL and types are Snowflake's. A
`SnowflakePipeline` keeps everything a run leaves in one folder (`in_folder`), so a copy of the
folder carries on from where the run left off (tests/snowflake/conftest.py shares one load so).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import demo_pipeline

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOADER = "target-snowflake--fakesnow"
JOB = ("--environment=dev", "run", "guestdata-to-snowflake-fakesnow")
# The same load, then dbt build by dbt-snowflake under fakesnow.
DBT_UTILITY = "dbt-snowflake--fakesnow"
# What the Snowflake tests install, once a session (one `meltano install`).
PLUGINS = ("tap-guestdata", LOADER, DBT_UTILITY)
DBT_JOB = ("--environment=dev", "run", "guestdata-to-snowflake-fakesnow-dbt")
# The job's dbt build alone: after JOB, the folder DBT_JOB leaves.
DBT_BUILD = ("--environment=dev", "run", f"{DBT_UTILITY}:build")
DATABASE = "RAW"  # meltano.yml: target-snowflake--fakesnow's database
SCHEMA = "GUESTDATA"  # meltano.yml: target-snowflake's default_target_schema
STATEMENT_LOG = "GUESTDATA_FAKESNOW_STATEMENT_LOG"
# The connector hands VARIANT, OBJECT and ARRAY values back as JSON text.
SEMI_STRUCTURED = {"VARIANT", "OBJECT", "ARRAY"}
# Settings of a user's that must not redirect a run (or reach a real account), nor the build.
USER_SETTINGS = (
    "TAP_GUESTDATA",
    "TARGET_SNOWFLAKE",
    "MELTANO_",
    "FAKESNOW",
    "DBT_",
    "GUESTDATA_DBT",
    "GUESTDATA_ERAS",  # the erasure salt and identifier
)


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


def installed_fakesnow_venv(scratch: Path) -> Path:
    """`meltano install` of PLUGINS (idempotent; its system database and log in `scratch`): the
    loader's plugin venv (target-snowflake, fakesnow, guestdata-fakesnow), with the tap and the
    dbt utility (dbt-snowflake) beside it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MELTANO_")}
    env["MELTANO_DATABASE_URI"] = f"sqlite:///{scratch / 'meltano.db'}"
    demo_pipeline.run_meltano(["install", *PLUGINS], env, scratch / "meltano-install.log")
    return PROJECT_ROOT / ".meltano" / "loaders" / LOADER / "venv"


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
    dbt_target: Path | None = None  # dbt's target dir (run_results.json, compiled SQL)

    @classmethod
    def in_folder(cls, folder: Path, venv: Path, base_url: str | None) -> SnowflakePipeline:
        """Runs whose every trace is in `folder`: fakesnow's databases, Meltano's system
        database (the state), the target's statement log, dbt's target dir and the logs."""
        env = {key: value for key, value in os.environ.items() if not key.startswith(USER_SETTINGS)}
        env.update(
            {
                "TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000",  # the sandbox's limits are off
                "TARGET_SNOWFLAKE__FAKESNOW_FAKESNOW_DB_PATH": str(folder / "databases"),
                STATEMENT_LOG: str(folder / "statements.jsonl"),
                "MELTANO_DATABASE_URI": f"sqlite:///{folder / 'meltano.db'}",
                "MELTANO_SEND_ANONYMOUS_USAGE_STATS": "false",
                "NO_COLOR": "1",
                "DBT_SNOWFLAKE__FAKESNOW_FAKESNOW_DB_PATH": str(folder / "databases"),
                # The folder's own target dir (never the repo's transform/target).
                "DBT_TARGET_PATH": str(folder / "dbt-target"),
                "DBT_LOG_PATH": str(folder / "dbt-target" / "logs"),
                "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
            }
        )
        if base_url is not None:
            env["TAP_GUESTDATA_BASE_URL"] = base_url
        return cls(
            env=env,
            log_path=folder / "meltano.log",
            warehouse=FakesnowWarehouse(db_path=folder / "databases", venv=venv),
            statement_log=folder / "statements.jsonl",
            dbt_target=folder / "dbt-target",
        )

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


# ------------------------------------------------------------------ the marts, as support.dbt's
# expected_* shape them (the Snowflake tests compare them with the truth)

MODELS = "GUESTDATA_ANALYTICS"  # <default_target_schema>_ANALYTICS (transform/profiles.yml)


def mart_rows(pipeline: SnowflakePipeline, statement: str) -> list[dict[str, Any]]:
    (result,) = pipeline.warehouse.query(statement)
    return result


def built_venue_days(pipeline: SnowflakePipeline, until: str) -> dict[tuple[int, str], tuple]:
    """(venue_id, London date) -> visits, unique guests, opt-ins, for days up to `until`."""
    rows = mart_rows(
        pipeline,
        "SELECT venue_id, date, visits, unique_guests, marketing_opt_ins "
        f"FROM {MODELS}.fct_venue_daily WHERE date <= '{until}'",
    )
    return {
        (row["VENUE_ID"], row["DATE"].isoformat()): (
            row["VISITS"],
            row["UNIQUE_GUESTS"],
            row["MARKETING_OPT_INS"],
        )
        for row in rows
    }


def built_members(pipeline: SnowflakePipeline) -> dict[int, tuple]:
    """member_id -> status, tier, balance, ledger sum, balance matches ledger."""
    rows = mart_rows(
        pipeline,
        "SELECT member_id, member_status, tier_key, points_balance, ledger_points_sum, "
        f"balance_matches_ledger FROM {MODELS}.dim_members",
    )
    return {
        row["MEMBER_ID"]: (
            row["MEMBER_STATUS"],
            row["TIER_KEY"],
            row["POINTS_BALANCE"],
            row["LEDGER_POINTS_SUM"],
            row["BALANCE_MATCHES_LEDGER"],
        )
        for row in rows
    }


def built_rewards(pipeline: SnowflakePipeline) -> dict[int, tuple]:
    """reward_id -> status as read, redemption_id."""
    rows = mart_rows(
        pipeline, f"SELECT reward_id, status_as_read, redemption_id FROM {MODELS}.fct_rewards"
    )
    return {row["REWARD_ID"]: (row["STATUS_AS_READ"], row["REDEMPTION_ID"]) for row in rows}


def built_offers(pipeline: SnowflakePipeline, columns: Sequence[str]) -> dict[int, tuple]:
    """offer_id -> `columns` of fct_offer_performance."""
    rows = mart_rows(
        pipeline, f"SELECT offer_id, {', '.join(columns)} FROM {MODELS}.fct_offer_performance"
    )
    return {row["OFFER_ID"]: tuple(row[name.upper()] for name in columns) for row in rows}
