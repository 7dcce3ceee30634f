"""End-to-end fixtures: a PostgreSQL database per test session and the repo's Meltano project.

PostgreSQL: GUESTDATA_E2E_PG_URL if set, else 127.0.0.1:5432 (CI starts it; trust auth, user
postgres), else the embedded server from the pgserver wheel, so `scripts/test` also runs these on
a laptop with no server. Each session creates `guestdata_e2e_<pid>_<random>` and drops it.

Meltano: `.venv/bin/meltano` on the repository's own meltano.yml (what users run), with a
throwaway `MELTANO_DATABASE_URI` per session so no state leaks in or out. Plugin venvs live in
the (gitignored) `.meltano/` and are reused between sessions.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess

PROJECT_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT_ROOT / "scripts"))

import demo_pipeline  # noqa: E402  (scripts/ is not a package; the demo's checks are reused)

pytestmark = pytest.mark.e2e

MELTANO = PROJECT_ROOT / ".venv" / "bin" / "meltano"
PLUGINS = (
    "tap-guestdata",
    "target-postgres",
    "guestdata-pg-types",
    "meltano-map-transformer",
    "dbt-postgres",  # the jobs end with dbt build
)
# A full run reads every member's ledger: without a client-side cap the suite stays quick.
# The sandbox's own limits are off here; rate limiting is the tap suite's business.
ERROR_WORDS = re.compile(r"error|exception|traceback|failed", re.IGNORECASE)
FAST_TAP = {"TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000"}


@pytest.fixture(scope="session")
def pg_server() -> Iterator[demo_pipeline.Destination]:
    url = os.environ.get("GUESTDATA_E2E_PG_URL")
    if url:
        destination = demo_pipeline.server_from_url(url, url)
        assert demo_pipeline.server_answers(destination), f"no PostgreSQL at {url}"
        yield destination
        return
    destination = demo_pipeline.server_from_url(demo_pipeline.DEFAULT_SERVER_URL, "local")
    if demo_pipeline.server_answers(destination):
        yield destination
        return
    with (
        tempfile.TemporaryDirectory(prefix="guestdata-e2e-pg-") as pgdata,
        demo_pipeline.embedded_server(Path(pgdata) / "data") as embedded,
    ):
        yield embedded


@pytest.fixture(scope="session")
def e2e_database(pg_server: demo_pipeline.Destination) -> Iterator[str]:
    """A database of this session's own, dropped at the end whatever happened."""
    name = f"guestdata_e2e_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(pg_server.conninfo("postgres"), autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass
class MeltanoProject:
    """Runs `meltano` on the repo's project against one sandbox and one database."""

    env: dict[str, str]
    log_dir: Path

    def run(
        self, *args: str, extra_env: Mapping[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        result = subprocess.run(
            [str(MELTANO), *args],
            cwd=PROJECT_ROOT,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        elapsed = time.monotonic() - started
        log = self.log_dir / f"meltano-{time.time_ns()}.log"
        log.write_text(
            f"$ meltano {' '.join(args)}  ({elapsed:.1f} s)\n{result.stdout}{result.stderr}"
        )
        if check and result.returncode != 0:
            lines = (result.stdout + result.stderr).splitlines()
            # The plugins' own error lines come long before Meltano's closing summary.
            errors = [line for line in lines if ERROR_WORDS.search(line)][:30]
            pytest.fail(
                f"meltano {' '.join(args)} failed ({result.returncode}); log {log}\n"
                + "\n".join([*errors, "...", *lines[-15:]])
            )
        return result

    def state_ids(self) -> list[str]:
        result = self.run("--environment=dev", "state", "list")
        return [line.strip() for line in result.stdout.splitlines() if ":" in line]


@pytest.fixture(scope="session")
def meltano_installed() -> None:
    """Plugin venvs, installed (or found up to date) once per session."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MELTANO_")}
    with tempfile.TemporaryDirectory() as state_dir:
        env["MELTANO_DATABASE_URI"] = f"sqlite:///{state_dir}/meltano.db"
        result = subprocess.run(
            [str(MELTANO), "install", *PLUGINS],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


@pytest.fixture(scope="module")
def e2e_sandbox() -> Iterator[SandboxProcess]:
    """The e2e module's own sandbox: the tests mutate it, in order."""
    with SandboxProcess(size="small", seed=11, limits=False) as server:
        yield server


@pytest.fixture(scope="module")
def meltano(
    meltano_installed: None,
    e2e_sandbox: SandboxProcess,
    pg_server: demo_pipeline.Destination,
    e2e_database: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> MeltanoProject:
    state_dir = tmp_path_factory.mktemp("meltano-state")
    env = demo_pipeline.meltano_env(e2e_sandbox.base_url, pg_server, e2e_database, state_dir)
    env.update(FAST_TAP)
    return MeltanoProject(env=env, log_dir=tmp_path_factory.mktemp("meltano-logs"))


@pytest.fixture(scope="module")
def database(pg_server: demo_pipeline.Destination, e2e_database: str) -> str:
    """Connection string of this session's database."""
    return pg_server.conninfo(e2e_database)


@pytest.fixture(scope="module")
def owner_truth(e2e_sandbox: SandboxProcess):
    """Ground truth now, for the owner's key (call it again after mutations)."""
    return lambda: e2e_sandbox.truth(OWNER_KEYS[0])
