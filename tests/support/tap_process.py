"""Run `tap-guestdata` as users do (a process with --config/--state/--catalog) and parse its output.

Shared by every suite that runs the tap. Only the standard library is used, so a test can run
the tap under any interpreter of the project's venv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAP_EXECUTABLE = Path(sys.executable).parent / "tap-guestdata"


@dataclass
class TapRun:
    """What one tap process printed, parsed: Singer messages on stdout, logs on stderr."""

    returncode: int
    stdout: str
    stderr: str
    records: dict[str, list[dict]] = field(default_factory=dict)
    schemas: dict[str, dict] = field(default_factory=dict)
    states: list[dict] = field(default_factory=list)
    # ACTIVATE_VERSION messages per stream, and each RECORD's version (None when it had none)
    activated: dict[str, list[int]] = field(default_factory=dict)
    versions: dict[str, list[int | None]] = field(default_factory=dict)

    @property
    def final_state(self) -> dict | None:
        return self.states[-1] if self.states else None

    def ids(self, stream: str, key: str = "id") -> list:
        return [record[key] for record in self.records.get(stream, [])]

    def summary_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if "Stream summary:" in line]


def parse_singer(stdout: str, run: TapRun) -> None:
    for line in stdout.splitlines():
        if not line.startswith('{"type"'):
            continue  # not a Singer message (e.g. --about or --discover output)
        message = json.loads(line)
        kind = message.get("type")
        if kind == "RECORD":
            run.records.setdefault(message["stream"], []).append(message["record"])
            run.versions.setdefault(message["stream"], []).append(message.get("version"))
        elif kind == "ACTIVATE_VERSION":
            run.activated.setdefault(message["stream"], []).append(message["version"])
        elif kind == "SCHEMA":
            run.schemas[message["stream"]] = message["schema"]
        elif kind == "STATE":
            run.states.append(message["value"])


def tap_command(*args: str) -> list[str]:
    return [str(TAP_EXECUTABLE), *args]


def write_json(directory: Path, name: str, value: Any) -> Path:
    """`value` as JSON; a str is written as it is (corrupt-file tests)."""
    path = directory / name
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    return path


def run_tap(
    config: Mapping[str, Any] | str,
    *,
    state: Mapping[str, Any] | str | None = None,
    catalog: Mapping[str, Any] | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> TapRun:
    """Run one sync (or `args`, e.g. ("--discover",)) and return its parsed output. A str
    config or state is the file's exact text."""
    with tempfile.TemporaryDirectory(prefix="tap-run-") as scratch:
        directory = Path(scratch)
        command = tap_command("--config", str(write_json(directory, "config.json", config)))
        if state is not None:
            command += ["--state", str(write_json(directory, "state.json", state))]
        if catalog is not None:
            command += ["--catalog", str(write_json(directory, "catalog.json", catalog))]
        command += list(args)
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
            check=False,
        )
    run = TapRun(result.returncode, result.stdout, result.stderr)
    parse_singer(result.stdout, run)
    return run


# Catalogs discovered in this process, by config without the address and key: the tap's
# discovery reads neither (tests/tap/test_about_discover.py discovers against a closed port),
# and each `--discover` is a tap start (1 s of CPU, mostly importing singer_sdk).
_DISCOVERED: dict[str, str] = {}
_NOT_READ_BY_DISCOVERY = ("base_url", "api_key", "api_keys")


def discover(config: Mapping[str, Any], *, seen: Callable[[TapRun], object] | None = None) -> dict:
    """The catalog `--discover` prints (pretty-printed JSON, read whole), once per config but
    its address and key. `seen` is handed the run (e.g. to check its output for leaked keys),
    so a call with `seen` always runs the tap."""
    settings = {name: value for name, value in config.items() if name not in _NOT_READ_BY_DISCOVERY}
    cache_key = json.dumps(settings, sort_keys=True, default=str)
    if seen is None and cache_key in _DISCOVERED:
        return json.loads(_DISCOVERED[cache_key])
    run = run_tap(config, args=("--discover",), timeout=120)
    if seen is not None:
        seen(run)
    assert run.returncode == 0, run.stderr[-3000:]
    _DISCOVERED[cache_key] = run.stdout
    return json.loads(run.stdout)


def select_streams(catalog: Mapping[str, Any], streams: Iterable[str]) -> dict:
    """A copy of a discovered catalog with exactly `streams` selected (all their fields)."""
    wanted = set(streams)
    selected = json.loads(json.dumps(catalog))
    for entry in selected["streams"]:
        for metadata in entry["metadata"]:
            if not metadata["breadcrumb"]:
                metadata["metadata"]["selected"] = entry["tap_stream_id"] in wanted
    return selected


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
