"""`scripts/cluster`: the accounts DAG on a real Airflow CeleryExecutor, one address per worker.

    scripts/cluster up [--workers 2] [--api-url URL] [--accounts FILE]
                       [--connections FILE] [--variables FILE]
                       [--postgres-url URL] [--redis-url URL] [--no-models]
                       [--env NAME=VALUE ...] [...]
    scripts/cluster status          what runs, where, and whether it answers
    scripts/cluster trigger [DAG]   a DAG run through the REST API, as a user would; waits
    scripts/cluster kill-worker N   SIGKILL worker N and everything in its namespace (a lost
                                    machine); `start-worker N` brings it back, as systemd would
    scripts/cluster kill-service S  SIGKILL the api-server, scheduler or dag-processor (a
                                    crash); `start-service S` starts it again
    scripts/cluster down            leaves nothing: processes, namespaces, links, forwarders,
                                    databases, Redis keys, the cluster's folder

What `up` makes (docs/scale-out.md), all named after `--name` (default `gdc`):
- a bridge `<name>-br` at `<subnet>.1`; worker N in namespace `<name>-w<N>` at `<subnet>.<10+N>`,
  serving Celery queue `worker_<N>` with `--concurrency 5` (its queue's pool: 5 tasks at once);
- socat forwarders on `<subnet>.1` for PostgreSQL and Redis (on their ports): a namespace
  cannot reach the root namespace's 127.0.0.1, and PostgreSQL then sees 127.0.0.1 (its trust
  rule);
- on the server of `--postgres-url` (default the shared local one), databases `<name>_airflow`
  (metadata and Celery results), `<name>_meltano` (Meltano state, via MELTANO_DATABASE_URI) and
  `<name>_warehouse` (target-postgres); the Redis db of `--redis-url` (default db `--redis-db`
  of the shared local Redis), saved with the cluster so `down`, `status`, `trigger` use them;
- a deployed copy of the Meltano project with its plugins installed, before any worker starts,
  dbt-postgres included: each DAG run ends with one dbt_build of every account's models into
  the warehouse's `guestdata_analytics` (`--no-models`: the loads alone);
- api-server (bound to the bridge address), scheduler, dag-processor, then the workers;
- a pool per queue (5 slots: concurrency, not rate), and through the REST API (no file) the
  Airflow connections: each account's `guestdata` one (`guestdata_<name>`: its keys; the default
  accounts', or `--connections`), and the warehouse's `postgres` one (`guestdata_warehouse`,
  which a `--connections` entry of that id amends); the workers' environment holds no key and no
  warehouse credential. `--variables`: keys as Airflow Variables (the old way). The tap's shared
  rate budget in the broker's Redis db (`rate_budget_store`).
Without `--api-url` it also starts the sandbox (every account, real limits); an API on the
host's loopback is reached from each namespace through a forwarder on the namespace's own
127.0.0.1 (the tap sends a key over plain http only to a loopback host).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from guestdata_cluster.deploy import account_connections, default_accounts, write_shared_secrets
from guestdata_cluster.network import require_namespaces
from guestdata_cluster.processes import alive, say
from guestdata_cluster.rest import Rest, task_label
from guestdata_cluster.services import require_services
from guestdata_cluster.stack import (
    SERVICES,
    down_cluster,
    kill_service,
    kill_worker,
    leftovers,
    start_service,
    start_worker,
    up_cluster,
)
from guestdata_cluster.state import (
    DAG_ID,
    DEFAULT_HOME,
    DEFAULT_REDIS_DB,
    LOCAL_POSTGRES,
    LOCAL_REDIS,
    Cluster,
    ClusterError,
)
from tap_guestdata.airflow.accounts import TASKS_PER_QUEUE


def cluster_of(args: argparse.Namespace, home: Path, secrets_file: Path) -> Cluster:
    """The cluster `up` makes from its options (nothing made yet)."""
    if args.redis_url and args.redis_db is not None:
        raise ClusterError("--redis-db names a db of the local Redis: give it or --redis-url")
    redis_db = DEFAULT_REDIS_DB if args.redis_db is None else args.redis_db
    redis_url = args.redis_url or f"{LOCAL_REDIS}/{redis_db}"
    for url, option, schemes in (
        (redis_url, "--redis-url", ("redis",)),
        (args.postgres_url, "--postgres-url", ("postgresql", "postgres")),
    ):
        if urlsplit(url).scheme not in schemes or not urlsplit(url).hostname:
            raise ClusterError(
                f"{option}: {schemes[0]}://[user[:password]@]host[:port]..., got {url!r}"
            )
    cluster = Cluster(
        name=args.name,
        home=str(home),
        workers=args.workers,
        subnet=args.subnet,
        api_port=args.api_port,
        redis_url=redis_url,
        postgres_url=args.postgres_url,
        api_url=args.api_url or f"http://127.0.0.1:{args.sandbox_port}/api/v1/customer",
        heartbeat_timeout=args.heartbeat_timeout,
        visibility_timeout=args.visibility_timeout,
        queued_timeout=args.queued_timeout,
        slots=args.slots,
        time_scale=args.time_scale,
        retry_delay_seconds=args.retry_delay_seconds,
        accounts_file=str(home / "accounts.json"),
        secrets_file=str(secrets_file),
        extra_env=args.env,
        models=not args.no_models,
    )
    # Every port the bridge address listens on: the api-server's and the forwarders'.
    ports = [cluster.api_port, *(port for port, _, _ in cluster.forwarders.values())]
    if len(set(ports)) < len(ports):
        raise ClusterError(f"the api-server and the services need different ports, got {ports}")
    return cluster


def up(args: argparse.Namespace) -> int:
    started = time.monotonic()
    home = Path(args.home).resolve()
    if (home / "cluster.json").exists():
        raise ClusterError(f"a cluster is already up at {home}: `scripts/cluster down` first")
    cluster = cluster_of(args, home, home / "secrets.json")
    require_namespaces()
    require_services(cluster)
    home.mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    (home / "airflow").mkdir(exist_ok=True)
    write_shared_secrets(home)
    variables = json.loads(Path(args.variables).read_text()) if args.variables else {}
    connections: dict[str, Any] = {}
    if args.accounts:
        accounts = json.loads(Path(args.accounts).read_text())
    else:  # the sandbox's keys in their accounts' connections, as a deployment holds them
        accounts, keys = default_accounts(args.groups.split(",") if args.groups else None)
        connections = account_connections(accounts, keys, cluster.api_url)
    if args.connections:
        connections.update(json.loads(Path(args.connections).read_text()))
    sandbox_port = None if args.api_url else args.sandbox_port
    up_cluster(cluster, accounts, variables, sandbox_port, connections)
    say(f"up in {time.monotonic() - started:.1f} s: {cluster.rest_url} (logs: {home}/logs)")
    return 0


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


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("GUESTDATA_CLUSTER_HOME", DEFAULT_HOME))
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("up")
    make.add_argument("--name", default="gdc", help="prefix of namespaces, links, databases")
    make.add_argument("--workers", type=int, default=2)
    make.add_argument("--subnet", default="10.200.0", help="first three octets of a free /24")
    make.add_argument("--api-port", type=int, default=8080)
    make.add_argument(
        "--redis-url",
        help=f"the broker and the shared rate budget (default: {LOCAL_REDIS}/<--redis-db>)",
    )
    make.add_argument(
        "--redis-db", type=int, help=f"a db of the local Redis (default {DEFAULT_REDIS_DB})"
    )
    make.add_argument(
        "--postgres-url",
        default=LOCAL_POSTGRES,
        help="the server of the metadata, state and warehouse databases (default: %(default)s)",
    )
    make.add_argument("--api-url", help="the API's base URL; default: a sandbox of its own")
    make.add_argument("--sandbox-port", type=int, default=8787)
    make.add_argument("--accounts", help="the accounts JSON (default: the sandbox's three)")
    make.add_argument(
        "--connections",
        help="JSON {conn_id: connection} (Airflow's JSON form): the accounts' guestdata "
        "connections; a guestdata_warehouse entry amends the warehouse's",
    )
    make.add_argument("--variables", help="JSON {variable: key}: keys as Variables (the old way)")
    make.add_argument("--groups", help="stream groups of the default accounts, e.g. core,members")
    make.add_argument("--time-scale", type=float, default=1.0, help="the sandbox's minute")
    make.add_argument(
        "--no-models",
        action="store_true",
        help="the loads alone: no dbt deployed, no dbt_build at the end of a run",
    )
    make.add_argument("--heartbeat-timeout", type=int, default=300)
    make.add_argument("--visibility-timeout", type=int, default=6 * 3600)
    make.add_argument("--retry-delay-seconds", type=float, default=300)
    make.add_argument(
        "--slots",
        type=int,
        default=TASKS_PER_QUEUE,
        help="tasks at once per queue: its pool's slots and its worker's concurrency "
        "(default %(default)s)",
    )
    make.add_argument(
        "--queued-timeout",
        type=int,
        default=180,
        help="seconds a task may wait queued before it is sent again (a message the broker lost)",
    )
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
    for verb in ("kill-service", "start-service"):
        commands.add_parser(verb).add_argument("service", choices=SERVICES)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "up":
            if not 1 <= args.workers <= 50:
                raise ClusterError("--workers: 1 to 50")
            if not 1 <= args.slots <= 32:
                raise ClusterError("--slots: 1 to 32")
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
        elif args.command == "start-worker":
            start_worker(cluster, args.worker)
            say(f"worker {args.worker}: ready")
        elif args.command == "kill-service":
            kill_service(cluster, args.service)
            say(f"{args.service}: killed")
        else:
            say(f"{args.service}: pid {start_service(cluster, args.service)}")
        return 0
    except ClusterError as error:
        print(f"cluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
