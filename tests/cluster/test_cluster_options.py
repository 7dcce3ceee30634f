"""`scripts/cluster up`'s options, without root or a cluster: the PostgreSQL server and the
Redis db it is given reach every Airflow and pipeline setting, from the root namespace (the
services' own addresses) and from a worker's namespace (the bridge's forwarders), and they are
saved with the cluster, so `down`, `status` and `trigger` use them; the warehouse reaches the
workers as an Airflow connection, not as environment; the models' build is on unless
`--no-models`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from guestdata_cluster import Cluster, ClusterError
from guestdata_cluster.cli import cluster_of, parser
from guestdata_cluster.deploy import (
    account_connections,
    default_accounts,
    warehouse_connection,
    write_shared_secrets,
)
from guestdata_cluster.state import DEFAULT_REDIS_DB, LOCAL_POSTGRES, LOCAL_REDIS
from tap_guestdata.airflow.config import transform_blocks

# A server and a Redis of the operator's own, with credentials (none of them is contacted).
REDIS = "redis://:broker-secret@10.9.8.7:6380/3"
POSTGRES = "postgresql://loader:pg-secret@10.9.8.6:5433"
TRANSFORM = "GUESTDATA_MELTANO_TRANSFORM"  # the DAGs' meltano_transform setting (config.py)


def saved_cluster(home: Path, *options: str) -> Cluster:
    """The cluster `up` would make with `options`, saved and read back as `down` reads it."""
    args = parser().parse_args(["--home", str(home), "up", "--name", "gdu", *options])
    cluster = cluster_of(args, home, home / "secrets.json")
    home.mkdir(exist_ok=True)
    write_shared_secrets(home)
    cluster.save()
    return Cluster.load(home)


def test_the_services_given_to_up_reach_every_airflow_and_pipeline_setting(
    tmp_path: Path,
) -> None:
    cluster = saved_cluster(tmp_path, "--redis-url", REDIS, "--postgres-url", POSTGRES)
    assert (cluster.redis_url, cluster.postgres_url) == (REDIS, POSTGRES)

    for via, host in ((None, "10.9.8.6"), (cluster.gateway, cluster.gateway)):
        env = {**cluster.airflow_env(via), **cluster.pipeline_env(via)}
        assert cluster.env(via).items() >= env.items()  # what each process gets
        broker = f"redis://:broker-secret@{'10.9.8.7' if via is None else host}:6380/3"
        airflow_db = f"loader:pg-secret@{host}:5433/gdu_airflow"
        assert env["AIRFLOW__CELERY__BROKER_URL"] == broker
        assert env["TAP_GUESTDATA_RATE_BUDGET_STORE"] == broker
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"postgresql+psycopg2://{airflow_db}"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == (
            f"postgresql+psycopg://{airflow_db}"
        )
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == f"db+postgresql+psycopg2://{airflow_db}"
        assert env["MELTANO_DATABASE_URI"] == (
            f"postgresql+psycopg2://loader:pg-secret@{host}:5433/gdu_meltano"
        )
        # The warehouse: its connection's id, no credential in any process's environment.
        assert [name for name in cluster.env(via) if name.startswith("TARGET_")] == []
        assert env["GUESTDATA_WAREHOUSE_CONNECTION_ID"] == "guestdata_warehouse"
    # target-postgres, the pg-types step and dbt-postgres on a worker: through the bridge.
    assert warehouse_connection(cluster) == {
        "conn_type": "postgres",
        "host": cluster.gateway,
        "port": 5433,
        "login": "loader",
        "password": "pg-secret",
        "schema": "gdu_warehouse",
    }
    # A namespace reaches each service through a forwarder on the bridge, on the service's port.
    assert cluster.forwarders == {
        "forward-postgres": (5433, "10.9.8.6", 5433),
        "forward-redis": (6380, "10.9.8.7", 6380),
    }
    assert cluster.maintenance_url() == f"{POSTGRES}/postgres"
    assert (tmp_path / "cluster.json").stat().st_mode & 0o077 == 0, "passwords: owner only"


def test_up_uses_the_shared_local_services_by_default(tmp_path: Path) -> None:
    cluster = saved_cluster(tmp_path)
    assert cluster.redis_url == f"{LOCAL_REDIS}/{DEFAULT_REDIS_DB}"
    assert cluster.postgres_url == LOCAL_POSTGRES
    assert cluster.env()["AIRFLOW__CELERY__BROKER_URL"] == cluster.redis_url
    warehouse = warehouse_connection(cluster)
    assert (warehouse["login"], warehouse["schema"]) == ("postgres", "gdu_warehouse")
    # The server trusts its clients; the connection still has a password (warehouse.py).
    assert len(warehouse["password"]) >= 20
    given = warehouse_connection(cluster, {"password": "chosen", "port": 6000})
    assert given == {**warehouse, "password": "chosen", "port": 6000}

    other = saved_cluster(tmp_path / "other", "--redis-db", "11")
    assert other.env(other.gateway)["TAP_GUESTDATA_RATE_BUDGET_STORE"] == (
        f"redis://{other.gateway}:6379/11"
    )


@pytest.mark.parametrize(
    "options",
    [
        ("--redis-url", REDIS, "--redis-db", "3"),
        ("--redis-url", "http://10.9.8.7:6380/3"),
        ("--postgres-url", "10.9.8.6:5433"),
        ("--postgres-url", "postgresql://postgres@127.0.0.1:8080"),  # the api-server's port
    ],
)
def test_up_refuses_services_it_cannot_use(tmp_path: Path, options: tuple[str, ...]) -> None:
    with pytest.raises(ClusterError):
        saved_cluster(tmp_path, *options)


def test_runs_end_with_the_models_build_unless_up_says_no_models(tmp_path: Path) -> None:
    """The DAG's `meltano_transform` setting, as the dag-processor and workers read it."""
    with_models = saved_cluster(tmp_path / "models").pipeline_env()
    loads_only = saved_cluster(tmp_path / "loads", "--no-models").pipeline_env()

    assert transform_blocks(with_models[TRANSFORM], "target-postgres") == ("dbt-postgres:build",)
    assert transform_blocks(loads_only[TRANSFORM], "target-postgres") == ()


@pytest.mark.parametrize(("seconds", "resends"), [(None, 9), (60, 29), (900, 2)])
def test_a_task_queued_too_long_is_sent_again_soon_and_a_queue_without_worker_lasts(
    tmp_path: Path, seconds: int | None, resends: int
) -> None:
    """A message the broker lost is sent again after `--queued-timeout` (default 180 s, not
    Airflow's 600); the resends keep a queue whose worker is gone 30 minutes from failing
    its tasks, as Airflow's defaults do (600 s x 3)."""
    options = () if seconds is None else ("--queued-timeout", str(seconds))
    env = saved_cluster(tmp_path, *options).airflow_env()
    timeout = int(env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT"])
    assert timeout == (seconds or 180)
    assert int(env["AIRFLOW__SCHEDULER__NUM_STUCK_IN_QUEUED_RETRIES"]) == resends
    assert timeout * (resends + 1) >= 1800
    assert int(env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL"]) <= timeout // 4


@pytest.mark.parametrize(("heartbeat_timeout", "failed_heartbeats"), [(None, 60), (30, 6), (5, 3)])
def test_tasks_live_through_an_api_server_outage_as_long_as_the_heartbeat_timeout(
    tmp_path: Path, heartbeat_timeout: int | None, failed_heartbeats: int
) -> None:
    """A task's supervisor gives up after as many failed heartbeats (one per 5 s) as fit in
    the scheduler's heartbeat timeout (Airflow's 3 ended every task about 10 s into an
    api-server outage), and each call to the api-server is tried 12 times, not 5."""
    options = () if heartbeat_timeout is None else ("--heartbeat-timeout", str(heartbeat_timeout))
    env = saved_cluster(tmp_path, *options).airflow_env()
    assert int(env["AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS"]) == failed_heartbeats
    assert int(env["AIRFLOW__WORKERS__EXECUTION_API_RETRIES"]) == 12


def test_scripts_cluster_leaves_the_installed_venv_alone() -> None:
    """A call of `scripts/cluster` (here `--help`) installs nothing once `.venv` has the tool:
    a reinstall of the editable packages removes `.venv/bin/tap-guestdata` for a moment, and
    whatever runs it then (another suite, a user's run) fails."""
    root = Path(__file__).resolve().parents[2]
    entry_point = root / ".venv" / "bin" / "tap-guestdata"
    before = entry_point.stat()
    result = subprocess.run(
        [str(root / "scripts" / "cluster"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "kill-worker" in result.stdout
    after = entry_point.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_the_default_accounts_keys_are_in_their_guestdata_connections() -> None:
    accounts, keys = default_accounts(["core"])
    connections = account_connections(accounts, keys, "http://127.0.0.1:8787/api/v1/customer")
    assert connections["guestdata_harbour"] == {
        "conn_type": "guestdata",
        "password": "gd_owner_growth_1",
        "extra": {
            "api_keys": ["gd_owner_growth_2"],
            "base_url": "http://127.0.0.1:8787/api/v1/customer",
        },
    }
    assert sorted(connections) == [
        "guestdata_harbour",
        "guestdata_northgate",
        "guestdata_saltmarsh",
    ]
