"""What a deploy puts in place: the Meltano project on the workers with its plugins installed,
the accounts and the Airflow connections of their keys and of the warehouse (or, the old way,
the keys' Variables), and the secrets every Airflow process shares."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from guestdata_cluster.state import PROJECT_ROOT, VENV_BIN, Cluster, ClusterError
from tap_guestdata.airflow.accounts import parse_config

LOAD_PLUGINS = ("tap-guestdata", "target-postgres", "guestdata-pg-types")
MODELS_PLUGINS = ("dbt-postgres",)  # the models' build (transform/), unless `up --no-models`
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


def deploy_project(cluster: Cluster, env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Copy the Meltano project and install its plugins, once, before any worker starts (what
    a deploy does on each worker machine); runs beside `airflow db migrate`."""
    if not (PROJECT_ROOT / "meltano.yml").exists():
        raise ClusterError(
            f"no Meltano project at {PROJECT_ROOT}: install guestdata-cluster editable from "
            "a checkout (scripts/bootstrap test)"
        )
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
    plugins = LOAD_PLUGINS + (MODELS_PLUGINS if cluster.models else ())
    log = (cluster.root / "logs" / "deploy.log").open("w")
    return subprocess.Popen(
        [str(VENV_BIN / "meltano"), "install", *plugins],
        cwd=cluster.project,
        env=dict(env),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def default_accounts(groups: Sequence[str] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The sandbox's three accounts, and the Variables holding their keys."""
    accounts: list[dict[str, Any]] = []
    variables: dict[str, str] = {}
    for name, keys in SANDBOX_ACCOUNTS.items():
        names = [f"guestdata_{name}_key_{n}" for n in range(1, len(keys) + 1)]
        entry: dict[str, Any] = {"name": name, "keys": names, "size": "small"}
        if groups:
            entry["groups"] = list(groups)
        accounts.append(entry)
        variables.update(zip(names, keys, strict=True))
    return {"accounts": accounts}, variables


def account_connections(
    document: Mapping[str, Any], variables: Mapping[str, str], api_url: str
) -> dict[str, dict[str, Any]]:
    """Each account's `guestdata` connection (its `connection`, default `guestdata_<name>`), in
    Airflow's JSON form: the keys its Variables name (the first as the password, the others in
    extra `api_keys`) and the API's base URL."""
    connections = {}
    for account in parse_config(json.dumps(dict(document))).accounts:
        keys = [variables[name] for name in account.key_variables]
        connections[account.connection_id] = {
            "conn_type": "guestdata",
            "password": keys[0],
            "extra": {"api_keys": keys[1:], "base_url": api_url},
        }
    return connections


def warehouse_connection(
    cluster: Cluster, given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The warehouse's `postgres` connection: the cluster's warehouse database, with `given`'s
    fields (a `guestdata_warehouse` entry of `up --connections`) over it. A server that trusts
    its clients needs no password, but the connection has one (warehouse.py requires it)."""
    connection = {**cluster.warehouse_connection(), **(given or {})}
    connection["password"] = connection.get("password") or secrets.token_urlsafe(18)
    return connection


def create_connections(rest: Any, connections: Mapping[str, Mapping[str, Any]]) -> None:
    """Airflow connections (JSON form by id) in the metadata database, through the REST API:
    nothing of them is written to a file."""
    for conn_id, connection in connections.items():
        body = {"connection_id": conn_id, **connection}
        extra = body.get("extra")
        if extra is not None and not isinstance(extra, str):
            body["extra"] = json.dumps(extra)  # the REST API takes extra as text
        rest.call("POST", "/connections", json=body)


def write_accounts(cluster: Cluster, document: dict[str, Any]) -> None:
    """The accounts with the cluster's queues (one per worker): the planner spreads the
    accounts over them, and a pool per queue must exist before a run."""
    document = {**document, "queues": list(cluster.queues)}
    parse_config(json.dumps(document))  # a bad document fails here, not in the dag-processor
    Path(cluster.accounts_file).write_text(json.dumps(document, indent=2))
