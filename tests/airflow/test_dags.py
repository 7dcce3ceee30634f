"""The DAG files import cleanly, and the DAGs have the shape docs/airflow-reference.md promises.

All scenarios are loaded in one `dag_inspector.py` subprocess (about 10 s, most of it importing
Airflow); each scenario is a set of Variables (`AIRFLOW_VAR_*`) and environment variables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dag_testing import DAGS_FOLDER, inspect_dags

pytestmark = pytest.mark.airflow

DAILY = "guestdata_meltano"
REFRESH = "guestdata_meltano_weekly_refresh"
TRANSFORM = "guestdata_transform"
GROUPS = ["core", "members", "rewards", "offers", "stats"]
SINGLE = "guestdata"  # the account of a deployment without an accounts setting
KEY_NAMES = [f"guestdata_api_key_{n}" for n in range(1, 6)]


def known_pools(queue: str = "default") -> list[str]:
    """What a DagBag knows: Airflow's own default_pool (the models' task) and the pool
    docs/airflow-deploy.md tells operators to create for the queue (concurrency, not rate)."""
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
            # The settings Variable (one read per parse) beats the environment.
            "AIRFLOW_VAR_GUESTDATA_SETTINGS": '{"retries": 0, "task_timeout_minutes": 15}',
            "GUESTDATA_RETRIES": "5",
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
# 10,000 accounts in one queue, one in fifty on a schedule of its own: the DAGs keep a fixed
# shape, and no plan returns more batches than Airflow's max_map_length (1,024 by default).
QUEUES = ["worker_1"]
MANY = [
    {"name": f"venue_{n:05d}", "keys": [f"venue_{n:05d}_key"]}
    | ({"schedule": "0 2 * * *"} if n % 50 == 1 else {})
    for n in range(10_000)
]
SCENARIOS["accounts_10000"] = {
    "env": {"GUESTDATA_ACCOUNTS": json.dumps({"queues": QUEUES, "accounts": MANY})},
    "known_pools": ["default_pool", "guestdata_worker_1"],
    "details": False,
}


@pytest.fixture(scope="module")
def loaded(airflow_home: Path) -> dict[str, dict[str, Any]]:
    results = inspect_dags(airflow_home, list(SCENARIOS.values()))
    return dict(zip(SCENARIOS, results, strict=True))


def tasks(result: dict[str, Any], dag_id: str = DAILY) -> dict[str, dict[str, Any]]:
    return result["dags"][dag_id]["tasks"]


def loads(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The load tasks of the daily DAG and the weekly refresh, by DAG id."""
    return {dag_id: tasks(result, dag_id)["default.accounts.load"] for dag_id in (DAILY, REFRESH)}


def account(result: dict[str, Any], dag_id: str = DAILY, name: str = SINGLE) -> dict[str, Any]:
    """What the load of `name` resolves to on the worker (`operators.AccountLoad`)."""
    return result["dags"][dag_id]["accounts"][name]["load"]


def test_every_file_in_dags_imports_without_errors(loaded: dict[str, dict[str, Any]]) -> None:
    assert list(DAGS_FOLDER.glob("*.py")), "no DAG files"
    for name, result in loaded.items():
        assert result["import_errors"] == {}, name
        if name.startswith("accounts"):
            continue  # test_every_account_gets_its_mapped_task_schema_state_id_and_queue
        # No models for a target other than target-postgres (the "overrides" scenario).
        expected = {DAILY, REFRESH} if name == "overrides" else {DAILY, REFRESH, TRANSFORM}
        assert set(result["dags"]) == expected, name


def test_parsing_reads_one_variable_and_starts_no_process(
    loaded: dict[str, dict[str, Any]],
) -> None:
    """What a parse does, not how long it takes: its time is bench/dag_parse.py's (a wall-time
    bound here failed under a loaded CI machine)."""
    for name, result in loaded.items():
        assert result["subprocesses_at_parse"] == [], name
        assert result["variable_reads"] == ["guestdata_settings"], name


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
LOAD_OPERATOR = "tap_guestdata.airflow.operators.GuestDataLoadOperator"


def test_a_single_account_is_a_plan_of_one_loaded_in_one_meltano_run(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["defaults"]
    daily = tasks(result)
    assert list(daily) == ["default.plan", "default.accounts.load"]
    task = daily["default.accounts.load"]
    assert task["operator"] == LOAD_OPERATOR
    assert task["mapped"] and task["map_index_template"] == "{{ task.label }}"
    assert task["upstream"] == ["default.plan"]
    assert task["blocks"] == ["tap-guestdata", "target-postgres", "guestdata-pg-types:timestamptz"]
    assert (task["meltano_bin"], task["environment"]) == ("meltano", "prod")
    assert task["project_root"] == str(DAGS_FOLDER.parent)
    assert task["reloadable"] is True and task["full_refresh"] is False
    # A backfill's tasks yield the queue's pool to the daily run's (priority.py).
    assert task["priority"] == {"scheduled": 10, "backfill": 1}
    planned = result["dags"][DAILY]["accounts"]
    assert {name: (p["group"], p["batch"]) for name, p in planned.items()} == {
        SINGLE: ("default", 0)
    }
    # The base extractor alone, all streams, the plain state id (no suffix), Meltano's schema.
    assert account(result) == {
        "name": SINGLE,
        "runs": [{"streams": EVERY_STREAM, "state_id_suffix": None}],
        "key_variables": [],
        "env": {},
        "assets": GROUPS,
        "build": True,
        # Its connection if it exists, else Meltano's own key (no connection_id setting).
        "connection_id": "guestdata_default",
        "connection_required": False,
    }


def test_task_shape_groups_runs_the_groups_side_by_side_each_with_its_state_id(
    loaded: dict[str, dict[str, Any]],
) -> None:
    runs = account(loaded["groups"])["runs"]
    assert runs == [{"streams": STREAMS[g], "state_id_suffix": g} for g in GROUPS]
    assert account(loaded["groups"])["assets"] == GROUPS


def test_weekly_refresh_rereads_guests_and_stats_in_full(
    loaded: dict[str, dict[str, Any]],
) -> None:
    refresh = loads(loaded["defaults"])[REFRESH]
    assert refresh["full_refresh"] is True
    assert refresh["reloadable"] is False, "the refresh reads everything anyway"
    assert account(loaded["defaults"], REFRESH)["runs"] == [
        {"streams": STREAMS["refresh"], "state_id_suffix": "refresh"}
    ]
    assert account(loaded["defaults"], REFRESH)["assets"] == ["refresh"]
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
    for dag_id, task in loads(loaded["defaults"]).items():
        assert task["retries"] == 3
        assert task["retry_delay"] == 300
        assert task["retry_exponential_backoff"] == 2.0
        assert task["max_retry_delay"] == 3600
        expected_timeout = 6 * 3600 if dag_id == REFRESH else 3 * 3600
        assert task["execution_timeout"] == expected_timeout


def test_without_configured_keys_the_tasks_use_meltanos_key_in_the_queues_pool(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for dag_id, task in loads(loaded["defaults"]).items():
        assert task["pool"] == "guestdata_default"
        assert account(loaded["defaults"], dag_id)["key_variables"] == []  # Meltano's config
        assert task["env"] == {}, "the tap's default budget store, Airflow's default queue"


@pytest.mark.parametrize("count", range(1, 6))
def test_every_task_uses_every_key(loaded: dict[str, dict[str, Any]], count: int) -> None:
    """The shared budget divides a key between tasks, so no task is held to one key."""
    for dag_id, task in loads(loaded[f"keys_{count}"]).items():
        assert account(loaded[f"keys_{count}"], dag_id)["key_variables"] == KEY_NAMES[:count]
        assert task["pool"] == "guestdata_default"


def test_keys_stay_out_of_the_dag_and_out_of_logs(loaded: dict[str, dict[str, Any]]) -> None:
    result = loaded["overrides"]
    assert "gd_owner_growth" not in json.dumps(result["dags"])
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


def test_settings_come_from_the_variable_then_environment(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["overrides"]
    dags = result["dags"]
    assert dags[DAILY]["schedule"] == "30 4 * * *"  # AIRFLOW_VAR_, not GUESTDATA_SCHEDULE
    assert dags[REFRESH]["schedule"] is None  # "none": manual runs only
    assert dags[DAILY]["catchup"] is True
    assert account(result)["key_variables"] == ["guestdata_k1", "GUESTDATA_TEST_K2"]
    task = tasks(result)["meltano.accounts.load"]
    assert task["retries"] == 0, "the settings Variable, not GUESTDATA_RETRIES"
    assert task["execution_timeout"] == 15 * 60
    assert task["queue"] == "meltano"
    assert task["pool"] == "guestdata_meltano"
    assert task["project_root"] == "/srv/tap-guestdata"
    assert task["env"] == {
        "TAP_GUESTDATA_RATE_BUDGET_STORE": "redis://broker:6379/3",
        "TAP_GUESTDATA_RATE_BUDGET_ADDRESS": "meltano",  # the queue
    }
    # No timestamptz step for a target other than target-postgres.
    assert task["blocks"] == ["tap-guestdata", "target-snowflake"]
    assert (task["meltano_bin"], task["environment"]) == ("/opt/meltano/bin/meltano", "dev")


def test_every_load_publishes_its_accounts_assets(
    loaded: dict[str, dict[str, Any]],
) -> None:
    for task in [*loads(loaded["defaults"]).values(), *loads(loaded["groups"]).values()]:
        assert task["outlets"] == ["guestdata_raw"], "the alias its account's assets go through"
    assert account(loaded["defaults"])["assets"] == GROUPS
    assert account(loaded["defaults"], REFRESH)["assets"] == ["refresh"]


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
    assert task["operator"] == "tap_guestdata.airflow.operators.GuestDataModelsOperator"
    assert task["blocks"] == ["dbt-postgres:build"]
    assert task["accounts"] == [
        {
            "name": SINGLE,
            "runs": [],
            "key_variables": [],
            "env": {},
            "assets": [],
            "build": True,
            "connection_id": None,  # the build reads no key
            "connection_required": True,
        }
    ]
    assert task["pool"] == "default_pool", "no API calls: not in the queue's pool"
    assert task["outlets"] == ["guestdata_models", "guestdata_model_tables"]
    assert task["execution_timeout"] == 3600


def test_every_account_gets_its_mapped_task_schema_state_id_and_queue(
    loaded: dict[str, dict[str, Any]],
) -> None:
    result = loaded["accounts"]
    assert result["dag_warnings"] == [], "every queue pool is one docs/airflow-deploy.md lists"
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
    # A fixed shape whatever the number of accounts: per queue, a plan and a mapped group;
    # then one build of every account's models, after every queue's loads.
    loads = ["worker_1.accounts.load", "worker_2.accounts.load"]
    for dag_id in (DAILY, REFRESH):
        shape = {
            task_id: (task["mapped"], task["upstream"], task["trigger_rule"])
            for task_id, task in tasks(result, dag_id).items()
        }
        assert shape == {
            **{
                f"{queue}.{name}": expected
                for queue in ("worker_1", "worker_2")
                for name, expected in {
                    "plan": (False, [], "all_success"),
                    "accounts.load": (True, [f"{queue}.plan"], "all_success"),
                }.items()
            },
            # Whatever the loads' ends (a failed account's marts are held).
            "dbt_build": (False, loads, "all_done"),
            # Fails the run when a load failed (a run's state is its leaves').
            "all_loaded": (False, loads, "all_success"),
        }, dag_id
        build = tasks(result, dag_id)["dbt_build"]
        assert build["operator"] == "tap_guestdata.airflow.operators.GuestDataModelsOperator"
        assert build["blocks"] == ["dbt-postgres:build"]
        assert build["load_task_ids"] == loads, "whose failed loads it holds"
        assert build["outlets"] == ["guestdata_models", "guestdata_model_tables"]
        assert build["pool"] == "default_pool", "no API calls: not in a queue's pool"
        assert build["queue"] == "worker_1", "the first queue's workers"
        assert build["execution_timeout"] == 3600
        # Every account's raw schema by its default name into one models schema; dbt's files
        # (and the Meltano directory, by the name) of the DAG's own.
        assert build["accounts"] == [
            {
                "name": dag_id,
                "runs": [],
                "key_variables": [],
                "env": {
                    "GUESTDATA_RAW_SCHEMAS": "guestdata\\_%",
                    "GUESTDATA_DBT_SCHEMA": "guestdata_analytics",
                    "DBT_TARGET_PATH": f"target/{dag_id}",
                },
                "assets": [],
                "build": True,  # harbour and quay load every group
                "connection_id": None,  # the build reads no key
                "connection_required": True,
            }
        ]
    # northgate's own DAG loads rewards alone; its run still builds every account's models
    # (they read every raw schema, harbour's complete ones among them).
    assert "dbt_build" in tasks(result, f"{DAILY}_at_0_2_x_x_x")
    queue_of_account: dict[str, str] = {}
    for dag_id, dag in result["dags"].items():
        for name, planned in dag["accounts"].items():
            queue = planned["group"]
            load = dag["tasks"][f"{queue}.accounts.load"]
            assert load["operator"] == LOAD_OPERATOR
            assert load["map_index_template"] == "{{ task.label }}", "labelled by its accounts"
            assert load["pool"] == f"guestdata_{queue}" and load["pool"] in QUEUE_POOLS
            assert load["queue"] == queue
            assert load["env"]["TAP_GUESTDATA_RATE_BUDGET_ADDRESS"] == queue
            # Every task of the queue's group on its queue: a deployment's workers serve those.
            group_tasks = [t for i, t in dag["tasks"].items() if i.startswith(f"{queue}.")]
            assert {t["queue"] for t in group_tasks} == {queue}
            assert load["priority"] == {"scheduled": 10, "backfill": 1}, "daily runs first"
            assert queue_of_account.setdefault(name, queue) == queue, "one queue each"
            entry = next(a for a in ACCOUNTS["accounts"] if a["name"] == name)
            work = planned["load"]
            assert work["key_variables"] == entry["keys"], "every key of its account"
            assert work["connection_id"] == f"guestdata_{name}", "its connection, by default"
            assert work["assets"] == [name], "its account's asset"
            schema = entry.get("target_schema", f"guestdata_{name}")
            base_url = {"TAP_GUESTDATA_BASE_URL": entry["base_url"]} if "base_url" in entry else {}
            assert work["env"] == {"TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": schema, **base_url}
            groups = entry.get("groups", GROUPS)
            if dag_id == REFRESH:
                assert load["full_refresh"] is True
                assert work["runs"] == [
                    {"streams": STREAMS["refresh"], "state_id_suffix": f"{name}-refresh"}
                ]
                continue
            assert load["reloadable"] is True and load["full_refresh"] is False
            # Large: its groups side by side, a state id each; else one run of all its groups.
            if name == "harbour":
                assert work["runs"] == [
                    {"streams": STREAMS[g], "state_id_suffix": f"harbour-{g}"} for g in GROUPS
                ]
            else:
                streams = [s for g in groups for s in STREAMS[g]]
                assert work["runs"] == [{"streams": streams, "state_id_suffix": name}]
    assert set(queue_of_account.values()) == {"worker_1", "worker_2"}


def test_ten_thousand_accounts_in_one_queue_parse_into_a_few_tasks_and_few_batches(
    loaded: dict[str, dict[str, Any]],
) -> None:
    """Parsing builds a fixed set of tasks whatever the number of accounts (the time it takes:
    bench/dag_parse.py); the plan tasks return at most max_map_length (1,024) batches."""
    many = loaded["accounts_10000"]
    assert many["import_errors"] == {} and many["dag_warnings"] == []
    assert set(many["dags"]) == {DAILY, f"{DAILY}_at_0_2_x_x_x", REFRESH}
    for dag_id, dag in many["dags"].items():
        assert list(dag["tasks"]) == [
            "worker_1.plan",
            "worker_1.accounts.load",
            "dbt_build",
            "all_loaded",
        ], dag_id
    own = many["dags"][f"{DAILY}_at_0_2_x_x_x"]["accounts"]
    daily = many["dags"][DAILY]["accounts"]
    assert sorted([*daily, *own]) == sorted(a["name"] for a in MANY), "each in one daily DAG"
    assert len(own) == 200
    refresh = many["dags"][REFRESH]["accounts"]
    assert len(refresh) == 10_000
    # 10,000 accounts: 1,000 batches of 10; 9,800: 980 of 10; 200: a batch each.
    for planned, batches in ((refresh, 1000), (daily, 980), (own, 200)):
        sizes: dict[int, int] = {}
        for entry in planned.values():
            sizes[entry["batch"]] = sizes.get(entry["batch"], 0) + 1
        assert len(sizes) == batches <= 1024
        assert set(sizes.values()) == ({1} if batches == 200 else {10})
