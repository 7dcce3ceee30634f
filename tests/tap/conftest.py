"""Fixtures of the tap behaviour tests: full syncs shared across modules (the sandbox is read-only
for them) and one incremental scenario on a sandbox of its own."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.json_values import parse_instant
from support.sandbox import OWNER_KEY, tap_config
from support.tap_process import discover
from support.tap_suite import IncrementalScenario, Sync, sync

INCREMENTAL_SEED = 11


@pytest.fixture(scope="session")
def owner_catalog(sandbox: SandboxProcess) -> dict:
    return discover(tap_config(sandbox))


@pytest.fixture(scope="session")
def full_sync_for(sandbox: SandboxProcess) -> Callable[[str], Sync]:
    """A full sync of every stream with a key of the session sandbox, run once per key."""
    done: dict[str, Sync] = {}

    def get(key: str) -> Sync:
        if key not in done:
            done[key] = sync(sandbox, tap_config(sandbox, key))
        return done[key]

    return get


@pytest.fixture(scope="session")
def owner_full_sync(full_sync_for: Callable[[str], Sync]) -> Sync:
    result = full_sync_for(OWNER_KEY)
    assert result.run.returncode == 0, result.run.stderr[-3000:]
    return result


# ------------------------------------------------------------------------------ incremental


def _days_ago(value: str, now: dt.datetime) -> float:
    instant = parse_instant(value)
    assert instant is not None, value
    return (now - instant).total_seconds() / 86400


def _pick(rows: list[dict], test: Callable[[dict], bool], what: str) -> dict:
    for row in rows:
        if test(row):
            return row
    raise AssertionError(f"the sandbox data has no {what}")


@pytest.fixture(scope="session")
def incremental_scenario() -> Iterator[IncrementalScenario]:
    with SandboxProcess(size="small", seed=INCREMENTAL_SEED, limits=False) as server:
        config = tap_config(server)
        now = dt.datetime.now(dt.timezone.utc)
        before = server.truth(OWNER_KEY)
        changed: dict[str, Any] = {}

        # A redemption voided before the first run, to be restored after it.
        by_age = sorted(before["redemptions"], key=lambda row: row["created_at"], reverse=True)
        to_restore = _pick(
            by_age,
            lambda row: row["status"] == "completed" and 8 < _days_ago(row["created_at"], now) < 25,
            "completed redemption 8-25 days old",
        )
        server.mutate("void_redemption", redemption_id=to_restore["id"])
        changed["restored_redemption"] = to_restore["id"]

        full = sync(server, config)
        assert full.run.returncode == 0, full.run.stderr[-3000:]
        assert full.run.final_state, "the full sync emitted no STATE"
        truth = full.truth

        # New rows: guests, ledger lines, redemptions.
        changed["new_guests"] = server.mutate("add_guests", count=3)["ids"]
        members = sorted(truth["members"], key=lambda row: row["created_at"])
        ledger_member = members[len(members) // 3]
        changed["ledger_member"] = ledger_member["id"]
        changed["new_ledger_lines"] = server.mutate(
            "add_ledger_lines", member_id=ledger_member["id"], count=2
        )["ids"]
        changed["new_redemptions"] = server.mutate("add_redemptions", count=2)["ids"]

        # A member changed without new ledger lines.
        tier_keys = [tier["key"] for tier in truth["tiers"]]
        updated = members[(2 * len(members)) // 3]
        new_tier = next(key for key in tier_keys if key != updated["tier_key"])
        server.mutate("update_member", member_id=updated["id"], fields={"tier_key": new_tier})
        changed["updated_member"] = updated["id"]
        changed["updated_member_tier"] = new_tier

        # An old reward redeemed now: only a lookback re-reads it.
        rewards = sorted(truth["rewards"], key=lambda row: row["issued_at"], reverse=True)
        reward = _pick(
            rewards,
            lambda row: (
                row["status"] == "issued"
                and 3 < _days_ago(row["issued_at"], now) < 20
                and _days_ago(row["expires_at"], now) < -2
            ),
            "unused, unexpired reward issued 3-20 days ago",
        )
        redeemed = server.mutate("redeem_reward", reward_id=reward["id"])
        changed["redeemed_reward"] = reward["id"]
        changed["redeemed_reward_redemption"] = redeemed["redemption_id"]

        # Old redemptions voided and restored now: only a lookback re-reads them.
        to_void = _pick(
            by_age,
            lambda row: (
                row["status"] == "completed"
                and row["id"] != to_restore["id"]
                and 3 < _days_ago(row["created_at"], now) < 25
            ),
            "completed redemption 3-25 days old",
        )
        server.mutate("void_redemption", redemption_id=to_void["id"])
        changed["voided_redemption"] = to_void["id"]
        server.mutate("restore_redemption", redemption_id=to_restore["id"])

        offer = _pick(truth["offers"], lambda row: row["status"] == "active", "active offer")
        server.mutate("archive_offer", offer_id=offer["id"])
        changed["archived_offer"] = offer["id"]

        incremental = sync(server, config, state=full.run.final_state)
        assert incremental.run.returncode == 0, incremental.run.stderr[-3000:]
        yield IncrementalScenario(full, incremental, changed)
