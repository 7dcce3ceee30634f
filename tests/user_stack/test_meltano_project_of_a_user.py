"""A new Meltano project, away from this checkout, loads the sandbox with the released package.

The README's "Use it in your own stack", as a user runs it: `meltano init` in a temporary
folder; `meltano add extractor tap-guestdata --from-ref` the plugin definition (a copy whose
`pip_url` is the release's wheel, as it would be the package index's) and `meltano add loader
target-postgres --from-ref` plugin/loaders/; `meltano config set`; `meltano run`. Every table
equals the sandbox's ground truth. No Meltano Hub, no network beyond the package index; the
project uses Meltano's uv backend for its plugin virtualenvs (a Meltano setting) to stay quick.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import yaml

import demo_pipeline
from demo_pipeline import Destination
from guestdata_sandbox.testing import SandboxProcess
from plugin_definition import EXTRACTOR_FILE, LOADER_FILE
from support.pipeline import MeltanoProject, throwaway_database
from support.release import Release
from support.sandbox import OWNER_KEY

pytestmark = pytest.mark.e2e

SCHEMA = "guestdata"
# Nothing of this checkout's own Meltano project or a developer's settings may reach the run.
SCRUBBED = ("MELTANO_", "TAP_GUESTDATA", "TARGET_POSTGRES", "PYTHONPATH")


@pytest.fixture(scope="module")
def database(pg_server: Destination) -> Iterator[str]:
    with throwaway_database(pg_server, "guestdata_user_stack") as name:
        yield name


def sqlalchemy_url(server: Destination, database: str) -> str:
    """One setting for target-postgres's connection (a Unix socket folder goes in `host=`)."""
    user = quote(server.user) + (f":{quote(server.password)}" if server.password else "")
    if server.host.startswith("/"):
        return f"postgresql+psycopg://{user}@/{database}?host={server.host}&port={server.port}"
    return f"postgresql+psycopg://{user}@{server.host}:{server.port}/{database}"


def as_utc(row: dict[str, Any]) -> dict[str, Any]:
    """target-postgres 0.8.1 stores date-times as `timestamp without time zone`, in the
    session's zone, which the loader definition pins to UTC (PGTZ): read them as UTC."""
    return {
        name: value.replace(tzinfo=dt.timezone.utc)
        if isinstance(value, dt.datetime) and value.tzinfo is None
        else value
        for name, value in row.items()
    }


def test_a_new_meltano_project_loads_the_sandbox_with_the_released_package(
    release: Release,
    sandbox: SandboxProcess,
    pg_server: Destination,
    database: str,
    tmp_path: Path,
) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith(SCRUBBED)}
    env["NO_COLOR"] = "1"
    folder = MeltanoProject(env=env, log_dir=tmp_path, root=tmp_path)
    folder.run("init", "--no-usage-stats", "my-meltano-project")
    project = MeltanoProject(env=env, log_dir=tmp_path, root=tmp_path / "my-meltano-project")
    project.run("config", "set", "meltano", "venv.backend", "uv")

    definition = yaml.safe_load(EXTRACTOR_FILE.read_text())
    definition["pip_url"] = str(release.wheel)  # tap-guestdata==<version> once it is published
    from_ref = tmp_path / "tap-guestdata.yml"
    from_ref.write_text(yaml.safe_dump(definition, sort_keys=False))
    project.run("add", "extractor", "tap-guestdata", "--from-ref", str(from_ref))
    project.run("add", "loader", "target-postgres", "--from-ref", str(LOADER_FILE))

    project.run("config", "set", "tap-guestdata", "base_url", sandbox.base_url)
    project.run("config", "set", "tap-guestdata", "api_key", OWNER_KEY)
    # The sandbox's limits are off; a budget of 120 a minute would only slow the test.
    project.run("config", "set", "tap-guestdata", "requests_per_minute", "100000")
    url = sqlalchemy_url(pg_server, database)
    project.run("config", "set", "target-postgres", "sqlalchemy_url", url)  # sensitive: .env
    project.run("config", "set", "target-postgres", "default_target_schema", SCHEMA)
    project.run("run", "tap-guestdata", "target-postgres")

    truth = demo_pipeline.truth_tables(sandbox.truth(OWNER_KEY))
    with psycopg.connect(pg_server.conninfo(database)) as connection:
        checks = [
            demo_pipeline.compare_stream(
                stream,
                [as_utc(row) for row in demo_pipeline.database_rows(connection, SCHEMA, stream)],
                expected,
            )
            for stream, expected in truth.items()
        ]
    assert all(check.matches for check in checks), "\n" + demo_pipeline.report(checks)
    assert all(check.rows_in_truth > 0 for check in checks)

    # The tap ran from the wheel: installed, not a link into this checkout, no sandbox.
    venv = project.root / ".meltano" / "extractors" / "tap-guestdata" / "venv"
    (site_packages,) = venv.glob("lib/python*/site-packages")
    assert (site_packages / "tap_guestdata" / "tap.py").is_file()
    installed = [path.name for path in site_packages.iterdir()]
    assert not [name for name in installed if "sandbox" in name or "editable" in name]
    links = [path.read_text() for path in site_packages.glob("*.pth")]
    assert not [link for link in links if str(demo_pipeline.PROJECT_ROOT) in link]
    assert url not in (project.root / "meltano.yml").read_text()
