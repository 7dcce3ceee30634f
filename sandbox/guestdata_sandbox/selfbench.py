"""`guestdata-sandbox selfbench`: generation time and per_page=200 pages a second, limits off."""

from __future__ import annotations

import threading
import time

import requests

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess

LISTS = ("/guests", "/rewards/members", "/rewards/rewards", "/rewards/redemptions")


def pages_per_second(base_url: str, seconds: float, threads: int) -> float:
    """Several clients read per_page=200 pages round-robin over the list endpoints."""
    counts = [0] * threads
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {OWNER_KEYS[index % len(OWNER_KEYS)]}"
        page = 1 + index
        while time.monotonic() < deadline:
            path = LISTS[page % len(LISTS)]
            response = session.get(f"{base_url}{path}", params={"per_page": 200, "page": page})
            response.raise_for_status()
            counts[index] += 1
            page = page + 1 if response.json()["data"] else 1

    workers = [threading.Thread(target=client, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / seconds


def run(size: str, seconds: float, threads: int) -> dict:
    began = time.perf_counter()
    with SandboxProcess(size=size, seed=42, limits=False) as server:
        started = time.perf_counter() - began
        generated = server.health()["generation_seconds"]
        counts = {
            name: len(rows) if isinstance(rows, list) else 1
            for name, rows in server.truth(OWNER_KEYS[0]).items()
            if rows is not None
        }
        rate = pages_per_second(server.base_url, seconds, threads)
    result = {
        "size": size,
        "generation_seconds": generated,
        "startup_seconds": round(started, 2),
        "rows_main_account": counts,
        "rows_total_main_account": sum(counts.values()),
        "pages_per_second": round(rate, 1),
    }
    print(result)
    return result
