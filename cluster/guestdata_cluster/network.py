"""Network namespaces: a bridge on the host, one namespace per worker with its own address, and
socat forwarders, since a namespace cannot reach the host's 127.0.0.1."""

from __future__ import annotations

import os
import shutil
from urllib.parse import urlsplit

from guestdata_cluster.processes import alive, sh, start
from guestdata_cluster.state import MARKER, Cluster, ClusterError


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


def remove_network(cluster: Cluster) -> None:
    """The namespaces, their links and the bridge (what is not there is skipped)."""
    for worker in range(1, cluster.workers + 1):
        sh("ip", "netns", "del", cluster.namespace(worker), check=False)
        sh("ip", "link", "del", f"{cluster.name}-w{worker}h", check=False)
    sh("ip", "link", "del", cluster.bridge, check=False)


def network_left(cluster: Cluster) -> list[str]:
    """The cluster's links and namespaces still there."""
    names = sh("ip", "-o", "link", "show", check=False).stdout
    found = [
        f"link {line.split(':')[1].strip().split('@')[0]}"
        for line in names.splitlines()
        if line.split(":")[1].strip().startswith(f"{cluster.name}-")
    ]
    spaces = sh("ip", "netns", "list", check=False).stdout.split()
    return found + [f"namespace {n}" for n in spaces if n.startswith(f"{cluster.name}-w")]


def namespace_pids(namespace: str) -> list[int]:
    result = sh("ip", "netns", "pids", namespace, check=False)
    return [int(pid) for pid in result.stdout.split() if pid.isdigit()]


def forward_services(cluster: Cluster) -> None:
    """socat on the bridge address to each service, PostgreSQL and Redis (the namespaces' only
    way out); a service on 127.0.0.1 then sees 127.0.0.1, and PostgreSQL's trust rule applies."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER: cluster.name}
    for label, (port, host, target_port) in cluster.forwarders.items():
        listen = f"TCP-LISTEN:{port},bind={cluster.gateway},reuseaddr,fork"
        start(cluster, label, ["socat", listen, f"TCP:{host}:{target_port}"], env, cluster.root)


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
