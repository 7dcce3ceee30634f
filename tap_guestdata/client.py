"""The one base class of every stream: auth and the key pool, paging, retries, error policy.

Streams stay declarations (path, keys, cursor, window); every API rule they share is here or
in `http/` (limiter, error codes) and `windows.py` (time).
"""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Generator, Iterable, Iterator
from functools import partial, wraps
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast
from urllib.parse import urlsplit

import orjson
import requests
from singer_sdk import RESTStream, metrics
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError
from singer_sdk.helpers.conform import TypeConformanceLevel
from singer_sdk.schema.source import SchemaDirectory, StreamSchema

from tap_guestdata import deletions, drift, windows
from tap_guestdata.authenticator import KeyPoolAuthenticator
from tap_guestdata.http.errors import (
    RateLimited,
    StreamForbidden,
    StreamSkipped,
    TransientError,
    classify,
    describe_request,
)
from tap_guestdata.http.paging import BODY_ATTRIBUTE, LastPagePaginator, NewestFirstPages, body_of
from tap_guestdata.prefetch import ChildPrefetch, PartitionKey, partition_key
from tap_guestdata.progress import StreamPlan
from tap_guestdata.resume import RESUME_KEY, ListingProgress
from tap_guestdata.settings import BASE_PATH
from tap_guestdata.windows import TimeWindow

if TYPE_CHECKING:
    from backoff.types import Details
    from singer_sdk.helpers.types import Context, RequestFunc

    from tap_guestdata.runtime import Runtime, StreamCounters
    from tap_guestdata.tap import TapGuestData

PER_PAGE = 200  # spec 4.3: the largest page; fewest requests
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 60.0
RATE_LIMITED_RETRY_CAP = 100  # 429s per request before giving up (they wait, they don't fail)
SCHEMAS = SchemaDirectory(resources.files("tap_guestdata") / "schemas")
SiblingStream = TypeVar("SiblingStream", bound="GuestDataStream")


class GuestDataStream(ChildPrefetch, RESTStream[int]):
    """A Guest Data Read API stream."""

    schema = StreamSchema(SCHEMAS)  # schemas/<stream name>.json
    # Records are the API's JSON as parsed; conforming would only copy them (ecosystem notes).
    TYPE_CONFORMANCE_LEVEL = TypeConformanceLevel.NONE

    scopes: ClassVar[tuple[str, ...]] = ()  # 403 groups that skip this stream (spec 4.5)
    paged: ClassVar[bool] = True  # a list: per_page=200 and page=N (spec 4.3)
    window: ClassVar[TimeWindow | None] = None
    newest_first: ClassVar[bool] = False  # a newest-first list: drop rows pages shift back
    follows_deletions: ClassVar[bool] = False  # rows the API drops are marked (deletions.py)
    allow_redirects = False  # spec 5.7: the key goes to base_url only, never where a 3xx points

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._window_params: dict[PartitionKey, dict[str, Any]] = {}
        self._listing = threading.local()  # the NewestFirstPages of the listing being read
        self._records_counter: StreamCounters | None = None
        self._utc_replication_key: str | None = None
        self._listing_progress: dict[PartitionKey, ListingProgress] = {}
        self.rows_read_by_venue: dict[Any, set[Any]] = {}  # deletions.record_window

    # ------------------------------------------------------------------ shared run state

    @property
    def tap(self) -> TapGuestData:
        """The tap of this stream (the SDK keeps it as `_tap`, with no public name)."""
        return cast("TapGuestData", self._tap)

    def sibling(self, stream_type: type[SiblingStream]) -> SiblingStream:
        """This tap's stream of that type: one instance per name, shared state and answers."""
        for stream in self.tap.streams.values():
            if type(stream) is stream_type:
                return stream
        raise LookupError(f"{stream_type.__name__} is not a stream of this tap")

    @property
    def runtime(self) -> Runtime:
        return self.tap.runtime

    @property
    def sync_started_at(self) -> dt.datetime:
        return self.runtime.sync_started_at

    @property
    def url_base(self) -> str:
        return self.runtime.settings.base_url

    @property
    def requests_session(self) -> requests.Session:
        return self.runtime.session()

    @property
    def timeout(self) -> float:  # type: ignore[override]
        return self.runtime.settings.request_timeout_seconds

    @property
    def http_headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "User-Agent": "tap-guestdata"}

    # ------------------------------------------------------------------ requests

    def get_new_paginator(self) -> LastPagePaginator | None:
        return LastPagePaginator(start_value=1) if self.paged else None

    def get_url_params(
        self, context: Context | None, next_page_token: int | None
    ) -> dict[str, Any]:
        params = {**self.partition_params(context), **self.window_params(context)}
        if self.paged:
            params.update(per_page=PER_PAGE, page=next_page_token or 1)
        return params

    def partition_params(self, context: Context | None) -> dict[str, Any]:
        """Parameters taken from the partition (e.g. venue_id, a day); none by default."""
        return {}

    def window_params(self, context: Context | None) -> dict[str, Any]:
        """since/until for this partition, fixed for the run (bounded at the sync start)."""
        if self.window is None:
            return {}
        key = self.state_key(context)
        if key not in self._window_params:
            self._window_params[key] = self.window.params(
                self.window_start(context),
                self.window_until(context),
                self.lookback_days(),
                start_date=self.runtime.settings.start_date,
            )
        return self._window_params[key]

    def window_until(self, context: Context | None) -> dt.datetime:
        """The window's upper bound: the run's window end (the sync start, or the end of
        end_date's London day, windows.window_end), or where an interrupted run got to."""
        progress = self.listing_progress(context)
        resume_until = progress.until() if progress is not None else None
        end = self.runtime.window_end
        return min(resume_until, end) if resume_until is not None else end

    def bookmark(self, context: Context | None) -> str | None:
        """The previous run's bookmark of this partition (progress of this run is kept apart
        in progress markers until the end, so this is stable during the run)."""
        state = self.get_context_state(context)
        if state.get("replication_key") != self.replication_key:
            return None
        return state.get("replication_key_value")

    def window_start(self, context: Context | None) -> str | None:
        """The previous run's bookmark, or start_date on a first run, whichever is later."""
        bookmark = self.bookmark(context)
        start_date = self.runtime.settings.start_date
        if bookmark and start_date:
            return max(bookmark, start_date, key=windows.parse_boundary)
        return bookmark or start_date

    def earliest_possible_day(self) -> dt.date | None:
        """The first London day a row of this windowed stream can have (deletions.py); None:
        not known, so only a window with no lower bound reads the whole history."""
        return None

    def venues_covered(self) -> list[int] | None:
        """The venues a complete read of this windowed stream covers (deletions.record_window);
        None: its reads are not recorded."""
        return None

    def sibling_selected(self, name: str) -> bool:
        stream = self.tap.streams.get(name)
        return stream is not None and stream.selected

    def lookback_days(self) -> int:
        if self.window is None or self.window.lookback_setting is None:
            return 0
        return int(getattr(self.runtime.settings, self.window.lookback_setting) or 0)

    def state_key(self, context: Context | None) -> PartitionKey:
        return partition_key(self.state_manager.get_state_partition_context(context))

    @property
    def authenticator(self) -> KeyPoolAuthenticator:
        return self.runtime.authenticator  # keys are added per attempt (authenticator.py)

    def request_decorator(self, func: RequestFunc) -> RequestFunc:
        """The SDK's retries (the backoff hooks below) around `attempt`."""
        return super().request_decorator(wraps(func)(partial(self.attempt, func)))

    def attempt(
        self,
        send: RequestFunc,
        prepared_request: requests.PreparedRequest,
        context: Context | None,
    ) -> requests.Response:
        """One attempt, counted; none when the stream's group is forbidden (spec 4.5), and the
        plan's copy of a first page is used instead of asking again."""
        if reason := self.runtime.gate.reason(self.scopes):
            raise StreamSkipped(reason)
        if (planned := self.runtime.first_pages.pop(str(prepared_request.url), None)) is not None:
            return planned  # read (and counted) when the run was planned
        self.runtime.attempting(self.name)  # counted as sent once it gets a key's slot
        try:
            return send(prepared_request, context)
        except RateLimited:  # the adapter paused that key for Retry-After (spec 8.3)
            self.runtime.counters_for(self.name).add(rate_limited=1)
            raise
        except (requests.RequestException, OSError) as error:
            raise TransientError(f"{self.describe(prepared_request)}: {error!r}") from None

    def send_once(
        self, prepared_request: requests.PreparedRequest, context: Context | None
    ) -> requests.Response:
        """The request on the wire, its duration metric and its check, without retries (the
        plan's first pages; every other request takes the SDK's own step)."""
        response = self.requests_session.send(
            prepared_request, timeout=self.timeout, allow_redirects=self.allow_redirects
        )
        status = metrics.Status.SUCCEEDED if response.ok else metrics.Status.FAILED
        duration = metrics.Point(
            "timer",
            metric=metrics.Metric.HTTP_REQUEST_DURATION,
            value=response.elapsed.total_seconds(),
            tags={
                metrics.Tag.STREAM: self.name,
                metrics.Tag.ENDPOINT: self.path,
                metrics.Tag.HTTP_STATUS_CODE: response.status_code,
                metrics.Tag.STATUS: status,
            },
        )
        metrics.log(self.metrics_logger, duration)
        self.validate_response(response)
        return response

    # ------------------------------------------------------------------ the plan (progress.py)

    def planned_requests(self) -> StreamPlan | None:
        """Requests this stream expects, from what the API says (its first page, read now and
        kept for the sync, so planning costs no request); None when it is skipped."""
        if not self.paged:
            return StreamPlan(self.name, 1, "one answer")
        pages = LastPagePaginator.last_page(self.first_page(None)) or 1
        return StreamPlan(self.name, pages, f"meta.last_page {pages}")

    def first_page(self, context: Context | None) -> requests.Response:
        """This listing's first page, read once and kept for the sync to use."""
        prepared = self.prepare_request(context, next_page_token=None)
        url = str(prepared.url)
        response = self.runtime.first_pages.get(url)
        if response is None:  # one attempt: a failing endpoint is retried by its own sync
            response = self.attempt(self.send_once, prepared, context)
            self.runtime.first_pages[url] = response
        return response

    def plan(self) -> StreamPlan | None:
        """planned_requests, or None (with the usual warning) when the stream is forbidden."""
        if self.runtime.gate.reason(self.scopes):
            return None
        try:
            return self.planned_requests()
        except StreamForbidden as error:
            self.forbidden(error)
            return None
        except RetriableAPIError as error:
            # A passing fault: other streams still run first, as without a plan, and this one
            # asks again in its own sync. A fatal answer (401, 422, ...) stops the run at once.
            if not isinstance(error, RateLimited):
                self.runtime.counters_for(self.name).add(retries=1)
            self.logger.warning("Plan: %s: not known (%s)", self.name, error)
            return None

    def describe(self, request: requests.PreparedRequest | None) -> str:
        return describe_request(request, self._base_path)

    @property
    def _base_path(self) -> str:
        path = urlsplit(self.url_base).path
        return path if path.endswith(BASE_PATH) else BASE_PATH

    def validate_response(self, response: requests.Response) -> None:
        """Spec 7 policy (http/errors.py); a 2xx body that is not the JSON envelope retries."""
        if response.status_code >= requests.codes.bad_request:
            raise classify(response, self.describe(response.request))
        if response.is_redirect:
            raise FatalAPIError(
                f"{self.describe(response.request)}: HTTP {response.status_code} redirect to "
                f"{response.headers.get('Location')!r} not followed (the key is only sent to "
                "base_url); check base_url"
            )
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            raise TransientError(
                f"{self.describe(response.request)}: HTTP {response.status_code} with a body "
                f"that is not JSON ({len(response.content)} bytes, truncated?)",
                response,
            ) from None
        if not isinstance(body, dict) or "data" not in body:  # spec 1: data + meta envelope
            raise TransientError(
                f"{self.describe(response.request)}: answer is not the data/meta envelope",
                response,
            )
        setattr(response, BODY_ATTRIBUTE, body)

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        data = body_of(response).get("data")
        if isinstance(data, list):
            guard: NewestFirstPages | None = getattr(self._listing, "guard", None)
            return guard.fresh(data) if guard is not None else data
        return [] if data is None else [data]

    # ------------------------------------------------------------------ retries (backoff)

    def backoff_wait_generator(self) -> Generator[float, Any, None]:
        """429: no extra wait here (the pool holds that key back for Retry-After, another key
        may go at once) and not counted as a failure; 5xx, timeouts, dropped connections and
        bad bodies: exponential backoff, at most max_retries times, then the error is raised."""
        max_retries = self.runtime.settings.max_retries
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

    def backoff_max_tries(self) -> int:
        return self.runtime.settings.max_retries + 1 + RATE_LIMITED_RETRY_CAP

    def backoff_jitter(self, value: float) -> float:
        return value  # the wait generator adds its own jitter

    def backoff_handler(self, details: Details) -> None:
        """Count a retry after a failure; a 429 is counted apart, as rate-limited, when it
        arrives (it waits Retry-After on its key and is no failure)."""
        error = details.get("exception")
        if isinstance(error, RateLimited):
            return
        self.runtime.counters_for(self.name).add(retries=1)
        self.logger.warning("Retrying in %.1fs after: %s", details.get("wait", 0), error)

    # ------------------------------------------------------------------ records

    def get_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        """The stream's rows, unless its group is forbidden (spec 4.5)."""
        following_deletions = self.follows_deletions and self.selected
        if reason := self.runtime.gate.reason(self.scopes):
            if following_deletions:
                deletions.not_checked(self, reason)
            return
        self._records_counter = self.runtime.counters_for(self.name) if self.selected else None
        if self.replication_key and self.is_timestamp_replication_key:
            self._utc_replication_key = self.replication_key
        checkpoints = self.runtime.checkpoints if self.parent_stream_type is None else None
        # Decided before reading: the window is fixed for the run, and a resume marker is
        # dropped when the listing finishes (deletions.py).
        scope = deletions.before_read(self, context) if following_deletions else None
        try:
            for row in self.read_records(context):
                yield row
                # The SDK asks for the next row only once it has written this one (and synced
                # its children): from here on the row counts as done (resume.py).
                self.row_written(row, context)
                if checkpoints is not None and checkpoints.due():
                    self.write_checkpoint()
        except StreamForbidden as error:
            self.forbidden(error)
            if following_deletions:
                deletions.not_checked(self, f"the read stopped: {error}")
            return
        except StreamSkipped as skipped:
            if following_deletions:
                deletions.not_checked(self, f"the read stopped: {skipped}")
            return
        except BaseException as error:  # a failed page, a stop: logged, then raised as it was
            if following_deletions:
                deletions.not_checked(self, f"the read did not finish ({type(error).__name__})")
            raise
        self.listing_finished(context)
        if scope is not None:
            deletions.follow(self, context, scope)
        if self.parent_stream_type is None:
            names = [self.name, *(child.name for child in self.child_streams)]
            self.runtime.progress.finished(*names)

    # ------------------------------------------------------------------ resuming (resume.py)

    @property
    def resumable_listing(self) -> bool:
        """A newest-first listing bounded in time: resumed by narrowing its window."""
        return self.newest_first and self.window is not None and not self.prefetched_by_parent

    def listing_progress(self, context: Context | None) -> ListingProgress | None:
        """This partition's progress (picked up from an interrupted run's state, or new)."""
        if not self.resumable_listing:
            return None
        key = self.state_key(context)
        if key not in self._listing_progress:
            state = self.get_context_state(context)
            self._listing_progress[key] = ListingProgress.from_state(state) or ListingProgress()
        return self._listing_progress[key]

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        """Called once the SDK has written `row`: move this run's resume marker past it."""
        progress = self.listing_progress(context)
        if progress is not None and self.replication_key and row.get(self.replication_key):
            progress.row_written(row[self.replication_key])

    def resume_markers(self) -> None:
        """Put this stream's resume markers into its state (before a STATE message)."""
        for key, progress in self._listing_progress.items():
            self.get_context_state(dict(key) or None)[RESUME_KEY] = progress.as_state()

    def write_checkpoint(self) -> None:
        """A STATE message now, carrying how far this stream got."""
        self.resume_markers()
        self.tap.state_writer.write_state(self.tap_state)

    def listing_finished(self, context: Context | None) -> None:
        """The whole window was read: keep the newest row of an interrupted run as the
        bookmark candidate (the SDK keeps the max) and drop the marker."""
        if not self.resumable_listing:
            return
        progress = self._listing_progress.pop(self.state_key(context), None)
        if progress is not None and progress.newest and self.replication_key:
            self.state_manager.increment_state(
                {self.replication_key: progress.newest},
                context=context,
                replication_key=self.replication_key,
            )
        self.get_context_state(context).pop(RESUME_KEY, None)

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        """The rows of one partition; streams override this for non-list endpoints."""
        if self.prefetched_by_parent:
            return self.prefetched_rows(context)
        return self.with_children_prefetched(self.list_rows(context), context)

    def list_rows(self, context: Context | None) -> Iterator[dict[str, Any]]:
        """request_records, with a fresh NewestFirstPages for this listing (per thread)."""
        self._listing.guard = NewestFirstPages() if self.newest_first else None
        try:
            yield from self.request_records(context)
        finally:
            self._listing.guard = None

    def write_activate_version(self, version: int) -> None:
        """ACTIVATE_VERSION for this stream under each of its aliases (stream maps): the SDK's
        own writer, which it calls only before a full-table sync (override register)."""
        self._write_activate_version_message(version)

    def forbidden(self, error: StreamForbidden) -> None:
        if self.runtime.settings.on_forbidden == "fail":
            raise FatalAPIError(f"{error} (on_forbidden=fail)") from None
        names = [
            stream.name
            for stream in self.tap.streams.values()
            if error.scope in getattr(stream, "scopes", ()) and stream.selected
        ]
        self.runtime.gate.close(error, names)

    def post_process(
        self, row: dict[str, Any], context: Context | None = None
    ) -> dict[str, Any] | None:
        drift.check_row(self, row)  # fields the schema lacks, or of another type (drift.py)
        if self.follows_deletions:
            # The SDK writes the RECORD's version from this attribute, set for a full-table
            # sync only (override register, docs/development.md); here: when it was read.
            self._stream_version = deletions.row_version()
        key = self._utc_replication_key
        if key is not None and (value := row.get(key)) is not None:
            row[key] = self._utc_cursor(row, key, value)  # bookmarks compare as strings: UTC
        if self.follows_deletions and self.window is not None:
            deletions.note_row_read(self, row)
        if self._records_counter is not None:
            self._records_counter.records += 1
        return row

    def _utc_cursor(self, row: dict[str, Any], key: str, value: Any) -> str:
        """The cursor value in UTC; a value that is not an instant stops the run, naming it."""
        if isinstance(value, str):
            try:
                return windows.utc_text(value)
            except ValueError:
                pass
        raise FatalAPIError(
            f"{self.name}: row id={row.get('id')!r} has {key}={value!r}, not an ISO 8601 "
            "instant (spec 1); the bookmark cannot be moved past it"
        )

    def compare_start_date(self, value: str, start_date_value: str) -> str:
        return max(value, start_date_value, key=windows.parse_boundary)
