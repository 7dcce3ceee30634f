"""Accounts as configuration, and keys spread over worker lanes (tap_guestdata/airflow/accounts.py).

Pure Python, no Airflow. The budget guarantees are checked the way Airflow would enforce them:
a random scheduler starts and ends the planned tasks in any order, honouring only the pools
(one slot each), and at every moment no queue's running keys may exceed 600 requests a minute
and no key may sit in two running tasks.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tap_guestdata.airflow.accounts import (
    GROUPS,
    LANES_PER_QUEUE,
    PER_ADDRESS_PER_MINUTE,
    PER_KEY_PER_MINUTE,
    REFRESH_GROUP,
    Account,
    AccountsConfig,
    AccountsError,
    TaskSpec,
    key_of_group,
    lane_loads,
    parse_config,
    plan_tasks,
    pools,
)


def random_schedule(tasks: list[TaskSpec], seed: int) -> list[list[TaskSpec]]:
    """Every set of running tasks a pool-honouring scheduler passes through, in a random run:
    each step either ends a running task or starts a queued one whose pool has a free slot."""
    rng = random.Random(seed)
    waiting = list(tasks)
    rng.shuffle(waiting)
    running: list[TaskSpec] = []
    snapshots = []
    while waiting or running:
        busy = {task.lane.pool for task in running}
        startable = [task for task in waiting if task.lane.pool not in busy]
        if startable and (not running or rng.random() < 0.7):
            task = rng.choice(startable)
            waiting.remove(task)
            running.append(task)
        else:
            running.remove(rng.choice(running))
        snapshots.append(list(running))
    return snapshots


def check_budgets(running: list[TaskSpec]) -> None:
    held = [(task.account, task.key_variable) for task in running]
    assert len(held) == len(set(held)), f"a key in two running tasks: {held}"
    per_queue: dict[str, int] = {}
    for task in running:
        per_queue[task.lane.queue] = per_queue.get(task.lane.queue, 0) + PER_KEY_PER_MINUTE
    assert all(rate <= PER_ADDRESS_PER_MINUTE for rate in per_queue.values()), per_queue


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
@given(
    accounts=accounts_strategy,
    queue_count=st.integers(min_value=1, max_value=6),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_no_queue_exceeds_600_a_minute_and_no_key_runs_twice(
    accounts: list[tuple[int, list[str], str | None]], queue_count: int, seed: int
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
    # Every account's every group (and its refresh) is planned once, with one of its own keys.
    for account in config.accounts:
        planned = [task for task in tasks if task.account == account.name]
        refreshed = bool({"core", "stats"} & set(account.groups))  # guests and stats
        assert [task.group for task in planned] == [
            *account.groups,
            *([REFRESH_GROUP] if refreshed else []),
        ]
        assert {task.key_variable for task in planned} <= set(account.key_variables)
    # A key lives in exactly one lane; a queue has at most LANES_PER_QUEUE lanes.
    lane_of_key: dict[tuple[str, str], str] = {}
    for task in tasks:
        key = (task.account, task.key_variable)
        assert lane_of_key.setdefault(key, task.lane.pool) == task.lane.pool
        assert 1 <= task.lane.number <= LANES_PER_QUEUE
        assert task.lane.pool in pools(config)
    for running in random_schedule(tasks, seed):
        check_budgets(running)


def test_the_schedule_check_can_fail() -> None:
    """Two lanes' worth of keys forced into one pool-free queue: the check must object."""
    account = Account("a", tuple(f"k{n}" for n in range(5)))
    config = AccountsConfig((account, Account("b", ("b1",))), ("w0",))
    tasks = plan_tasks(config)
    with pytest.raises(AssertionError):
        check_budgets(tasks)  # every task at once, as if no pools existed


def test_heavy_groups_go_to_different_keys() -> None:
    """Medium's first sync: stats (2,819 requests) and members (2,010) never share a key."""
    for keys in range(2, 6):
        account = Account("m", tuple(f"k{n}" for n in range(keys)), size="medium")
        chosen = key_of_group(account, GROUPS)
        assert chosen["stats"] != chosen["members"], chosen
        assert set(chosen.values()) == set(account.key_variables[: len(GROUPS)])
    # Without sizes: round-robin in group order, as the single-account DAG.
    plain = Account("p", ("k1", "k2", "k3"))
    assert list(key_of_group(plain, GROUPS).values()) == ["k1", "k2", "k3", "k1", "k2"]


def test_keys_spread_over_queues_heaviest_first() -> None:
    """Ten large one-key accounts on two addresses: five lanes each, two keys per lane."""
    config = AccountsConfig(
        tuple(Account(f"big{n}", (f"big{n}_key",), size="large") for n in range(10)),
        ("w1", "w2"),
    )
    tasks = plan_tasks(config)
    loads = lane_loads(task for task in tasks if task.group != REFRESH_GROUP)
    assert len(loads) == 10
    assert len(set(loads.values())) == 1, loads  # equal accounts: equal lanes
    assert {lane.queue for lane in loads} == {"w1", "w2"}


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
    assert harbour.state_id_suffix == "harbour"
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
        ('{"queues": [], "accounts": [{"name": "a", "keys": ["k"]}]}', "queues"),
        ("not json", "not JSON"),
    ],
)
def test_a_wrong_entry_is_refused_with_its_place(document: str, complaint: str) -> None:
    with pytest.raises(AccountsError, match=complaint):
        parse_config(document)
