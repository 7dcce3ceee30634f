"""The stack itself: bringing it up in order, the workers (started, killed), and taking it all
down again with a check that nothing is left."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guestdata_cluster.deploy import (
    create_connections,
    deploy_project,
    warehouse_connection,
    write_accounts,
)
from guestdata_cluster.network import (
    forward_api_in_namespace,
    forward_services,
    make_network,
    namespace_pids,
    network_left,
    remove_network,
)
from guestdata_cluster.processes import (
    end_group,
    kill_all,
    processes_marked,
    say,
    start,
    wait_until,
)
from guestdata_cluster.rest import Rest
from guestdata_cluster.services import (
    broker,
    databases_left,
    drop_databases,
    make_databases,
    server,
    start_sandbox,
)
from guestdata_cluster.state import (
    DAG_ID,
    VENV_BIN,
    WAREHOUSE_CONNECTION,
    Cluster,
    ClusterError,
    redacted,
)
from tap_guestdata.airflow.accounts import parse_config, pools


def up_cluster(
    cluster: Cluster,
    accounts: dict[str, Any],
    variables: dict[str, str],
    sandbox_port: int | None,
    connections: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Network, forwarders, databases, the sandbox (`sandbox_port`: one of its own), the
    deployed project, Airflow, pools, the connections (the accounts' `connections`, and the
    warehouse's, which a `guestdata_warehouse` entry there amends) and Variables, then the
    workers; on any failure, `down`."""
    connections = dict(connections or {})
    connections[WAREHOUSE_CONNECTION] = warehouse_connection(
        cluster, connections.get(WAREHOUSE_CONNECTION)
    )
    cluster.save()
    try:
        write_accounts(cluster, accounts)
        say(f"network: bridge {cluster.bridge} {cluster.gateway}, {cluster.workers} namespaces")
        make_network(cluster)
        forward_services(cluster)
        make_databases(cluster)
        broker(cluster).flushdb()
        if sandbox_port is not None:
            say(f"sandbox on {cluster.api_url}")
            start_sandbox(cluster, sandbox_port, cluster.time_scale)
        say("deploy: the Meltano project and its plugins; airflow db migrate")
        env = cluster.env()  # the root namespace: the services' own addresses
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
            raise ClusterError(f"meltano install failed: see {cluster.root}/logs/deploy.log")
        say(", ".join(SERVICES))
        for service in SERVICES:
            start_service(cluster, service, wait=False)
        rest = Rest(cluster)
        wait_until("the api-server", lambda: rest.login(), 180)
        for pool in pools(parse_config(Path(cluster.accounts_file).read_text())):
            rest.call(
                "POST",
                "/pools",
                json={"name": pool, "slots": cluster.slots, "description": "tasks at once"},
            )
        create_connections(rest, connections)
        for key, value in variables.items():  # the old way: keys in Variables
            rest.call("POST", "/variables", json={"key": key, "value": value})
        for worker in range(1, cluster.workers + 1):
            say(f"worker {worker}: queue {cluster.queue(worker)} at {cluster.address(worker)}")
            start_worker(cluster, worker)
        wait_until(f"DAG {DAG_ID} to be parsed", lambda: rest.call("GET", f"/dags/{DAG_ID}"), 180)
    except BaseException:
        say("up failed: taking down what it made")
        down_cluster(cluster)
        raise


SERVICES = ("api-server", "scheduler", "dag-processor")  # Airflow's, in the root namespace


def service_command(cluster: Cluster, service: str) -> list[str]:
    airflow = str(VENV_BIN / "airflow")
    if service == "api-server":
        return [
            airflow, "api-server", "--host", cluster.gateway, "--port", str(cluster.api_port),
            "--workers", "1",
        ]  # fmt: skip
    if service in SERVICES:
        return [airflow, service]
    raise ClusterError(f"no service {service!r}: one of {', '.join(SERVICES)}")


def start_service(cluster: Cluster, service: str, *, wait: bool = True) -> int:
    """Start (or, after `kill_service`, start again, as systemd would) one of Airflow's
    services; `wait`: until the api-server answers again."""
    pid = start(cluster, service, service_command(cluster, service), cluster.env(), cluster.project)
    if wait and service == "api-server":
        wait_until("the api-server", lambda: Rest(cluster).login(), 180)
    return pid


def kill_service(cluster: Cluster, service: str) -> None:
    """A crash: SIGKILL the service's whole process group (its own children go with it)."""
    service_command(cluster, service)  # names a service
    pid = cluster.pids.get(service)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def start_worker(cluster: Cluster, worker: int) -> None:
    queue, namespace = cluster.queue(worker), cluster.namespace(worker)
    forward_api_in_namespace(cluster, worker)
    command = [
        shutil.which("ip") or "ip", "netns", "exec", namespace,
        str(VENV_BIN / "airflow"), "celery", "worker",
        "--queues", queue, "--concurrency", str(cluster.slots),
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
    remove_network(cluster)
    with server(cluster) as connection:
        drop_databases(cluster, connection)
    broker(cluster).flushdb()
    shutil.rmtree(cluster.root, ignore_errors=True)


def leftovers(cluster: Cluster) -> list[str]:
    """What of the cluster is still there (empty after `down`)."""
    found = [f"process {pid}" for pid in processes_marked(cluster.name)]
    found += network_left(cluster)
    found += [f"database {name}" for name in databases_left(cluster)]
    keys = broker(cluster).dbsize()
    if keys:
        found.append(f"{keys} Redis keys in {redacted(cluster.redis_url)}")
    if cluster.root.exists():
        found.append(f"folder {cluster.root}")
    return found
