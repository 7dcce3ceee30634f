"""PostgreSQL and Meltano for the suites that run the repository's Meltano project (e2e, dbt,
Snowflake, Airflow).

PostgreSQL: a URL if one is given, else 127.0.0.1:5432 (CI starts it; trust auth, user
postgres), else the embedded server from the pgserver wheel, so `scripts/test` also runs these
on a laptop with no server. Each user gets throwaway databases, dropped whatever happened.

Meltano: `.venv/bin/meltano` on the repository's own meltano.yml (what users run), with a
throwaway `MELTANO_DATABASE_URI` so no state leaks in or out. Plugin venvs live in the
(gitignored) `.meltano/` and are reused between sessions.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import demo_pipeline
from demo_pipeline import PROJECT_ROOT, Destination

MELTANO = PROJECT_ROOT / ".venv" / "bin" / "meltano"
# A full run reads every member's ledger: without a client-side cap the suites stay quick.
# The sandbox's own limits are off there; rate limiting is the tap suite's business.
FAST_TAP = {"TAP_GUESTDATA_REQUESTS_PER_MINUTE": "100000"}
ERROR_WORDS = re.compile(r"error|exception|traceback|failed", re.IGNORECASE)


@contextmanager
def postgres_server(url: str | None = None) -> Iterator[Destination]:
    """The server at `url` (it must answer), else the local one, else an embedded one."""
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
        tempfile.TemporaryDirectory(prefix="guestdata-test-pg-") as pgdata,
        demo_pipeline.embedded_server(Path(pgdata) / "data") as embedded,
    ):
        yield embedded


def drop_database(server: Destination, name: str) -> None:
    with psycopg.connect(server.conninfo("postgres"), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def create_database(server: Destination, name: str) -> str:
    """A new, empty database `name` (one of that name left by an earlier run is dropped)."""
    drop_database(server, name)
    with psycopg.connect(server.conninfo("postgres"), autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


@contextmanager
def throwaway_database(server: Destination, prefix: str) -> Iterator[str]:
    """A database of its own (`<prefix>_<pid>_<random>`), dropped at the end whatever happened."""
    name = create_database(server, f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}")
    try:
        yield name
    finally:
        drop_database(server, name)


def business(row: dict[str, Any]) -> dict[str, Any]:
    """A loaded row without the target's bookkeeping (_sdc_*), which every load rewrites."""
    return {name: value for name, value in row.items() if not name.startswith("_sdc_")}


def run_in_project(
    command: Sequence[str], env: Mapping[str, str], timeout: float, cwd: Path = PROJECT_ROOT
) -> subprocess.CompletedProcess[str]:
    """`command` run from the project root (or `cwd`) with exactly `env`, output as text."""
    return subprocess.run(
        [*command],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def plugin_venv(plugin_type: str, name: str) -> Path:
    """Where `meltano install` put a plugin's virtualenv."""
    return PROJECT_ROOT / ".meltano" / plugin_type / name / "venv"


def bytecode_share(venv: Path) -> float:
    """Of a venv's site-packages modules, the share with a .pyc of this interpreter beside: with
    none, and PYTHONDONTWRITEBYTECODE set, each start compiles every module it imports."""
    (site_packages,) = venv.glob("lib/python3*/site-packages")
    sources = list(site_packages.rglob("*.py"))
    tag = sys.implementation.cache_tag
    compiled = [source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc" for source in sources]
    return sum(path.exists() for path in compiled) / len(sources) if sources else 0.0


def install_plugins(plugins: Sequence[str], scratch: Path) -> None:
    """`meltano install` of `plugins` (idempotent), with a throwaway Meltano database."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MELTANO_")}
    env["MELTANO_DATABASE_URI"] = f"sqlite:///{scratch}/meltano.db"
    result = run_in_project([str(MELTANO), "install", *plugins], env, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


@dataclass
class MeltanoProject:
    """Runs `meltano` on the repo's project (or the one in `root`) with one environment."""

    env: dict[str, str]
    log_dir: Path
    root: Path = PROJECT_ROOT

    def run(
        self,
        *args: str,
        extra_env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        result = run_in_project(
            [str(MELTANO), *args], {**self.env, **(extra_env or {})}, timeout=timeout, cwd=self.root
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


def sandbox_project(
    base_url: str, destination: Destination, database: str, log_dir: Path, **env: str
) -> MeltanoProject:
    """The repo's Meltano project reading one sandbox (`base_url`) into one database: quick
    (FAST_TAP), with a state store of its own under `log_dir`, and `env` on top."""
    state_dir = Path(tempfile.mkdtemp(prefix="meltano-state-", dir=log_dir))
    project_env = demo_pipeline.meltano_env(base_url, destination, database, state_dir)
    project_env.update({**FAST_TAP, **env})
    return MeltanoProject(env=project_env, log_dir=log_dir)


# ---------------------------------------------------------------- fixtures
# Imported by the conftest.py of each suite that uses them (e2e, transform): one definition.

E2E_PLUGINS = (
    "tap-guestdata",
    "target-postgres",
    "guestdata-pg-types",
    "meltano-map-transformer",
    "dbt-postgres",  # the jobs end with dbt build
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Destination]:
    """GUESTDATA_E2E_PG_URL if set, else the local server, else an embedded one."""
    with postgres_server(os.environ.get("GUESTDATA_E2E_PG_URL")) as server:
        yield server


@pytest.fixture(scope="session")
def e2e_database(pg_server: Destination) -> Iterator[str]:
    """A database of this session's own, dropped at the end whatever happened."""
    with throwaway_database(pg_server, "guestdata_e2e") as name:
        yield name


@pytest.fixture(scope="session")
def meltano_installed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Plugin venvs, installed (or found up to date) once per session."""
    install_plugins(E2E_PLUGINS, tmp_path_factory.mktemp("meltano-install"))
