"""What a deploy puts in place: the Meltano project on the workers with its plugins installed,
the accounts and their keys' Variables, and the secrets every Airflow process shares."""

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


def write_accounts(cluster: Cluster, document: dict[str, Any]) -> None:
    """The accounts with the cluster's queues (one per worker): the planner spreads the
    accounts over them, and a pool per queue must exist before a run."""
    document = {**document, "queues": list(cluster.queues)}
    parse_config(json.dumps(document))  # a bad document fails here, not in the dag-processor
    Path(cluster.accounts_file).write_text(json.dumps(document, indent=2))
