"""`SandboxProcess`: a sandbox server in a subprocess on a free loopback port, for tests."""

from __future__ import annotations

import datetime as dt
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import requests

from guestdata_sandbox.server import BASE_PATH, CONTROL_PATH

STARTUP_TIMEOUT_S = 240.0


class SandboxError(RuntimeError):
    """A control call the sandbox refused."""


class SandboxProcess:
    """Context manager: `with SandboxProcess(size="small", seed=7) as server: server.base_url`.

    `as_of` (an aware datetime or an ISO 8601 instant with offset): the data as of that instant,
    generated and read at it whatever the wall time (`--as-of`); sandboxes of one seed, size,
    anchor and `as_of` serve the same data. `anchor` defaults to its London day.
    """

    def __init__(
        self,
        size: str = "small",
        seed: int = 42,
        time_scale: float = 1.0,
        limits: bool = True,
        anchor: str | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = STARTUP_TIMEOUT_S,
        colliding_account: bool = False,
        as_of: dt.datetime | str | None = None,
    ) -> None:
        self.size, self.seed, self.time_scale = size, seed, time_scale
        self.as_of = as_of.isoformat() if isinstance(as_of, dt.datetime) else as_of
        self.colliding_account = colliding_account  # account 1006 under 1001's ids
        self.limits_enabled = limits  # `limits` is the method that switches them
        self.anchor, self.host, self.startup_timeout = anchor, host, startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.url = self.base_url = self.control_url = ""
        self.session = requests.Session()

    # ------------------------------------------------------------------ lifecycle

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "guestdata_sandbox.cli", "serve", "--host", self.host]
        command += ["--port", "0", "--seed", str(self.seed), "--size", self.size]
        command += ["--time-scale", str(self.time_scale)]
        if not self.limits_enabled:
            command.append("--no-limits")
        if self.anchor:
            command += ["--anchor", str(self.anchor)]
        if self.as_of:
            command += ["--as-of", self.as_of]
        if self.colliding_account:
            command.append("--colliding-account")
        return command

    def start(self) -> SandboxProcess:
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, text=True, bufsize=1
        )
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None

        def drain() -> None:  # keep reading so the server never blocks on a full pipe
            for line in stdout:
                lines.put(line)

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout
        try:
            first = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            self.stop()
            raise SandboxError("the sandbox printed no URL in time") from None
        self.url = first.strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SandboxError(f"unexpected first line from the sandbox: {first!r}")
        self.base_url, self.control_url = self.url + BASE_PATH, self.url + CONTROL_PATH
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SandboxError(f"the sandbox exited with {self.process.returncode}")
            try:
                if self.session.get(self.control_url + "/health", timeout=2).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.05)
        self.stop()
        raise SandboxError("the sandbox did not answer /_sandbox/health in time")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.session.close()

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ control surface

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, self.control_url + path, timeout=300, **kwargs)
        if response.status_code >= 400:
            raise SandboxError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def health(self) -> dict:
        return self._call("GET", "/health")

    def keys(self) -> list[dict]:
        return self._call("GET", "/keys")

    def truth(self, key: str, resource: str | None = None) -> Any:
        params = {"key": key} if resource is None else {"key": key, "resource": resource}
        return self._call("GET", "/truth", params=params)

    def requests_log(self, after: int = 0) -> list[dict]:
        return self._call("GET", "/requests", params={"after": after})

    def clear_requests(self) -> None:
        self._call("DELETE", "/requests")

    def mutate(self, action: str, **fields: Any) -> dict:
        return self._call("POST", "/mutate", json={"action": action, **fields})

    def fault(self, kind: str, count: int = 1, **kw: Any) -> None:
        self._call("POST", "/faults", json={"kind": kind, "count": count, **kw})

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def latency(self, seconds: float) -> None:
        self._call("POST", "/latency", json={"seconds": seconds})

    def limits(self, enabled: bool, time_scale: float | None = None) -> dict:
        body: dict[str, Any] = {"enabled": enabled}
        if time_scale is not None:
            body["time_scale"] = time_scale
        return self._call("POST", "/limits", json=body)

    def reset(self) -> None:
        self._call("POST", "/reset")


def busiest_window(times: Iterable[float], window: float) -> int:
    """The most requests in any rolling window of `window` seconds (spec 8's rolling minute,
    scaled): what the rate limits say no key or address may exceed."""
    ordered, most, first = sorted(times), 0, 0
    for last, moment in enumerate(ordered):
        while moment - ordered[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most
