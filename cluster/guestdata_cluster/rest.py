"""Airflow's public REST API, as a user's script would call it: a token, runs, task instances."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import requests

from guestdata_cluster.state import Cluster, ClusterError


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
    index label and the last part of its task id), else its task id. A mapped try not yet
    rendered (a retry is, once it runs) is `<task id>[<map index>]`: Airflow reports its map
    index as its label then, the same for every mapped task."""
    task_id, map_index = str(task["task_id"]), int(task.get("map_index", -1))
    if map_index < 0:
        return task_id
    rendered = task.get("rendered_map_index")
    if not rendered or rendered == str(map_index):
        return task_key(task)
    return f"{rendered}.{task_id.rsplit('.', 1)[-1]}"


def task_key(task: Mapping[str, Any]) -> str:
    """A mapped task instance by its task id and map index, `<task id>[<map index>]`: the same
    name for every try, rendered or not (a label comes only once a try runs)."""
    return f"{task['task_id']}[{task['map_index']}]"
