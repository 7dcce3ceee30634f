"""Shared plumbing of the benchmarks: paths, the sandbox, the tap's config and catalog, and
measured subprocess runs (wall time, CPU time, peak RSS and Singer RECORD counts per stream).

Only the standard library is imported at module level, so `dlt_baseline.py` (which runs in the
separate `bench/.venv-dlt`) can import the endpoint table from here too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
TAP_EXECUTABLE = ROOT / ".venv" / "bin" / "tap-guestdata"
# BENCH_TAP overrides the tap command (e.g. ".venv/bin/python bench/minimal_tap.py").
TAP_COMMAND = shlex.split(os.environ.get("BENCH_TAP", str(TAP_EXECUTABLE)))
# ... and BENCH_TAP_CLASS the class bench/tap_variant.py runs (e.g. "minimal_tap:MinimalTap").
TAP_CLASS = os.environ.get("BENCH_TAP_CLASS", "tap_guestdata.tap:TapGuestData")
DLT_VENV = BENCH / ".venv-dlt"
DLT_PYTHON = DLT_VENV / "bin" / "python"
DLT_REQUIREMENT = "dlt>=1.0,<2"

OWNER_KEYS = [f"gd_owner_growth_{number}" for number in range(1, 6)]  # spec 5.3: at most 5 keys
PER_PAGE_MAX = 200  # spec 4.3
# The list endpoints every throughput contender reads: tap stream name -> path under base_url.
LIST_ENDPOINTS: dict[str, str] = {
    "guests": "/guests",
    "members": "/rewards/members",
    "rewards": "/rewards/rewards",
    "redemptions": "/rewards/redemptions",
}
# Far before any generated data, so a first sync is a full one.
EARLIEST_START_DATE = "2000-01-01T00:00:00Z"
# Effectively no client-side limit when the sandbox runs with limits off.
UNLIMITED_REQUESTS_PER_MINUTE = 1_000_000

# Every measured process gets this environment: a bytecode cache (outside the work tree) as an
# installed tap would have, and normal stdout buffering. This machine's shells export
# PYTHONDONTWRITEBYTECODE=1 (each start recompiles every module: +1.3 s for singer-sdk alone)
# and PYTHONUNBUFFERED=1 (a write system call per record line).
PYCACHE_PREFIX = Path(tempfile.gettempdir()) / "bench-guestdata-pycache"
_DROPPED_VARIABLES = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")


def process_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in _DROPPED_VARIABLES}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE_PREFIX)
    env.update(extra or {})
    return env


_RECORD_LINE = re.compile(rb'^\{"type": ?"RECORD", ?"stream": ?"([^"]+)"', re.MULTILINE)
_STATE_LINE = re.compile(rb'^\{"type": ?"STATE"', re.MULTILINE)


# ----------------------------------------------------------------------------- CLI helpers


def base_parser(description: str, default_size: str = "small") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", default=default_size, choices=["small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--tap-setting",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra tap config, the value parsed as JSON when it parses (repeatable)",
    )
    return parser


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        try:
            settings[key] = json.loads(raw)
        except json.JSONDecodeError:
            settings[key] = raw
    return settings


# ----------------------------------------------------------------------------- sandbox


def wait_for_sandbox_code(timeout_s: float = 0.0) -> None:
    """Fail fast with a clear message when the sandbox package is not importable yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            import guestdata_sandbox.testing  # noqa: F401
        except ImportError as error:
            if time.monotonic() >= deadline:
                sys.exit(f"the sandbox is not importable yet ({error}); see .sandbox-status")
            time.sleep(5)
        else:
            return


@contextlib.contextmanager
def sandbox(
    size: str, seed: int = 42, *, limits: bool = False, time_scale: float = 1.0
) -> Iterator[Any]:
    """A sandbox server in its own process (`guestdata_sandbox.testing.SandboxProcess`)."""
    wait_for_sandbox_code()
    from guestdata_sandbox.testing import SandboxProcess

    started = time.perf_counter()
    with SandboxProcess(size=size, seed=seed, time_scale=time_scale, limits=limits) as server:
        print(
            f"# sandbox size={size} seed={seed} limits={limits} time_scale={time_scale} "
            f"up in {time.perf_counter() - started:.1f}s at {server.base_url}",
            file=sys.stderr,
        )
        yield server


def truth_counts(server: Any, key: str = OWNER_KEYS[0]) -> dict[str, int]:
    truth = server.truth(key)
    return {name: len(rows) for name, rows in truth.items() if isinstance(rows, list)}


def list_endpoint_truth(server: Any, streams: Sequence[str], key: str = OWNER_KEYS[0]) -> Counter:
    """Rows a full read of each list endpoint returns (offers would leave out archived ones)."""
    return Counter({name: len(server.truth(key, resource=name)) for name in streams})


# ----------------------------------------------------------------------------- the tap


def tap_about() -> dict[str, Any]:
    output = subprocess.run(
        [*TAP_COMMAND, "--about", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        env=process_env(),
    ).stdout
    return json.loads(output)


def tap_setting_names() -> set[str]:
    about = tap_about()
    properties = about.get("settings", {}).get("properties", {})
    return set(properties)


def window_setting_name(names: set[str]) -> str | None:
    """The tap's setting for the length of the rate-limit minute, whatever it is called."""
    for candidate in ("rate_limit_window_seconds", "rate_limit_window", "window_seconds"):
        if candidate in names:
            return candidate
    matches = sorted(name for name in names if "window" in name and "rate" in name)
    return matches[0] if matches else None


def tap_config(
    server: Any,
    keys: Sequence[str] = (OWNER_KEYS[0],),
    *,
    requests_per_minute: int = UNLIMITED_REQUESTS_PER_MINUTE,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "base_url": server.base_url,
        "start_date": EARLIEST_START_DATE,
        "requests_per_minute": requests_per_minute,
    }
    if len(keys) == 1:
        config["api_key"] = keys[0]
    else:
        config["api_keys"] = list(keys)
    config.update(extra or {})
    return config


def write_json(directory: Path, name: str, payload: Any) -> Path:
    path = directory / name
    path.write_text(json.dumps(payload, indent=1))
    return path


def discover(config_path: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [*TAP_COMMAND, "--config", str(config_path), "--discover"],
        capture_output=True,
        text=True,
        env=process_env(),
    )
    if completed.returncode != 0:
        sys.exit(f"tap discovery failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def catalog_stream_names(catalog: Mapping[str, Any]) -> list[str]:
    return [entry["tap_stream_id"] for entry in catalog["streams"]]


def select_streams(catalog: dict[str, Any], selected: Sequence[str] | None) -> dict[str, Any]:
    """Mark the streams in `selected` (all when None) as selected and every other one not."""
    known = set(catalog_stream_names(catalog))
    if selected is not None and (unknown := set(selected) - known):
        sys.exit(f"the tap has no stream(s) {sorted(unknown)}; it has {sorted(known)}")
    for entry in catalog["streams"]:
        wanted = selected is None or entry["tap_stream_id"] in selected
        for metadata in entry.get("metadata", []):
            if metadata.get("breadcrumb") == []:
                metadata["metadata"]["selected"] = wanted
    return catalog


def replication_keys(catalog: Mapping[str, Any]) -> dict[str, str | None]:
    keys: dict[str, str | None] = {}
    for entry in catalog["streams"]:
        key = entry.get("replication_key")
        for metadata in entry.get("metadata", []):
            if metadata.get("breadcrumb") == []:
                found = metadata["metadata"].get("valid-replication-keys") or []
                key = key or (found[0] if found else None)
        keys[entry["tap_stream_id"]] = key
    return keys


@dataclass
class TapFiles:
    """A scratch directory with the tap's config and a catalog selecting some streams."""

    directory: Path
    config: Path
    catalog: Path
    catalog_body: dict[str, Any]

    def arguments(self, state: Path | None = None) -> list[str]:
        arguments = ["--config", str(self.config), "--catalog", str(self.catalog)]
        if state is not None:
            arguments += ["--state", str(state)]
        return arguments

    def argv(self, state: Path | None = None) -> list[str]:
        return [*TAP_COMMAND, *self.arguments(state)]


def prepare_tap(
    directory: Path, config: Mapping[str, Any], streams: Sequence[str] | None
) -> TapFiles:
    config_path = write_json(directory, "config.json", dict(config))
    catalog = select_streams(discover(config_path), streams)
    catalog_path = write_json(directory, "catalog.json", catalog)
    return TapFiles(directory, config_path, catalog_path, catalog)


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- measured runs


@dataclass
class RunResult:
    label: str
    wall_s: float
    cpu_s: float  # user + system of the measured process only (os.wait4)
    max_rss_mb: float
    returncode: int
    records: dict[str, int] = field(default_factory=dict)
    state_messages: int = 0
    last_state: dict[str, Any] | None = None
    stderr_tail: str = ""

    @property
    def total_records(self) -> int:
        return sum(self.records.values())

    def as_dict(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["total_records"] = self.total_records
        payload.pop("last_state")
        return payload


def run_measured(
    label: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stop_after_s: float | None = None,
    keep_last_state: bool = False,
    check: bool = True,
) -> RunResult:
    """Run `argv`, read its stdout as a Singer stream that is counted and discarded.

    Timing is the whole process, start to exit; CPU time and peak RSS come from `os.wait4` of
    that process alone (not the sandbox, not this reader). `stop_after_s` sends SIGTERM then.
    """
    records: Counter[bytes] = Counter()
    state_messages = 0
    last_state_line = b""
    with tempfile.TemporaryFile() as stderr_file:
        started = time.perf_counter()
        process = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            env=process_env(env),
            cwd=ROOT,
        )
        timer = None
        if stop_after_s is not None:
            timer = threading.Timer(stop_after_s, _terminate, args=(process,))
            timer.start()
        assert process.stdout is not None
        descriptor = process.stdout.fileno()
        pending = b""
        while chunk := os.read(descriptor, 1 << 20):
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if not cut:
                continue
            complete, pending = pending[:cut], pending[cut:]
            records.update(_RECORD_LINE.findall(complete))
            states = list(_STATE_LINE.finditer(complete))
            if states:
                state_messages += len(states)
                if keep_last_state:
                    start = states[-1].start()
                    last_state_line = complete[start : complete.index(b"\n", start)]
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        process.stdout.close()
        if timer is not None:
            timer.cancel()
        stderr_file.seek(0)
        stderr_tail = stderr_file.read()[-4000:].decode(errors="replace")
    result = RunResult(
        label=label,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        max_rss_mb=usage.ru_maxrss / 1024,  # Linux: kilobytes
        returncode=process.returncode,
        records={name.decode(): count for name, count in sorted(records.items())},
        state_messages=state_messages,
        last_state=json.loads(last_state_line)["value"] if last_state_line else None,
        stderr_tail=stderr_tail,
    )
    stopped = stop_after_s is not None and result.returncode in (-signal.SIGTERM, 143)
    if check and result.returncode != 0 and not stopped:
        sys.exit(f"{label} exited {result.returncode}:\n{result.stderr_tail}")
    return result


def _terminate(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)


# ----------------------------------------------------------------------------- output


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [
        max(len(header), *(len(row[index]) for row in cells)) if cells else len(header)
        for index, header in enumerate(headers)
    ]
    print("  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True)))
    print("  ".join("-" * width for width in widths))
    for row in cells:
        print("  ".join(value.rjust(width) for value, width in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def save_results(benchmark: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = {"benchmark": benchmark, "finished_at": stamp, "host_cpus": os.cpu_count(), **payload}
    path = RESULTS / f"{benchmark}-{stamp}.json"
    text = json.dumps(payload, indent=1, default=str)
    path.write_text(text)
    (RESULTS / f"{benchmark}-latest.json").write_text(text)
    print(f"\nresults: {path.relative_to(ROOT)}")
    return path


# ----------------------------------------------------------------------------- dlt virtualenv


def ensure_dlt_venv() -> Path:
    """Create `bench/.venv-dlt` with dlt on first use (kept apart: its pins may clash)."""
    probe = [str(DLT_PYTHON), "-c", "import dlt.sources.rest_api, requests"]
    if DLT_PYTHON.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return DLT_PYTHON
    print(f"# creating {DLT_VENV.relative_to(ROOT)} with {DLT_REQUIREMENT}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(DLT_VENV)], check=True)
    uv = ROOT / ".venv" / "bin" / "uv"
    if uv.exists():
        install = [str(uv), "pip", "install", "--python", str(DLT_PYTHON)]
    else:
        install = [str(DLT_PYTHON), "-m", "pip", "install", "--quiet"]
    subprocess.run([*install, DLT_REQUIREMENT, "requests"], check=True)
    subprocess.run(probe, check=True)
    return DLT_PYTHON
