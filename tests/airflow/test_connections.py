"""Keys from Airflow connections (the `guestdata` type): `airflow connections test` against the
sandbox, the load's keys from the account's connection, Variables as the old way, and one
error of its own for a missing connection, a secrets backend that fails and a revoked key.

Connections are given as `AIRFLOW_CONN_<ID>` (JSON), as a secrets backend would give them; the
outage is a secrets backend class of this module that raises.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.configuration import clear_secrets_backends_cache
from airflow.secrets import BaseSecretsBackend

from dag_testing import airflow_env
from guestdata_sandbox.accounts import OWNER_KEYS, REVOKED_KEY
from guestdata_sandbox.testing import SandboxProcess
from tap_guestdata.airflow.accounts import AccountsError, parse_config
from tap_guestdata.airflow.config import flag
from tap_guestdata.airflow.connection import (
    ConnectionNotFound,
    KeyVariableNotFound,
    SecretsBackendUnavailable,
    account_credentials,
    api_key,
)
from tap_guestdata.airflow.operators import (
    AccountLoad,
    GuestDataLoadOperator,
    GuestDataModelsOperator,
    MeltanoRun,
)

pytestmark = pytest.mark.airflow

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
BACKEND_SECRET = "s3cr3t-vault-token"  # in the failing backend's message: must not be repeated


class OutageBackend(BaseSecretsBackend):
    """A secrets backend that is down (Vault answering 503, say)."""

    def get_conn_value(self, conn_id: str, team_name: str | None = None) -> str | None:
        raise ConnectionError(f"vault: 503 with token {BACKEND_SECRET}")

    def get_variable(self, key: str, team_name: str | None = None) -> str | None:
        raise ConnectionError(f"vault: 503 with token {BACKEND_SECRET}")


def connection(base_url: str, key: str, *more: str) -> str:
    """A `guestdata` connection in Airflow's JSON form."""
    return json.dumps(
        {"conn_type": "guestdata", "host": base_url, "password": key, "extra": {"api_keys": more}}
    )


def connections_test(home: Path, conn_id: str, value: str) -> subprocess.CompletedProcess[str]:
    extra = {
        f"AIRFLOW_CONN_{conn_id.upper()}": value,
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
    }
    return subprocess.run(
        [AIRFLOW, "connections", "test", conn_id],
        env=airflow_env(home, extra),
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def clean_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No connection, Variable or secrets backend of the developer's; the backends rebuilt."""
    import os

    for name in [n for n in os.environ if n.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("AIRFLOW__SECRETS__BACKEND", raising=False)
    clear_secrets_backends_cache()
    yield monkeypatch
    clear_secrets_backends_cache()


def test_airflow_connections_test_passes_against_the_sandbox(
    sandbox: SandboxProcess, tmp_path: Path
) -> None:
    keys = OWNER_KEYS[:2]
    result = connections_test(tmp_path, "guestdata_harbour", connection(sandbox.base_url, *keys))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Connection success" in output
    assert not any(key in output for key in keys)


def test_airflow_connections_test_names_a_revoked_key_and_not_its_value(
    sandbox: SandboxProcess, tmp_path: Path
) -> None:
    value = connection(sandbox.base_url, OWNER_KEYS[0], REVOKED_KEY)
    result = connections_test(tmp_path, "guestdata_harbour", value)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Connection failed" in output
    assert "the key in its extra api_keys[0] was refused: GET /me: 401 unauthenticated" in output
    assert "revoked" in output
    assert REVOKED_KEY not in output and OWNER_KEYS[0] not in output


def test_the_hook_reads_the_account_behind_every_key(
    sandbox: SandboxProcess, clean_backends: pytest.MonkeyPatch
) -> None:
    from tap_guestdata.airflow.connection import GuestDataHook

    value = connection(sandbox.base_url, *OWNER_KEYS[:2])
    clean_backends.setenv("AIRFLOW_CONN_GUESTDATA_HARBOUR", value)
    ok, message = GuestDataHook("guestdata_harbour").test_connection()
    assert ok, message
    assert message.startswith("2 key(s) read account 1001 (")


class RecordingHook:
    """Stands in for MeltanoHook: records the environment of each run."""

    def __init__(self) -> None:
        self.envs: list[dict[str, str]] = []

    def run(self, blocks: Any, *, env: dict[str, str], **run: Any) -> int:
        self.envs.append(env)
        return 0


def load(account: AccountLoad) -> dict[str, str]:
    """The environment the load of `account` gives Meltano (no Meltano run)."""
    operator = GuestDataLoadOperator(
        task_id="load", accounts=[account], project_root="/nowhere", reloadable=False
    )
    hook = RecordingHook()
    operator.hook = hook  # type: ignore[assignment]
    context = {"ti": SimpleNamespace(try_number=1)}
    assert operator.run_account(account, context) == "success"
    (env,) = hook.envs
    return env


HARBOUR_RUN = (MeltanoRun(("account",), "harbour"),)


def test_the_load_runs_meltano_with_the_keys_and_base_url_of_the_connection(
    clean_backends: pytest.MonkeyPatch,
) -> None:
    url = "http://guestdata.example:8080/api/v1/customer"
    clean_backends.setenv("AIRFLOW_CONN_GUESTDATA_HARBOUR", connection(url, "gd_a", "gd_b"))
    clean_backends.setenv("AIRFLOW_VAR_HARBOUR_KEY_1", "gd_old")  # the old way: not used
    account = AccountLoad(
        "harbour",
        HARBOUR_RUN,
        key_variables=("harbour_key_1",),
        env={"TAP_GUESTDATA_BASE_URL": "https://elsewhere"},
        connection_id="guestdata_harbour",
    )
    env = load(account)
    assert json.loads(env["TAP_GUESTDATA_API_KEYS"]) == ["gd_a", "gd_b"]
    assert env["TAP_GUESTDATA_API_KEY"] == "gd_a"
    assert env["TAP_GUESTDATA_BASE_URL"] == url


def test_without_its_connection_an_account_falls_back_to_its_variables(
    clean_backends: pytest.MonkeyPatch,
) -> None:
    clean_backends.setenv("AIRFLOW_VAR_HARBOUR_KEY_1", "gd_old")
    account = AccountLoad(
        "harbour", HARBOUR_RUN, key_variables=("harbour_key_1",), connection_id="guestdata_harbour"
    )
    env = load(account)
    assert json.loads(env["TAP_GUESTDATA_API_KEYS"]) == ["gd_old"]
    assert "TAP_GUESTDATA_BASE_URL" not in env


def test_a_single_account_without_connection_or_variables_keeps_meltanos_own_key(
    clean_backends: pytest.MonkeyPatch,
) -> None:
    account = AccountLoad(
        "guestdata", HARBOUR_RUN, connection_id="guestdata_default", connection_required=False
    )
    assert "TAP_GUESTDATA_API_KEYS" not in load(account)


def test_a_missing_connection_is_named_as_missing(clean_backends: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConnectionNotFound, match="connection 'guestdata_harbour' not found"):
        account_credentials("guestdata_harbour", ())
    with pytest.raises(KeyVariableNotFound, match="'harbour_key_1': no Airflow Variable"):
        account_credentials("guestdata_harbour", ("harbour_key_1",))


def test_a_secrets_backend_outage_is_not_reported_as_missing(
    clean_backends: pytest.MonkeyPatch,
) -> None:
    clean_backends.setenv("AIRFLOW__SECRETS__BACKEND", f"{__name__}.OutageBackend")
    clean_backends.setenv("AIRFLOW_VAR_HARBOUR_KEY_1", "gd_old")
    clear_secrets_backends_cache()
    with pytest.raises(SecretsBackendUnavailable) as raised:
        # No fallback to the Variables: an outage is not a missing connection.
        account_credentials("guestdata_harbour", ("harbour_key_1",))
    message = str(raised.value)
    assert "connection 'guestdata_harbour'" in message
    assert "OutageBackend (ConnectionError)" in message
    assert BACKEND_SECRET not in message
    # The old way: a Variable no backend has, while one backend is down.
    with pytest.raises(SecretsBackendUnavailable, match="Variable 'harbour_key_2'"):
        api_key("harbour_key_2")
    assert api_key("harbour_key_1") == "gd_old", "another backend has it: no outage for it"


def test_accounts_name_their_connection_default_guestdata_name() -> None:
    config = parse_config(
        '[{"name": "harbour"}, {"name": "saltmarsh", "connection": "vault_saltmarsh",'
        ' "keys": ["saltmarsh_key_1"]}]'
    )
    harbour, saltmarsh = config.accounts
    assert (harbour.connection_id, harbour.key_variables) == ("guestdata_harbour", ())
    assert (saltmarsh.connection_id, saltmarsh.key_variables) == (
        "vault_saltmarsh",
        ("saltmarsh_key_1",),
    )
    with pytest.raises(AccountsError, match="connections must be distinct"):
        parse_config('[{"name": "a", "connection": "c"}, {"name": "b", "connection": "c"}]')


def test_env_blocks_full_refresh_and_reloadable_are_rendered_from_the_runs_params() -> None:
    from airflow.sdk import DAG

    with DAG("templated", schedule=None):
        load_task = GuestDataLoadOperator(
            task_id="load",
            accounts=[],
            project_root="/nowhere",
            blocks=["tap-guestdata", "{{ params.target }}"],
            env={"TAP_GUESTDATA_RATE_BUDGET_STORE": "{{ params.store }}"},
            full_refresh="{{ params.full }}",
            reloadable="{{ params.reload }}",
        )
        models_task = GuestDataModelsOperator(
            task_id="models", accounts=[], project_root="/nowhere", blocks="{{ params.build }}"
        )
    params = {
        "target": "target-snowflake",
        "store": "redis://broker:6379/3",
        "full": True,
        "reload": "false",
        "build": "dbt-snowflake:build",
    }
    for task in (load_task, models_task):
        task.render_template_fields({"params": params})  # type: ignore[arg-type]
    assert load_task.blocks == ["tap-guestdata", "target-snowflake"]
    assert load_task.env == {"TAP_GUESTDATA_RATE_BUDGET_STORE": "redis://broker:6379/3"}
    assert flag(load_task.full_refresh) is True
    assert flag(load_task.reloadable) is False
    assert models_task.blocks == "dbt-snowflake:build"  # split into blocks when it executes
