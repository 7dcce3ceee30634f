"""Issue #7.3: records inserted at the head of a newest-first list while the tap pages through it
shift older rows onto later pages. The tap must still emit every row that existed when the run
began (none is skipped by the shift), must not break, and the next incremental run picks up the
rows that arrived after its window.
"""

from __future__ import annotations

import pytest

from guestdata_sandbox.testing import SandboxProcess
from support.reliability import assert_union_matches_truth, catalog_for, reliability_config, run
from support.sandbox import OWNER_KEY, last_seq
from support.streams import key_of, truth_rows

# resource inserted into -> streams to select (a child needs its parent)
CASES: dict[str, list[str]] = {
    "guests": ["guests"],
    "members": ["members"],
    "rewards": ["rewards"],
    "redemptions": ["redemptions"],
    "member_ledger": ["members", "member_ledger"],
}


@pytest.mark.parametrize("resource", sorted(CASES))
def test_rows_inserted_while_paging_are_not_missed(
    resource: str, fresh_sandbox: SandboxProcess
) -> None:
    server = fresh_sandbox
    streams = CASES[resource]
    config = reliability_config(server)
    catalog = catalog_for(config, streams)
    before = {stream: truth_rows(server.truth(OWNER_KEY), stream) for stream in streams}
    seq = last_seq(server)
    # 70 rows before each of the first two list requests: enough to push every list onto a
    # second page, and to shift most of a page. Only the first run meets the inserts.
    server.mutate("insert_while_paging", resource=resource, count=70, times=2)

    first = run(config, catalog=catalog)

    assert first.returncode == 0, first.stderr[-3000:]
    after = {stream: truth_rows(server.truth(OWNER_KEY), stream) for stream in streams}
    inserted = {key_of(resource, row) for row in after[resource]} - {
        key_of(resource, row) for row in before[resource]
    }
    assert inserted, "the sandbox inserted nothing: the test proves nothing"
    emitted = {key_of(resource, row) for row in first.records.get(resource, [])}
    missed = {key_of(resource, row) for row in before[resource]} - emitted
    assert not missed, f"{len(missed)} existing {resource} rows skipped by the page shift"
    # Bounded: the run did not chase the growing list forever.
    requests = server.requests_log(after=seq)
    assert len(requests) < 3 * max(1, len(after[resource])) + 50

    second = run(config, catalog=catalog, state=first.final_state)

    assert second.returncode == 0, second.stderr[-3000:]
    assert_union_matches_truth([first, second], server, OWNER_KEY, streams, allow_stale=True)
