"""The accounts DAG's side of "one account's failure stays that account's" (docs/transform.md,
"Accounts in production"): a load task puts its failed accounts' raw schemas in XCom, the build
hands them to dbt (`GUESTDATA_FAILED_LOADS`), and a build that held accounts fails without a
retry, naming them. Meltano here is a stand-in script (the dbt side runs for real in
tests/transform/test_accounts.py; the DAG's plumbing in test_accounts_dag_run.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tap_guestdata.airflow.operators import (
    FAILED_LOADS,
    AccountLoad,
    GuestDataLoadOperator,
    GuestDataModelsOperator,
    MeltanoRun,
)

pytestmark = pytest.mark.airflow

# Says what dbt was told, then ends as a build that held them would (or fails otherwise).
FAKE_BUILD = """#!/bin/bash
echo "failed loads: ${GUESTDATA_FAILED_LOADS:-none}"
for _ in 1 2; do  # dbt says it twice: as it ends, and in its summary
  echo "Done. PASS=109 WARN=1 ERROR=${FAKE_ERRORS:-0} SKIP=0 NO-OP=0 TOTAL=110"
done
if [ "$FAKE_HELD" = 1 ]; then
  echo "Compilation Error: GUESTDATA ACCOUNTS HELD: ${GUESTDATA_FAILED_LOADS} (why: the status)"
fi
exit "$FAKE_EXIT"
"""


class TaskInstance(SimpleNamespace):
    """What the operators read of `ti`, with an XCom store."""

    def __init__(self, xcoms: dict[tuple[str, str], list[Any]]) -> None:
        super().__init__(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)
        self.xcoms = xcoms

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms.setdefault((self.task_id, key), []).append(value)

    def xcom_pull(self, task_ids: list[str], key: str) -> list[Any]:
        return [value for task_id in task_ids for value in self.xcoms.get((task_id, key), [None])]


def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xcoms: dict, *, held: bool, code: int):
    meltano = tmp_path / "meltano"
    meltano.write_text(FAKE_BUILD)
    meltano.chmod(0o755)
    monkeypatch.setenv("FAKE_HELD", "1" if held else "0")
    monkeypatch.setenv("FAKE_EXIT", str(code))
    operator = GuestDataModelsOperator(
        task_id="dbt_build",
        accounts=[AccountLoad("guestdata_meltano", ())],
        project_root=str(tmp_path),
        meltano_bin=str(meltano),
        load_task_ids=["q1.accounts.load", "q2.accounts.load"],
    )
    lines: list[str] = []
    keep = SimpleNamespace(
        info=lambda message, *args: lines.append(message % args),
        warning=lambda message, *args: lines.append(message % args),
        exception=lambda message, *args: lines.append(message % args),
    )
    monkeypatch.setattr(GuestDataModelsOperator, "log", property(lambda _: keep))
    operator.execute({"ti": TaskInstance(xcoms), "params": {}})
    return lines


def test_a_failed_load_reaches_the_build_and_a_held_build_fails_without_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    xcoms: dict[tuple[str, str], list[Any]] = {}
    # A load task of two accounts, one of which fails: its schema goes to XCom.
    load = GuestDataLoadOperator(task_id="load", accounts=[], project_root=str(tmp_path))
    harbour = AccountLoad(
        "harbour",
        (MeltanoRun(("account",)),),
        env={"TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": "guestdata_harbour"},
    )
    quay = AccountLoad("quay", (MeltanoRun(("account",)),))  # Meltano's own schema: not named
    ti = TaskInstance(xcoms)
    load.record_failed({"ti": ti}, [harbour, quay])
    ti.xcoms[("q2.accounts.load", FAILED_LOADS)] = ti.xcoms.pop(("t", FAILED_LOADS))
    ti.xcoms[("q2.accounts.load", FAILED_LOADS)].append(["guestdata_saltmarsh"])  # map index 2

    with pytest.raises(AirflowFailException, match="held accounts: guestdata_harbour,guestdata_"):
        build(tmp_path, monkeypatch, xcoms, held=True, code=1)
    # A build that failed for another reason (the warehouse away) is retried as before, and so
    # is one that held accounts and also had an error of its own.
    for held, errors in ((False, "0"), (True, "1")):
        monkeypatch.setenv("FAKE_ERRORS", errors)
        with pytest.raises(AirflowException) as raised:
            build(tmp_path, monkeypatch, xcoms, held=held, code=1)
        assert not isinstance(raised.value, AirflowFailException)
    monkeypatch.setenv("FAKE_ERRORS", "0")
    # With no failed load, dbt is told none; with some, the task's log names them.
    assert "failed loads: none" in build(tmp_path, monkeypatch, {}, held=False, code=0)
    lines = build(tmp_path, monkeypatch, xcoms, held=False, code=0)
    assert "failed loads: guestdata_harbour,guestdata_saltmarsh" in lines
    assert (
        "loads failed in this run, their marts held: guestdata_harbour, guestdata_saltmarsh"
        in lines
    )
