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


def known_pools(queue: str = "default") -> list[str]:
    """What a DagBag knows: Airflow's own default_pool (the models' task) and the pool
    docs/airflow.md tells operators to create for the queue (concurrency, not rate)."""
    return ["default_pool", f"guestdata_{queue}"]


SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {"env": {}, "known_pools": known_pools()},
    # Pool validation is live: a DagBag that knows only the default pool warns about ours.
    "pools_missing": {"env": {}, "known_pools": ["default_pool"]},
    **{
        f"keys_{count}": {
            "env": {"GUESTDATA_API_KEY_VARIABLES": ",".join(KEY_NAMES[:count])},
            "known_pools": known_pools(),
        }
        for count in range(1, 6)
    },
    "groups": {"env": {"GUESTDATA_TASK_SHAPE": "groups"}, "known_pools": known_pools()},
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
            "GUESTDATA_KEY_COOLDOWN_SECONDS": "60",  # ignored: no cool-down any more
            "GUESTDATA_RATE_BUDGET_STORE": "redis://broker:6379/3",
            "GUESTDATA_MELTANO_ENVIRONMENT": "dev",
            "GUESTDATA_MELTANO_TARGET": "target-snowflake",
            "GUESTDATA_MELTANO_BIN": "/opt/meltano/bin/meltano",
            "GUESTDATA_PROJECT_ROOT": "/srv/tap-guestdata",
            "GUESTDATA_QUEUE": "meltano",
        },
        "known_pools": known_pools("meltano"),
        "api_keys": ["guestdata_k1", "GUESTDATA_TEST_K2", "guestdata_missing"],
    },
}


ACCOUNTS = {
    "queues": ["worker_1", "worker_2"],
    "accounts": [
        {"name": "harbour", "keys": ["harbour_k1", "harbour_k2"], "size": "large"},
        {"name": "quay", "keys": ["quay_k1"], "size": "small"},
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
QUEUE_POOLS = ["guestdata_worker_1", "guestdata_worker_2"]
SCENARIOS["accounts"] = {
    "env": {"GUESTDATA_ACCOUNTS": json.dumps(ACCOUNTS)},
    "known_pools": ["default_pool", *QUEUE_POOLS],
}
# 10,000 accounts, one in fifty on a schedule of its own: the DAGs keep the shape of four.
QUEUES = ["worker_1", "worker_2"]
MANY = [
    {"name": f"venue_{n:05d}", "keys": [f"venue_{n:05d}_key"]}
    | ({"schedule": "0 2 * * *"} if n % 50 == 1 else {})
    for n in range(10_000)
]
SCENARIOS["accounts_10000"] = {
    "env": {"GUESTDATA_ACCOUNTS": json.dumps({"queues": QUEUES, "accounts": MANY})},
    "known_pools": ["default_pool", *QUEUE_POOLS],
    "render_scripts": False,
}


@pytest.fixture(scope="module")
def loaded(airflow_home: Path) -> dict[str, dict[str, Any]]:
    results = inspect_dags(airflow_home, list(SCENARIOS.values()))
    return dict(zip(SCENARIOS, results, strict=True))


def tasks(result: dict[str, Any], dag_id: str = DAILY) -> dict[str, dict[str, Any]]:
    return result["dags"][dag_id]["tasks"]


def all_tasks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {**tasks(result, DAILY), **tasks(result, REFRESH)}


def key_names(task: dict[str, Any]) -> list[str] | None:
    """The Variable/env names a task's keys come from (its env holds a template, not keys)."""
    if "TAP_GUESTDATA_API_KEYS" not in task["env"]:
        return None
    match = re.fullmatch(
        r"\{\{ guestdata_api_keys\((\[[^]]*\])\) \}\}", task["env"]["TAP_GUESTDATA_API_KEYS"]
    )
    assert match, task["env"]
    return json.loads(match.group(1).replace("'", '"'))


def selected_streams(command: str) -> list[str]:
    """The streams a command selects (its first TAP_GUESTDATA__SELECT: a daily run's)."""
    match = re.search(r"^export TAP_GUESTDATA__SELECT='(.*)'$", command, re.MULTILINE)
    assert match, command
    return [pattern.removesuffix(".*") for pattern in json.loads(match.group(1))]


RELOAD_MACRO = "{{ guestdata_reload(dag_run.run_type, data_interval_start, data_interval_end, "


def test_every_file_in_dags_imports_without_errors(loaded: dict[str, dict[str, Any]]) -> None:
    assert list(DAGS_FOLDER.glob("*.py")), "no DAG files"
    for name, result in loaded.items():
        assert result["import_errors"] == {}, name
        if name.startswith("accounts"):
            continue  # test_every_account_gets_its_mapped_task_schema_state_id_and_queue
        # No models for a target other than target-postgres (the "overrides" scenario).
        expected = {DAILY, REFRESH} if name == "overrides" else {DAILY, REFRESH, TRANSFORM}
        assert set(result["dags"]) == expected, name


def test_parsing_is_cheap_and_starts_no_process(loaded: dict[str, dict[str, Any]]) -> None:
    for name, result in loaded.items():
        assert result["subprocesses_at_parse"] == [], name
        if name != "accounts_10000":  # its time: bench/dag_parse.py
            assert result["parse_seconds"] < 2, name


def test_every_pool_the_dags_use_is_one_the_docs_say_to_create(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for name, result in loaded.items():
        if name != "pools_missing":
            assert result["dag_warnings"] == [], name
    assert any("guestdata_default" in w for w in loaded["pools_missing"]["dag_warnings"])


STREAMS = {  # read_windows with guests: what each read covered (deletions inside a window)
    "core": ["account", "venues", "guests", "read_windows"],
    "members": ["members", "member_ledger"],
    "rewards": ["rewards", "redemptions"],
    "offers": ["programme", "programme_venues", "tiers", "offers", "offer_stats"],
    "stats": ["daily_stats", "daily_account_stats"],
    "refresh": ["guests", "read_windows", "daily_stats", "daily_account_stats"],
}
EVERY_STREAM = [stream for group in GROUPS for stream in STREAMS[group]]


def test_daily_dag_runs_the_account_in_one_task_by_default(
    loaded: dict[str, dict[str, Any]],
) -> None:
    daily = tasks(loaded["defaults"])
    assert list(daily) == ["all"]
    task = daily["all"]
    assert task["operator"] == "airflow.providers.standard.operators.bash.BashOperator"
    # The base extractor alone: no inheriting extractor, no suffix (a plain run's state id).
    assert task["bash_command"].endswith(
        'exec meltano --environment=prod run "${take_over[@]}" "${run[@]}" '
        "tap-guestdata target-postgres guestdata-pg-types:timestamptz"
    )
    assert "\nsuffix=''\nrun=(--no-install)\n" in task["bash_command"]
    assert "--full-refresh" not in task["bash_command"]
    assert RELOAD_MACRO in task["bash_command"], "a backfill run reloads its interval"
    assert task["skip_on_exit_code"] == [99], "a reload with nothing to read is skipped"
    # A backfill's tasks yield the queue's pool to the daily run's (priority.py).
    assert task["priority"] == {"scheduled": 10, "backfill": 1}
    assert selected_streams(task["bash_command"]) == EVERY_STREAM
    assert task["cwd"] == str(DAGS_FOLDER.parent)
    assert task["append_env"] is True


def test_task_shape_groups_runs_one_independent_task_per_stream_group(
    loaded: dict[str, dict[str, Any]],
) -> None:
    daily = tasks(loaded["groups"])
    assert list(daily) == GROUPS
    for group, task in daily.items():
        assert task["upstream"] == [], "groups must be free to run in parallel"
        assert (
            f'\nsuffix={group}\nrun=(--no-install "--state-id-suffix=$suffix")\n'
            in (task["bash_command"])
        )
        assert selected_streams(task["bash_command"]) == STREAMS[group]
        # Its own Meltano run directory: run/tap-guestdata/ is not shared by the tasks.
        assert 'own="$shared/tasks/${suffix:-default}"' in task["bash_command"]


def test_weekly_refresh_rereads_guests_and_stats_in_full(
    loaded: dict[str, dict[str, Any]],
) -> None:
    refresh = tasks(loaded["defaults"], REFRESH)
    assert list(refresh) == ["refresh"]
    command = refresh["refresh"]["bash_command"]
    assert '\nsuffix=refresh\nrun=(--no-install "--state-id-suffix=$suffix" --full-refresh)\n' in (
        command
    )
    assert RELOAD_MACRO not in command, "the refresh reads everything anyway"
    assert selected_streams(command) == STREAMS["refresh"]
    assert loaded["defaults"]["dags"][REFRESH]["schedule"] == "0 3 * * 0"


def test_schedules_are_cron_without_catchup_and_one_run_at_a_time(
    loaded: dict[str, dict[str, Any]],
) -> None:
    dags = loaded["defaults"]["dags"]
    assert dags[DAILY]["schedule"] == "0 5 * * *"
    # Real data intervals, which a backfill run reloads (the refresh's are never reloaded).
    assert dags[DAILY]["timetable"] == "CronDataIntervalTimetable"
    assert dags[REFRESH]["timetable"] == "CronTriggerTimetable"
    for dag in (dags[DAILY], dags[REFRESH]):
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
        # No cool-down: the shared rate budget counts the rolling minute (spec 8).
        assert "sleep" not in task["bash_command"]


def test_without_configured_keys_the_tasks_use_meltanos_key_in_the_queues_pool(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for task in all_tasks(loaded["defaults"]).values():
        assert task["pool"] == "guestdata_default"
        assert key_names(task) is None  # the key comes from Meltano's environment config
        assert "TAP_GUESTDATA_API_KEY" not in task["env"]
        assert "TAP_GUESTDATA_RATE_BUDGET_STORE" not in task["env"]  # the tap's default


@pytest.mark.parametrize("count", range(1, 6))
def test_every_task_uses_every_key(loaded: dict[str, dict[str, Any]], count: int) -> None:
    """The shared budget divides a key between tasks, so no task is held to one key."""
    for task_id, task in all_tasks(loaded[f"keys_{count}"]).items():
        assert key_names(task) == KEY_NAMES[:count], task_id
        assert task["pool"] == "guestdata_default"
        # No key configured elsewhere (another account's) joins them: api_key is the first.
        assert task["env"]["TAP_GUESTDATA_API_KEY"] == (
            f"{{{{ guestdata_api_key({KEY_NAMES[0]!r}) }}}}"
        )


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
    task = tasks(result)["all"]
    assert key_names(task) == ["guestdata_k1", "GUESTDATA_TEST_K2"]
    assert task["retries"] == 0
    assert task["execution_timeout"] == 15 * 60
    assert task["queue"] == "meltano"
    assert task["pool"] == "guestdata_meltano"
    assert task["cwd"] == "/srv/tap-guestdata"
    assert task["env"]["TAP_GUESTDATA_RATE_BUDGET_STORE"] == "redis://broker:6379/3"
    assert task["env"]["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] == "meltano"  # the queue
    # No timestamptz step for a target other than target-snowflake; no cool-down (ignored).
    assert task["bash_command"].endswith(
        'take_over=(); [ "{{ ti.try_number }}" -le 1 ] || take_over=(--force)\n'
        'exec /opt/meltano/bin/meltano --environment=dev run "${take_over[@]}" "${run[@]}" '
        "tap-guestdata target-snowflake"
    )


def test_each_load_task_publishes_the_asset_of_its_group(
    loaded: dict[str, dict[str, Any]],
) -> None:
    daily = tasks(loaded["defaults"])
    assert daily["all"]["outlets"] == [f"guestdata_raw_{group}" for group in GROUPS]
    assert tasks(loaded["defaults"], REFRESH)["refresh"]["outlets"] == ["guestdata_raw_refresh"]
    for group, task in tasks(loaded["groups"]).items():
        assert task["outlets"] == [f"guestdata_raw_{group}"], group


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
    assert task["pool"] == "default_pool", "no API calls: not in the queue's pool"
    assert task["outlets"] == ["guestdata_models"]
    assert task["append_env"] is True
    assert task["execution_timeout"] == 3600


def test_every_account_gets_its_mapped_task_schema_state_id_and_queue(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["accounts"]
    assert result["dag_warnings"] == [], "every queue pool is one docs/airflow.md lists"
    assert set(result["dags"]) == {
        DAILY,  # harbour, quay and saltmarsh: the daily schedule
        f"{DAILY}_at_0_2_x_x_x",  # northgate's own schedule, "0 2 * * *"
        REFRESH,  # harbour, quay and saltmarsh (northgate loads neither guests nor stats)
    }
    own = result["dags"][f"{DAILY}_at_0_2_x_x_x"]
    assert own["schedule"] == "0 2 * * *"
    assert own["timetable"] == "CronDataIntervalTimetable"
    assert list(own["accounts"]) == ["northgate"]
    daily = result["dags"][DAILY]
    assert list(daily["accounts"]) == ["harbour", "quay", "saltmarsh"]
    assert list(result["dags"][REFRESH]["accounts"]) == ["harbour", "quay", "saltmarsh"]
    assert daily["max_active_tasks"] == 10, "two queues' pools all busy at once"
    # A fixed shape whatever the number of accounts: per queue, a plan and a mapped group.
    for dag_id in (DAILY, REFRESH):
        shape = {
            task_id: (task["mapped"], task["upstream"])
            for task_id, task in tasks(result, dag_id).items()
        }
        assert shape == {
            f"{queue}.{name}": expected
            for queue in ("worker_1", "worker_2")
            for name, expected in {
                "plan": (False, []),
                "account.load": (True, [f"{queue}.plan"]),
                "account.dbt_build": (True, [f"{queue}.account.load", f"{queue}.plan"]),
            }.items()
        }, dag_id
    queue_of_account: dict[str, str] = {}
    for dag_id, dag in result["dags"].items():
        for account, planned in dag["accounts"].items():
            queue = planned["group"]
            load = dag["tasks"][f"{queue}.account.load"]
            assert load["map_index_template"] == "{{ task.account }}", "labelled by account"
            assert load["pool"] == f"guestdata_{queue}" and load["pool"] in QUEUE_POOLS
            assert load["queue"] == queue
            assert load["env"]["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] == queue
            assert load["env"]["TAP_GUESTDATA_API_KEYS"] == (
                "{{ guestdata_account_keys(task.account) }}"
            ), "every key of its account, found on the worker"
            assert load["skip_on_exit_code"] == [99]
            # Every task of the queue's group on its queue: a deployment's workers serve those.
            group_tasks = [t for i, t in dag["tasks"].items() if i.startswith(f"{queue}.")]
            assert {t["queue"] for t in group_tasks} == {queue}
            assert load["priority"] == {"scheduled": 10, "backfill": 1}, "daily runs first"
            assert queue_of_account.setdefault(account, queue) == queue, "one queue each"
            script = planned["script"]
            schema = "raw_saltmarsh" if account == "saltmarsh" else f"guestdata_{account}"
            assert f"export TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA={schema}\n" in script
            base_url = "https://eu.example/api/v1/customer" if account == "saltmarsh" else None
            assert ("export TAP_GUESTDATA_BASE_URL=" in script) == (base_url is not None)
            assert 'export MELTANO_SYS_DIR_ROOT="$own"' in script
            groups = {
                "harbour": GROUPS,
                "quay": GROUPS,
                "saltmarsh": ["core", "stats"],
                "northgate": ["rewards"],
            }[account]
            runs = script.count("tap-guestdata target-postgres")
            if dag_id == REFRESH:
                assert runs == 1 and selected_streams(script) == STREAMS["refresh"]
                assert f"\nsuffix={account}-refresh\n" in script and "--full-refresh" in script
                continue
            # Large: its groups side by side, a state id each; else one run of all its groups.
            suffixes = re.findall(r"^suffix=(\S+)$", script, re.MULTILINE)
            if account == "harbour":
                assert suffixes == [f"harbour-{group}" for group in GROUPS]
                assert runs == 5 and script.count(") &\npids+=($!)") == 5
            else:
                assert suffixes == [account] and runs == 1
                assert selected_streams(script) == [s for g in groups for s in STREAMS[g]]
            assert "# a daily run: Meltano state drives the window" in script
            reload = planned["reload_script"]
            assert "export TAP_GUESTDATA_START_DATE=2026-10-01\n" in reload
            assert "export TAP_GUESTDATA_END_DATE=2026-10-01\n" in reload
            build = planned["build_script"]
            if set(groups) == set(GROUPS):
                assert build.endswith(
                    "meltano --environment=prod run --no-install dbt-postgres:build"
                )
                assert f"export DBT_TARGET_PATH=target/accounts/{account}\n" in build
                assert f"export TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA={schema}\n" in build
            else:
                assert build.endswith("exit 99"), "the models need every group: skipped"
    assert set(queue_of_account.values()) == {"worker_1", "worker_2"}


def test_ten_thousand_accounts_parse_into_the_same_few_tasks(
    loaded: dict[str, dict[str, Any]],
) -> None:
    """Parsing builds a fixed set of tasks whatever the number of accounts (the time it takes:
    bench/dag_parse.py); the accounts are fanned out when the plan tasks run."""
    many, four = loaded["accounts_10000"], loaded["accounts"]
    assert many["import_errors"] == {} and many["dag_warnings"] == []
    assert set(many["dags"]) == set(four["dags"])
    for dag_id, dag in many["dags"].items():
        assert list(dag["tasks"]) == list(four["dags"][dag_id]["tasks"]), dag_id
    own = many["dags"][f"{DAILY}_at_0_2_x_x_x"]["accounts"]
    daily = [*many["dags"][DAILY]["accounts"], *own]
    assert sorted(daily) == sorted(a["name"] for a in MANY), "each account in one daily DAG"
    assert len(own) == 200
    assert len(many["dags"][REFRESH]["accounts"]) == 10_000
