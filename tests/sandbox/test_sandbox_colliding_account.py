"""`serve --colliding-account`: account 1006 holds its own data under account 1001's ids (the API
promises ids unique within an account only), so warehouse tests can load two accounts whose ids
collide. Without the flag its key is unknown (401)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from guestdata_sandbox.accounts import COLLIDING_ACCOUNT, COLLIDING_KEY
from guestdata_sandbox.testing import SandboxProcess
from support.sandbox_api import OWNER, client, read_all

PAST_ANCHOR = "2026-06-30"


@pytest.fixture(scope="module")
def colliding() -> Iterator[SandboxProcess]:
    with SandboxProcess(limits=False, anchor=PAST_ANCHOR, colliding_account=True) as server:
        yield server


def by_id(rows: list[dict]) -> dict[int, dict]:
    return {row["id"]: row for row in rows}


def test_the_two_accounts_share_ids_and_not_data(colliding: SandboxProcess) -> None:
    first, twin = colliding.truth(OWNER), colliding.truth(COLLIDING_KEY)
    assert twin["account"]["account_id"] == COLLIDING_ACCOUNT
    for resource in ("venues", "guests", "members", "offers", "rewards"):
        shared = by_id(first[resource]).keys() & by_id(twin[resource]).keys()
        assert shared and shared == by_id(twin[resource]).keys(), (
            resource
        )  # every twin id is 1001's
    guests, twin_guests = by_id(first["guests"]), by_id(twin["guests"])
    assert any(guests[i]["email"] != twin_guests[i]["email"] for i in twin_guests)
    # the API serves each account its own rows under the same ids
    get = client(colliding)
    assert read_all(get, "/guests", key=COLLIDING_KEY) == twin["guests"]
    assert read_all(get, "/rewards/members", key=COLLIDING_KEY) == twin["members"]
    assert read_all(get, "/guests") == first["guests"]


def test_a_mutation_names_its_account_and_leaves_the_other(colliding: SandboxProcess) -> None:
    twin_guest = colliding.truth(COLLIDING_KEY)["guests"][0]["id"]
    before = by_id(colliding.truth(OWNER)["guests"])[twin_guest]
    colliding.mutate("delete_guest", guest_id=twin_guest, account_id=COLLIDING_ACCOUNT)
    assert twin_guest not in by_id(colliding.truth(COLLIDING_KEY)["guests"])
    assert by_id(colliding.truth(OWNER)["guests"])[twin_guest] == before
    member = colliding.truth(COLLIDING_KEY)["members"][0]["id"]
    colliding.mutate(
        "update_member",
        member_id=member,
        account_id=COLLIDING_ACCOUNT,
        fields={"status": "anonymised"},
    )
    assert by_id(colliding.truth(COLLIDING_KEY)["members"])[member]["anonymised_at"]
    assert not by_id(colliding.truth(OWNER)["members"])[member]["anonymised_at"]


def test_without_the_flag_the_key_is_unknown(sandbox: SandboxProcess) -> None:
    response = client(sandbox)("/me", key=COLLIDING_KEY)
    assert response.status_code == 401
    listed = sandbox.keys()  # the control surface's list of keys
    assert COLLIDING_KEY not in {key["key"] for key in listed}
