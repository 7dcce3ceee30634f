"""`MeltanoHook`: one `meltano run` as a process the hook owns, from start to cleanup.

The hook gives each run a Meltano system directory of its own (`.meltano/tasks/<label>/`),
starts Meltano in a process group of its own with umask 077, streams its output line by line to
the task's log, and removes the run's files (Meltano writes every plugin's configuration, with
the API keys and the warehouse password, to `run/`) however the run ends. A run killed so hard
that no `finally` ran (its worker SIGKILLed) leaves them; the next run of the same label sweeps
them before it starts. Keys reach Meltano through the process environment only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

# Meltano 4.4 writes an extractor's catalog and incoming state to fixed names under
# `run/<plugin>/`, and every task runs the same extractor with its own selection and state id:
# a directory per label keeps two tasks on one machine apart. Everything else (plugin
# virtualenvs, a SQLite database) is linked back, so plugins are installed once per machine.
OWN_ENTRIES = ("run", "logs", "tasks")
PRIVATE = 0o077  # the umask of Meltano and its plugins: their files are the worker user's alone
TERMINATE_GRACE_SECONDS = 10.0


class MeltanoHook(BaseHook):
    """Runs `meltano --environment=<env> run ...` in a Meltano project on the worker."""

    def __init__(self, project_root: str, meltano_bin: str = "meltano", environment: str = "prod"):
        super().__init__()
        self.project_root = Path(project_root)
        self.meltano_bin = meltano_bin
        self.environment = environment
        self._running: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()

    @property
    def shared_directory(self) -> Path:
        return Path(os.environ.get("MELTANO_SYS_DIR_ROOT") or self.project_root / ".meltano")

    def own_directory(self, label: str) -> Path:
        """`.meltano/tasks/<label>`: the system directory of the runs of one state id."""
        own = self.shared_directory / "tasks" / label
        own.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(own, 0o700)  # made before this hook by an older version: tighten it
        shared = self.shared_directory
        for entry in [*shared.iterdir(), shared / "meltano.db"]:
            link = own / entry.name
            if entry.name in OWN_ENTRIES or link.is_symlink() or link.exists():
                continue
            with contextlib.suppress(FileExistsError):  # another try of the label made it first
                link.symlink_to(entry)
        return own

    def run(
        self,
        blocks: Sequence[str],
        *,
        label: str,
        options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log: Any = None,  # the task's logger (Airflow's structlog one), else the hook's
        on_line: Callable[[str], None] | None = None,
    ) -> int:
        """`meltano run [options] blocks` in the label's own directory; the exit code.

        The process's lines go to `log` as they come (the tap's progress lines), and to
        `on_line`. Its run files are removed before it starts (a killed earlier run's) and when
        it ends, however it ends.
        """
        log = log or self.log
        own = self.own_directory(label)
        remove_run_files(own)
        command = [
            self.meltano_bin,
            f"--environment={self.environment}",
            "run",
            "--no-install",  # installed when the worker is deployed: parallel runs must not race
            *options,
            *blocks,
        ]
        process_env = {**os.environ, **(env or {}), "MELTANO_SYS_DIR_ROOT": str(own)}
        log.info("meltano run %s (label %s)", " ".join([*options, *blocks]), label)
        try:
            process = subprocess.Popen(
                command,
                cwd=self.project_root,
                env=process_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,  # its own process group: on_kill ends the plugins too
                umask=PRIVATE,
            )
            with self._lock:
                self._running.add(process)
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    log.info("%s", line.rstrip("\n"))
                    if on_line is not None:
                        on_line(line)
                return process.wait()
            finally:
                end_process_group(process)
                with self._lock:
                    self._running.discard(process)
        finally:
            remove_run_files(own)

    def kill(self) -> None:
        """Ends every run of this hook, plugins included (their process groups)."""
        with self._lock:
            running = list(self._running)
        for process in running:
            end_process_group(process)


def end_process_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the process's group, SIGKILL it if it is still there after a grace period."""
    for sig, wait in ((signal.SIGTERM, TERMINATE_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # the group is gone
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader exited; plugins it started may still be there
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return


def remove_run_files(own: Path) -> None:
    """Meltano's `run/` of a label: plugin configurations (keys), catalogs, incoming state."""
    shutil.rmtree(own / "run", ignore_errors=True)
