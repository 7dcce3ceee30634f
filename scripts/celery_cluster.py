"""`scripts/cluster`: the accounts DAG on a real Airflow CeleryExecutor, one address per worker.

    scripts/cluster up [--workers 2] [--api-url URL] [--accounts FILE --variables FILE]
                       [--env NAME=VALUE ...] [...]
    scripts/cluster status          what runs, where, and whether it answers
    scripts/cluster trigger [DAG]   a DAG run through the REST API, as a user would; waits
    scripts/cluster kill-worker N   SIGKILL worker N and everything in its namespace (a lost
                                    machine); `start-worker N` brings it back, as systemd would
    scripts/cluster down            leaves nothing: processes, namespaces, links, forwarders,
                                    databases, Redis keys, the cluster's folder

What `up` makes (docs/scale-out.md), all named after `--name` (default `gdc`):
- a bridge `<name>-br` at `<subnet>.1`; worker N in namespace `<name>-w<N>` at `<subnet>.<10+N>`,
  serving Celery queue `worker_<N>` with `--concurrency 5` (its queue's pool: 5 tasks at once);
- socat forwarders on `<subnet>.1` for PostgreSQL (5432) and Redis (6379): a namespace cannot
  reach the root namespace's 127.0.0.1, and PostgreSQL then sees 127.0.0.1 (its trust rule);
- databases `<name>_airflow` (metadata and Celery results), `<name>_meltano` (Meltano state,
  via MELTANO_DATABASE_URI) and `<name>_warehouse` (target-postgres); Redis db `--redis-db`;
- a deployed copy of the Meltano project with its plugins installed, before any worker starts;
- api-server (bound to the bridge address), scheduler, dag-processor, then the workers;
- a pool per queue (5 slots: concurrency, not rate) and the keys as Airflow Variables, through
  the REST API; the tap's shared rate budget in the broker's Redis db (`rate_budget_store`).
Without `--api-url` it also starts the sandbox (every account, real limits); an API on the
host's loopback is reached from each namespace through a forwarder on the namespace's own
127.0.0.1 (the tap sends a key over plain http only to a loopback host).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis
import requests
from cryptography.fernet import Fernet
from psycopg import sql

from tap_guestdata.airflow.accounts import TASKS_PER_QUEUE, parse_config, pools

PROJECT_ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = PROJECT_ROOT / ".venv" / "bin"
DEFAULT_HOME = PROJECT_ROOT / ".cluster"
DAG_ID = "guestdata_meltano"
MARKER = "GUESTDATA_CLUSTER"  # in every process's environment: `down` finds stragglers by it
PG_PORT, REDIS_PORT = 5432, 6379
DATABASE_ROLES = ("airflow", "meltano", "warehouse")  # <name>_<role>: metadata, state, rows
PLUGINS = ("tap-guestdata", "target-postgres", "guestdata-pg-types")
# What a deploy puts on a worker machine: the Meltano project, not the repository's tests.
DEPLOYED = ("meltano.yml", "pyproject.toml", "README.md", "LICENSE", "tap_guestdata", "transform")
DEPLOYED_SCRIPTS = ("pg_timestamptz.py",)  # guestdata-pg-types runs it
# The sandbox's accounts of the default deployment: Growth with Rewards (two keys), a key
# limited to some venues, and an account whose plan has no Rewards.
SANDBOX_ACCOUNTS = {
    "harbour": ["gd_owner_growth_1", "gd_owner_growth_2"],
    "saltmarsh": ["gd_team_some_venues"],
    "northgate": ["gd_rewards_off"],
}


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
    redis_db: int
    api_url: str
    heartbeat_timeout: int
    visibility_timeout: int
    time_scale: float
    retry_delay_seconds: float
    accounts_file: str
    pids: dict[str, int] = field(default_factory=dict)
    secrets_file: str = ""
    extra_env: list[str] = field(default_factory=list)  # NAME=VALUE, for every process

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
        (self.root / "cluster.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, home: Path) -> Cluster:
        path = home / "cluster.json"
        if not path.exists():
            raise ClusterError(f"no cluster at {home} (no cluster.json): `scripts/cluster up`")
        return cls(**json.loads(path.read_text()))

    # -- environments --------------------------------------------------------------------
    def postgres_url(self, role: str, host: str, driver: str = "postgresql+psycopg2") -> str:
        return f"{driver}://postgres@{host}:{PG_PORT}/{self.database(role)}"

    def airflow_env(self, host: str) -> dict[str, str]:
        """Every Airflow process's settings; `host` is how it reaches PostgreSQL and Redis."""
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
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres_url("airflow", host),
            # Airflow's async engine: psycopg 3 (already installed) instead of asyncpg.
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": self.postgres_url(
                "airflow", host, "postgresql+psycopg"
            ),
            "AIRFLOW__CELERY__BROKER_URL": f"redis://{host}:{REDIS_PORT}/{self.redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + self.postgres_url("airflow", host),
            # Longer than the longest task, or Redis hands a running task's message to a
            # second worker (task_acks_late); docs/scale-out.md.
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": str(
                self.visibility_timeout
            ),
            # How soon a task whose worker vanished is failed (and retried).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(self.heartbeat_timeout),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "NO_COLOR": "1",
        }

    def pipeline_env(self, host: str) -> dict[str, str]:
        """The DAG's settings and the Meltano project's, for the dag-processor and workers."""
        window = 60.0 * self.time_scale
        env = {
            "GUESTDATA_PROJECT_ROOT": str(self.project),
            "GUESTDATA_MELTANO_BIN": str(VENV_BIN / "meltano"),
            "GUESTDATA_MELTANO_ENVIRONMENT": "prod",
            "GUESTDATA_ACCOUNTS": self.accounts_file,
            "GUESTDATA_SCHEDULE": "none",  # runs are triggered (REST or CLI)
            "GUESTDATA_REFRESH_SCHEDULE": "none",
            "GUESTDATA_MELTANO_TRANSFORM": "none",  # dbt is not deployed to the workers here
            "GUESTDATA_RETRY_DELAY_MINUTES": str(self.retry_delay_seconds / 60.0),
            "MELTANO_DATABASE_URI": self.postgres_url("meltano", host),
            "MELTANO_SEND_ANONYMOUS_USAGE_STATS": "false",
            "TAP_GUESTDATA_BASE_URL": self.api_url,
            # One rate budget for every worker (spec 8), in the broker's Redis; each task names
            # its queue as its address (the DAG sets TAP_GUESTDATA_RATE_BUDGET_ADDRESS).
            "TAP_GUESTDATA_RATE_BUDGET_STORE": f"redis://{host}:{REDIS_PORT}/{self.redis_db}",
            "TARGET_POSTGRES_HOST": host,
            "TARGET_POSTGRES_PORT": str(PG_PORT),
            "TARGET_POSTGRES_USER": "postgres",
            "TARGET_POSTGRES_PASSWORD": "",
            "TARGET_POSTGRES_DATABASE": self.database("warehouse"),
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }
        if self.time_scale != 1.0:  # the sandbox's scaled minute: the tap keeps to it
            env["TAP_GUESTDATA_RATE_LIMIT_WINDOW_SECONDS"] = f"{window:g}"
        return env

    def env(self, host: str) -> dict[str, str]:
        base = {
            name: value
            for name, value in os.environ.items()
            # The operator's own settings must not redirect the cluster.
            if not name.startswith(("AIRFLOW", "GUESTDATA_", "TAP_GUESTDATA", "TARGET_", "MELTANO"))
        }
        extra = dict(item.split("=", 1) for item in self.extra_env)
        return {**base, **self.airflow_env(host), **self.pipeline_env(host), **extra}


# -- small helpers ------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def sh(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {(result.stderr or result.stdout).strip()}")
    return result


def require_namespaces() -> None:
    """One line naming the requirement when this machine cannot make network namespaces."""
    missing = [tool for tool in ("ip", "socat") if shutil.which(tool) is None]
    if missing:
        raise ClusterError(f"the cluster needs {' and '.join(missing)} (Debian: iproute2, socat)")
    if os.geteuid() != 0:
        raise ClusterError(
            "the cluster needs root (CAP_NET_ADMIN) to make network namespaces: run it as root"
        )
    probe = f"gdprobe{os.getpid()}"
    made = sh("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        raise ClusterError(
            f"the cluster needs network namespaces (`ip netns add` failed: {made.stderr.strip()})"
        )
    sh("ip", "netns", "del", probe, check=False)


def wait_until(what: str, check: Any, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except (requests.RequestException, OSError, psycopg.Error, redis.RedisError):
            value = None
        if value:
            return value
        time.sleep(interval)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")


def start(
    cluster: Cluster, label: str, command: Sequence[str], env: Mapping[str, str], cwd: Path
) -> int:
    """A long-running process in a session of its own (so its whole group can be ended)."""
    log = cluster.root / "logs" / f"{label}.log"
    with log.open("a") as output:
        process = subprocess.Popen(
            list(command),
            env=dict(env),
            cwd=cwd,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cluster.pids[label] = process.pid
    cluster.save()
    return process.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def end_group(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left of it after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.2)
        if not alive(pid):
            return


def processes_marked(name: str) -> list[int]:
    """Every process whose environment carries this cluster's marker."""
    found = []
    needle = f"{MARKER}={name}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes() + b"\0":
                found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if alive(pid)]


def namespace_pids(namespace: str) -> list[int]:
    result = sh("ip", "netns", "pids", namespace, check=False)
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- REST ----------------------------------------------------------------------------------


class Rest:
    """Airflow's public REST API with a token, as a user's script would call it."""

    def __init__(self, cluster: Cluster) -> None:
        self.url = cluster.rest_url
        self.session = requests.Session()
        self.session.trust_env = False  # no proxy between us and the bridge

    def login(self) -> Rest:
        response = self.session.get(f"{self.url}/auth/token", timeout=30)
        response.raise_for_status()
        self.session.headers["Authorization"] = f"Bearer {response.json()['access_token']}"
        return self

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.url}/api/v2{path}", timeout=60, **kwargs)
        if response.status_code >= 400:
            raise ClusterError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else None

    def trigger(self, dag_id: str) -> str:
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        return list(self.call("GET", path, params={"limit": 1000})["task_instances"])

    def tries(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[dict[str, Any]]:
        mapped = "" if map_index < 0 else f"/{map_index}"
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}{mapped}/tries"
        return list(self.call("GET", path)["task_instances"])

    def task_instance(self, dag_id: str, run_id: str, label: str) -> dict[str, Any]:
        """The task instance of `label` (see `task_label`)."""
        found = [t for t in self.task_instances(dag_id, run_id) if task_label(t) == label]
        if not found:
            raise ClusterError(f"{dag_id} run {run_id}: no task instance {label!r} (yet)")
        return found[0]

    def wait(self, dag_id: str, run_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise ClusterError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s")


def task_label(task: Mapping[str, Any]) -> str:
    """A task instance by what it is: `<account>.load` for an account's mapped task (its map
    index label and the last part of its task id), else its task id."""
    if task.get("map_index", -1) < 0:
        return str(task["task_id"])
    label = task.get("rendered_map_index") or f"{task['task_id']}[{task['map_index']}]"
    return f"{label}.{str(task['task_id']).rsplit('.', 1)[-1]}"


# -- up -------------------------------------------------------------------------------------


def make_network(cluster: Cluster) -> None:
    sh("ip", "link", "add", cluster.bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{cluster.gateway}/24", "dev", cluster.bridge)
    sh("ip", "link", "set", cluster.bridge, "up")
    for worker in range(1, cluster.workers + 1):
        namespace, host_end, inner = cluster.namespace(worker), f"{cluster.name}-w{worker}h", "eth0"
        sh("ip", "netns", "add", namespace)
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", f"{host_end}n")
        sh("ip", "link", "set", f"{host_end}n", "netns", namespace)
        sh("ip", "link", "set", host_end, "master", cluster.bridge, "up")
        inside = ("ip", "netns", "exec", namespace, "ip")
        sh(*inside, "link", "set", f"{host_end}n", "name", inner)
        sh(*inside, "addr", "add", f"{cluster.address(worker)}/24", "dev", inner)
        sh(*inside, "link", "set", inner, "up")
        sh(*inside, "link", "set", "lo", "up")


def forward(cluster: Cluster, label: str, port: int) -> None:
    """socat on the bridge address to the service on 127.0.0.1 (the namespaces' only way in)."""
    listen = f"TCP-LISTEN:{port},bind={cluster.gateway},reuseaddr,fork"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER: cluster.name}
    start(cluster, label, ["socat", listen, f"TCP:127.0.0.1:{port}"], env, cluster.root)


def server() -> psycopg.Connection[Any]:
    """The local PostgreSQL server's maintenance database, autocommit (CREATE/DROP DATABASE)."""
    return psycopg.connect(f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres", autocommit=True)


def drop_databases(cluster: Cluster, connection: psycopg.Connection[Any]) -> None:
    for role in DATABASE_ROLES:
        name = sql.Identifier(cluster.database(role))
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def make_databases(cluster: Cluster) -> None:
    with server() as connection:
        drop_databases(cluster, connection)  # a crashed cluster's, if any
        for role in DATABASE_ROLES:
            connection.execute(
                sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cluster.database(role)))
            )


def deploy_project(cluster: Cluster, env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Copy the Meltano project and install its plugins, once, before any worker starts (what
    a deploy does on each worker machine); runs beside `airflow db migrate`."""
    cluster.project.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "target", "logs", "dbt_packages", ".user.yml")
    for name in DEPLOYED:
        source = PROJECT_ROOT / name
        if source.is_dir():
            shutil.copytree(source, cluster.project / name, ignore=ignore)
        else:
            shutil.copy2(source, cluster.project / name)
    (cluster.project / "scripts").mkdir()
    for name in DEPLOYED_SCRIPTS:
        shutil.copy2(PROJECT_ROOT / "scripts" / name, cluster.project / "scripts" / name)
    log = (cluster.root / "logs" / "deploy.log").open("w")
    return subprocess.Popen(
        [str(VENV_BIN / "meltano"), "install", *PLUGINS],
        cwd=cluster.project,
        env=dict(env),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def default_accounts(groups: Sequence[str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The sandbox's three accounts, and the Variables holding their keys."""
    accounts, variables = [], {}
    for name, keys in SANDBOX_ACCOUNTS.items():
        names = [f"guestdata_{name}_key_{n}" for n in range(1, len(keys) + 1)]
        entry: dict[str, Any] = {"name": name, "keys": names, "size": "small"}
        if groups:
            entry["groups"] = list(groups)
        accounts.append(entry)
        variables.update(zip(names, keys, strict=True))
    return {"accounts": accounts}, variables


def write_accounts(cluster: Cluster, document: dict[str, Any]) -> None:
    """The accounts with the cluster's queues (one per worker): the planner spreads the
    accounts over them, and a pool per queue must exist before a run."""
    document = {**document, "queues": list(cluster.queues)}
    parse_config(json.dumps(document))  # a bad document fails here, not in the dag-processor
    Path(cluster.accounts_file).write_text(json.dumps(document, indent=2))


def start_sandbox(cluster: Cluster, port: int, time_scale: float) -> None:
    command = [
        str(VENV_BIN / "python"), "-m", "guestdata_sandbox.cli", "serve", "--host", "0.0.0.0",
        "--port", str(port), "--size", "small", "--seed", "42", "--time-scale", str(time_scale),
    ]  # fmt: skip
    start(cluster, "sandbox", command, {**os.environ, MARKER: cluster.name}, cluster.root)
    wait_until(
        "the sandbox",
        lambda: requests.get(f"http://127.0.0.1:{port}/_sandbox/health", timeout=2).ok,
        120,
    )


def api_loopback_port(cluster: Cluster) -> int | None:
    """The port of an API on this machine's loopback (the sandbox), else None."""
    parts = urlsplit(cluster.api_url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return None
    return parts.port or 80


def forward_api_in_namespace(cluster: Cluster, worker: int) -> None:
    """An API on the host's loopback (the sandbox) is reached from a namespace through a
    forwarder on the namespace's own 127.0.0.1: the tap sends its key over plain http only to
    a loopback host, and the API still sees the worker's address as the source."""
    port = api_loopback_port(cluster)
    label = f"forward-api-w{worker}"
    if port is None or (label in cluster.pids and alive(cluster.pids[label])):
        return
    command = [
        shutil.which("ip") or "ip", "netns", "exec", cluster.namespace(worker), "socat",
        f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork", f"TCP:{cluster.gateway}:{port}",
    ]  # fmt: skip
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER: cluster.name}
    start(cluster, label, command, env, cluster.root)


def start_worker(cluster: Cluster, worker: int) -> None:
    queue, namespace = cluster.queue(worker), cluster.namespace(worker)
    forward_api_in_namespace(cluster, worker)
    command = [
        shutil.which("ip") or "ip", "netns", "exec", namespace,
        str(VENV_BIN / "airflow"), "celery", "worker",
        "--queues", queue, "--concurrency", str(TASKS_PER_QUEUE),
        "--celery-hostname", f"{queue}@{cluster.name}",
        "--pid", str(cluster.root / "airflow" / f"{queue}.pid"),
    ]  # fmt: skip
    (cluster.root / "airflow" / f"{queue}.pid").unlink(missing_ok=True)  # a killed one's
    log = cluster.root / "logs" / f"{queue}.log"
    offset = log.stat().st_size if log.exists() else 0
    start(cluster, queue, command, cluster.env(cluster.gateway), cluster.project)
    wait_until(
        f"worker {worker} ({queue}) to be ready",
        lambda: " ready." in log.read_text()[offset:],
        180,
    )


def require_services() -> None:
    for port, service in ((PG_PORT, "PostgreSQL"), (REDIS_PORT, "Redis")):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=3):
                pass
        except OSError as error:
            raise ClusterError(f"{service} does not answer at 127.0.0.1:{port} ({error})") from None


def write_shared_secrets(home: Path) -> Path:
    """The keys every Airflow process must share, readable by root only (a secret store's
    job in production)."""
    path = home / "secrets.json"
    shared = {
        "fernet_key": Fernet.generate_key().decode(),
        "jwt_secret": secrets.token_urlsafe(64),  # 64+ bytes
        "secret_key": secrets.token_urlsafe(32),
    }
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as output:
        json.dump(shared, output)
    return path


def up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    home = Path(args.home).resolve()
    if (home / "cluster.json").exists():
        raise ClusterError(f"a cluster is already up at {home}: `scripts/cluster down` first")
    require_namespaces()
    require_services()
    home.mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    (home / "airflow").mkdir(exist_ok=True)
    secrets_file = write_shared_secrets(home)
    sandbox_port = args.sandbox_port
    cluster = Cluster(
        name=args.name,
        home=str(home),
        workers=args.workers,
        subnet=args.subnet,
        api_port=args.api_port,
        redis_db=args.redis_db,
        api_url=args.api_url or f"http://127.0.0.1:{sandbox_port}/api/v1/customer",
        heartbeat_timeout=args.heartbeat_timeout,
        visibility_timeout=args.visibility_timeout,
        time_scale=args.time_scale,
        retry_delay_seconds=args.retry_delay_seconds,
        accounts_file=str(home / "accounts.json"),
        secrets_file=str(secrets_file),
        extra_env=args.env,
    )
    cluster.save()
    try:
        if args.accounts:
            document = json.loads(Path(args.accounts).read_text())
            variables = json.loads(Path(args.variables).read_text()) if args.variables else {}
        else:
            document, variables = default_accounts(args.groups.split(",") if args.groups else None)
        write_accounts(cluster, document)
        say(f"network: bridge {cluster.bridge} {cluster.gateway}, {cluster.workers} namespaces")
        make_network(cluster)
        forward(cluster, "forward-postgres", PG_PORT)
        forward(cluster, "forward-redis", REDIS_PORT)
        make_databases(cluster)
        redis.Redis(host="127.0.0.1", port=REDIS_PORT, db=cluster.redis_db).flushdb()
        if not args.api_url:
            say(f"sandbox on {cluster.api_url}")
            start_sandbox(cluster, sandbox_port, args.time_scale)
        say("deploy: the Meltano project and its plugins; airflow db migrate")
        env = cluster.env("127.0.0.1")
        install = deploy_project(cluster, env)
        migrate = subprocess.run(
            [str(VENV_BIN / "airflow"), "db", "migrate"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if migrate.returncode != 0:
            raise ClusterError(
                "airflow db migrate failed: " + (migrate.stdout + migrate.stderr)[-1500:]
            )
        if install.wait() != 0:
            raise ClusterError(f"meltano install failed: see {home}/logs/deploy.log")
        say("api-server, scheduler, dag-processor")
        airflow = str(VENV_BIN / "airflow")
        api = [airflow, "api-server", "--host", cluster.gateway, "--port", str(cluster.api_port)]
        start(cluster, "api-server", [*api, "--workers", "1"], env, cluster.project)
        start(cluster, "scheduler", [airflow, "scheduler"], env, cluster.project)
        start(cluster, "dag-processor", [airflow, "dag-processor"], env, cluster.project)
        rest = Rest(cluster)
        wait_until("the api-server", lambda: rest.login(), 180)
        for pool in pools(parse_config(Path(cluster.accounts_file).read_text())):
            rest.call(
                "POST",
                "/pools",
                json={"name": pool, "slots": TASKS_PER_QUEUE, "description": "tasks at once"},
            )
        for key, value in variables.items():
            rest.call("POST", "/variables", json={"key": key, "value": value})
        for worker in range(1, cluster.workers + 1):
            say(f"worker {worker}: queue {cluster.queue(worker)} at {cluster.address(worker)}")
            start_worker(cluster, worker)
        wait_until(f"DAG {DAG_ID} to be parsed", lambda: rest.call("GET", f"/dags/{DAG_ID}"), 180)
    except BaseException:
        say("up failed: taking down what it made")
        down_cluster(cluster)
        raise
    say(f"up in {time.monotonic() - started:.1f} s: {cluster.rest_url} (logs: {home}/logs)")
    return 0


# -- down, status, workers, trigger -----------------------------------------------------------


def leftovers(cluster: Cluster) -> list[str]:
    """What of the cluster is still there (empty after `down`)."""
    found = [f"process {pid}" for pid in processes_marked(cluster.name)]
    names = sh("ip", "-o", "link", "show", check=False).stdout
    found += [
        f"link {line.split(':')[1].strip().split('@')[0]}"
        for line in names.splitlines()
        if line.split(":")[1].strip().startswith(f"{cluster.name}-")
    ]
    spaces = sh("ip", "netns", "list", check=False).stdout.split()
    found += [f"namespace {n}" for n in spaces if n.startswith(f"{cluster.name}-w")]
    with server() as connection:
        rows = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{cluster.name}\\_%",)
        ).fetchall()
    found += [f"database {name}" for (name,) in rows]
    keys = redis.Redis(host="127.0.0.1", port=REDIS_PORT, db=cluster.redis_db).dbsize()
    if keys:
        found.append(f"{keys} Redis keys in db {cluster.redis_db}")
    if cluster.root.exists():
        found.append(f"folder {cluster.root}")
    return found


def down_cluster(cluster: Cluster) -> None:
    for label in [label for label in cluster.pids if label.startswith("worker_")]:
        end_group(cluster.pids[label])  # workers first: they hold tasks and connections
    for pid in cluster.pids.values():
        end_group(pid)
    for worker in range(1, cluster.workers + 1):
        kill_all(namespace_pids(cluster.namespace(worker)))
    kill_all(processes_marked(cluster.name))  # a task's meltano left behind by its worker
    deadline = time.monotonic() + 10
    while processes_marked(cluster.name) and time.monotonic() < deadline:
        time.sleep(0.2)
    for worker in range(1, cluster.workers + 1):
        sh("ip", "netns", "del", cluster.namespace(worker), check=False)
        sh("ip", "link", "del", f"{cluster.name}-w{worker}h", check=False)
    sh("ip", "link", "del", cluster.bridge, check=False)
    with server() as connection:
        drop_databases(cluster, connection)
    redis.Redis(host="127.0.0.1", port=REDIS_PORT, db=cluster.redis_db).flushdb()
    shutil.rmtree(cluster.root, ignore_errors=True)


def down(args: argparse.Namespace) -> int:
    home = Path(args.home).resolve()
    if not (home / "cluster.json").exists():
        say(f"no cluster at {home}")
        return 0
    cluster = Cluster.load(home)
    started = time.monotonic()
    down_cluster(cluster)
    left = leftovers(cluster)
    if left:
        raise ClusterError("down left: " + ", ".join(left))
    say(f"down in {time.monotonic() - started:.1f} s; nothing left")
    return 0


def status(args: argparse.Namespace) -> int:
    cluster = Cluster.load(Path(args.home).resolve())
    healthy = True
    for label, pid in cluster.pids.items():
        state = "running" if alive(pid) else "GONE"
        healthy &= state == "running"
        print(f"{label:16} pid {pid:<8} {state}")
    for worker in range(1, cluster.workers + 1):
        print(
            f"worker {worker}: queue {cluster.queue(worker)}, namespace "
            f"{cluster.namespace(worker)}, address {cluster.address(worker)}"
        )
    try:
        health = requests.get(f"{cluster.rest_url}/api/v2/monitor/health", timeout=5).json()
        print("api-server:", {part: value.get("status") for part, value in health.items()})
    except requests.RequestException as error:
        healthy = False
        print(f"api-server: no answer ({error})")
    print(f"REST: {cluster.rest_url}  API: {cluster.api_url}")
    return 0 if healthy else 1


def kill_worker(cluster: Cluster, worker: int) -> list[int]:
    """A lost machine: SIGKILL the worker's process group and everything else in its
    namespace (a BashOperator's command runs in a session of its own, outside the group)."""
    label = cluster.queue(worker)
    pid = cluster.pids.get(label)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    killed = namespace_pids(cluster.namespace(worker))
    kill_all(killed)
    return killed


def trigger(args: argparse.Namespace) -> int:
    cluster = Cluster.load(Path(args.home).resolve())
    rest = Rest(cluster).login()
    run_id = rest.trigger(args.dag_id)
    say(f"{args.dag_id}: run {run_id}")
    if args.no_wait:
        return 0
    started = time.monotonic()
    state = rest.wait(args.dag_id, run_id, args.timeout)
    for task in rest.task_instances(args.dag_id, run_id):
        label = task_label(task)
        print(f"  {label:32} {task['state'] or '':16} try {task['try_number']}")
    say(f"{state} in {time.monotonic() - started:.0f} s")
    return 0 if state == "success" else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("GUESTDATA_CLUSTER_HOME", DEFAULT_HOME))
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("up")
    make.add_argument("--name", default="gdc", help="prefix of namespaces, links, databases")
    make.add_argument("--workers", type=int, default=2)
    make.add_argument("--subnet", default="10.200.0", help="first three octets of a free /24")
    make.add_argument("--api-port", type=int, default=8080)
    make.add_argument("--redis-db", type=int, default=7)
    make.add_argument("--api-url", help="the API's base URL; default: a sandbox of its own")
    make.add_argument("--sandbox-port", type=int, default=8787)
    make.add_argument("--accounts", help="the accounts JSON (default: the sandbox's three)")
    make.add_argument("--variables", help="JSON {variable: key} of the accounts' keys")
    make.add_argument("--groups", help="stream groups of the default accounts, e.g. core,members")
    make.add_argument("--time-scale", type=float, default=1.0, help="the sandbox's minute")
    make.add_argument("--heartbeat-timeout", type=int, default=300)
    make.add_argument("--visibility-timeout", type=int, default=6 * 3600)
    make.add_argument("--retry-delay-seconds", type=float, default=300)
    make.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for every process, e.g. TAP_GUESTDATA_MAX_WORKERS=2",
    )
    commands.add_parser("down")
    commands.add_parser("status")
    run = commands.add_parser("trigger")
    run.add_argument("dag_id", nargs="?", default=DAG_ID)
    run.add_argument("--no-wait", action="store_true")
    run.add_argument("--timeout", type=float, default=6 * 3600)
    for verb in ("kill-worker", "start-worker"):
        commands.add_parser(verb).add_argument("worker", type=int)
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            if not 1 <= args.workers <= 50:
                raise ClusterError("--workers: 1 to 50")
            if bad := [item for item in args.env if "=" not in item]:
                raise ClusterError(f"--env takes NAME=VALUE, got {bad}")
            return up(args)
        if args.command == "down":
            return down(args)
        if args.command == "status":
            return status(args)
        if args.command == "trigger":
            return trigger(args)
        cluster = Cluster.load(Path(args.home).resolve())
        if args.command == "kill-worker":
            say(f"worker {args.worker}: killed {len(kill_worker(cluster, args.worker))} processes")
        else:
            start_worker(cluster, args.worker)
            say(f"worker {args.worker}: ready")
        return 0
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
