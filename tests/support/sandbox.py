"""The tap pointed at a sandbox: its config, the owner's key, the sandbox's request log."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from guestdata_sandbox.accounts import OWNER_KEYS
from guestdata_sandbox.testing import SandboxProcess

OWNER_KEY = OWNER_KEYS[0]

# The tests' sandboxes run with limits off: a budget far above spec 8's 120/minute keeps the
# suites fast. The rate-limit tests set the real budget.
FAST: dict[str, Any] = {"requests_per_minute": 100_000}


def this_instant() -> dt.datetime:
    """Now, to the second: the `as_of` of a sandbox whose rows are checked against its truth
    after a run. Read at its start, a reward that expires or a London midnight that passes
    between the run and the truth changes neither (a reward read as issued by a run and as
    expired by the later truth failed CI twice)."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def module_sandbox_as_of(instant: dt.datetime | str) -> SandboxProcess:
    """The sandbox a module's tests pick their rows from and may mutate, in order, serving its
    data as of `instant` (`SandboxProcess(as_of=)`). GUESTDATA_TEST_SANDBOX_ANCHOR=YYYY-MM-DD
    ends its data on that London day instead (tests that pick their rows from the data mean the
    same on any day)."""
    anchor = os.environ.get("GUESTDATA_TEST_SANDBOX_ANCHOR") or None
    return SandboxProcess(size="small", seed=11, limits=False, anchor=anchor, as_of=instant)


def tap_config(server: SandboxProcess, key: str = OWNER_KEY, **overrides: Any) -> dict[str, Any]:
    """A tap config pointing at `server` with one key, without client-side throttling."""
    config: dict[str, Any] = {"api_key": key, "base_url": server.base_url, **FAST}
    config.update(overrides)
    return config


def last_seq(server: SandboxProcess) -> int:
    """The sequence number of the last request the sandbox logged (0 if none)."""
    log = server.requests_log()
    return max((entry["seq"] for entry in log), default=0)
