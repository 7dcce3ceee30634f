"""Snowflake fixtures: the real target-snowflake 0.20.4, run by Meltano against fakesnow.

No account exists here. `target-snowflake--fakesnow` (meltano.yml) is the MeltanoLabs target in
its own plugin venv with fakesnow (Snowflake emulated on DuckDB) and the user stage fakesnow
lacks (guestdata_fakesnow/). Each module gets an empty folder of fakesnow databases, a sandbox
and a throwaway Meltano state; `FakesnowWarehouse` reads the databases back through fakesnow,
so queries are Snowflake SQL and types are Snowflake's.

Reuse (e.g. dbt-snowflake models): `snowflake_pipeline` loads the databases once per module
(`pipeline.run()`), `built` loads them and builds the models (the job with dbt; its
run_results.json in `dbt_target`), `pipeline.warehouse.query(sql)` reads them, and in any venv
that has `tests/snowflake/guestdata_fakesnow` installed beside a Snowflake client,
`guestdata-fakesnow run --db-path <pipeline.warehouse.db_path> dbt build ...` runs that client
on the same databases.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import demo_pipeline
from guestdata_sandbox.testing import SandboxProcess
from support.snowflake_pipeline import (
    DBT_JOB,
    DBT_UTILITY,
    LOADER,
    PLUGINS,
    PROJECT_ROOT,
    STATEMENT_LOG,
    FakesnowWarehouse,
    SnowflakePipeline,
)

pytestmark = pytest.mark.snowflake


@pytest.fixture(scope="session")
def fakesnow_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loader's plugin venv (target-snowflake, fakesnow, guestdata-fakesnow), installed or
    found up to date once per session."""
    scratch = tmp_path_factory.mktemp("snowflake-install")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MELTANO_")}
    env["MELTANO_DATABASE_URI"] = f"sqlite:///{scratch / 'meltano.db'}"
    demo_pipeline.run_meltano(["install", *PLUGINS], env, scratch / "meltano-install.log")
    return PROJECT_ROOT / ".meltano" / "loaders" / LOADER / "venv"


@pytest.fixture(scope="module")
def snowflake_pipeline(
    fakesnow_venv: Path, module_sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> SnowflakePipeline:
    scratch = tmp_path_factory.mktemp("snowflake")
    env = {
        key: value
        for key, value in os.environ.items()
        # A user's own settings must not redirect the run (or reach a real account).
        if not key.startswith(("TAP_GUESTDATA", "TARGET_SNOWFLAKE", "MELTANO_", "FAKESNOW"))
    }
    env.update(
        {
            "TAP_GUESTDATA_BASE_URL": module_sandbox.base_url,
            "TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000",  # the sandbox's limits are off
            "TARGET_SNOWFLAKE__FAKESNOW_FAKESNOW_DB_PATH": str(scratch / "databases"),
            STATEMENT_LOG: str(scratch / "statements.jsonl"),
            "MELTANO_DATABASE_URI": f"sqlite:///{scratch / 'meltano.db'}",
            "MELTANO_SEND_ANONYMOUS_USAGE_STATS": "false",
            "NO_COLOR": "1",
        }
    )
    return SnowflakePipeline(
        env=env,
        log_path=scratch / "meltano.log",
        warehouse=FakesnowWarehouse(db_path=scratch / "databases", venv=fakesnow_venv),
        statement_log=scratch / "statements.jsonl",
    )


@pytest.fixture(scope="module")
def dbt_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dbt-snowflake-target")


@pytest.fixture(scope="module")
def built(snowflake_pipeline: SnowflakePipeline, dbt_target: Path) -> SnowflakePipeline:
    """The load, then dbt build, as one Meltano job on this module's databases."""
    env = snowflake_pipeline.env
    for name in [
        name for name in env if name.startswith(("DBT_", "GUESTDATA_DBT", "GUESTDATA_ERAS"))
    ]:
        del env[name]  # a user's dbt settings (or erasure salt) must not redirect the build
    env.update(
        {
            "DBT_SNOWFLAKE__FAKESNOW_FAKESNOW_DB_PATH": str(snowflake_pipeline.warehouse.db_path),
            # The test's own target dir (never the repo's transform/target): run_results.json.
            "DBT_TARGET_PATH": str(dbt_target),
            "DBT_LOG_PATH": str(dbt_target / "logs"),
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        }
    )
    demo_pipeline.run_meltano(["install", DBT_UTILITY], env, snowflake_pipeline.log_path)
    snowflake_pipeline.run(*DBT_JOB)
    return snowflake_pipeline
