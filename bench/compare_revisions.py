"""Behaviour of two revisions of the tap, compared: records, state and request log of a full and an
incremental sync against one sandbox, equal apart from the runs' own times.

    .venv/bin/python bench/compare_revisions.py --ref main [--size small]

The other revision is checked out in a temporary git worktree and run by this venv's Python
with that worktree first on PYTHONPATH (same dependencies, its own `tap_guestdata`). Each
revision runs a full sync (no state) then an incremental one (its own state), every stream
selected (read_windows too). Before comparing, values of the run itself are replaced by a
placeholder: instants from a minute before the first run's start on (extraction times,
bookmarks taken from the sync start less its margin, the windows' `until`), and table
versions (epoch milliseconds). Requests are compared as a sorted list (worker threads send in
any order). Exit 0: identical.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import difflib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

import harness

RUN_TIME = "<run time>"
VERSION = "<version>"
VERSION_KEYS = {"version", "read_version", "_sdc_table_version"}
INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
CLI = "from tap_guestdata.tap import TapGuestData; TapGuestData.cli()"


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """`ref` in a temporary git worktree (removed afterwards)."""
    directory = Path(tempfile.mkdtemp(prefix="compare-revisions-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(directory), ref],
        cwd=harness.ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield directory
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(directory)],
            cwd=harness.ROOT,
            check=False,
            capture_output=True,
        )


def run_tap(
    source: Path, tap: harness.TapFiles, state: dict[str, Any] | None, out: Path
) -> list[dict[str, Any]]:
    """The tap of `source` (a checkout), its Singer messages parsed."""
    arguments = tap.arguments()
    if state is not None:
        state_path = harness.write_json(out.parent, f"{out.stem}-input-state.json", state)
        arguments += ["--state", str(state_path)]
    with out.open("wb") as stdout:
        completed = subprocess.run(
            [str(harness.VENV_PYTHON), "-c", CLI, *arguments],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=harness.process_env({"PYTHONPATH": str(source)}),
            cwd=source,
            check=False,
        )
    if completed.returncode != 0:
        sys.exit(f"{source}: the tap exited {completed.returncode}:\n{completed.stderr[-3000:]!r}")
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def normalised(value: Any, since: dt.datetime, key: str = "") -> Any:
    """`value` with the run's own times and versions replaced by placeholders."""
    if key in VERSION_KEYS and isinstance(value, int):
        return VERSION
    if isinstance(value, dict):
        return {name: normalised(item, since, name) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalised(item, since) for item in value]
    if isinstance(value, str):
        return INSTANT.sub(lambda match: run_time(match.group(0), since), value)
    return value


def run_time(text: str, since: dt.datetime) -> str:
    try:
        instant = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.timezone.utc)
    return RUN_TIME if instant >= since else text


def summary(
    messages: list[dict[str, Any]], requests: list[dict[str, Any]], since: dt.datetime
) -> dict[str, Any]:
    """What is compared of one run: messages but STATE in order, the last STATE, requests."""
    kept = [
        normalised({k: v for k, v in message.items() if k != "time_extracted"}, since)
        for message in messages
        if message.get("type") != "STATE"
    ]
    states = [message["value"] for message in messages if message.get("type") == "STATE"]
    return {
        "messages": kept,
        "state": normalised(states[-1] if states else None, since),
        "requests": sorted(json.dumps(request_line(entry, since)) for entry in requests),
    }


def request_line(entry: dict[str, Any], since: dt.datetime) -> dict[str, Any]:
    """One logged request: method, path, query (decoded and sorted), answer's status."""
    path = str(entry.get("path", ""))
    raw_query = str(entry.get("query", ""))
    if "?" in path:
        path, _, raw_query = path.partition("?")
    query = sorted((name, unquote(value)) for name, value in parse_qsl(raw_query))
    return normalised(
        {
            "method": entry.get("method"),
            "path": path,
            "query": query,
            "status": entry.get("status"),
        },
        since,
    )


def compare(label: str, left: Any, right: Any, names: tuple[str, str]) -> bool:
    if left == right:
        print(f"{label}: identical")
        return True
    left_lines = json.dumps(left, indent=1, sort_keys=True).splitlines()
    right_lines = json.dumps(right, indent=1, sort_keys=True).splitlines()
    diff = difflib.unified_diff(left_lines, right_lines, *names, lineterm="", n=2)
    print(f"{label}: DIFFERENT")
    for number, line in enumerate(diff):
        if number >= 80:
            print("  ...")
            break
        print(f"  {line}")
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="main", help="the revision to compare with")
    parser.add_argument("--size", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    # The runs' own instants: from the first run's start less the members bookmark's margin
    # (members_margin_seconds, 60 by default) on; the data's instants are older.
    since = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(seconds=62)
    names = (args.ref, "this work tree")
    with (
        checkout(args.ref) as other,
        harness.sandbox(args.size, args.seed, limits=False) as server,
        harness.scratch_dir("compare") as scratch,
    ):
        config = harness.tap_config(server)
        config.pop("start_date")  # a full sync of the whole history (deletions checked)
        tap = harness.prepare_tap(scratch, config, None)
        sources = {names[0]: other, names[1]: harness.ROOT}
        results: dict[str, dict[str, Any]] = {name: {} for name in names}
        states: dict[str, dict[str, Any] | None] = dict.fromkeys(names)
        for run in ("full", "incremental"):
            for name in names:
                after = max((entry["seq"] for entry in server.requests_log()), default=0)
                out = scratch / f"{run}-{names.index(name)}.jsonl"
                messages = run_tap(sources[name], tap, states[name], out)
                requests = server.requests_log(after=after)
                states[name] = next(
                    (m["value"] for m in reversed(messages) if m.get("type") == "STATE"), None
                )
                results[name][run] = summary(messages, requests, since)
                counts = (len(messages), len(requests))
                print(f"# {run} sync, {name}: {counts[0]} messages, {counts[1]} requests")
        verdicts = [
            compare(
                f"{run} sync: {part}",
                results[names[0]][run][part],
                results[names[1]][run][part],
                names,
            )
            for run in ("full", "incremental")
            for part in ("messages", "state", "requests")
        ]
        same = all(verdicts)
    print("verdict:", "the same behaviour" if same else "DIFFERENT behaviour")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
