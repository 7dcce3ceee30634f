"""Accounts as configuration, their tasks, and accounts spread over worker queues
(tap_guestdata/airflow/accounts.py). Pure Python, no Airflow.

The rate budget itself (per key, per address) is the tap's shared budget, tested in
tests/budget; here: every account's groups are planned exactly once, a small account is one
task, a large one a task per group, and the work is spread evenly over the queues.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tap_guestdata.airflow.accounts import (
    GROUPS,
    REFRESH_GROUP,
    SIZE_REQUESTS,
    SPLIT_FROM_REQUESTS,
    WHOLE_ACCOUNT,
    Account,
    AccountsConfig,
    AccountsError,
    account_minutes,
    parse_config,
    plan_tasks,
    pools,
    queue_loads,
)

accounts_strategy = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=5),  # keys
        st.lists(st.sampled_from(GROUPS), min_size=1, max_size=5, unique=True),
        st.sampled_from([None, "small", "medium", "large"]),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(accounts=accounts_strategy, queue_count=st.integers(min_value=1, max_value=6))
def test_every_group_of_every_account_is_planned_once_on_the_accounts_queue(
    accounts: list[tuple[int, list[str], str | None]], queue_count: int
) -> None:
    config = AccountsConfig(
        tuple(
            Account(
                f"a{n}",
                tuple(f"a{n}_key_{k}" for k in range(keys)),
                groups=tuple(groups),
                size=size,
            )
            for n, (keys, groups, size) in enumerate(accounts)
        ),
        tuple(f"w{q}" for q in range(queue_count)),
    )
    tasks = plan_tasks(config)
    for account in config.accounts:
        planned = [task for task in tasks if task.account == account.name]
        daily = [task for task in planned if task.group != REFRESH_GROUP]
        loaded = [group for task in daily for group in task.groups]
        assert loaded == list(account.groups), "each group exactly once, in order"
        large = (
            account.size == "large"
            and sum(SIZE_REQUESTS["large"]["first"][g] for g in account.groups)
            >= SPLIT_FROM_REQUESTS
        )
        if large:
            assert [task.group for task in daily] == list(account.groups)
        else:
            assert [task.group for task in daily] == [WHOLE_ACCOUNT]
        refreshed = bool({"core", "stats"} & set(account.groups))  # guests and stats
        assert [t.group for t in planned if t.group == REFRESH_GROUP] == (
            [REFRESH_GROUP] if refreshed else []
        )
        assert len({task.queue for task in planned}) == 1, "an account leaves from one address"
        assert all(task.pool in pools(config) for task in planned)


def test_a_small_account_is_one_task_and_a_large_one_a_task_per_group() -> None:
    small = Account("s", ("k1",), size="small")
    large = Account("l", ("k1", "k2"), size="large")
    forced = Account("f", ("k1",), size="small", split=True)
    tasks = plan_tasks(AccountsConfig((small, large, forced)))
    assert [t.task_id for t in tasks if t.account == "s"] == ["s.all", "s.refresh"]
    assert [t.task_id for t in tasks if t.account == "l"] == [
        *(f"l.{group}" for group in GROUPS),
        "l.refresh",
    ]
    assert [t.group for t in tasks if t.account == "f"] == [*GROUPS, REFRESH_GROUP]
    whole = next(t for t in tasks if t.task_id == "s.all")
    assert whole.groups == GROUPS
    assert whole.weight == sum(SIZE_REQUESTS["small"]["first"].values())


def test_accounts_spread_over_queues_longest_first() -> None:
    """Ten large one-key accounts on two addresses: five each; equal work per queue."""
    config = AccountsConfig(
        tuple(Account(f"big{n}", (f"big{n}_key",), size="large") for n in range(10)),
        ("w1", "w2"),
    )
    tasks = plan_tasks(config)
    loads = queue_loads(task for task in tasks if task.group != REFRESH_GROUP)
    assert loads.keys() == {"w1", "w2"}
    assert len(set(loads.values())) == 1, loads
    # One five-key account is as long as five one-key accounts: it gets a queue to itself.
    wide = Account("wide", tuple(f"k{n}" for n in range(5)), size="large")
    narrow = tuple(Account(f"n{n}", (f"n{n}_key",), size="small") for n in range(5))
    mixed = plan_tasks(AccountsConfig((*narrow, wide), ("w1", "w2")))
    queues = {task.account: task.queue for task in mixed}
    assert account_minutes(wide) > sum(account_minutes(a) for a in narrow)
    assert all(queues[a.name] != queues["wide"] for a in narrow)


def test_an_account_entry_is_all_it_takes() -> None:
    config = parse_config(
        json.dumps(
            {
                "queues": ["w1", "w2"],
                "accounts": [
                    {
                        "name": "harbour",
                        "keys": ["harbour_key_1", "harbour_key_2"],
                        "size": "large",
                    },
                    {
                        "name": "saltmarsh",
                        "base_url": "https://eu.example/api/v1/customer",
                        "keys": "saltmarsh_key",
                        "groups": ["core", "stats"],
                        "schedule": "0 2 * * *",
                        "target_schema": "raw_saltmarsh",
                    },
                ],
            }
        )
    )
    harbour, saltmarsh = config.accounts
    assert harbour.schema == "guestdata_harbour"
    assert harbour.split_groups, "a large account runs a task per group"
    assert saltmarsh.key_variables == ("saltmarsh_key",)
    assert saltmarsh.schema == "raw_saltmarsh"
    assert config.queues == ("w1", "w2")
    assert parse_config('[{"name": "one", "keys": ["k"]}]').queues == ("default",)


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ('[{"name": "Bad Name", "keys": ["k"]}]', "name must match"),
        ('[{"name": "a", "keys": []}]', "1 to 5"),
        ('[{"name": "a", "keys": ["1", "2", "3", "4", "5", "6"]}]', "1 to 5"),
        ('[{"name": "a", "keys": ["k"], "groups": ["everything"]}]', "groups"),
        ('[{"name": "a", "keys": ["k"]}, {"name": "a", "keys": ["j"]}]', "distinct"),
        ('[{"name": "a", "keys": ["k"]}, {"name": "b", "keys": ["k"]}]', "listed for"),
        ('[{"name": "a", "keys": ["k"], "sise": "large"}]', "unknown fields"),
        ('[{"name": "a", "keys": ["k"], "split": "yes"}]', "split must be"),
        ('{"queues": [], "accounts": [{"name": "a", "keys": ["k"]}]}', "queues"),
        ("not json", "not JSON"),
    ],
)
def test_a_wrong_entry_is_refused_with_its_place(document: str, complaint: str) -> None:
    with pytest.raises(AccountsError, match=complaint):
        parse_config(document)
