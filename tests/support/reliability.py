"""Helpers of the reliability suite (tests/reliability): tap runs that are checked for leaked
keys, ground-truth comparison, Singer output of killed processes, small recording HTTP servers.

Every tap output of a reliability test goes through `run`, `discover_streams` or `collect`, which
register stdout and stderr with `LEAK_WATCH`; the autouse fixture in conftest.py fails the test
if any API key (every key the sandbox knows, plus any a test registers) appears in any of them.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from guestdata_sandbox.accounts import KEYS
from guestdata_sandbox.testing import SandboxProcess
from support.json_values import same_value
from support.sandbox import OWNER_KEY, tap_config
from support.streams import key_of, truth_rows
from support.tap_process import (
    TapRun,
    discover,
    parse_singer,
    run_tap,
    select_streams,
    tap_command,
    write_json,
)

# Faults are injected on purpose: a short request timeout keeps the suite quick.
QUICK_TIMEOUT: dict[str, Any] = {"request_timeout_seconds": 5}


def reliability_config(
    server: SandboxProcess, key: str = OWNER_KEY, **overrides: Any
) -> dict[str, Any]:
    """`support.sandbox.tap_config` with the suite's short request timeout."""
    return tap_config(server, key, **{**QUICK_TIMEOUT, **overrides})


# ------------------------------------------------------------------ leaked keys


@dataclass
class LeakWatch:
    """Texts a test produced (tap output, logs, exceptions) and the secrets that must not be in
    any of them. Reset before each test, checked after it (conftest.py)."""

    secrets: set[str] = field(default_factory=set)
    texts: list[tuple[str, str]] = field(default_factory=list)

    def reset(self) -> None:
        self.secrets = {key for key in KEYS if len(key) >= 8}
        self.texts = []

    def watch(self, *secrets: str) -> None:
        self.secrets.update(secret for secret in secrets if secret and secret.strip())

    def add(self, where: str, text: str) -> None:
        self.texts.append((where, text))

    def leaks(self) -> list[str]:
        return [
            f"{secret!r} in {where}"
            for where, text in self.texts
            for secret in sorted(self.secrets)
            if secret in text
        ]

    def assert_clean(self) -> None:
        found = self.leaks()
        assert not found, "secret leaked: " + "; ".join(found[:10])


LEAK_WATCH = LeakWatch()


def _watch_config(config: Mapping[str, Any]) -> None:
    key = config.get("api_key")
    if isinstance(key, str):
        LEAK_WATCH.watch(key)
    keys = config.get("api_keys")
    if isinstance(keys, list):
        LEAK_WATCH.watch(*(k for k in keys if isinstance(k, str)))


def _register(label: str, run: TapRun) -> TapRun:
    LEAK_WATCH.add(f"{label} stdout", run.stdout)
    LEAK_WATCH.add(f"{label} stderr", run.stderr)
    return run


def run(
    config: Mapping[str, Any],
    *,
    streams: Sequence[str] | None = None,
    catalog: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
) -> TapRun:
    """One sync (of `streams`, selected from a fresh discovery, when given)."""
    _watch_config(config)
    if streams is not None:
        catalog = select_streams(discover_streams(config), streams)
    result = run_tap(config, state=state, catalog=catalog, env=env, timeout=timeout)
    return _register("sync", result)


_CATALOGS: dict[str, dict] = {}


def discover_streams(config: Mapping[str, Any]) -> dict:
    """The discovered catalog (cached: discovery makes no request and depends on no setting
    that the tests vary, so one discovery per session is enough)."""
    _watch_config(config)
    if "catalog" not in _CATALOGS:
        _CATALOGS["catalog"] = discover(config, seen=lambda run: _register("discover", run))
    return json.loads(json.dumps(_CATALOGS["catalog"]))


def catalog_for(config: Mapping[str, Any], streams: Iterable[str]) -> dict:
    return select_streams(discover_streams(config), streams)


def run_raw(
    config_text: str,
    *,
    state_text: str | None = None,
    catalog: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> TapRun:
    """A sync whose config and state files hold exactly the given text (corrupt files)."""
    run = run_tap(config_text, state=state_text, catalog=catalog, env=env, timeout=timeout)
    return _register("raw", run)


# ------------------------------------------------------------------ background runs and kills


def parse_partial(stdout: str) -> TapRun:
    """Singer output of a killed process: a cut last line is ignored."""
    tap_run = TapRun(-9, stdout, "")
    lines = stdout.splitlines(keepends=True)
    complete = [line for line in lines if line.endswith("\n")]
    parse_singer("".join(complete), tap_run)
    return tap_run


def collect(directory: Path, returncode: int) -> TapRun:
    """The parsed output of a background run started with `start`."""
    stdout = (directory / "out.jsonl").read_text()
    stderr = (directory / "err.log").read_text()
    tap_run = parse_partial(stdout)
    tap_run.returncode = returncode
    tap_run.stderr = stderr
    return _register(f"background run in {directory.name}", tap_run)


def start(
    config: Mapping[str, Any],
    directory: Path,
    *,
    catalog: Mapping[str, Any],
    state: Mapping[str, Any] | None = None,
) -> subprocess.Popen:
    """A sync in the background, with a catalog; stdout and stderr in `directory`."""
    _watch_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    command = tap_command(
        "--config",
        str(write_json(directory, "config.json", config)),
        "--catalog",
        str(write_json(directory, "catalog.json", catalog)),
    )
    if state is not None:
        command += ["--state", str(write_json(directory, "state.json", state))]
    return subprocess.Popen(
        command,
        stdout=(directory / "out.jsonl").open("w"),
        stderr=(directory / "err.log").open("w"),
    )


def count_lines(path: Path, marker: str) -> int:
    try:
        with path.open() as handle:
            return sum(1 for line in handle if marker in line)
    except FileNotFoundError:
        return 0


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


# ------------------------------------------------------------------ ground truth


def row_differences(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    problems = [
        f"{name}: {expected[name]!r} != {actual.get(name, '<missing>')!r}"
        for name in expected
        if name not in actual or not same_value(expected[name], actual[name])
    ]
    problems += [f"{name}: unexpected field" for name in actual if name not in expected]
    return problems


def by_key(stream: str, rows: Iterable[Mapping[str, Any]]) -> dict[tuple, list[Mapping]]:
    grouped: dict[tuple, list[Mapping]] = {}
    for row in rows:
        grouped.setdefault(key_of(stream, row), []).append(row)
    return grouped


def assert_records_match(
    stream: str,
    records: Sequence[Mapping[str, Any]],
    truth: Sequence[Mapping[str, Any]],
    *,
    allow_duplicates: bool = False,
    allow_extra_keys: Iterable[tuple] = (),
    allow_stale: bool = False,
) -> None:
    """Records of one stream equal the truth: same primary keys, equal values.

    `allow_duplicates`: a key may come more than once (resumed runs), every copy equal.
    `allow_extra_keys`: keys that may be emitted though not in `truth` (rows added later).
    `allow_stale`: for a duplicated key, only the last copy must equal the truth (rows changed
    between runs; an upserting target keeps the last)."""
    emitted = by_key(stream, records)
    expected = {key_of(stream, row): row for row in truth}
    missing = sorted(set(expected) - set(emitted), key=repr)
    extra = sorted(set(emitted) - set(expected) - set(allow_extra_keys), key=repr)
    assert not missing, f"{stream}: {len(missing)} rows lost, e.g. {missing[:5]}"
    assert not extra, f"{stream}: {len(extra)} rows not in the truth, e.g. {extra[:5]}"
    duplicated = {key: rows for key, rows in emitted.items() if len(rows) > 1}
    assert allow_duplicates or not duplicated, (
        f"{stream}: {len(duplicated)} keys emitted more than once, e.g. {list(duplicated)[:5]}"
    )
    for key, row in expected.items():
        copies = emitted[key][-1:] if allow_stale else emitted[key]
        for copy in copies:
            problems = row_differences(row, copy)
            assert not problems, f"{stream} {key}: {problems[:5]}"


def assert_matches_truth(
    tap_run: TapRun, server: SandboxProcess, key: str, streams: Iterable[str]
) -> None:
    """What one run emitted for each of `streams` equals the truth now (`assert_records_match`:
    no duplicate, no row lost or extra, every value equal)."""
    truth = server.truth(key)
    for stream in streams:
        assert_records_match(stream, tap_run.records.get(stream, []), truth_rows(truth, stream))


def assert_union_matches_truth(
    runs: Iterable[TapRun],
    server: SandboxProcess,
    key: str,
    streams: Iterable[str],
    *,
    allow_stale: bool = False,
) -> None:
    """What several runs emitted together, upserted by primary key, equals the truth."""
    merged = union_records(runs)
    truth = server.truth(key)
    for stream in streams:
        assert_records_match(
            stream,
            merged.get(stream, []),
            truth_rows(truth, stream),
            allow_duplicates=True,
            allow_stale=allow_stale,
        )


def assert_resumed(
    failed: TapRun,
    resumed: TapRun,
    server: SandboxProcess,
    key: str,
    streams: Iterable[str],
    *,
    guests_share: float,
) -> None:
    """A run resumed from a failed run's STATE: it succeeded, read again fewer guests than
    `guests_share` of the truth's (resumed, not restarted), and the two runs together hold the
    truth of `streams`."""
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    guests_truth = truth_rows(server.truth(key), "guests")
    assert len(resumed.records.get("guests", [])) < len(guests_truth) * guests_share
    assert_union_matches_truth([failed, resumed], server, key, streams)


def union_records(runs: Iterable[TapRun]) -> dict[str, list[dict]]:
    merged: dict[str, list[dict]] = {}
    for tap_run in runs:
        for stream, records in tap_run.records.items():
            merged.setdefault(stream, []).extend(records)
    return merged


# ------------------------------------------------------------------ failures


def assert_no_traceback(tap_run: TapRun) -> None:
    assert "Traceback" not in tap_run.stderr, tap_run.stderr[-3000:]


def assert_clean_failure(tap_run: TapRun, *words: str) -> None:
    """A failed run: non-zero exit, each of `words` in its log (case-insensitive)."""
    assert tap_run.returncode != 0, "the run should have failed:\n" + tap_run.stderr[-3000:]
    lowered = tap_run.stderr.lower()
    for word in words:
        assert word.lower() in lowered, f"{word!r} not in the log:\n{tap_run.stderr[-3000:]}"


# ------------------------------------------------------------------ recording HTTP servers


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class RecordingServer:
    """A loopback HTTP server answering with `respond(path) -> (status, headers, body)` and
    recording every request (also when used as a proxy: the path is then an absolute URL)."""

    host: str
    respond: Callable[[str], tuple[int, dict[str, str], bytes]]
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def recording_server(
    respond: Callable[[str], tuple[int, dict[str, str], bytes]] | None = None,
    host: str = "127.0.0.1",
) -> Iterator[RecordingServer]:
    server_state = RecordingServer(host, respond or (lambda path: (404, {}, b'{"message":"no"}')))

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            server_state.requests.append(Recorded(self.command, self.path, dict(self.headers)))
            status, headers, body = server_state.respond(self.path)
            self.send_response(status)
            headers = {"Content-Type": "application/json", **headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _answer
        do_CONNECT = _answer
        do_POST = _answer
        do_HEAD = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = ThreadingHTTPServer((host, 0), Handler)
    httpd.daemon_threads = True
    server_state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server_state
    finally:
        httpd.shutdown()
        httpd.server_close()


def json_body(value: Any) -> bytes:
    return json.dumps(value).encode()
