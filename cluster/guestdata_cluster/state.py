"""What `up` made, saved in `<home>/cluster.json`: names, addresses and every process's settings.

`status`, `down`, `trigger` and the tests read it back (`Cluster.load`), so a cluster is driven
by what it was made with, not by the options of a later command.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from tap_guestdata.airflow.accounts import TASKS_PER_QUEUE

# An editable install from a checkout (scripts/bootstrap): the cluster deploys that checkout's
# Meltano project and DAG file. cluster/guestdata_cluster/state.py -> the checkout.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.prefix) / "bin"  # airflow, meltano: the virtualenv running the cluster
DEFAULT_HOME = PROJECT_ROOT / ".cluster"
DAG_ID = "guestdata_meltano"
MARKER = "GUESTDATA_CLUSTER"  # in every process's environment: `down` finds stragglers by it
PG_PORT, REDIS_PORT = 5432, 6379
# The shared local services (`up`'s defaults): the server's trust rule lets postgres in.
LOCAL_POSTGRES = f"postgresql://postgres@127.0.0.1:{PG_PORT}"
LOCAL_REDIS = f"redis://127.0.0.1:{REDIS_PORT}"
DEFAULT_REDIS_DB = 7
DATABASE_ROLES = ("airflow", "meltano", "warehouse")  # <name>_<role>: metadata, state, rows
# The `postgres` Airflow connection of the warehouse (tap_guestdata/airflow/warehouse.py): every
# load and build reads its credentials there, not from the workers' environment.
WAREHOUSE_CONNECTION = "guestdata_warehouse"


class ClusterError(RuntimeError):
    """Something the operator must fix; the message says what."""


@dataclass
class Cluster:
    """What `up` made, saved in `<home>/cluster.json` so `status`, `down` and tests read it."""

    name: str
    home: str
    workers: int
    subnet: str  # the first three octets, e.g. "10.200.0"
    api_port: int
    redis_url: str  # the broker and the shared rate budget: redis://[:password@]host:port/db
    postgres_url: str  # the server of the three databases: postgresql://user[:password]@host:port
    api_url: str
    heartbeat_timeout: int
    visibility_timeout: int
    time_scale: float
    retry_delay_seconds: float
    accounts_file: str
    pids: dict[str, int] = field(default_factory=dict)
    secrets_file: str = ""
    extra_env: list[str] = field(default_factory=list)  # NAME=VALUE, for every process
    models: bool = True  # dbt deployed, and each DAG run ends with its one dbt_build
    # How long a task may stay queued (sent to the broker, not started) before the scheduler
    # sends it again: a broker that lost its messages costs this, not Airflow's 600 s.
    queued_timeout: int = 180
    slots: int = TASKS_PER_QUEUE  # each queue's pool, and its worker's concurrency

    # -- names and addresses ------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"{self.name}-br"

    @property
    def gateway(self) -> str:
        return f"{self.subnet}.1"

    def namespace(self, worker: int) -> str:
        return f"{self.name}-w{worker}"

    def address(self, worker: int) -> str:
        return f"{self.subnet}.{10 + worker}"

    def queue(self, worker: int) -> str:
        return f"worker_{worker}"

    def database(self, role: str) -> str:
        return f"{self.name}_{role}"

    @property
    def rest_url(self) -> str:
        return f"http://{self.gateway}:{self.api_port}"

    @property
    def queues(self) -> dict[str, str]:
        """Queue -> the address its worker's requests leave from."""
        return {self.queue(n): self.address(n) for n in range(1, self.workers + 1)}

    @property
    def root(self) -> Path:
        return Path(self.home)

    @property
    def project(self) -> Path:
        return self.root / "project"

    def save(self) -> None:
        """Readable by its owner only: the services' URLs may hold passwords."""
        path = self.root / "cluster.json"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as output:
            json.dump(asdict(self), output, indent=2)

    @classmethod
    def load(cls, home: Path) -> Cluster:
        path = home / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster at {home} (no cluster.json): `scripts/cluster up`")
        return cls(**json.loads(path.read_text()))

    # -- services --------------------------------------------------------------------------
    @property
    def postgres(self) -> SplitResult:
        return urlsplit(self.postgres_url)

    @property
    def redis(self) -> SplitResult:
        return urlsplit(self.redis_url)

    @property
    def forwarders(self) -> dict[str, tuple[int, str, int]]:
        """Label -> (port on the bridge address, the service's host and port): a namespace
        reaches each service through the bridge, whatever address the service has."""
        return {
            "forward-postgres": (
                port_of(self.postgres),
                host_of(self.postgres),
                port_of(self.postgres),
            ),
            "forward-redis": (port_of(self.redis), host_of(self.redis), port_of(self.redis)),
        }

    def database_url(self, role: str, via: str | None = None, driver: str = "postgresql") -> str:
        """The database of `role` (`<name>_<role>`); `via`: the bridge address a namespace
        reaches the server through, else the server's own address."""
        return with_host(self.postgres, via, driver, f"/{self.database(role)}")

    def maintenance_url(self) -> str:
        """The server's maintenance database (CREATE/DROP DATABASE): the URL's own, else
        `postgres`."""
        database = self.postgres.path.strip("/") or "postgres"
        return with_host(self.postgres, None, "postgresql", f"/{database}")

    def warehouse_connection(self) -> dict[str, Any]:
        """The warehouse as an Airflow `postgres` connection (its JSON form), as the workers
        reach it: through the bridge. The server's password, if its URL has one."""
        postgres = self.postgres
        return {
            "conn_type": "postgres",
            "host": self.gateway,
            "port": port_of(postgres),
            "login": unquote(postgres.username or ""),
            "password": unquote(postgres.password or ""),
            "schema": self.database("warehouse"),  # Airflow's postgres connection: the database
        }

    def broker_url(self, via: str | None = None) -> str:
        """The Redis db; `via`: the bridge address a namespace reaches it through."""
        return with_host(self.redis, via, self.redis.scheme, self.redis.path)

    # -- environments --------------------------------------------------------------------
    def airflow_env(self, via: str | None = None) -> dict[str, str]:
        """Every Airflow process's settings; `via`: the bridge address a namespace reaches
        PostgreSQL and Redis through (None: the services' own addresses)."""
        shared = json.loads(Path(self.secrets_file).read_text())
        return {
            MARKER: self.name,
            "AIRFLOW_HOME": str(self.root / "airflow"),
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__FERNET_KEY": shared["fernet_key"],
            "AIRFLOW__API_AUTH__JWT_SECRET": shared["jwt_secret"],
            "AIRFLOW__API__SECRET_KEY": shared["secret_key"],
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.rest_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.rest_url,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url("airflow", via, PSYCOPG2),
            # Airflow's async engine: psycopg 3 (already installed) instead of asyncpg.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.database_url(
                "airflow", via, "postgresql+psycopg"
            ),
            "AIRFLOW__CELERY__BROKER_URL": self.broker_url(via),
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + self.database_url("airflow", via, PSYCOPG2),
            # Longer than the longest task, or Redis hands a running task's message to a
            # second worker (task_acks_late); docs/scale-out.md.
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": str(
                self.visibility_timeout
            ),
            # A queued task's message lost with the broker (restarted without its AOF) is sent
            # again after queued_timeout; as many resends as keep a queue without a worker
            # 30 minutes from failing its tasks, as Airflow's defaults do (3 x 600 s).
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(self.queued_timeout),
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": str(
                max(5, min(120, self.queued_timeout // 4))
            ),
            "AIRFLOW__SCHEDULER__NUM_STUCK_IN_QUEUED_RETRIES": str(
                max(2, -(-QUEUE_WITHOUT_WORKER_SECONDS // self.queued_timeout) - 1)
            ),
            # A task's supervisor ends the task after this many heartbeats failed in a row
            # (Airflow: 3, so an api-server away for ~10 s failed every running task); at one
            # heartbeat per 5 s, as long as the scheduler waits before it fails a silent task.
            "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": str(
                max(3, self.heartbeat_timeout // SUPERVISOR_HEARTBEAT_SECONDS)
            ),
            # Every call of a task to the api-server (its heartbeats, its XComs, its end) is
            # tried this many times, the waits growing at random to 90 s: 2 to 6 minutes in
            # all (Airflow: 5, 5 to 15 s; a task that ended while the api-server was starting
            # again failed its try).
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": str(EXECUTION_API_RETRIES),
            # A scheduler started again adopts the queued tasks of the one that died only at
            # this check (default 300 s); until then the queued-too-long check skips them.
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": str(ORPHAN_CHECK_SECONDS),
            # How soon a task whose worker vanished is failed (and retried).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.heartbeat_timeout),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "NO_COLOR": "1",
        }

    def pipeline_env(self, via: str | None = None) -> dict[str, str]:
        """The DAG's settings and the Meltano project's, for the dag-processor and workers;
        `via` as for `airflow_env`."""
        window = 60.0 * self.time_scale
        env = {
            "GUESTDATA_PROJECT_ROOT": str(self.project),
            "GUESTDATA_MELTANO_BIN": str(VENV_BIN / "meltano"),
            "GUESTDATA_MELTANO_ENVIRONMENT": "prod",
            "GUESTDATA_ACCOUNTS": self.accounts_file,
            "GUESTDATA_SCHEDULE": "none",  # runs are triggered (REST or CLI)
            "GUESTDATA_REFRESH_SCHEDULE": "none",
            # The DAG's one dbt_build per run (GuestDataModelsOperator, every account's models
            # into guestdata_analytics): this repository's dbt-postgres utility, deployed with
            # the project; "none" (`up --no-models`): the loads alone.
            "GUESTDATA_MELTANO_TRANSFORM": "auto" if self.models else "none",
            "GUESTDATA_RETRY_DELAY_MINUTES": str(self.retry_delay_seconds / 60.0),
            "MELTANO_DATABASE_URI": self.database_url("meltano", via, PSYCOPG2),
            "MELTANO_SEND_ANONYMOUS_USAGE_STATS": "false",
            "TAP_GUESTDATA_BASE_URL": self.api_url,
            # One rate budget for every worker (spec 8), in the broker's Redis; each task names
            # its queue as its address (the DAG sets TAP_GUESTDATA_RATE_BUDGET_ADDRESS).
            "TAP_GUESTDATA_RATE_BUDGET_STORE": self.broker_url(via),
            # The warehouse (target-postgres, the pg-types step and dbt-postgres): its Airflow
            # connection, which `up` creates; no credential of it in any worker's environment.
            "GUESTDATA_WAREHOUSE_CONNECTION_ID": WAREHOUSE_CONNECTION,
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        if self.time_scale != 1.0:  # the sandbox's scaled minute: the tap keeps to it
            env["TAP_GUESTDATA_RATE_LIMIT_WINDOW_SECONDS"] = f"{window:g}"
        return env

    def env(self, via: str | None = None) -> dict[str, str]:
        base = {
            name: value
            for name, value in os.environ.items()
            # The operator's own settings must not redirect the cluster.
            if not name.startswith(("AIRFLOW", "GUESTDATA_", "TAP_GUESTDATA", "TARGET_", "MELTANO"))
        }
        extra = dict(item.split("=", 1) for item in self.extra_env)
        return {**base, **self.airflow_env(via), **self.pipeline_env(via), **extra}


PSYCOPG2 = "postgresql+psycopg2"  # SQLAlchemy's driver for Airflow, Celery and Meltano
SUPERVISOR_HEARTBEAT_SECONDS = 5  # Airflow's [workers] min_heartbeat_interval (default)
EXECUTION_API_RETRIES = 12  # [workers] execution_api_retries (Airflow: 5)
ORPHAN_CHECK_SECONDS = 60  # [scheduler] orphaned_tasks_check_interval (Airflow: 300)
QUEUE_WITHOUT_WORKER_SECONDS = 1800  # Airflow's defaults: 600 s x (2 resends + the first)


def host_of(url: SplitResult) -> str:
    return url.hostname or "127.0.0.1"


def port_of(url: SplitResult) -> int:
    return url.port or (REDIS_PORT if url.scheme.startswith("redis") else PG_PORT)


def with_host(url: SplitResult, host: str | None, scheme: str, path: str) -> str:
    """`url` with another scheme and path, and (`host`) another address, same port and
    credentials."""
    credentials = url.netloc.rpartition("@")[0]
    address = f"{host or host_of(url)}:{port_of(url)}"
    return f"{scheme}://{credentials + '@' if credentials else ''}{address}{path}"


def redacted(url: str) -> str:
    """A service's URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)
