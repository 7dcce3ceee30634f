"""The services the cluster uses: PostgreSQL databases (metadata and results, Meltano state,
the warehouse), the Redis db (broker and shared rate budget), and the sandbox."""

from __future__ import annotations

import os
import socket
from typing import Any

import psycopg
import redis
import requests
from psycopg import sql

from guestdata_cluster.processes import start, wait_until
from guestdata_cluster.state import (
    DATABASE_ROLES,
    MARKER,
    VENV_BIN,
    Cluster,
    ClusterError,
    host_of,
    port_of,
)


def require_services(cluster: Cluster) -> None:
    """PostgreSQL and Redis answer where the cluster's URLs say (`--postgres-url`,
    `--redis-url`), before anything is made."""
    for url, service in ((cluster.postgres, "PostgreSQL"), (cluster.redis, "Redis")):
        address = (host_of(url), port_of(url))
        try:
            with socket.create_connection(address, timeout=3):
                pass
        except OSError as error:
            raise ClusterError(
                f"{service} does not answer at {address[0]}:{address[1]} ({error})"
            ) from None


def server(cluster: Cluster) -> psycopg.Connection[Any]:
    """The PostgreSQL server's maintenance database, autocommit (CREATE/DROP DATABASE)."""
    return psycopg.connect(cluster.maintenance_url(), autocommit=True)


def drop_databases(cluster: Cluster, connection: psycopg.Connection[Any]) -> None:
    for role in DATABASE_ROLES:
        name = sql.Identifier(cluster.database(role))
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def make_databases(cluster: Cluster) -> None:
    with server(cluster) as connection:
        drop_databases(cluster, connection)  # a crashed cluster's, if any
        for role in DATABASE_ROLES:
            connection.execute(
                sql.SQL("CREATE DATABASE {}").format(sql.Identifier(cluster.database(role)))
            )


def databases_left(cluster: Cluster) -> list[str]:
    with server(cluster) as connection:
        rows = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{cluster.name}\\_%",)
        ).fetchall()
    return [name for (name,) in rows]


def broker(cluster: Cluster) -> redis.Redis:
    """The cluster's Redis db, from this (the root) namespace."""
    return redis.Redis.from_url(cluster.redis_url)


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
