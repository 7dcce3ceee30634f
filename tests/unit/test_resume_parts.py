"""Resume parts (stream/resume.py) on stand-in streams: the listing resume (with and without open
rows) and the member walk with its ledgers, each marker written and read back from state."""

from __future__ import annotations

import datetime as dt
from typing import Any

from support.parts import UTC, FakeHost
from tap_guestdata.run.state_markers import RESUME_KEY
from tap_guestdata.stream.resume import ListingResume, MemberWalkResume, WalkedLedgerResume
from tap_guestdata.stream.window import ListingWindow

WINDOW_END = dt.datetime(2026, 3, 30, 12, 0, tzinfo=UTC)


def rows(*cursors: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"id": index, "created_at": cursor, **fields} for index, cursor in enumerate(cursors)]


def test_listing_marker_keeps_oldest_and_newest_rows_written() -> None:
    host = FakeHost().with_parts(resume=ListingResume())
    for row in rows("2026-03-29T10:00:00+00:00", "2026-03-20T10:00:00+00:00"):
        host.resume.row_written(row, None)
    host.resume.markers()
    assert host.stream_state[RESUME_KEY] == {
        "oldest": "2026-03-20T10:00:00+00:00",
        "newest": "2026-03-29T10:00:00+00:00",
    }


def test_next_run_resumes_below_the_oldest_row_and_keeps_the_newest_as_bookmark() -> None:
    state = {
        RESUME_KEY: {"oldest": "2026-03-20T10:00:00+00:00", "newest": "2026-03-29T10:00:00+00:00"}
    }
    host = FakeHost()
    host.stream_state.update(state)
    host.with_parts(resume=ListingResume(), window=ListingWindow(since="since", until="until"))
    assert host.resume.window_until(None, WINDOW_END).isoformat() == "2026-03-20T10:00:01+00:00"
    assert "resumed an interrupted read below 2026-03-20T10:00:00+00:00" in str(
        host.resume.resumed_below(None)
    )
    host.resume.row_written(rows("2026-03-05T10:00:00+00:00")[0], None)
    host.resume.read_ended(None)
    assert host.stream_state == {
        "replication_key": "created_at",
        "replication_key_value": "2026-03-29T10:00:00+00:00",
    }


def test_a_finished_read_without_marker_resumes_nothing() -> None:
    host = FakeHost().with_parts(resume=ListingResume())
    assert host.resume.window_until(None, WINDOW_END) == WINDOW_END
    assert host.resume.resumed_below(None) is None


def test_open_rows_keep_the_oldest_open_one() -> None:
    resume = ListingResume(open_row=lambda row: row["open"], oldest_open_key="oldest_open")
    host = FakeHost().with_parts(resume=resume)
    host.resume.row_written({"created_at": "2026-03-29T10:00:00+00:00", "open": True}, None)
    host.resume.row_written({"created_at": "2026-03-28T10:00:00+00:00", "open": False}, None)
    host.resume.row_written({"created_at": "2026-03-27T10:00:00Z", "open": True}, None)
    host.resume.markers()
    assert host.stream_state[RESUME_KEY]["oldest_open"] == "2026-03-27T10:00:00+00:00"
    host.resume.read_ended(None)
    assert host.stream_state["oldest_open"] == "2026-03-27T10:00:00+00:00"
    assert RESUME_KEY not in host.stream_state


def test_no_open_row_bounds_the_next_window_at_this_run_end() -> None:
    resume = ListingResume(open_row=lambda row: False, oldest_open_key="oldest_open")
    host = FakeHost().with_parts(resume=resume)
    host.resume.read_ended(None)
    assert host.stream_state["oldest_open"] == WINDOW_END.isoformat()


def member_walk_pair() -> tuple[FakeHost, FakeHost]:
    ledger = FakeHost(name="member_ledger")
    members = FakeHost(name="members", replication_key=None)
    members.with_parts(
        resume=MemberWalkResume(ledger=lambda host: ledger, bookmark_key="updated_since")
    )
    walk = members.resume
    assert isinstance(walk, MemberWalkResume)
    ledger.with_parts(resume=WalkedLedgerResume(walk=lambda host: walk))
    return members, ledger


def test_member_walk_marker_says_where_the_walk_got_to() -> None:
    members, ledger = member_walk_pair()
    for member in (
        {"id": 1, "created_at": "2026-03-29T10:00:00Z"},
        {"id": 2, "created_at": "2026-03-20T10:00:00Z"},
    ):
        members.resume.row_written(member, None)
    ledger.resume.row_written({"created_at": "2026-03-28T10:00:00+00:00"}, {"member_id": 1})
    members.resume.markers()
    assert members.stream_state[RESUME_KEY] == {
        "started_at": WINDOW_END.isoformat(),
        "with_ledger": True,
        "members_bookmark": "2026-03-30T11:55:00+00:00",  # the start less the 300 s margin
        "boundary": "2026-03-20T10:00:00+00:00",
        "boundary_ids": [2],
        "ledger_newest": "2026-03-28T10:00:00+00:00",
    }


def test_resumed_member_walk_skips_ledgers_written_and_reads_the_old_window() -> None:
    members, ledger = member_walk_pair()
    members.stream_state[RESUME_KEY] = {
        "started_at": "2026-03-29T08:00:00+00:00",
        "with_ledger": True,
        "members_bookmark": "2026-03-29T07:55:00+00:00",
        "boundary": "2026-03-20T10:00:00+00:00",
        "boundary_ids": [2],
        "ledger_newest": "2026-03-28T10:00:00+00:00",
    }
    newer = {"id": 1, "created_at": "2026-03-25T10:00:00Z"}
    at_boundary_done = {"id": 2, "created_at": "2026-03-20T10:00:00Z"}
    at_boundary_new = {"id": 3, "created_at": "2026-03-20T10:00:00Z"}
    older = {"id": 4, "created_at": "2026-03-01T10:00:00Z"}
    walked = [
        members.resume.child_already_read(m)
        for m in (newer, at_boundary_done, at_boundary_new, older)
    ]
    assert walked == [True, True, False, False]
    assert ledger.resume.already_read({"member_id": 2})
    assert not ledger.resume.already_read({"member_id": 3})
    assert (
        ledger.resume.window_until({"member_id": 3}, WINDOW_END).isoformat()
        == "2026-03-29T08:00:00+00:00"
    )
    members.resume.read_ended(None)
    assert members.stream_state == {
        "replication_key": "updated_since",
        "replication_key_value": "2026-03-29T07:55:00+00:00",  # the interrupted walk's
    }
    assert ledger.stream_state["replication_key_value"] == "2026-03-28T10:00:00+00:00"
