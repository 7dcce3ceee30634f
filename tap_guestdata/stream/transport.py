"""Transport: one stream's requests on the wire, their retries and the error policy.

The key pool and both rate limits (http/limiter.py: each key's window and the address's
ceiling; http/budget.py: the budget shared with other processes) sign and pace each attempt in
the session's adapter (http/auth.py); this part sends, checks (spec 7, http/errors.py) and
retries: a 429 waits on its key and is no failure, anything passing backs off exponentially,
at most `max_retries` times. The stream's SDK hooks (`request_decorator`, `validate_response`)
are delegates to it.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from functools import partial, wraps
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import backoff
import orjson
import requests
from singer_sdk import metrics
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError

from tap_guestdata.http.errors import (
    BASE_PATH,
    RateLimited,
    StreamForbidden,
    StreamSkipped,
    TransientError,
    classify,
    describe_request,
)
from tap_guestdata.http.paging import BODY_ATTRIBUTE
from tap_guestdata.stream.host import Part, StreamHost

if TYPE_CHECKING:
    from backoff.types import Details
    from singer_sdk.helpers.types import Context, RequestFunc

BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 60.0
RATE_LIMITED_RETRY_CAP = 100  # 429s per request before giving up (they wait, they don't fail)
# What the SDK retries (RESTStream.request_decorator), RetriableAPIError covering ours.
RETRIED = (
    ConnectionResetError,
    RetriableAPIError,
    requests.exceptions.Timeout,
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
    requests.exceptions.ContentDecodingError,
)


class TransportHost(StreamHost, Protocol):
    """A stream as its transport sees it: where it sends, and the groups a 403 closes."""

    @property
    def scopes(self) -> tuple[str, ...]: ...
    @property
    def allow_redirects(self) -> bool: ...
    @property
    def metrics_logger(self) -> Any: ...

    @property
    def path(self) -> str | None: ...
    @property
    def url_base(self) -> str: ...
    @property
    def requests_session(self) -> requests.Session: ...
    @property
    def timeout(self) -> float: ...


class Transport(Part):
    """Send, check and retry one stream's requests."""

    def attach(self, host: TransportHost) -> None:
        self.host = host

    def retrying(self, send: RequestFunc) -> RequestFunc:
        """`send` (the SDK's `_request`) as counted attempts, retried by this policy."""
        attempt = wraps(send)(partial(self.attempt, send))
        decorated: RequestFunc = backoff.on_exception(
            self.waits,
            RETRIED,
            max_tries=self.max_tries,
            on_backoff=self.retried,
            jitter=None,  # `waits` adds its own jitter
            logger=self.host.logger,
        )(attempt)
        return decorated

    def attempt(
        self,
        send: RequestFunc,
        prepared_request: requests.PreparedRequest,
        context: Context | None,
    ) -> requests.Response:
        """One attempt, counted; none when the stream's group is forbidden (spec 4.5), and the
        plan's copy of a first page is used instead of asking again."""
        runtime = self.host.runtime
        if reason := runtime.gate.reason(self.host.scopes):
            raise StreamSkipped(reason)
        if (planned := runtime.first_pages.pop(str(prepared_request.url), None)) is not None:
            return planned  # read (and counted) when the run was planned
        runtime.attempting(self.host.name)  # counted as sent once it gets a key's slot
        try:
            return send(prepared_request, context)
        except RateLimited:  # the adapter paused that key for Retry-After (spec 8.3)
            runtime.counters_for(self.host.name).add(rate_limited=1)
            raise
        except (requests.RequestException, OSError) as error:
            raise TransientError(f"{self.describe(prepared_request)}: {error!r}") from None

    def send_once(
        self, prepared_request: requests.PreparedRequest, context: Context | None
    ) -> requests.Response:
        """The request on the wire, its duration metric and its check, without retries (the
        plan's first pages; every other request takes the SDK's own step)."""
        host = self.host
        response = host.requests_session.send(
            prepared_request, timeout=host.timeout, allow_redirects=host.allow_redirects
        )
        status = metrics.Status.SUCCEEDED if response.ok else metrics.Status.FAILED
        duration = metrics.Point(
            "timer",
            metric=metrics.Metric.HTTP_REQUEST_DURATION,
            value=response.elapsed.total_seconds(),
            tags={
                metrics.Tag.STREAM: host.name,
                metrics.Tag.ENDPOINT: host.path,
                metrics.Tag.HTTP_STATUS_CODE: response.status_code,
                metrics.Tag.STATUS: status,
            },
        )
        metrics.log(host.metrics_logger, duration)
        self.check(response)
        return response

    def check(self, response: requests.Response) -> None:
        """Spec 7 policy (http/errors.py); a 2xx body that is not the JSON envelope retries."""
        where = self.describe(response.request)
        if response.status_code >= requests.codes.bad_request:
            raise classify(response, where)
        if response.is_redirect:
            raise FatalAPIError(
                f"{where}: HTTP {response.status_code} redirect to "
                f"{response.headers.get('Location')!r} not followed (the key is only sent to "
                "base_url); check base_url"
            )
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise TransientError(
                f"{where}: HTTP {response.status_code} with a body "
                f"that is not JSON ({len(response.content)} bytes, truncated?)",
                response,
            ) from None
        if not isinstance(body, dict) or "data" not in body:  # spec 1: data + meta envelope
            raise TransientError(f"{where}: answer is not the data/meta envelope", response)
        setattr(response, BODY_ATTRIBUTE, body)

    def describe(self, request: requests.PreparedRequest | None) -> str:
        path = urlsplit(self.host.url_base).path
        return describe_request(request, path if path.endswith(BASE_PATH) else BASE_PATH)

    def waits(self) -> Generator[float, Any, None]:
        """429: no extra wait here (the pool holds that key back for Retry-After, another key
        may go at once) and not counted as a failure; 5xx, timeouts, dropped connections and
        bad bodies: exponential backoff, at most max_retries times, then the error is raised."""
        max_retries = self.host.runtime.settings.max_retries
        failures = rate_limited = 0
        error = yield 0.0
        while True:
            if isinstance(error, RateLimited):
                rate_limited += 1
                if rate_limited > RATE_LIMITED_RETRY_CAP:
                    return
                error = yield 0.0
                continue
            failures += 1
            if failures > max_retries:
                if isinstance(error, Exception) and error.args:
                    error.args = (f"{error.args[0]} (gave up after {max_retries} retries)",)
                return
            wait = min(BACKOFF_CAP_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** (failures - 1))
            error = yield wait * random.uniform(0.8, 1.2)

    def max_tries(self) -> int:
        return self.host.runtime.settings.max_retries + 1 + RATE_LIMITED_RETRY_CAP

    def retried(self, details: Details) -> None:
        """Count a retry after a failure; a 429 is counted apart, as rate-limited, when it
        arrives (it waits Retry-After on its key and is no failure)."""
        error = details.get("exception")
        if isinstance(error, RateLimited):
            return
        self.host.runtime.counters_for(self.host.name).add(retries=1)
        self.host.logger.warning("Retrying in %.1fs after: %s", details.get("wait", 0), error)

    def forbidden(self, error: StreamForbidden) -> None:
        """A 403 (spec 4.5): the run fails (on_forbidden=fail), or the stream's group closes
        and every selected stream of it is skipped with one warning."""
        if self.host.runtime.settings.on_forbidden == "fail":
            raise FatalAPIError(f"{error} (on_forbidden=fail)") from None
        names = [
            stream.name
            for stream in self.host.streams_of_tap.values()
            if error.scope in getattr(stream, "scopes", ()) and stream.selected
        ]
        self.host.runtime.gate.close(error, names)
