"""Paging (spec 2.5, 4.3): page numbers up to meta.last_page, and newest-first lists whose pages
shift when rows are added at the head while we page (spec 4.2)."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import requests
from singer_sdk.exceptions import FatalAPIError
from singer_sdk.pagination import PageNumberPaginator

from tap_guestdata.http.errors import BASE_PATH, describe_request

PER_PAGE = 200  # spec 4.3: the largest page; fewest requests
PAGES_REMEMBERED = 5  # NewestFirstPages: how far back a row given twice can sit
BODY_ATTRIBUTE = "_guestdata_body"  # the parsed JSON, kept on the response when validated


def body_of(response: requests.Response) -> dict[str, Any]:
    body: dict[str, Any] | None = getattr(response, BODY_ATTRIBUTE, None)
    return body if body is not None else dict(orjson.loads(response.content))


class LastPagePaginator(PageNumberPaginator):
    """Page numbers 1, 2, ... up to meta.last_page (spec 2.5, 4.1 "read meta.last_page to know
    when to stop"): never a request past it, and none of the pages before it skipped, even
    an empty one (or one whose rows all came before, see NewestFirstPages)."""

    def has_more(self, response: requests.Response) -> bool:
        last_page = self.last_page(response)
        return last_page is not None and self.current_value < last_page

    def continue_if_empty(self, response: requests.Response) -> bool:
        return self.has_more(response)

    @staticmethod
    def last_page(response: requests.Response) -> int | None:
        """meta.last_page; None for an unpaged answer (spec 4.1: /venues paging not shown)."""
        meta = body_of(response).get("meta")
        if not isinstance(meta, dict) or "last_page" not in meta:
            return None
        value = meta["last_page"]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
        where = describe_request(response.request, BASE_PATH)
        raise FatalAPIError(f"{where}: meta.last_page is {value!r}, not a page number")


def listing_total(response: requests.Response) -> int | None:
    """meta.total (spec 2.5), for the plan only: None when absent or not a count."""
    meta = body_of(response).get("meta")
    value = meta.get("total") if isinstance(meta, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class NewestFirstPages:
    """Drops rows a newest-first listing gives twice (spec 4.2: lists are newest first).

    Rows added at the head between two page requests push rows of one page onto the next, so
    a page can start with rows already given. Those are dropped by id; only ids given by this
    listing's last few pages are remembered, and only the start of a page is checked. A row
    is never dropped unless this listing gave that very id before.
    """

    def __init__(self, pages_remembered: int = PAGES_REMEMBERED) -> None:
        self._pages: deque[set[Any]] = deque(maxlen=pages_remembered)

    def fresh(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        start = 0
        while start < len(rows) and self._given(rows[start].get("id")):
            start += 1
        fresh = rows[start:] if start else rows
        self._pages.append({row.get("id") for row in fresh})
        return fresh

    def _given(self, row_id: Any) -> bool:
        return row_id is not None and any(row_id in page for page in self._pages)
