"""Planning: how many requests each stream expects, from what the API says, before the sync
(run/progress.py logs the plan and the progress lines). A first page read to plan is kept for the
sync (`Runtime.first_pages`), so planning costs no request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from singer_sdk.exceptions import RetriableAPIError

from tap_guestdata.http.errors import RateLimited, StreamForbidden
from tap_guestdata.http.paging import LastPagePaginator
from tap_guestdata.run.progress import StreamPlan
from tap_guestdata.stream.host import StreamHost

if TYPE_CHECKING:
    import requests
    from singer_sdk.helpers.types import Context

    from tap_guestdata.stream.transport import Transport


class PlanHost(StreamHost, Protocol):
    """A stream as its plan sees it: its requests, and what it expects to send."""

    @property
    def scopes(self) -> tuple[str, ...]: ...
    @property
    def paged(self) -> bool: ...
    @property
    def transport(self) -> Transport: ...

    def prepare_request(
        self, context: Context | None, next_page_token: Any
    ) -> requests.PreparedRequest: ...
    def planned_requests(self) -> StreamPlan | None: ...


def listing_plan(host: PlanHost) -> StreamPlan:
    """A list's pages (meta.last_page of its first page), or one request for one answer."""
    if not host.paged:
        return StreamPlan(host.name, 1, "one answer")
    pages = LastPagePaginator.last_page(first_page(host, None)) or 1
    return StreamPlan(host.name, pages, f"meta.last_page {pages}")


def first_page(host: PlanHost, context: Context | None) -> requests.Response:
    """This listing's first page, read once and kept for the sync to use."""
    prepared = host.prepare_request(context, next_page_token=None)
    url = str(prepared.url)
    response = host.runtime.first_pages.get(url)
    if response is None:  # one attempt: a failing endpoint is retried by its own sync
        response = host.transport.attempt(host.transport.send_once, prepared, context)
        host.runtime.first_pages[url] = response
    return response


def plan(host: PlanHost) -> StreamPlan | None:
    """The stream's planned requests, or None (with the usual warning) when it is forbidden."""
    if host.runtime.gate.reason(host.scopes):
        return None
    try:
        return host.planned_requests()
    except StreamForbidden as error:
        host.transport.forbidden(error)
        return None
    except RetriableAPIError as error:
        # A passing fault: other streams still run first, as without a plan, and this one
        # asks again in its own sync. A fatal answer (401, 422, ...) stops the run at once.
        if not isinstance(error, RateLimited):
            host.runtime.counters_for(host.name).add(retries=1)
        host.logger.warning("Plan: %s: not known (%s)", host.name, error)
        return None
