"""A user's own `dags/` file, the README's, builds today's DAGs from the installed package.

The file lives in a folder of its own and only calls `tap_guestdata.airflow.build_dags`; the
package is the release's wheel with the `airflow` extra, installed into a fresh virtualenv.
Under every scenario of test_dags.py (plus the two Variables that ask for this repository's
extra blocks) Airflow's DagBag finds the same DAGs, tasks, pools and settings as it finds in
this repository's dags/; without those Variables the DAGs are the same less those blocks.
The factory's other arguments (environment, target, keys, accounts, settings) give what the
same Variables give, a Variable still beats an argument, and without a project root the file
fails to import with the reason. The stream-group extractors docs/airflow-deploy.md tells a user to
add are meltano.yml's.
"""

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dag_testing import PROJECT_ROOT, inspect_dags
from support.release import Release, fresh_venv
from test_dags import ACCOUNTS, DAILY, QUEUE_POOLS, REFRESH, SCENARIOS, known_pools

pytestmark = pytest.mark.airflow


def readme_dags_file() -> tuple[str, str]:
    """The DAG file of the README's "Use it in your own stack", and the project root it names."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Use it in your own stack\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)\n *```", section, re.DOTALL)
    (root,) = re.findall(r'project_root="([^"]+)"', block)
    return textwrap.dedent(block) + "\n", root


USER_DAGS_FILE, USER_PROJECT = readme_dags_file()
# What this repository's dags/ file asks for by argument, asked for by an operator.
THIS_PROJECTS_BLOCKS = {
    "AIRFLOW_VAR_GUESTDATA_MELTANO_AFTER_LOAD": "auto",
    "AIRFLOW_VAR_GUESTDATA_MELTANO_TRANSFORM": "auto",
}


@pytest.fixture(scope="module")
def user_python(release: Release, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh virtualenv with the wheel and its airflow extra, as an Airflow image would."""
    venv = tmp_path_factory.mktemp("user-airflow") / "venv"
    return str(fresh_venv(venv, f"{release.wheel}[airflow]"))


def dags_folder(tmp_path_factory: pytest.TempPathFactory, text: str) -> Path:
    folder = tmp_path_factory.mktemp("user-airflow") / "dags"
    folder.mkdir()
    (folder / "guestdata.py").write_text(text)
    return folder


@pytest.fixture(scope="module")
def user_dags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dags_folder(tmp_path_factory, USER_DAGS_FILE)


def without_project_root(result: dict[str, Any]) -> dict[str, Any]:
    """The result, less what differs by design: the project root (tasks') and timing."""
    result = copy.deepcopy(result)
    del result["parse_seconds"], result["factory_file"]
    for dag in result["dags"].values():
        for task in dag["tasks"].values():
            if task["project_root"] in (USER_PROJECT, str(PROJECT_ROOT)):
                task["project_root"] = "<project root>"
    return result


def test_a_users_dags_file_builds_todays_dags_tasks_and_pools(
    user_python: str, user_dags: Path, airflow_home: Path
) -> None:
    ours = inspect_dags(airflow_home, list(SCENARIOS.values()))
    theirs_scenarios = [
        {
            **scenario,
            "env": {**THIS_PROJECTS_BLOCKS, **scenario["env"]},
            "dags_folder": str(user_dags),
        }
        for scenario in SCENARIOS.values()
    ]
    theirs = inspect_dags(airflow_home, theirs_scenarios, python=user_python)
    for name, mine, users in zip(SCENARIOS, ours, theirs, strict=True):
        assert users["import_errors"] == {}, name
        # The factory came from the fresh virtualenv, not from this checkout.
        assert users["factory_file"].startswith(str(Path(user_python).parents[1])), name
        assert without_project_root(users) == without_project_root(mine), name
    defaults = theirs[list(SCENARIOS).index("defaults")]
    tasks = defaults["dags"][DAILY]["tasks"]
    assert tasks["default.accounts.load"]["project_root"] == USER_PROJECT
    assert sorted(tasks) == ["default.accounts.load", "default.plan"]


def test_without_this_projects_blocks_the_dags_load_and_stop(
    user_python: str, user_dags: Path, airflow_home: Path
) -> None:
    """A user's project has no timestamptz step or dbt models of ours: by default the loads end
    at the loader and there is no transform DAG."""
    scenario = {**SCENARIOS["defaults"], "dags_folder": str(user_dags)}
    (result,) = inspect_dags(airflow_home, [scenario], python=user_python)
    assert result["import_errors"] == {}
    assert result["dag_warnings"] == []
    assert set(result["dags"]) == {DAILY, REFRESH}
    load = result["dags"][DAILY]["tasks"]["default.accounts.load"]
    assert load["blocks"] == ["tap-guestdata", "target-postgres"]
    assert load["pool"] == "guestdata_default"


# build_dags arguments -> the environment variables that give this repository's dags/ the same.
ARGUMENTS = {
    "keys": (
        'environment="dev", target="target-snowflake", api_key_variables=["k_one", "k_two"], '
        'settings={"key_cooldown_seconds": 0, "catchup": True}',
        {
            "GUESTDATA_MELTANO_ENVIRONMENT": "dev",
            "GUESTDATA_MELTANO_TARGET": "target-snowflake",
            "GUESTDATA_API_KEY_VARIABLES": "k_one,k_two",
            "GUESTDATA_KEY_COOLDOWN_SECONDS": "0",
            "GUESTDATA_CATCHUP": "true",
        },
        known_pools(),
    ),
    "accounts": (
        f"accounts={ACCOUNTS!r}",
        {"GUESTDATA_ACCOUNTS": json.dumps(ACCOUNTS)},
        ["default_pool", *QUEUE_POOLS],
    ),
}


def test_the_factorys_arguments_are_the_settings_and_variables_still_win(
    user_python: str, airflow_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ours, theirs = [], []
    for arguments, env, pools in ARGUMENTS.values():
        text = USER_DAGS_FILE.replace(
            f'project_root="{USER_PROJECT}"', f'project_root="{USER_PROJECT}", {arguments}'
        )
        folder = dags_folder(tmp_path_factory, text)
        ours.append({"env": {**env, **THIS_PROJECTS_BLOCKS}, "known_pools": pools})
        theirs.append(
            {"env": THIS_PROJECTS_BLOCKS, "known_pools": pools, "dags_folder": str(folder)}
        )
    # An operator's Variable beats the file's argument.
    override = {"AIRFLOW_VAR_GUESTDATA_MELTANO_ENVIRONMENT": "staging"}
    theirs.append({**theirs[0], "env": {**THIS_PROJECTS_BLOCKS, **override}})
    # No project root anywhere: the file does not import, and says why.
    rootless = dags_folder(
        tmp_path_factory, USER_DAGS_FILE.replace(f'project_root="{USER_PROJECT}"', "")
    )
    theirs.append({"env": {}, "dags_folder": str(rootless)})
    *results, overridden, unrooted = inspect_dags(airflow_home, theirs, python=user_python)
    for name, mine, users in zip(ARGUMENTS, inspect_dags(airflow_home, ours), results, strict=True):
        assert users["import_errors"] == {} and users["dag_warnings"] == [], name
        assert without_project_root(users) == without_project_root(mine), name
    assert overridden["dags"][DAILY]["tasks"]["default.accounts.load"]["environment"] == "staging"
    (error,) = unrooted["import_errors"].values()
    assert "Meltano project root unknown" in error and "MELTANO_PROJECT_ROOT" in error


def test_a_users_project_needs_tap_guestdata_alone() -> None:
    """The tasks choose their streams (TAP_GUESTDATA__SELECT) and state ids (--state-id-suffix)
    themselves: the docs ask for no inheriting extractor, and the groups cover the tap's
    streams exactly once."""
    from tap_guestdata.airflow.plan import streams_of
    from tap_guestdata.run.catalog import GROUPS
    from tap_guestdata.tap import STREAM_TYPES

    for page in (PROJECT_ROOT / "docs").glob("airflow*.md"):
        assert "inherit_from: tap-guestdata" not in page.read_text(), page.name
    grouped = streams_of(GROUPS)
    assert sorted(grouped) == sorted(stream.name for stream in STREAM_TYPES)
    assert len(grouped) == len(set(grouped))


def test_a_dag_written_by_hand_with_the_operator_is_what_the_docs_say(
    airflow_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """docs/airflow-reference.md's "Writing a DAG by hand": the operator with one typed account,
    and a DAG of the user's scheduled on that account's asset; no settings, so no Variable
    read."""
    docs = (PROJECT_ROOT / "docs" / "airflow-reference.md").read_text()
    section = docs.split("## Writing a DAG by hand", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)\n```", section, re.DOTALL)
    folder = dags_folder(tmp_path_factory, block)
    scenario = {"dags_folder": str(folder), "known_pools": known_pools()}
    (result,) = inspect_dags(airflow_home, [scenario])
    assert result["import_errors"] == {} and result["dag_warnings"] == []
    assert result["variable_reads"] == []
    load = result["dags"]["harbour_core"]["tasks"]["load"]
    assert load["operator"] == "tap_guestdata.airflow.operators.GuestDataLoadOperator"
    assert load["accounts"] == [
        {
            "name": "harbour",
            "runs": [
                {
                    "streams": ["account", "venues", "guests", "read_windows"],
                    "state_id_suffix": "harbour-core",
                }
            ],
            "key_variables": [],
            "env": {"TARGET_POSTGRES_DEFAULT_TARGET_SCHEMA": "guestdata_harbour"},
            "assets": ["harbour"],
            "build": True,
            "connection_id": "guestdata_harbour",
            "connection_required": True,
        }
    ]
    assert load["outlets"] == ["guestdata_raw"], "its account's asset, through the alias"
    assert (load["pool"], load["retries"], load["execution_timeout"]) == (
        "guestdata_default",
        3,
        3 * 3600,
    )
    assert result["dags"]["harbour_report"]["asset_condition"] == "guestdata_raw_harbour"
