"""The warehouse's credentials from an Airflow connection, as the loader's environment variables.

`warehouse_env(conn_id)` reads the connection through Airflow's secrets backends (connection.py's
`get_connection`: `ConnectionNotFound`, `SecretsBackendUnavailable`) and gives the variables
Meltano's loader reads (`TARGET_POSTGRES_*` or `TARGET_SNOWFLAKE_*`). The pg-types step and dbt
share the loader's namespace (meltano.yml), so one set drives all three. The values go to Meltano
through its process environment only, each secret masked in Airflow's logs first; a Snowflake
private key is passed as its PEM text, never written to a file.

- `postgres`: host, port, login, password, schema (Airflow's name for the database); extra
  `sslmode`. All but port and sslmode are required.
- `snowflake` (the Snowflake provider's fields): login; extra `account`, `database`, `warehouse`,
  `role`, `region`, each also as `extra__snowflake__<name>`; a password, or a key pair: extra
  `private_key_content` (PEM text, or base64 of it), its passphrase in the password (the
  provider's rule) or in extra `private_key_passphrase`. Extra `private_key_file` is refused: a
  key file on the worker is what the connection replaces.
Every error names the connection and the field, never a value.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from airflow.sdk.log import mask_secret

from tap_guestdata.airflow.connection import CredentialsError, get_connection

if TYPE_CHECKING:
    from airflow.sdk import Connection

WarehouseKind = Literal["postgres", "snowflake"]
# conn_type -> kind; "postgresql" is what a connection URI's scheme may leave.
KINDS: dict[str, WarehouseKind] = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "snowflake": "snowflake",
}
SNOWFLAKE_PREFIX = "extra__snowflake__"  # the provider's old form-field names, still accepted
PASSWORD_AUTHENTICATORS = ("", "snowflake")  # the provider's default; the others need a browser


@dataclass(frozen=True)
class WarehouseCredentials:
    """The loader's variables a warehouse connection gives, and where they came from."""

    env: dict[str, str] = field(hash=False)
    kind: WarehouseKind
    source: str  # "connection <id>", for the task's log

    def __repr__(self) -> str:  # no password or key in a log line or a traceback's locals
        return f"WarehouseCredentials({self.kind} from {self.source}, {sorted(self.env)})"


def warehouse_env(conn_id: str) -> WarehouseCredentials:
    """The `TARGET_POSTGRES_*` or `TARGET_SNOWFLAKE_*` variables of connection `conn_id`,
    its secrets masked; `CredentialsError` (or a subclass) naming what is wrong."""
    connection = get_connection(conn_id)
    kind = KINDS.get((connection.conn_type or "").lower())
    if kind is None:
        raise CredentialsError(
            f"connection {conn_id!r} is of type {connection.conn_type!r}: a warehouse "
            f"connection is of type {' or '.join(sorted(set(KINDS.values())))}"
        )
    env = postgres_env(connection) if kind == "postgres" else snowflake_env(connection)
    return WarehouseCredentials(env, kind, f"connection {conn_id}")


def required(connection: Connection, value: object, what: str) -> str:
    """`value` as text, or a `CredentialsError` naming the missing field."""
    text = "" if value is None else str(value).strip()
    if not text:
        raise CredentialsError(
            f"warehouse connection {connection.conn_id!r} ({connection.conn_type}) has no "
            f"{what}: set it"
        )
    return text


def postgres_env(connection: Connection) -> dict[str, str]:
    """Airflow's postgres connection as target-postgres's settings (and so the pg-types step's
    and dbt-postgres's: meltano.yml maps them to PG*)."""
    host = required(connection, connection.host, "host")
    user = required(connection, connection.login, "login")
    password = required(connection, connection.password, "password")
    # Airflow's postgres connection calls the database its schema.
    database = required(connection, connection.schema, "database (the connection's schema)")
    port = str(connection.port or 5432)
    mask_secret(password)
    env = {
        "TARGET_POSTGRES_HOST": host,
        "TARGET_POSTGRES_PORT": port,
        "TARGET_POSTGRES_USER": user,
        "TARGET_POSTGRES_PASSWORD": password,
        "TARGET_POSTGRES_DATABASE": database,
    }
    if host.startswith("/"):
        # A Unix socket directory: target-postgres renders host/port into a URL that mangles
        # it; its sqlalchemy_url passes one through (libpq's host=), as the demo does.
        url = (
            f"postgresql+psycopg://{quote(user, safe='')}:{quote(password, safe='')}@/"
            f"{quote(database, safe='')}?host={quote(host)}&port={port}"
        )
        mask_secret(url)
        env["TARGET_POSTGRES_SQLALCHEMY_URL"] = url
    sslmode = str(connection.extra_dejson.get("sslmode") or "").strip()
    if sslmode:
        env["TARGET_POSTGRES_SSL_ENABLE"] = "false" if sslmode == "disable" else "true"
        env["TARGET_POSTGRES_SSL_MODE"] = sslmode
        env["PGSSLMODE"] = sslmode  # the pg-types step and dbt connect through libpq
    return env


def snowflake_extra(extra: dict[str, Any], name: str) -> str:
    """An extra field as the provider reads it: `name`, else `extra__snowflake__<name>`."""
    value = extra.get(name)
    if value in (None, ""):
        value = extra.get(f"{SNOWFLAKE_PREFIX}{name}")
    return "" if value is None else str(value).strip()


def snowflake_env(connection: Connection) -> dict[str, str]:
    """The Snowflake provider's connection as target-snowflake's settings (and dbt-snowflake's:
    meltano.yml maps them to the names transform/profiles.yml reads)."""
    extra = connection.extra_dejson
    authenticator = str(extra.get("authenticator") or "").strip().lower()
    if authenticator not in PASSWORD_AUTHENTICATORS:
        raise CredentialsError(
            f"warehouse connection {connection.conn_id!r}: authenticator {authenticator!r} is "
            "not supported by the loader; use a password or a key pair (private_key_content)"
        )
    if snowflake_extra(extra, "private_key_file"):
        # A path means a key file on the worker's disk, which this connection exists to avoid.
        raise CredentialsError(
            f"warehouse connection {connection.conn_id!r}: extra private_key_file (a key file "
            "on the worker) is not supported; put the key in extra private_key_content"
        )
    account = required(connection, snowflake_extra(extra, "account"), "extra account")
    region = snowflake_extra(extra, "region")
    if region:  # the provider's account identifier: <account>.<region>
        account = f"{account}.{region}"
    env = {
        "TARGET_SNOWFLAKE_ACCOUNT": account,
        "TARGET_SNOWFLAKE_USER": required(connection, connection.login, "login"),
        "TARGET_SNOWFLAKE_DATABASE": required(
            connection, snowflake_extra(extra, "database"), "extra database"
        ),
    }
    for name in ("warehouse", "role"):
        if value := snowflake_extra(extra, name):
            env[f"TARGET_SNOWFLAKE_{name.upper()}"] = value
    key_text = snowflake_extra(extra, "private_key_content")
    password = (connection.password or "").strip()
    if key_text:
        # The provider's rule: with a key, the password is the key's passphrase.
        passphrase = snowflake_extra(extra, "private_key_passphrase") or password
        for secret in (key_text, passphrase):
            mask_secret(secret)
        pem = private_key_pem(connection, key_text, passphrase)
        for line in [pem, *pem.splitlines()]:  # a log line holds one line of the key at most
            mask_secret(line)
        env["TARGET_SNOWFLAKE_PRIVATE_KEY"] = pem
        if passphrase:
            env["TARGET_SNOWFLAKE_PRIVATE_KEY_PASSPHRASE"] = passphrase
    else:
        env["TARGET_SNOWFLAKE_PASSWORD"] = required(
            connection, password, "password and no extra private_key_content"
        )
        mask_secret(env["TARGET_SNOWFLAKE_PASSWORD"])
    return env


def private_key_pem(connection: Connection, key_text: str, passphrase: str) -> str:
    """The key's PEM text, from PEM or base64 of PEM (the provider's two forms), checked
    against its passphrase now so a bad key fails here, by name, and not inside dbt.

    PEM, because dbt-snowflake reads a private_key not starting with "-" as base64 DER, and
    target-snowflake takes PEM too.
    """
    where = f"warehouse connection {connection.conn_id!r}: extra private_key_content"
    text = key_text.replace("\\n", "\n")  # a one-line JSON value with its newlines escaped
    if "-----BEGIN" not in text:
        try:
            text = base64.b64decode(text, validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise CredentialsError(f"{where} is neither PEM text nor base64 of it") from None
        if "-----BEGIN" not in text:
            raise CredentialsError(f"{where} is base64, but not of a PEM key")
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        load_pem_private_key(text.encode(), password=passphrase.encode() or None)
    except TypeError:  # encrypted without a passphrase, or a passphrase for a plain key
        mismatch = (
            "is not encrypted, but the connection gives a passphrase"
            if passphrase
            else "is encrypted, but the connection gives no passphrase"
        )
        raise CredentialsError(
            f"{where}: the key {mismatch} (with a key, the password is its passphrase, or "
            "extra private_key_passphrase)"
        ) from None
    except ValueError:  # not a key, or the wrong passphrase; the library's words name neither
        raise CredentialsError(
            f"{where} could not be read: not a private key, or the wrong passphrase"
        ) from None
    return text.strip() + "\n"
