"""`get_provider_info`: tap-guestdata as an Airflow provider (the `apache_airflow_provider`
entry point in pyproject.toml), so `airflow providers list` shows it and the `guestdata`
connection type has its form and `airflow connections test`.

No Airflow import: the providers manager calls it in every Airflow process that lists providers.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "tap-guestdata"
HOOK = "tap_guestdata.airflow.connection.GuestDataHook"
CONNECTION_TYPE = "guestdata"


def package_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # the source tree on sys.path, not installed
        return "0.0.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads: the package, its version, the connection type."""
    return {
        "package-name": PACKAGE,
        "name": "Guest Data",
        "description": "Guest Data Read API to a warehouse with Meltano: the `guestdata` "
        "connection type (base URL and API keys) and the load and models operators.",
        "versions": [package_version()],
        "connection-types": [{"hook-class-name": HOOK, "connection-type": CONNECTION_TYPE}],
        "hooks": [
            {
                "integration-name": "Guest Data",
                "python-modules": [
                    "tap_guestdata.airflow.connection",
                    "tap_guestdata.airflow.hooks",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Guest Data",
                "python-modules": ["tap_guestdata.airflow.operators"],
            }
        ],
    }
