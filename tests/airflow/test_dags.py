"""The DAG files import cleanly, and the DAGs have the shape docs/airflow.md promises.

All scenarios are loaded in one `dag_inspector.py` subprocess (about 10 s, most of it importing
Airflow); each scenario is a set of Variables (`AIRFLOW_VAR_*`) and environment variables.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dag_testing import DAGS_FOLDER, inspect_dags

pytestmark = pytest.mark.airflow

DAILY = "guestdata_meltano"
REFRESH = "guestdata_meltano_weekly_refresh"
TRANSFORM = "guestdata_transform"
GROUPS = ["core", "members", "rewards", "offers", "stats"]
KEY_NAMES = [f"guestdata_api_key_{n}" for n in range(1, 6)]


def pools(count: int) -> list[str]:
    """The pools docs/airflow.md tells operators to create for `count` keys (1 slot each)."""
    return [f"guestdata_api_key_{n}" for n in range(1, max(count, 1) + 1)]


def known_pools(count: int) -> list[str]:
    """What a DagBag knows: Airflow's own default_pool (the models' task) and the key pools."""
    return ["default_pool", *pools(count)]


SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {"env": {}, "known_pools": known_pools(0)},
    # Pool validation is live: a DagBag that knows only the default pool warns about ours.
    "pools_missing": {"env": {}, "known_pools": ["default_pool"]},
    **{
        f"keys_{count}": {
            "env": {"GUESTDATA_API_KEY_VARIABLES": ",".join(KEY_NAMES[:count])},
            "known_pools": known_pools(count),
        }
        for count in range(1, 6)
    },
    # Variables (AIRFLOW_VAR_*) beat plain environment variables; the key list as JSON; one key
    # in a Variable whose name Airflow would not mask by itself, one in a plain env var.
    "overrides": {
        "env": {
            "AIRFLOW_VAR_GUESTDATA_API_KEY_VARIABLES": '["guestdata_k1", "GUESTDATA_TEST_K2"]',
            "GUESTDATA_API_KEY_VARIABLES": "ignored_1,ignored_2,ignored_3",
            "AIRFLOW_VAR_GUESTDATA_K1": "gd_owner_growth_4",
            "GUESTDATA_TEST_K2": "gd_owner_growth_5",
            "AIRFLOW_VAR_GUESTDATA_SCHEDULE": "30 4 * * *",
            "GUESTDATA_SCHEDULE": "0 1 * * *",
            "GUESTDATA_REFRESH_SCHEDULE": "none",
            "GUESTDATA_CATCHUP": "true",
            "GUESTDATA_RETRIES": "0",
            "GUESTDATA_TASK_TIMEOUT_MINUTES": "15",
            "GUESTDATA_KEY_COOLDOWN_SECONDS": "0",
            "GUESTDATA_MELTANO_ENVIRONMENT": "dev",
            "GUESTDATA_MELTANO_TARGET": "target-snowflake",
            "GUESTDATA_MELTANO_BIN": "/opt/meltano/bin/meltano",
            "GUESTDATA_PROJECT_ROOT": "/srv/tap-guestdata",
            "GUESTDATA_QUEUE": "meltano",
        },
        "known_pools": known_pools(2),
        "api_keys": ["guestdata_k1", "GUESTDATA_TEST_K2", "guestdata_missing"],
    },
}


ACCOUNTS = {
    "queues": ["worker_1", "worker_2"],
    "accounts": [
        {"name": "harbour", "keys": ["harbour_k1", "harbour_k2"], "size": "medium"},
        {
            "name": "saltmarsh",
            "base_url": "https://eu.example/api/v1/customer",
            "keys": ["saltmarsh_k1"],
            "groups": ["core", "stats"],
            "target_schema": "raw_saltmarsh",
        },
        {
            "name": "northgate",
            "keys": ["northgate_k1"],
            "groups": ["rewards"],
            "schedule": "0 2 * * *",
        },
    ],
}
LANE_POOLS = [f"guestdata_worker_{w}_lane_{n}" for w in (1, 2) for n in range(1, 6)]
SCENARIOS["accounts"] = {
    "env": {"GUESTDATA_ACCOUNTS": json.dumps(ACCOUNTS)},
    "known_pools": ["default_pool", *LANE_POOLS],
}


@pytest.fixture(scope="module")
def loaded(airflow_home: Path) -> dict[str, dict[str, Any]]:
    results = inspect_dags(airflow_home, list(SCENARIOS.values()))
    return dict(zip(SCENARIOS, results, strict=True))


def tasks(result: dict[str, Any], dag_id: str = DAILY) -> dict[str, dict[str, Any]]:
    return result["dags"][dag_id]["tasks"]


def all_tasks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {**tasks(result, DAILY), **tasks(result, REFRESH)}


def key_name(task: dict[str, Any]) -> str | None:
    """The Variable/env name a task's key comes from (its env holds a template, not a key)."""
    if not task["env"]:
        return None
    match = re.fullmatch(
        r"\{\{ guestdata_api_key\('([^']+)'\) \}\}", task["env"]["TAP_GUESTDATA_API_KEY"]
    )
    assert match, task["env"]
    return match.group(1)


def test_every_file_in_dags_imports_without_errors(loaded: dict[str, dict[str, Any]]) -> None:
    assert list(DAGS_FOLDER.glob("*.py")), "no DAG files"
    for name, result in loaded.items():
        assert result["import_errors"] == {}, name
        if name == "accounts":
            continue  # test_every_account_gets_its_task_group_schema_state_id_and_lane
        # No models for a target other than target-postgres (the "overrides" scenario).
        expected = {DAILY, REFRESH} if name == "overrides" else {DAILY, REFRESH, TRANSFORM}
        assert set(result["dags"]) == expected, name


def test_parsing_is_cheap_and_starts_no_process(loaded: dict[str, dict[str, Any]]) -> None:
    for name, result in loaded.items():
        assert result["subprocesses_at_parse"] == [], name
        assert result["parse_seconds"] < 2, name


def test_every_pool_the_dags_use_is_one_the_docs_say_to_create(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for name, result in loaded.items():
        if name != "pools_missing":
            assert result["dag_warnings"] == [], name
    assert any("guestdata_api_key_1" in w for w in loaded["pools_missing"]["dag_warnings"])


def test_daily_dag_runs_one_independent_task_per_stream_group(
    loaded: dict[str, dict[str, Any]],
) -> None:
    daily = tasks(loaded["defaults"])
    assert list(daily) == GROUPS
    for group, task in daily.items():
        assert task["operator"] == "airflow.providers.standard.operators.bash.BashOperator"
        assert task["upstream"] == [], "groups must be free to run in parallel"
        assert (
            'meltano --environment=prod run "${take_over[@]}" --no-install '
            f"tap-guestdata--{group} target-postgres "
            "guestdata-pg-types:timestamptz && status=0 || status=$?"
        ) in task["bash_command"]
        assert "--full-refresh" not in task["bash_command"]
        assert task["cwd"] == str(DAGS_FOLDER.parent)
        assert task["append_env"] is True


def test_weekly_refresh_rereads_guests_and_stats_in_full(
    loaded: dict[str, dict[str, Any]],
) -> None:
    refresh = tasks(loaded["defaults"], REFRESH)
    assert list(refresh) == ["refresh"]
    assert (
        'meltano --environment=prod run "${take_over[@]}" --no-install --full-refresh '
        "tap-guestdata--refresh "
        "target-postgres"
    ) in refresh["refresh"]["bash_command"]
    assert loaded["defaults"]["dags"][REFRESH]["schedule"] == "0 3 * * 0"


def test_schedules_are_cron_without_catchup_and_one_run_at_a_time(
    loaded: dict[str, dict[str, Any]],
) -> None:
    dags = loaded["defaults"]["dags"]
    assert dags[DAILY]["schedule"] == "0 5 * * *"
    for dag in (dags[DAILY], dags[REFRESH]):
        assert dag["timetable"] == "CronTriggerTimetable"
        assert dag["catchup"] is False
        assert dag["max_active_runs"] == 1
        assert dag["dagrun_timeout"] == 20 * 3600
        assert dag["tags"] == ["guestdata", "meltano"]


def test_tasks_retry_with_exponential_backoff_and_time_out(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for task_id, task in all_tasks(loaded["defaults"]).items():
        assert task["retries"] == 3
        assert task["retry_delay"] == 300
        assert task["retry_exponential_backoff"] == 2.0
        assert task["max_retry_delay"] == 3600
        expected_timeout = 6 * 3600 if task_id == "refresh" else 3 * 3600
        assert task["execution_timeout"] == expected_timeout
        # The task holds its key's pool slot for the rolling minute after the run (spec 8).
        assert task["bash_command"].endswith('sleep 60\nexit "$status"')


def test_without_configured_keys_all_tasks_share_one_single_slot_pool(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for task in all_tasks(loaded["defaults"]).values():
        assert task["pool"] == "guestdata_api_key_1"
        assert task["pool_slots"] == 1
        assert task["env"] is None  # the key comes from Meltano's environment config
        assert "unset TAP_GUESTDATA_API_KEYS" not in task["bash_command"]


@pytest.mark.parametrize("count", range(1, 6))
def test_no_two_tasks_can_hold_one_key_at_once(
    loaded: dict[str, dict[str, Any]], count: int
) -> None:
    """Pool <-> key is one-to-one, so a 1-slot pool per key serialises that key's users."""
    result = loaded[f"keys_{count}"]
    everything = all_tasks(result)
    pool_of_key: dict[str, str] = {}
    key_of_pool: dict[str, str] = {}
    for index, (task_id, task) in enumerate(everything.items()):
        key = key_name(task)
        assert key == KEY_NAMES[index % count], f"{task_id}: round-robin over the keys"
        assert task["pool_slots"] == 1
        assert pool_of_key.setdefault(key, task["pool"]) == task["pool"]
        assert key_of_pool.setdefault(task["pool"], key) == key
        # The tap must not spread requests over other keys than the one this task holds.
        assert "unset TAP_GUESTDATA_API_KEYS" in task["bash_command"]
    assert sorted(key_of_pool) == pools(count)
    daily_pools = [task["pool"] for task in tasks(result).values()]
    assert len(set(daily_pools)) == min(count, len(GROUPS)), "as parallel as the keys allow"


def test_keys_stay_out_of_the_dag_and_out_of_logs(loaded: dict[str, dict[str, Any]]) -> None:
    result = loaded["overrides"]
    for task in all_tasks(result).values():
        assert "gd_owner_growth" not in task["bash_command"] + str(task["env"])
    assert result["api_keys"]["guestdata_k1"] == {
        "value": "gd_owner_growth_4",
        "masked_in_logs": True,
    }
    assert result["api_keys"]["GUESTDATA_TEST_K2"] == {
        "value": "gd_owner_growth_5",
        "masked_in_logs": True,
    }
    error = result["api_keys"]["guestdata_missing"]["error"]
    assert "guestdata_missing" in error


def test_settings_come_from_variables_then_environment(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["overrides"]
    dags = result["dags"]
    assert dags[DAILY]["schedule"] == "30 4 * * *"  # the Variable, not GUESTDATA_SCHEDULE
    assert dags[REFRESH]["schedule"] is None  # "none": manual runs only
    assert dags[DAILY]["catchup"] is True
    assert [key_name(task) for task in tasks(result).values()] == [
        "guestdata_k1",
        "GUESTDATA_TEST_K2",
        "guestdata_k1",
        "GUESTDATA_TEST_K2",
        "guestdata_k1",
    ]
    core = tasks(result)["core"]
    assert core["retries"] == 0
    assert core["execution_timeout"] == 15 * 60
    assert core["queue"] == "meltano"
    assert core["cwd"] == "/srv/tap-guestdata"
    # No timestamptz step for a target other than target-postgres; no cool-down when 0.
    assert core["bash_command"] == (
        "set -u\nunset TAP_GUESTDATA_API_KEYS\n"
        'take_over=(); [ "{{ ti.try_number }}" -le 1 ] || take_over=(--force)\n'
        '/opt/meltano/bin/meltano --environment=dev run "${take_over[@]}" --no-install '
        "tap-guestdata--core target-snowflake"
        ' && status=0 || status=$?\nexit "$status"'
    )


def test_each_load_task_publishes_the_asset_of_its_group(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for task_id, task in all_tasks(loaded["defaults"]).items():
        assert task["outlets"] == [f"guestdata_raw_{task_id}"], task_id


def test_models_build_when_every_daily_group_or_the_weekly_refresh_has_loaded(
    loaded: dict[str, dict[str, Any]],
) -> None:
    transform = loaded["defaults"]["dags"][TRANSFORM]
    assert transform["timetable"] == "AssetTriggeredTimetable"
    assert transform["asset_condition"] == {
        "any": [{"all": [f"guestdata_raw_{group}" for group in GROUPS]}, "guestdata_raw_refresh"]
    }
    assert transform["max_active_runs"] == 1
    assert transform["catchup"] is False
    task = transform["tasks"]["dbt_build"]
    assert task["bash_command"] == "meltano --environment=prod run --no-install dbt-postgres:build"
    assert task["pool"] == "default_pool", "no API calls: no key pool"
    assert task["outlets"] == ["guestdata_models"]
    assert task["append_env"] is True
    assert task["execution_timeout"] == 3600


def test_every_account_gets_its_task_group_schema_state_id_and_lane(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["accounts"]
    assert result["dag_warnings"] == [], "every lane pool is one docs/airflow.md lists"
    assert set(result["dags"]) == {
        DAILY,  # harbour and saltmarsh: the daily schedule
        f"{DAILY}_northgate",  # its own schedule
        REFRESH,  # harbour and saltmarsh (northgate loads neither guests nor stats)
        f"{TRANSFORM}_harbour",  # the only account with every group
    }
    daily = tasks(result)
    assert list(daily) == [f"harbour.{g}" for g in GROUPS] + ["saltmarsh.core", "saltmarsh.stats"]
    assert list(tasks(result, f"{DAILY}_northgate")) == ["northgate.rewards"]
    assert result["dags"][f"{DAILY}_northgate"]["schedule"] == "0 2 * * *"
    assert list(tasks(result, REFRESH)) == ["harbour.refresh", "saltmarsh.refresh"]
    assert result["dags"][DAILY]["max_active_tasks"] == 10, "two queues' lanes all busy at once"
    everything = {**daily, **tasks(result, REFRESH), **tasks(result, f"{DAILY}_northgate")}
    lane_of_key: dict[str, tuple[str, str]] = {}
    for task_id, task in everything.items():
        account, group = task_id.split(".")
        assert f"--state-id-suffix={account} " in task["bash_command"]
        # Its own Meltano run directory: run/<extractor>/state.json is not shared by accounts.
        assert f'own="$shared/accounts/{account}"' in task["bash_command"]
        assert 'export MELTANO_SYS_DIR_ROOT="$own"' in task["bash_command"]
        assert f"tap-guestdata--{group} target-postgres" in task["bash_command"]
        schema = "raw_saltmarsh" if account == "saltmarsh" else f"guestdata_{account}"
        assert task["env"]["TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA"] == schema
        assert task["env"].get("TAP_GUESTDATA_BASE_URL") == (
            "https://eu.example/api/v1/customer" if account == "saltmarsh" else None
        )
        key = key_name(task)
        assert key.startswith(f"{account}_k")
        assert task["pool"] in LANE_POOLS and task["pool_slots"] == 1
        assert task["pool"].startswith(f"guestdata_{task['queue']}_lane_")
        # One lane per key: every task holding a key queues for the same one-slot pool.
        assert lane_of_key.setdefault(key, (task["pool"], task["queue"])) == (
            task["pool"],
            task["queue"],
        )
        assert task["outlets"] == [f"guestdata_raw_{account}_{group}"]
    # Medium's two heaviest groups (stats, members) on different keys.
    assert key_name(daily["harbour.stats"]) != key_name(daily["harbour.members"])
    assert {queue for _, queue in lane_of_key.values()} == {"worker_1", "worker_2"}
    transform = result["dags"][f"{TRANSFORM}_harbour"]
    assert transform["asset_condition"] == {
        "any": [
            {"all": [f"guestdata_raw_harbour_{group}" for group in GROUPS]},
            "guestdata_raw_harbour_refresh",
        ]
    }
    build = transform["tasks"]["dbt_build"]
    assert build["env"]["TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA"] == "guestdata_harbour"
    assert build["outlets"] == ["guestdata_models_harbour"]
