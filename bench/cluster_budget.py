"""The accounts DAG on the real CeleryExecutor cluster, rate limits on, a scaled minute: how much
of spec 8's allowance the shared rate budget uses, before (the one-slot lanes and cool-downs of
an earlier commit) and after. Run by hand (root, network namespaces; about 25 minutes):

    .venv/bin/python bench/cluster_budget.py [--name gdb --subnet 10.201.0 --redis-db 12
        --api-port 8090 --sandbox-port 8797] [--time-scale 0.5] [--before REF | --no-before]

1. First sync of one medium account with 5 keys on 1 worker. Utilisation = requests / (the
   DAG run's wall time x 600 per scaled minute).
2. Nightly run of 5 small accounts (one key each, one of them split into a task per group,
   so five tasks share its key) on 2 workers: a first sync, then the measured second run.
   The same with the DAG of `--before` (default: the commit before the shared budget),
   deployed from a `git archive` of it with its own virtualenv.

From the sandbox's request log, for every part: 429s, the busiest rolling (scaled) minute of
any key and of any address. Prints the figures as JSON (and writes --out).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from guestdata_cluster import DAG_ID, Cluster, Rest
from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess, busiest_window
from tap_guestdata.airflow.accounts import SIZE_REQUESTS, parse_config, plan_tasks

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts")]  # the planner's model, scripts/plan_workers.py

from plan_workers import planned_seconds  # noqa: E402

BEFORE = "15acd3c"  # the last commit with one-slot lanes and cool-downs
PER_KEY, PER_ADDRESS = 120, 600  # spec 8


def limits_report(log: list[dict[str, Any]], window: float) -> dict[str, Any]:
    by_key: dict[str, list[float]] = {}
    by_address: dict[str, list[float]] = {}
    for entry in log:
        by_key.setdefault(entry["key"], []).append(float(entry["time"]))
        by_address.setdefault(entry["ip"], []).append(float(entry["time"]))
    return {
        "requests": len(log),
        "status_429": Counter(entry["status"] for entry in log)[429],
        "busiest_key_window": max(busiest_window(t, window) for t in by_key.values()),
        "busiest_address_window": max(busiest_window(t, window) for t in by_address.values()),
        "addresses": sorted(by_address),
    }


class Deployment:
    """`scripts/cluster` of one checkout (this one, or an earlier commit's)."""

    def __init__(self, checkout: Path, args: argparse.Namespace, home: Path) -> None:
        self.checkout, self.args, self.home = checkout, args, home

    def cluster(self, *command: str, timeout: float = 900) -> None:
        run = [str(self.checkout / "scripts" / "cluster"), "--home", str(self.home), *command]
        result = subprocess.run(run, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[:1])}: {(result.stdout + result.stderr)[-3000:]}"
            )

    @contextmanager
    def up(
        self, api_url: str, accounts: Mapping[str, Any], variables: Mapping[str, str], workers: int
    ) -> Iterator[Rest]:
        files = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
        (files / "accounts.json").write_text(json.dumps(accounts))
        (files / "variables.json").write_text(json.dumps(variables))
        a = self.args
        self.cluster(
            "up", "--name", a.name, "--subnet", a.subnet, "--redis-db", str(a.redis_db),
            "--api-port", str(a.api_port), "--api-url", api_url, "--workers", str(workers),
            "--accounts", str(files / "accounts.json"),
            "--variables", str(files / "variables.json"),
            "--time-scale", str(a.time_scale),
            # The loads alone, as the earlier commit's DAG (no models then): the figures are
            # the shared budget's; this checkout's runs would otherwise end with a dbt build.
            *(["--no-models"] if self.checkout == ROOT else []),
        )  # fmt: skip
        try:
            yield Rest(Cluster.load(self.home)).login()
        finally:
            self.cluster("down", timeout=300)

    @staticmethod
    def run(rest: Rest, timeout: float = 3600) -> dict[str, Any]:
        run_id = rest.trigger(DAG_ID)
        state = rest.wait(DAG_ID, run_id, timeout)
        run = rest.call("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
        tasks = rest.task_instances(DAG_ID, run_id)

        def at(value: str) -> float:
            from datetime import datetime

            return datetime.fromisoformat(value).timestamp()

        durations = [at(t["end_date"]) - at(t["start_date"]) for t in tasks if t["end_date"]]
        return {
            "state": state,
            "wall_seconds": round(at(run["end_date"]) - at(run["start_date"]), 1),
            "tasks": len(tasks),
            "task_seconds_mean": round(sum(durations) / max(len(durations), 1), 1),
            "started_at": at(run["start_date"]),
            "ended_at": at(run["end_date"]),
            # Each task's (start, end), seconds after the run's start.
            "task_spans": sorted(
                (round(at(t["start_date"]) - at(run["start_date"]), 1),
                 round(at(t["end_date"]) - at(run["start_date"]), 1))
                for t in tasks if t["start_date"] and t["end_date"]
            ),
        }  # fmt: skip


def forecast(
    accounts: Mapping[str, Any],
    workers: int,
    phase: str,
    measured: Mapping[str, int],
    window: float,
) -> float:
    """The planner's forecast for this deployment: its tasks, each account's measured requests
    spread over its groups as the size's figures are (scripts/plan_workers.py's model)."""
    queues = [f"worker_{n}" for n in range(1, workers + 1)]
    config = parse_config(json.dumps({**accounts, "queues": queues}))
    tasks = []
    for spec in plan_tasks(config, refresh=False):
        account = next(a for a in config.accounts if a.name == spec.account)
        shares = SIZE_REQUESTS[account.size or "small"][phase]
        total = sum(shares[group] for group in account.groups)
        part = sum(shares[group] for group in spec.groups)
        tasks.append(replace(spec, weight=round(measured.get(spec.account, 0) * part / total)))
    keys = {a.name: len(a.key_variables) for a in config.accounts}
    return planned_seconds(tasks, keys, latency=0.01, minute=window)


def requests_per_account(
    log: list[dict[str, Any]], variables: Mapping[str, str], accounts: Mapping[str, Any]
) -> dict[str, int]:
    account_of = {
        variables[name]: entry["name"] for entry in accounts["accounts"] for name in entry["keys"]
    }
    return dict(Counter(account_of[entry["key"]] for entry in log))


def small_accounts(split_one: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """Five accounts of one key each (the sandbox owner's five keys, five schemas)."""
    accounts, variables = [], {}
    for n, key in enumerate(OWNER_KEYS[:5], 1):
        entry: dict[str, Any] = {"name": f"small{n}", "keys": [f"small{n}_key"], "size": "small"}
        if split_one and n == 1:
            entry["split"] = True  # five group tasks on one key: the budget divides it
        accounts.append(entry)
        variables[f"small{n}_key"] = key
    return {"accounts": accounts}, variables


def nightly(deployment: Deployment, args: argparse.Namespace, split_one: bool) -> dict[str, Any]:
    window = 60 * args.time_scale
    with SandboxProcess(
        size="small", seed=42, time_scale=args.time_scale, host="0.0.0.0"
    ) as sandbox:
        api_url = f"http://127.0.0.1:{urlsplit(sandbox.url).port}/api/v1/customer"
        accounts, variables = small_accounts(split_one)
        with deployment.up(api_url, accounts, variables, workers=2) as rest:
            first = deployment.run(rest)
            sandbox.clear_requests()
            second = deployment.run(rest)
            log = sandbox.requests_log()
    report = {**second, **limits_report(log, window)}
    if deployment.checkout == ROOT:  # the planner models this checkout's DAG, not the earlier one
        measured = requests_per_account(log, variables, accounts)
        planned = forecast(accounts, 2, "incremental", measured, window)
        report["planner_forecast_seconds"] = round(planned, 1)
    return {"first_sync": first, "nightly": report}


def medium_first_sync(args: argparse.Namespace) -> dict[str, Any]:
    window = 60 * args.time_scale
    deployment = Deployment(ROOT, args, Path(tempfile.mkdtemp(prefix="bench-home-")))
    with SandboxProcess(
        size="medium", seed=42, time_scale=args.time_scale, host="0.0.0.0"
    ) as sandbox:
        port = urlsplit(sandbox.url).port
        names = [f"medium_key_{n}" for n in range(1, 6)]
        accounts = {"accounts": [{"name": "medium", "keys": names, "size": "medium"}]}
        variables = dict(zip(names, OWNER_KEYS, strict=True))
        with deployment.up(
            f"http://127.0.0.1:{port}/api/v1/customer", accounts, variables, workers=1
        ) as rest:
            run = deployment.run(rest)
        log = sandbox.requests_log()
    report = limits_report(log, window)
    utilisation = report["requests"] / (run["wall_seconds"] / window * PER_ADDRESS)
    run.update(idle_time(log, run.pop("started_at"), run.pop("ended_at")))
    measured = requests_per_account(log, variables, accounts)
    planned = forecast(accounts, 1, "first", measured, window)
    return {
        **run,
        **report,
        "utilisation": round(utilisation, 3),
        "planner_forecast_seconds": round(planned, 1),
    }


def idle_time(log: list[dict[str, Any]], started: float, ended: float) -> dict[str, Any]:
    """Where the run sent no request: before its first, after its last, and every pause of
    over a second between them (seconds after the run's start, and how long)."""
    times = sorted(float(entry["time"]) for entry in log)
    pauses = [
        (round(a - started, 1), round(b - a, 1)) for a, b in itertools.pairwise(times) if b - a > 1
    ]
    return {
        "first_request_after_s": round(times[0] - started, 1),
        "after_last_request_s": round(ended - times[-1], 1),
        "pauses_over_1s": pauses,
    }


def checkout_of(ref: str) -> Path:
    """An earlier commit's tree with its own virtualenv (its scripts/cluster and DAG)."""
    target = Path(tempfile.mkdtemp(prefix=f"bench-{ref}-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    subprocess.run([str(target / "scripts" / "bootstrap"), "test"], cwd=target, check=True)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="gdb")
    parser.add_argument("--subnet", default="10.201.0")
    parser.add_argument("--redis-db", type=int, default=12)
    parser.add_argument("--api-port", type=int, default=8090)
    parser.add_argument("--time-scale", type=float, default=0.5, help="0.5: a 30-s minute")
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--no-before", action="store_true")
    parser.add_argument("--parts", default="medium,nightly", help="which parts to run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    figures: dict[str, Any] = {
        "time_scale": args.time_scale,
        "window_seconds": 60 * args.time_scale,
    }
    started = time.monotonic()
    parts = args.parts.split(",")
    if "medium" in parts:
        figures["medium_first_sync_1_worker"] = medium_first_sync(args)
        print(json.dumps(figures, indent=2), flush=True)
    if "nightly" in parts:
        home = Path(tempfile.mkdtemp(prefix="bench-home-"))
        figures["small_x5_2_workers_after"] = nightly(Deployment(ROOT, args, home), args, True)
        print(json.dumps(figures, indent=2), flush=True)
        if not args.no_before:
            old = Deployment(checkout_of(args.before), args, Path(tempfile.mkdtemp()))
            figures["small_x5_2_workers_before"] = nightly(old, args, False)
            after = figures["small_x5_2_workers_after"]["nightly"]["wall_seconds"]
            before = figures["small_x5_2_workers_before"]["nightly"]["wall_seconds"]
            figures["nightly_after_over_before"] = round(after / before, 3)
    figures["bench_seconds"] = round(time.monotonic() - started)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
