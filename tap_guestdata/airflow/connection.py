"""The `guestdata` connection type: `GuestDataHook`, its form and test, and an account's keys.

A connection holds one account: its base URL (the host, or `base_url` in extra), its API key
(the password) and up to four more of its keys (`api_keys` in extra, a JSON list; spec 5.3: 5
keys an account). It is read through Airflow's secrets backends (Vault, AWS Secrets Manager,
`AIRFLOW_CONN_<ID>`, the metadata database), so a key is never in a DAG file.

`account_credentials` gives a load its keys: the account's connection, else (the old way) the
Variables its accounts entry names, else the worker's environment variables of those names.
Four failures, four exceptions, none with a secret in its message: no such connection
(`ConnectionNotFound`), a secrets backend that raised (`SecretsBackendUnavailable`: Airflow
itself logs it and answers "not found", so the lookup is repeated backend by backend to tell
them apart), no such Variable (`KeyVariableNotFound`), and a key the API refuses (`KeyRejected`,
from `GuestDataHook.check`, which `test_connection` reports).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
from airflow.sdk import BaseHook, Variable
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException
from airflow.sdk.log import mask_secret

from tap_guestdata.http.errors import classify, error_body

if TYPE_CHECKING:
    from airflow.sdk import Connection

CONN_TYPE = "guestdata"
DEFAULT_CONN_ID = "guestdata_default"
KEYS_EXTRA = "api_keys"  # "api_key" in the name: Airflow's masker hides the extra's value too
BASE_URL_EXTRA = "base_url"
LIGHTEST_PATH = "/me"  # spec 4.1: one small object, readable by any valid key (spec 4.5.1)
TEST_TIMEOUT_SECONDS = 30.0


class CredentialsError(AirflowException):
    """An account's keys could not be had; the message says which and why, never a key."""


class ConnectionNotFound(CredentialsError):
    """No secrets backend holds the connection."""


class SecretsBackendUnavailable(CredentialsError):
    """A secrets backend raised (an outage, a timeout, a misconfiguration), not "not found"."""


class KeyVariableNotFound(CredentialsError):
    """The old way: no Variable and no worker environment variable of a key's name."""


class KeyRejected(CredentialsError):
    """The API refused a key (spec 7: 401 for a wrong or revoked key, 403 for no API access)."""


@dataclass(frozen=True)
class Credentials:
    """An account's keys and, when the connection has one, its base URL."""

    keys: tuple[str, ...]
    base_url: str | None
    source: str  # where they came from, for the log: "connection guestdata_x", "Variables a, b"
    labels: tuple[str, ...] = ()  # each key's place ("password", "extra api_keys[0]")

    def __repr__(self) -> str:  # no key in a log line or a traceback's locals
        return f"Credentials({len(self.keys)} keys from {self.source}, base_url={self.base_url!r})"


def failing_backends(lookup: Callable[[Any], object]) -> list[str]:
    """The secrets backends (in Airflow's search order) whose `lookup` raises, by class name.

    Airflow's own lookups log such a failure and go on to the next backend, so a value missing
    everywhere and a backend that is down both end as "not found"; this tells them apart.
    """
    # The same backends, in the same order, as Connection.get and Variable.get use here.
    from airflow.sdk.execution_time.supervisor import ensure_secrets_backend_loaded

    failing = []
    for backend in ensure_secrets_backend_loaded():
        try:
            lookup(backend)
        except Exception as error:  # its message may quote a URL or a token: the type only
            failing.append(f"{type(backend).__name__} ({type(error).__name__})")
    return failing


def get_connection(conn_id: str) -> Connection:
    """The connection through Airflow's secrets backends; `ConnectionNotFound` or
    `SecretsBackendUnavailable` if there is none."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        failing = failing_backends(lambda backend: backend.get_connection(conn_id=conn_id))
        if failing:
            raise SecretsBackendUnavailable(
                f"connection {conn_id!r}: the secrets backend failed: {', '.join(failing)}; "
                "fix the backend (its log has the error), the connection may well exist"
            ) from None
        raise ConnectionNotFound(
            f"connection {conn_id!r} not found in any secrets backend: create it (type "
            f"{CONN_TYPE}, docs/airflow-deploy.md#connections)"
        ) from None


def credentials_of(connection: Connection) -> Credentials:
    """The keys (password first, then extra `api_keys`) and base URL of a connection, masked."""
    extra = connection.extra_dejson
    more = extra.get(KEYS_EXTRA, [])
    if isinstance(more, str):  # the form's extra field holds text: a JSON list as a string
        more = json.loads(more) if more.strip().startswith("[") else [more]
    if not isinstance(more, list) or not all(isinstance(key, str) for key in more):
        raise CredentialsError(
            f"connection {connection.conn_id!r}: extra {KEYS_EXTRA} must be a list of keys"
        )
    keys, labels = [], []
    if connection.password:
        keys.append(connection.password.strip())
        labels.append("password")
    for index, key in enumerate(more):
        if key.strip() and key.strip() not in keys:
            keys.append(key.strip())
            labels.append(f"extra {KEYS_EXTRA}[{index}]")
    if not keys:
        raise CredentialsError(
            f"connection {connection.conn_id!r} holds no API key: set its password"
        )
    for key in keys:
        mask_secret(key)
    return Credentials(
        tuple(keys), base_url_of(connection), f"connection {connection.conn_id}", tuple(labels)
    )


def base_url_of(connection: Connection) -> str | None:
    """`base_url` in extra, else the host (https:// unless it names its scheme), else None."""
    url = connection.extra_dejson.get(BASE_URL_EXTRA) or connection.host or ""
    url = str(url).strip().rstrip("/")
    if not url:
        return None
    if "://" not in url:
        url = f"https://{url}{f':{connection.port}' if connection.port else ''}"
    return url


def api_key(name: str) -> str:
    """The old way: the key in Variable `name`, else env var `name`; masked whatever the name.

    A secrets backend that fails is `SecretsBackendUnavailable`, not "no such Variable".
    """
    value = Variable.get(name, default=None)
    if not value:
        failing = failing_backends(lambda backend: backend.get_variable(key=name))
        if failing:
            raise SecretsBackendUnavailable(
                f"Variable {name!r}: the secrets backend failed: {', '.join(failing)}"
            )
        value = os.environ.get(name)
    if not value:
        raise KeyVariableNotFound(
            f"API key {name!r}: no Airflow Variable or environment variable so named"
        )
    mask_secret(value)
    return str(value)


def account_credentials(
    connection_id: str | None, key_variables: Sequence[str], *, required: bool = True
) -> Credentials | None:
    """An account's keys: its connection, else the Variables `key_variables` (the old way).

    None when neither exists and `required` is false: the key Meltano's own configuration holds
    (a single account deployed before connections). A backend outage never falls back.
    """
    if connection_id is not None:
        try:
            return credentials_of(get_connection(connection_id))
        except ConnectionNotFound:
            if not key_variables and required:
                raise
    if key_variables:
        keys = tuple(api_key(name) for name in key_variables)
        return Credentials(
            keys, None, f"Variables {', '.join(key_variables)}", tuple(key_variables)
        )
    return None


class GuestDataHook(BaseHook):
    """The `guestdata` connection: an account's base URL and keys; `test_connection` reads
    `/me` with each key (the API's lightest request)."""

    conn_name_attr = "guestdata_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Guest Data API"

    def __init__(
        self, guestdata_conn_id: str = DEFAULT_CONN_ID, timeout: float = TEST_TIMEOUT_SECONDS
    ) -> None:
        super().__init__()
        self.guestdata_conn_id = guestdata_conn_id
        self.timeout = timeout

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: base URL, API key, more keys in extra."""
        return {
            "hidden_fields": ["schema", "login", "port"],
            "relabeling": {"host": "Base URL", "password": "API key"},
            "placeholders": {
                "host": "https://api.example.com/api/v1/customer",
                "password": "the account's API key (API Keys page of the dashboard)",
                "extra": json.dumps({KEYS_EXTRA: ["more keys of the same account, up to 4"]}),
            },
        }

    def credentials(self) -> Credentials:
        return credentials_of(get_connection(self.guestdata_conn_id))

    def check(self) -> str:
        """Reads `/me` with every key of the connection; what they reach, or the first
        failure as a `CredentialsError` (`KeyRejected` for a key the API refuses)."""
        credentials = self.credentials()
        if not credentials.base_url:
            raise CredentialsError(
                f"connection {self.guestdata_conn_id!r} has no base URL: set its host"
            )
        accounts = set()
        for label, key in zip(credentials.labels, credentials.keys, strict=True):
            account = read_me(credentials.base_url, key, self.timeout)
            if isinstance(account, str):  # the refusal, described
                raise KeyRejected(
                    f"connection {self.guestdata_conn_id!r}: the key in its {label} {account}"
                )
            accounts.add((account.get("account_id"), account.get("business_name")))
        if len(accounts) > 1:  # spec 5: a key reads its own account; one connection, one account
            raise CredentialsError(
                f"connection {self.guestdata_conn_id!r}: its keys belong to "
                f"{len(accounts)} accounts; one connection holds the keys of one account"
            )
        ((account_id, name),) = accounts
        return (
            f"{len(credentials.keys)} key(s) read account {account_id} ({name}) at "
            f"{credentials.base_url}"
        )

    def test_connection(self) -> tuple[bool, str]:
        """`airflow connections test` and the form's Test button."""
        try:
            return True, self.check()
        except CredentialsError as error:
            return False, str(error)


def read_me(base_url: str, key: str, timeout: float) -> dict[str, Any] | str:
    """GET /me with `key`: the account, or why the API (or the network) refused it, in the
    words of the tap's own error policy (tap_guestdata/http/errors.py, spec 7)."""
    request_text = f"GET {LIGHTEST_PATH}"
    try:
        response = requests.get(
            f"{base_url}{LIGHTEST_PATH}",
            headers={"Authorization": f"Bearer {key}", "Accept": "application/json"},
            timeout=timeout,
        )
    except requests.RequestException as error:  # its message names the URL, never the header
        return f"could not reach {base_url}: {type(error).__name__}"
    if not response.ok:
        return f"was refused: {classify(response, request_text)}"
    body = error_body(response)  # the JSON object, or {}
    if isinstance(body.get("data"), dict):
        account: dict[str, Any] = body["data"]
        return account
    return f"got HTTP {response.status_code} from {request_text} without an account object"
