"""The warehouse's credentials from an Airflow connection (tap_guestdata/airflow/warehouse.py):
a `postgres` or `snowflake` connection gives the loader's variables, masked in Airflow's logs;
a Snowflake key pair is passed as PEM text; a wrong type, a missing field, a missing connection
and a failing secrets backend each give an error of their own, with no secret in it; the
operators merge the variables under each account's own.

Connections are given as `AIRFLOW_CONN_<ID>` (JSON), as a secrets backend would give them. The
real run (a load and the models' build into PostgreSQL with the connection's credentials only)
is in test_dag_run.py.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk._shared.secrets_masker import redact
from airflow.sdk.configuration import clear_secrets_backends_cache
from airflow.secrets import BaseSecretsBackend
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tap_guestdata.airflow.connection import (
    ConnectionNotFound,
    CredentialsError,
    SecretsBackendUnavailable,
)
from tap_guestdata.airflow.operators import AccountLoad, GuestDataModelsOperator, MeltanoRun
from tap_guestdata.airflow.warehouse import warehouse_env

pytestmark = pytest.mark.airflow

PG_PASSWORD = "pg-Warehouse-s3cret"
SF_PASSWORD = "sf-Warehouse-s3cret"
PASSPHRASE = "key-passphrase-s3cret"
BACKEND_SECRET = "vault-token-s3cret"
POSTGRES = {
    "conn_type": "postgres",
    "host": "warehouse.internal",
    "port": 6432,
    "login": "loader",
    "password": PG_PASSWORD,
    "schema": "analytics",  # Airflow's postgres connection: the database
    "extra": {"sslmode": "verify-full"},
}


class OutageBackend(BaseSecretsBackend):
    """A secrets backend that is down (Vault answering 503, say)."""

    def get_conn_value(self, conn_id: str, team_name: str | None = None) -> str | None:
        raise ConnectionError(f"vault: 503 with token {BACKEND_SECRET}")


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No connection or secrets backend of the developer's; the backends rebuilt."""
    for name in [n for n in os.environ if n.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("AIRFLOW__SECRETS__BACKEND", raising=False)
    clear_secrets_backends_cache()
    yield monkeypatch
    clear_secrets_backends_cache()


def given(backends: pytest.MonkeyPatch, conn_id: str, connection: dict[str, Any]) -> None:
    backends.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


def pem_key(passphrase: str | None) -> str:
    """A new RSA key's PEM text (PKCS#8), encrypted with `passphrase` if given."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    encryption = (
        serialization.BestAvailableEncryption(passphrase.encode())
        if passphrase
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    ).decode()


def snowflake(password: str | None = SF_PASSWORD, **extra: str) -> dict[str, Any]:
    return {
        "conn_type": "snowflake",
        "login": "LOADER",
        "password": password,
        "extra": {"account": "myorg-acct", "database": "RAW", **extra},
    }


def test_a_postgres_connection_gives_the_loaders_variables_masked(
    backends: pytest.MonkeyPatch,
) -> None:
    given(backends, "warehouse", POSTGRES)
    credentials = warehouse_env("warehouse")
    assert (credentials.kind, credentials.source) == ("postgres", "connection warehouse")
    assert credentials.env == {
        "TARGET_POSTGRES_HOST": "warehouse.internal",
        "TARGET_POSTGRES_PORT": "6432",
        "TARGET_POSTGRES_USER": "loader",
        "TARGET_POSTGRES_PASSWORD": PG_PASSWORD,
        "TARGET_POSTGRES_DATABASE": "analytics",
        "TARGET_POSTGRES_SSL_ENABLE": "true",
        "TARGET_POSTGRES_SSL_MODE": "verify-full",
        "PGSSLMODE": "verify-full",
    }
    assert PG_PASSWORD not in repr(credentials)
    # Airflow's masker hides it in any log line, whatever the line's name.
    assert redact(f"connect with {PG_PASSWORD} to analytics") == "connect with *** to analytics"


def test_a_postgres_socket_directory_reaches_the_loader_as_its_url(
    backends: pytest.MonkeyPatch,
) -> None:
    given(backends, "warehouse", {**POSTGRES, "host": "/run/postgresql", "extra": {}})
    env = warehouse_env("warehouse").env
    assert env["TARGET_POSTGRES_SQLALCHEMY_URL"] == (
        f"postgresql+psycopg://loader:{PG_PASSWORD}@/analytics?host=/run/postgresql&port=6432"
    )
    assert "***" in str(redact(env["TARGET_POSTGRES_SQLALCHEMY_URL"]))


def test_a_snowflake_connection_with_a_password_and_the_providers_prefixed_extras(
    backends: pytest.MonkeyPatch,
) -> None:
    connection = snowflake()
    connection["extra"] = {
        "extra__snowflake__account": "myorg-acct",
        "extra__snowflake__database": "RAW",
        "extra__snowflake__warehouse": "LOADING",
        "role": "LOADER_ROLE",
    }
    given(backends, "snowflake_warehouse", connection)
    credentials = warehouse_env("snowflake_warehouse")
    assert credentials.kind == "snowflake"
    assert credentials.env == {
        "TARGET_SNOWFLAKE_ACCOUNT": "myorg-acct",
        "TARGET_SNOWFLAKE_USER": "LOADER",
        "TARGET_SNOWFLAKE_PASSWORD": SF_PASSWORD,
        "TARGET_SNOWFLAKE_DATABASE": "RAW",
        "TARGET_SNOWFLAKE_WAREHOUSE": "LOADING",
        "TARGET_SNOWFLAKE_ROLE": "LOADER_ROLE",
    }
    assert SF_PASSWORD not in repr(credentials)
    assert SF_PASSWORD not in str(redact(f"password={SF_PASSWORD}"))


@pytest.mark.parametrize("form", ["pem", "base64"])
def test_a_snowflake_key_pair_reaches_the_loader_as_pem_text_with_its_passphrase(
    backends: pytest.MonkeyPatch, form: str
) -> None:
    """The provider's rule: with a key, the password is its passphrase. The key is passed as
    PEM text in the environment (what dbt-snowflake and target-snowflake both read), no path."""
    pem = pem_key(PASSPHRASE)
    content = pem if form == "pem" else base64.b64encode(pem.encode()).decode()
    given(backends, "sf", snowflake(PASSPHRASE, private_key_content=content))
    env = warehouse_env("sf").env
    assert env["TARGET_SNOWFLAKE_PRIVATE_KEY"] == pem
    assert env["TARGET_SNOWFLAKE_PRIVATE_KEY_PASSPHRASE"] == PASSPHRASE
    assert "TARGET_SNOWFLAKE_PASSWORD" not in env, "a password beside a key: the target refuses"
    assert not any(name.endswith("_PATH") for name in env), "no key file"
    key_line = pem.splitlines()[3]
    assert key_line not in str(redact(f"key line: {key_line}"))
    assert PASSPHRASE not in str(redact(f"passphrase {PASSPHRASE}"))


def test_an_unencrypted_key_needs_no_passphrase_and_an_extra_passphrase_is_accepted(
    backends: pytest.MonkeyPatch,
) -> None:
    given(backends, "plain", snowflake(None, private_key_content=pem_key(None)))
    assert "TARGET_SNOWFLAKE_PRIVATE_KEY_PASSPHRASE" not in warehouse_env("plain").env
    encrypted = pem_key(PASSPHRASE)
    extra = {"private_key_content": encrypted, "private_key_passphrase": PASSPHRASE}
    given(backends, "in_extra", snowflake(None, **extra))
    env = warehouse_env("in_extra").env
    assert env["TARGET_SNOWFLAKE_PRIVATE_KEY_PASSPHRASE"] == PASSPHRASE


def test_another_connection_type_names_the_supported_ones(backends: pytest.MonkeyPatch) -> None:
    given(backends, "mysql_warehouse", {**POSTGRES, "conn_type": "mysql"})
    with pytest.raises(CredentialsError) as raised:
        warehouse_env("mysql_warehouse")
    message = str(raised.value)
    assert message == (
        "connection 'mysql_warehouse' is of type 'mysql': a warehouse connection is of type "
        "postgres or snowflake"
    )


@pytest.mark.parametrize(
    ("conn_id", "connection", "missing"),
    [
        ("pg_no_host", {**POSTGRES, "host": None}, "host"),
        ("pg_no_database", {**POSTGRES, "schema": ""}, "database (the connection's schema)"),
        ("pg_no_password", {**POSTGRES, "password": None}, "password"),
        ("sf_no_account", {**snowflake(), "extra": {"database": "RAW"}}, "extra account"),
        ("sf_no_database", {**snowflake(), "extra": {"account": "a"}}, "extra database"),
        ("sf_no_auth", snowflake(None), "password and no extra private_key_content"),
    ],
)
def test_a_missing_field_is_named_with_its_connection_and_no_secret(
    backends: pytest.MonkeyPatch, conn_id: str, connection: dict[str, Any], missing: str
) -> None:
    given(backends, conn_id, connection)
    with pytest.raises(CredentialsError) as raised:
        warehouse_env(conn_id)
    message = str(raised.value)
    kind = connection["conn_type"]
    assert message == f"warehouse connection {conn_id!r} ({kind}) has no {missing}: set it"
    assert PG_PASSWORD not in message and SF_PASSWORD not in message


def test_a_key_file_a_wrong_passphrase_and_a_bad_key_are_refused_by_name(
    backends: pytest.MonkeyPatch,
) -> None:
    pem = pem_key(PASSPHRASE)
    cases = {
        "key_file": (
            snowflake(None, private_key_file="/keys/rsa_key.p8"),
            "extra private_key_file (a key file on the worker) is not supported",
        ),
        "wrong_passphrase": (
            snowflake("not-the-passphrase", private_key_content=pem),
            "could not be read: not a private key, or the wrong passphrase",
        ),
        "no_passphrase": (
            snowflake(None, private_key_content=pem),
            "the key is encrypted, but the connection gives no passphrase",
        ),
        "not_a_key": (
            snowflake(None, private_key_content="not a key at all!"),
            "is neither PEM text nor base64 of it",
        ),
        "browser": (snowflake(authenticator="externalbrowser"), "authenticator 'externalbrowser'"),
    }
    for conn_id, (connection, expected) in cases.items():
        given(backends, conn_id, connection)
        with pytest.raises(CredentialsError) as raised:
            warehouse_env(conn_id)
        message = str(raised.value)
        assert f"warehouse connection {conn_id!r}" in message and expected in message, message
        assert PASSPHRASE not in message and "not-the-passphrase" not in message
        assert pem.splitlines()[1] not in message


def test_a_missing_connection_and_a_backend_outage_each_say_so(
    backends: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConnectionNotFound, match="connection 'warehouse' not found"):
        warehouse_env("warehouse")
    given(backends, "warehouse", POSTGRES)  # in the environment, but the next backend is down
    backends.setenv("AIRFLOW__SECRETS__BACKEND", f"{__name__}.OutageBackend")
    clear_secrets_backends_cache()
    assert warehouse_env("warehouse").env["TARGET_POSTGRES_DATABASE"] == "analytics"
    with pytest.raises(SecretsBackendUnavailable) as raised:
        warehouse_env("vault_warehouse")
    message = str(raised.value)
    assert "connection 'vault_warehouse'" in message
    assert "OutageBackend (ConnectionError)" in message
    assert BACKEND_SECRET not in message


class RecordingHook:
    """Stands in for MeltanoHook: records the environment of each run."""

    envs: list[dict[str, str]] = []

    def __init__(self, *args: Any) -> None:
        pass

    def run(self, blocks: Any, *, env: dict[str, str], **run: Any) -> int:
        self.envs.append(env)
        return 0


def test_the_build_reads_the_connection_once_and_an_accounts_env_wins(
    backends: pytest.MonkeyPatch,
) -> None:
    given(backends, "warehouse", POSTGRES)
    backends.setattr("tap_guestdata.airflow.operators.MeltanoHook", RecordingHook)
    RecordingHook.envs = []
    account = AccountLoad(
        "models",
        (MeltanoRun(()),),
        env={"TARGET_POSTGRES_DATABASE": "its_own", "GUESTDATA_PG_SCHEMA": "guestdata"},
    )
    operator = GuestDataModelsOperator(
        task_id="dbt_build",
        accounts=[account],
        project_root="/nowhere",
        blocks=["dbt-postgres:build"],
        env={"TARGET_POSTGRES_HOST": "the-workers-own", "GUESTDATA_DBT_THREADS": "2"},
        warehouse_conn_id="{{ params.warehouse }}",
    )
    operator.render_template_fields({"params": {"warehouse": "warehouse"}})  # type: ignore[arg-type]
    assert operator.warehouse_conn_id == "warehouse"
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="dbt_build", map_index=-1, try_number=1)
    assert operator.execute({"ti": ti}) == ["models"]
    (env,) = RecordingHook.envs
    assert operator.warehouse_credentials is not None
    assert env == {
        **operator.warehouse_credentials.env,  # over the operator's env
        "TARGET_POSTGRES_DATABASE": "its_own",  # under the account's
        "GUESTDATA_PG_SCHEMA": "guestdata",
        "GUESTDATA_DBT_THREADS": "2",
    }
    assert env["TARGET_POSTGRES_HOST"] == "warehouse.internal"
