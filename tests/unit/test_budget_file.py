"""The embedded store's file lives in the user's own folder, and one another user could
create first, or write, is refused (http/budget.py, docs/security.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tap_guestdata.http.budget import (
    Limits,
    SqliteBudget,
    UnsafeStoreFile,
    default_sqlite_path,
    open_budget,
)

LIMITS = Limits(per_key=2, per_address=3, window_seconds=60, address="here")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture()
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "run-user"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


def test_the_default_file_is_in_the_users_runtime_folder_mode_0700(runtime_dir: Path) -> None:
    assert default_sqlite_path() == runtime_dir / "tap-guestdata" / "rate-budget.sqlite"
    budget = open_budget("sqlite", LIMITS)
    assert budget is not None
    assert budget.take("key").slot is not None
    assert mode(runtime_dir / "tap-guestdata") == 0o700
    assert mode(default_sqlite_path()) == 0o600
    budget.close()


def test_without_a_runtime_folder_the_default_is_the_users_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_sqlite_path() == tmp_path / ".cache" / "tap-guestdata" / "rate-budget.sqlite"


def test_a_folder_others_can_write_is_refused_with_the_fix(runtime_dir: Path) -> None:
    folder = runtime_dir / "tap-guestdata"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(UnsafeStoreFile, match=f"{folder} is writable by others.*chmod go-w"):
        open_budget("sqlite", LIMITS)


def test_a_file_another_user_owns_is_refused(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = default_sqlite_path()
    path.parent.mkdir(mode=0o700)
    path.write_bytes(b"")
    owner = os.getuid()
    folder_owner = path.parent.stat().st_uid
    real_lstat = os.lstat

    class Other:  # the file as another user (uid + 1) would have created it
        def __init__(self, info: os.stat_result) -> None:
            self.st_mode, self.st_uid = info.st_mode, owner + 1

    def lstat(target: str | Path) -> object:
        info = real_lstat(target)
        return Other(info) if Path(target) == path else info

    monkeypatch.setattr(os, "lstat", lstat)
    assert folder_owner == owner
    with pytest.raises(UnsafeStoreFile, match=f"{path} belongs to uid {owner + 1}.*sqlite:///"):
        open_budget("sqlite", LIMITS)


def test_a_symbolic_link_in_place_of_the_file_is_refused(runtime_dir: Path) -> None:
    path = default_sqlite_path()
    path.parent.mkdir(mode=0o700)
    path.symlink_to(runtime_dir / "elsewhere.sqlite")
    with pytest.raises(UnsafeStoreFile, match="symbolic link"):
        open_budget("sqlite", LIMITS)


def test_an_explicit_path_still_works_and_its_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "budget.sqlite"
    budget = open_budget(f"sqlite:///{path}", LIMITS)
    assert isinstance(budget, SqliteBudget)
    assert budget.take("key").slot is not None
    assert mode(path) == 0o600
    budget.close()
    path.chmod(0o666)  # made writable by others afterwards: refused at the next run
    with pytest.raises(UnsafeStoreFile, match=str(path)):
        open_budget(f"sqlite:///{path}", LIMITS)
