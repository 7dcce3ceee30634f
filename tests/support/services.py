"""Servers of a test's own, on free ports, for tests that kill or restart them: a Redis and a
PostgreSQL cluster. The machine's shared Redis and PostgreSQL are never restarted."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

from guestdata_cluster.processes import wait_until


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class OwnRedis:
    """A redis-server of the test's own on a free port; `persistent`: AOF (`appendonly yes`,
    fsync `fsync`: every write by default, `everysec` as docs/scale-out.md advises). Stopped
    whatever happens (`stop`)."""

    folder: Path
    persistent: bool
    fsync: str = "always"
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    starts: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.port = self.port or free_port()
        persistence = ["--appendonly", "yes", "--appendfsync", self.fsync]
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + (persistence if self.persistent else ["--appendonly", "no"])
            + ["--dir", str(self.folder), "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_until(f"redis-server on port {self.port}", client.ping, 30, interval=0.05)
        client.close()
        self.starts.append(time.time())

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def shut_down(self) -> None:
        """A planned restart's first half: SHUTDOWN, which writes the AOF out."""
        assert self.process is not None
        client = redis.Redis.from_url(self.url)
        with contextlib.suppress(redis.ConnectionError):  # the server closes as it answers
            client.shutdown()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def postgres_bin(tool: str) -> str:
    """A PostgreSQL server program (Debian keeps them out of PATH, under its major version)."""
    found = shutil.which(tool)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"), key=lambda p: p.parts)
    if not versions:
        raise RuntimeError(f"no PostgreSQL {tool} (Debian: postgresql)")
    return str(versions[-1])


@dataclass
class OwnPostgres:
    """A PostgreSQL cluster of the test's own (initdb in `folder`, trust for local TCP, user
    `postgres`) on a free port of 127.0.0.1, run as the `postgres` system user when the test
    runs as root (the server refuses root). `stop` removes it whatever happens."""

    folder: Path
    port: int = 0
    starts: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _run(self, *command: str) -> subprocess.CompletedProcess[str]:
        prefix: list[str] = []
        if os.geteuid() == 0:
            prefix = ["runuser", "-u", "postgres", "--"]
        result = subprocess.run(
            [*prefix, *command], capture_output=True, text=True, timeout=120, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:2])}: {(result.stdout + result.stderr)[-800:]}")
        return result

    def create(self) -> None:
        self.port = self.port or free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # the folder's parents must let the server's user through
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)
        self._run(
            postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.folder}'\nmax_connections = 300\n"
                "fsync = off\nfull_page_writes = off\n"
            )
        self.start()

    def start(self) -> None:
        self._run(
            postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
            "-w", "-t", "60", "start",
        )  # fmt: skip
        wait_until(
            f"PostgreSQL on port {self.port}",
            lambda: psycopg.connect(f"{self.url}/postgres", connect_timeout=2).close() or True,
            30,
            interval=0.05,
        )
        self.starts.append(time.time())

    def stop(self, mode: str = "fast") -> None:
        """`immediate`: a crash (no checkpoint; recovery at the next start)."""
        if (self.data / "postmaster.pid").exists():
            self._run(postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)
