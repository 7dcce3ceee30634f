"""Issue #3, point 8: one end-of-run summary line per stream, agreeing with the output and with
the sandbox's request log."""

from __future__ import annotations

import pytest

from support.streams import ALL_STREAMS
from support.tap_suite import PATH_GROUPS, Sync, param, requests_for, summaries


def test_one_summary_line_per_stream(owner_full_sync: Sync) -> None:
    found = summaries(owner_full_sync.run)
    assert "<unparsed>" not in found, found.get("<unparsed>")
    assert {stream: len(lines) for stream, lines in found.items()} == dict.fromkeys(ALL_STREAMS, 1)


@pytest.mark.parametrize("stream", ALL_STREAMS)
def test_summary_record_count_matches_the_records_emitted(
    owner_full_sync: Sync, stream: str
) -> None:
    (summary,) = summaries(owner_full_sync.run)[stream]
    assert summary["records"] == len(owner_full_sync.records(stream)) > 0
    assert summary["retries"] == 0 and summary["limited"] == 0, summary


@pytest.mark.parametrize("group", list(PATH_GROUPS), ids="+".join)
def test_summary_request_count_matches_the_sandbox_log(
    owner_full_sync: Sync, group: tuple[str, ...]
) -> None:
    found = summaries(owner_full_sync.run)
    entries = requests_for(owner_full_sync.log, PATH_GROUPS[group])
    assert entries
    if group == ("daily_stats", "daily_account_stats"):
        per_venue = [entry for entry in entries if param(entry, "venue_id") is not None]
        (daily,) = found["daily_stats"]
        (account,) = found["daily_account_stats"]
        assert daily["requests"] == len(per_venue)
        assert account["requests"] == len(entries) - len(per_venue)
        return
    counts = [found[stream][0]["requests"] for stream in group]
    # Streams sharing one endpoint either each read it (counts add up) or share one read
    # (each reports it).
    assert sum(counts) == len(entries) or set(counts) == {len(entries)}, (counts, len(entries))
