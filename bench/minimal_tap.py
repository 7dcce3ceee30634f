"""A minimal singer-sdk tap over the same list endpoints: the SDK's floor, as a yardstick for
tap-guestdata's own overhead (and a stand-in to exercise the harness before the tap exists).

    python bench/minimal_tap.py --config CONFIG [--catalog CATALOG]

Config: base_url, api_key, streams (optional list of LIST_ENDPOINTS names). Schemas are
inferred from the first page of each endpoint (every property nullable; ISO timestamps as
date-time), so no schema files are needed. Paging: page numbers until meta.last_page,
per_page=200. No state, no rate limiting.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import requests
from singer_sdk import RESTStream, Stream, Tap
from singer_sdk import typing as th
from singer_sdk.authenticators import BearerTokenAuthenticator
from singer_sdk.pagination import PageNumberPaginator

from harness import LIST_ENDPOINTS, PER_PAGE_MAX

_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def infer_schema(records: list[dict[str, Any]]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for record in records:
        for name, value in record.items():
            if value is None and name in properties:
                continue
            properties[name] = {"type": [_json_type(value), "null"]}
            if isinstance(value, str) and _TIMESTAMP.match(value):
                properties[name]["format"] = "date-time"
            if isinstance(value, list):
                properties[name]["items"] = {}
    return {"type": "object", "properties": properties}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


class LastPagePaginator(PageNumberPaginator):
    def has_more(self, response: requests.Response) -> bool:
        meta = response.json()["meta"]
        return bool(meta["current_page"] < meta["last_page"])


class ListStream(RESTStream):
    primary_keys = ("id",)
    records_jsonpath = "$.data[*]"

    def __init__(self, tap: Tap, name: str, path: str) -> None:
        self.path = path
        super().__init__(tap, name=name, schema=self._infer(tap, path))

    @staticmethod
    def _infer(tap: Tap, path: str) -> dict[str, Any]:
        response = requests.get(
            f"{tap.config['base_url']}{path}",
            params={"per_page": PER_PAGE_MAX},
            headers={"Authorization": f"Bearer {tap.config['api_key']}"},
            timeout=60,
        )
        response.raise_for_status()
        return infer_schema(response.json()["data"])

    @property
    def url_base(self) -> str:
        return str(self.config["base_url"])

    @cached_property
    def authenticator(self) -> BearerTokenAuthenticator:
        return BearerTokenAuthenticator(token=self.config["api_key"])

    def get_new_paginator(self) -> LastPagePaginator:
        return LastPagePaginator(start_value=1)

    def get_url_params(self, context: Any, next_page_token: Any) -> dict[str, Any]:
        return {"per_page": PER_PAGE_MAX, "page": next_page_token or 1}


class MinimalTap(Tap):
    name = "tap-minimal"
    config_jsonschema = th.PropertiesList(
        th.Property("base_url", th.StringType, required=True),
        th.Property("api_key", th.StringType, required=True),
        th.Property("streams", th.ArrayType(th.StringType), description="default: all"),
    ).to_dict()

    def discover_streams(self) -> list[Stream]:
        wanted = self.config.get("streams") or list(LIST_ENDPOINTS)
        return [ListStream(self, name, LIST_ENDPOINTS[name]) for name in wanted]


if __name__ == "__main__":
    MinimalTap.cli()
