"""Quick end-to-end checks of the tap author's: full sync equals the sandbox's ground truth,
an incremental run reads only what changed, Rewards off skips the Rewards streams.

The behaviour tests proper live beside these; these run the tap as a subprocess, as Meltano does.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from guestdata_sandbox.testing import SandboxProcess
from tests.conftest import OWNER_KEY, tap_config

FAST = {"requests_per_minute": 100_000}
KEYS = {
    "account": ("account_id",),
    "venues": ("id",),
    "guests": ("id",),
    "daily_stats": ("venue_id", "date"),
    "daily_account_stats": ("date",),
    "programme": ("id",),
    "programme_venues": ("site_id",),
    "tiers": ("programme_id", "key"),
    "members": ("id",),
    "member_ledger": ("id",),
    "rewards": ("id",),
    "redemptions": ("id",),
    "offers": ("id",),
    "offer_stats": ("offer_id",),
}


def run_tap(tmp_path: Path, config: dict, state: dict | None = None) -> dict[str, Any]:
    (tmp_path / "config.json").write_text(json.dumps(config))
    tap = str(Path(sys.executable).parent / "tap-guestdata")
    argv = [tap, "--config", str(tmp_path / "config.json")]
    if state is not None:
        (tmp_path / "state.json").write_text(json.dumps(state))
        argv += ["--state", str(tmp_path / "state.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    records: dict[str, list[dict]] = defaultdict(list)
    states = []
    for line in done.stdout.splitlines():
        message = json.loads(line)
        if message["type"] == "RECORD":
            records[message["stream"]].append(message["record"])
        elif message["type"] == "STATE":
            states.append(message["value"])
    return {"rc": done.returncode, "records": records, "state": states[-1], "log": done.stderr}


def same_instant(value: Any) -> Any:
    if isinstance(value, str) and len(value) > 19 and value[10] == "T" and value[:4].isdigit():
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return value


def keyed(stream: str, rows: list[dict]) -> dict[tuple, dict]:
    return {
        tuple(row[key] for key in KEYS[stream]): {k: same_instant(v) for k, v in row.items()}
        for row in rows
    }


def expected_rows(stream: str, truth: Any) -> list[dict]:
    rows = [truth] if isinstance(truth, dict) else list(truth)
    if stream != "programme_venues":
        return rows
    fixed = []
    for row in rows:
        partner = next((k for k in row if k.startswith("mirror_to_")), None)
        out = {k: v for k, v in row.items() if k != partner}
        out["mirror_partner"] = partner[len("mirror_to_") :] if partner else None
        out["mirror_to_partner"] = row[partner] if partner else None
        fixed.append(out)
    return fixed


def test_full_sync_equals_ground_truth(sandbox: SandboxProcess, tmp_path: Path) -> None:
    result = run_tap(tmp_path, tap_config(sandbox, **FAST))
    assert result["rc"] == 0, result["log"][-3000:]
    truth = sandbox.truth(OWNER_KEY)
    for stream in KEYS:
        emitted = result["records"][stream]
        assert len(emitted) == len(keyed(stream, emitted)), f"{stream}: duplicates"
        assert keyed(stream, emitted) == keyed(stream, expected_rows(stream, truth[stream])), stream
    assert "Stream summary: guests: " in result["log"]
    assert OWNER_KEY not in result["log"]


def test_incremental_run_reads_only_changed_members(tmp_path: Path) -> None:
    with SandboxProcess(size="small", seed=11, limits=False) as server:
        first = run_tap(tmp_path, tap_config(server, **FAST))
        member = server.truth(OWNER_KEY, resource="members")[3]["id"]
        lines = server.mutate("add_ledger_lines", member_id=member, count=2)["ids"]
        server.clear_requests()
        second = run_tap(tmp_path, tap_config(server, **FAST), state=first["state"])
        assert second["rc"] == 0, second["log"][-3000:]
        members = {row["id"] for row in second["records"]["members"]}
        assert member in members and len(members) < 50
        assert set(lines) <= {row["id"] for row in second["records"]["member_ledger"]}
        ledger_reads = [e for e in server.requests_log() if e["path"].endswith("/ledger")]
        assert len(ledger_reads) == len(members)
        assert all("%2B" in e["query"] and "until=" in e["query"] for e in ledger_reads)
        assert second["state"]["bookmarks"]["members"]["replication_key"] == "updated_since"


def test_rewards_off_skips_every_rewards_stream_with_one_warning(
    sandbox: SandboxProcess, tmp_path: Path
) -> None:
    sandbox.clear_requests()
    result = run_tap(tmp_path, tap_config(sandbox, api_key="gd_rewards_off", **FAST))
    assert result["rc"] == 0, result["log"][-3000:]
    assert result["log"].count("REWARDS_DISABLED: Rewards is switched off") >= 1
    assert result["log"].count("Skipping the rewards streams") == 1
    assert "Stream summary: offers: skipped (REWARDS_DISABLED" in result["log"]
    rewards_calls = [e for e in sandbox.requests_log() if e["path"].startswith("/rewards")]
    assert len(rewards_calls) == 1
