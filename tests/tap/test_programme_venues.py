"""Issue #3, point 6: `mirror_to_<partner>` (spec 2.6) becomes fixed columns, whatever the
partner's name, so two accounts with different partners load into one table shape."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest
import requests

from guestdata_sandbox.testing import SandboxProcess
from support.sandbox import OWNER_KEY, tap_config
from support.streams import truth_rows
from support.tap_process import discover, select_streams
from support.tap_suite import Sync, stream_problems, sync

OTHER_ACCOUNT_KEYS = ("gd_limited_access",)  # account 1005, with a programme of its own


def partner_of(server: SandboxProcess, key: str) -> str | None:
    rows = server.truth(key, "programme_venues") or []
    names = {name for row in rows for name in row if name.startswith("mirror_to_")}
    return names.pop().removeprefix("mirror_to_") if len(names) == 1 else None


@pytest.fixture(scope="module")
def two_partners(sandbox: SandboxProcess, owner_catalog: dict) -> Iterator[list[Sync]]:
    """Syncs of programme_venues from two accounts (or seeds) whose partners differ."""
    catalog = select_streams(owner_catalog, ["programme_venues"])
    with ExitStack() as stack:
        sources: list[tuple[SandboxProcess, str]] = [(sandbox, OWNER_KEY)]
        first = partner_of(sandbox, OWNER_KEY)
        assert first, "the owner's programme has no mirror_to_<partner> field"
        candidates = [(sandbox, key) for key in OTHER_ACCOUNT_KEYS]
        for seed in (8, 9, 10, 12, 13):
            if any(partner_of(server, key) not in (None, first) for server, key in candidates):
                break
            server = stack.enter_context(SandboxProcess(size="small", seed=seed, limits=False))
            candidates.append((server, OWNER_KEY))
        other = next((pair for pair in candidates if partner_of(*pair) not in (None, first)), None)
        assert other, f"every account and seed tried has the partner {first!r}"
        sources.append(other)
        results = []
        for server, key in sources:
            result = sync(server, tap_config(server, key), catalog=catalog)
            assert result.run.returncode == 0, result.run.stderr[-3000:]
            results.append(result)
        yield results


def test_partner_names_differ_between_the_two_sources(two_partners: list[Sync]) -> None:
    names = [
        {
            name
            for row in result.truth["programme_venues"]
            for name in row
            if name.startswith("mirror_to_")
        }
        for result in two_partners
    ]
    assert names[0] and names[1] and names[0] != names[1], names


def test_programme_venues_schema_is_identical_whatever_the_partner(
    two_partners: list[Sync], owner_catalog: dict
) -> None:
    schemas = [result.run.schemas["programme_venues"] for result in two_partners]
    assert schemas[0] == schemas[1]
    properties = schemas[0]["properties"]
    assert "string" in properties["mirror_partner"]["type"]
    assert "boolean" in properties["mirror_to_partner"]["type"]
    assert [name for name in properties if name.startswith("mirror_to_")] == ["mirror_to_partner"]
    discovered = next(
        entry["schema"]
        for entry in owner_catalog["streams"]
        if entry["tap_stream_id"] == "programme_venues"
    )
    assert discovered["properties"] == properties


def test_programme_venues_rows_carry_partner_name_and_flag(two_partners: list[Sync]) -> None:
    problems: list[str] = []
    for result in two_partners:
        expected = truth_rows(result.truth, "programme_venues")
        assert expected
        problems += stream_problems(
            "programme_venues", result.records("programme_venues"), expected
        )
    assert not problems, "\n".join(problems)


def test_no_programme_yet_gives_no_rows_and_a_clean_run(fresh_sandbox: SandboxProcess) -> None:
    """spec 2.6: data is null until a programme has been created; the run still succeeds."""
    server = fresh_sandbox
    server.mutate("remove_programme", account_id=1001)
    programme_answer = requests.get(
        server.base_url + "/rewards/programme",
        headers={"Authorization": f"Bearer {OWNER_KEY}"},
        timeout=10,
    ).json()
    assert programme_answer["data"] is None  # guards the test's own setup
    streams = ["programme", "programme_venues", "tiers"]
    catalog = select_streams(discover(tap_config(server)), [*streams, "offers"])
    result = sync(server, tap_config(server), catalog=catalog)

    assert result.run.returncode == 0, result.run.stderr[-3000:]
    for stream in streams:
        assert result.records(stream) == [], stream
    assert not stream_problems(
        "offers", result.records("offers"), truth_rows(result.truth, "offers")
    )
