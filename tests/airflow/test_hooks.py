"""`MeltanoHook` owns its Meltano process: its files are the worker user's alone and gone
however the run ends, and a kill ends the whole process group (plugins included).

Meltano here is a stand-in script that does what Meltano does with a run's configuration
(writes `run/<plugin>/tap.<id>.config.json` with the key, mode from the umask) and starts a
plugin that outlives it unless its group is killed; the real Meltano runs in test_dag_run.py,
and a worker SIGKILLed mid-run in tests/cluster.
"""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest

from tap_guestdata.airflow.hooks import MeltanoHook

pytestmark = pytest.mark.airflow

KEY = "gd_owner_growth_1"
# Writes the configuration as Meltano does, reports its mode, starts a long "plugin" in the
# background, then exits with $FAKE_EXIT after $FAKE_SECONDS.
FAKE_MELTANO = """#!/bin/bash
set -eu
mkdir -p "$MELTANO_SYS_DIR_ROOT/run/tap-guestdata"
config="$MELTANO_SYS_DIR_ROOT/run/tap-guestdata/tap.$$.config.json"
echo "{\\"api_key\\": \\"$TAP_GUESTDATA_API_KEY\\"}" > "$config"
echo "config mode $(stat -c %a "$config")"
echo "progress: guests 100 records"
sleep 300 > /dev/null 2>&1 &
echo "plugin $!"
sleep "$FAKE_SECONDS"
exit "$FAKE_EXIT"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".meltano" / "venvs").mkdir(parents=True)
    meltano = tmp_path / "meltano"
    meltano.write_text(FAKE_MELTANO)
    meltano.chmod(0o755)
    return tmp_path


class Lines:
    """A logger that keeps what the hook logs."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


def files_with_key(root: Path) -> list[str]:
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and KEY in path.read_text(errors="replace")
    ]


def plugin_pid(log: Lines) -> int:
    return int(next(line for line in log.lines if line.startswith("plugin ")).split()[1])


def alive(pid: int, seconds: float = 5.0) -> bool:
    """Still running after `seconds` (a process SIGKILLed takes a moment to go; a zombie
    waiting for its reaper is gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_run_leaves_no_key_on_disk_and_no_process_and_logs_its_lines(
    project: Path, exit_code: int
) -> None:
    hook = MeltanoHook(str(project), str(project / "meltano"))
    log = Lines()
    env = {"TAP_GUESTDATA_API_KEY": KEY, "FAKE_SECONDS": "0", "FAKE_EXIT": str(exit_code)}
    assert hook.run(["tap-guestdata", "target-postgres"], label="harbour", env=env, log=log) == (
        exit_code
    )
    assert "config mode 600" in log.lines, "readable by the worker's user alone"
    assert "progress: guests 100 records" in log.lines, "the tap's lines are the task's log"
    assert files_with_key(project) == []
    own = project / ".meltano" / "tasks" / "harbour"
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
    assert (own / "venvs").is_symlink(), "plugins stay installed once per machine"
    assert not alive(plugin_pid(log)), "the run's plugins end with it"


def test_a_killed_run_ends_its_process_group_and_its_files(project: Path) -> None:
    hook = MeltanoHook(str(project), str(project / "meltano"))
    log = Lines()
    env = {"TAP_GUESTDATA_API_KEY": KEY, "FAKE_SECONDS": "300", "FAKE_EXIT": "0"}
    codes: list[int] = []
    runner = threading.Thread(
        target=lambda: codes.append(hook.run(["tap-guestdata"], label="x", env=env, log=log))
    )
    runner.start()
    while not any(line.startswith("plugin ") for line in log.lines):
        assert runner.is_alive(), log.lines
        time.sleep(0.05)
    assert files_with_key(project), "the run's configuration is there while it runs"
    hook.kill()  # what the operator's on_kill does
    # The run would last FAKE_SECONDS (300): ending well before that is the kill's doing, on
    # however loaded a machine (no wall-time bound on the kill itself).
    runner.join(timeout=150)
    assert not runner.is_alive(), "the killed run went on"
    assert codes and codes[0] != 0
    assert not alive(plugin_pid(log))
    assert files_with_key(project) == []


def test_a_run_sweeps_what_a_sigkilled_run_of_its_label_left(project: Path) -> None:
    """A worker SIGKILLed runs no `finally`: the next run of the label removes its files."""
    stale = project / ".meltano" / "tasks" / "harbour" / "run" / "tap-guestdata"
    stale.mkdir(parents=True)
    (stale / "tap.1234.config.json").write_text(f'{{"api_key": "{KEY}"}}')
    hook = MeltanoHook(str(project), str(project / "meltano"))
    env = {"TAP_GUESTDATA_API_KEY": "another", "FAKE_SECONDS": "0", "FAKE_EXIT": "0"}
    hook.run(["tap-guestdata"], label="harbour", env=env, log=Lines())
    assert files_with_key(project) == []
