"""Processes of the cluster: started in sessions of their own, ended by process group, found by
the marker in their environment, and waited for."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import redis
import requests

from guestdata_cluster.state import MARKER, Cluster, ClusterError


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def sh(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {(result.stderr or result.stdout).strip()}")
    return result


def wait_until(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
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


def kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
