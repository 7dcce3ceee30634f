"""Fixtures of the Celery cluster tests: a real `scripts/cluster` (root, network namespaces).

These tests need root to make network namespaces, as CI has here. Where namespaces cannot be
made they fail with one line naming the requirement; `GUESTDATA_SKIP_CLUSTER_TESTS=1` is the
only way to skip them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cluster_testing import TIME_SCALE, LocalCluster
from guestdata_cluster import ClusterError, require_namespaces
from guestdata_sandbox.testing import SandboxProcess
from support.services import free_port

OPT_OUT = "GUESTDATA_SKIP_CLUSTER_TESTS"


@pytest.fixture(scope="module")
def namespaces() -> None:
    if os.environ.get(OPT_OUT) == "1":
        pytest.skip(f"{OPT_OUT}=1: the Celery cluster tests are opted out")
    try:
        require_namespaces()
    except ClusterError as error:
        pytest.fail(f"{error} (or set {OPT_OUT}=1 to skip these tests)", pytrace=False)


@pytest.fixture(scope="module")
def sandbox(namespaces: None) -> Iterator[SandboxProcess]:
    """Every sandbox account, real limits (120 per key, 600 per address) in a scaled minute;
    listening on every address so the workers reach it through the bridge."""
    with SandboxProcess(size="small", seed=42, time_scale=TIME_SCALE, host="0.0.0.0") as server:
        yield server


@pytest.fixture(scope="module")
def cluster(
    sandbox: SandboxProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """The cluster's command, on this module's own home, names and subnet; `down` at the end
    whatever happened."""
    port = urlsplit(sandbox.url).port
    local = LocalCluster(
        home=Path(tmp_path_factory.mktemp("cluster")),
        api_url=f"http://127.0.0.1:{port}/api/v1/customer",
        api_port=free_port("0.0.0.0"),
        logs=Path(tmp_path_factory.mktemp("cluster-logs")),
        connections=True,  # keys and the warehouse from Airflow connections (no Variables)
    )
    try:
        yield local
    finally:
        if local.is_up():
            local.down()
