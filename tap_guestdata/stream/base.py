"""The one base class of every stream: the SDK's hooks, each a short delegate to a part.

A stream is a declaration: its path, keys and cursor, and the parts it needs.

    class Guests(GuestDataStream):
        window = ListingWindow(since="from", until="to", dates=True)   # window.py
        resume = ListingResume()                                       # resume.py
        deletions = FollowDeletions(first_day=..., venues=...)         # deletions.py

Every stream also holds a transport (transport.py: send, retry, error policy; the key pool and
the rate limits behind it) and a prefetcher (prefetch.py); `get_records` is the read loop of
reading.py, telling the parts what happened. The parts see the stream through protocols
(host.py), never through this class, so they import nothing from here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from functools import partial
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import requests
from singer_sdk import RESTStream
from singer_sdk.exceptions import FatalAPIError
from singer_sdk.helpers.conform import TypeConformanceLevel
from singer_sdk.schema.source import SchemaDirectory, StreamSchema

from tap_guestdata.http.paging import PER_PAGE, LastPagePaginator, NewestFirstPages, body_of
from tap_guestdata.run import time_rules
from tap_guestdata.stream import drift, planning, reading
from tap_guestdata.stream.deletions import FollowDeletions, row_version
from tap_guestdata.stream.prefetch import ChildPrefetch
from tap_guestdata.stream.resume import Resume
from tap_guestdata.stream.transport import Transport
from tap_guestdata.stream.window import WindowPolicy

if TYPE_CHECKING:
    from collections.abc import Mapping

    from singer_sdk.helpers.types import Context, RequestFunc

    from tap_guestdata.http.auth import KeyPoolAuthenticator
    from tap_guestdata.run.progress import StreamPlan
    from tap_guestdata.run.runtime import Runtime, StreamCounters

SCHEMAS = SchemaDirectory(resources.files("tap_guestdata") / "schemas")
SiblingStream = TypeVar("SiblingStream", bound="GuestDataStream")


class GuestDataStream(RESTStream[int]):
    """A Guest Data Read API stream."""

    schema = StreamSchema(SCHEMAS)  # schemas/<stream name>.json
    # Records are the API's JSON as parsed; conforming would only copy them (ecosystem notes).
    TYPE_CONFORMANCE_LEVEL = TypeConformanceLevel.NONE
    allow_redirects = False  # spec 5.7: the key goes to base_url only, never where a 3xx points

    # What the stream is (facts of the API) ...
    scopes: ClassVar[tuple[str, ...]] = ()  # 403 groups that skip this stream (spec 4.5)
    paged: ClassVar[bool] = True  # a list: per_page=200 and page=N (spec 4.3)
    newest_first: ClassVar[bool] = False  # a newest-first list: drop rows pages shift back
    query_from_partition: ClassVar[tuple[str, ...]] = ()  # partition keys sent as parameters
    prefetched_by_parent: ClassVar[bool] = False  # child partitions fetched by worker threads
    skip_missing_partition: ClassVar[bool] = False  # 404: the parent vanished, skip it
    # ... and its parts, each bound to the instance when it is built.
    window: WindowPolicy = WindowPolicy()
    resume: Resume = Resume()
    deletions: FollowDeletions | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.transport = Transport().bound(self)
        self.prefetcher = ChildPrefetch().bound(self)
        self.window = self.window.bound(self)
        self.resume = self.resume.bound(self)
        self.deletions = self.deletions.bound(self) if self.deletions else None
        self._listing_guard = threading.local()  # this thread's listing's NewestFirstPages
        self.counter: StreamCounters | None = None  # this stream's summary figures, if selected
        self.utc_cursor_key: str | None = None  # a timestamp cursor, rendered in UTC

    # ------------------------------------------------------------------ the run it belongs to

    @property
    def runtime(self) -> Runtime:
        return self._tap.runtime  # type: ignore[attr-defined,no-any-return]

    @property
    def streams_of_tap(self) -> Mapping[str, Any]:
        """Every stream of this tap by name (the SDK keeps the tap as `_tap`, unnamed)."""
        return self._tap.streams

    # ------------------------------------------------------------------ requests (transport.py)

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

    @property
    def authenticator(self) -> KeyPoolAuthenticator:
        return self.runtime.authenticator  # keys are added per attempt (http/auth.py)

    def get_new_paginator(self) -> LastPagePaginator | None:
        return LastPagePaginator(start_value=1) if self.paged else None

    def get_url_params(
        self, context: Context | None, next_page_token: int | None
    ) -> dict[str, Any]:
        keys = self.query_from_partition
        params = {key: context[key] for key in keys if context and key in context}
        params.update(self.window.params(context))
        if self.paged:
            params.update(per_page=PER_PAGE, page=next_page_token or 1)
        return params

    def request_decorator(self, func: RequestFunc) -> RequestFunc:
        return self.transport.retrying(func)

    def validate_response(self, response: requests.Response) -> None:
        self.transport.check(response)

    def parse_response(self, response: requests.Response) -> Iterable[dict[str, Any]]:
        data = body_of(response).get("data")
        if isinstance(data, list):
            guard: NewestFirstPages | None = getattr(self._listing_guard, "pages", None)
            return guard.fresh(data) if guard is not None else data
        return [] if data is None else [data]

    def planned_requests(self) -> StreamPlan | None:
        """Requests this stream expects (planning.py); a stream with another shape says its own."""
        return planning.listing_plan(self)

    # ------------------------------------------------------------------ records (reading.py)

    def get_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        """The stream's rows, its parts told what happened; none when its group is forbidden
        (spec 4.5)."""
        if reason := self.runtime.gate.reason(self.scopes):
            reading.tell_failed(read_observers(self), context, reason)
            return
        self.counter = self.runtime.counters_for(self.name) if self.selected else None
        timestamps = self.replication_key and self.is_timestamp_replication_key
        self.utc_cursor_key = self.replication_key if timestamps else None
        yield from reading.read_told(
            lambda: self.read_records(context),
            read_observers(self),
            context,
            forbidden=self.transport.forbidden,
        )

    def read_records(self, context: Context | None) -> Iterable[dict[str, Any]]:
        """The rows of one partition; streams override this for non-list endpoints."""
        if self.resume.already_read(context):
            return []  # written by the interrupted run this one resumes
        if self.prefetched_by_parent:
            return self.prefetcher.rows(context)
        return self.prefetcher.with_children(self.list_rows(context), context)

    def list_rows(self, context: Context | None) -> Iterator[dict[str, Any]]:
        """request_records, with a fresh NewestFirstPages for this listing (per thread)."""
        self._listing_guard.pages = NewestFirstPages() if self.newest_first else None
        try:
            yield from self.request_records(context)
        finally:
            self._listing_guard.pages = None

    def post_process(
        self, row: dict[str, Any], context: Context | None = None
    ) -> dict[str, Any] | None:
        drift.check_row(self, row)  # fields the schema lacks, or of another type (drift.py)
        if self.deletions is not None:
            # The SDK writes the RECORD's version from this attribute, set for a full-table
            # sync only (override register, docs/development-sdk.md); here: when it was read.
            self._stream_version = row_version()
        key = self.utc_cursor_key
        if key is not None and (value := row.get(key)) is not None:
            row[key] = utc_cursor(self.name, row, key, value)  # bookmarks compare as strings
        if self.counter is not None:
            self.counter.records += 1
        return row

    def write_activate_version(self, version: int) -> None:
        """ACTIVATE_VERSION for this stream under each of its aliases (stream maps): the SDK's
        own writer, which it calls only before a full-table sync (override register)."""
        self._write_activate_version_message(version)

    def compare_start_date(self, value: str, start_date_value: str) -> str:
        return max(value, start_date_value, key=time_rules.parse_boundary)


def sibling(stream: GuestDataStream, stream_type: type[SiblingStream]) -> SiblingStream:
    """The tap's stream of that type: one instance per name, shared state and answers."""
    for other in stream.streams_of_tap.values():
        if type(other) is stream_type:
            return other
    raise LookupError(f"{stream_type.__name__} is not a stream of this tap")


def read_observers(stream: GuestDataStream) -> list[reading.ReadObserver]:
    """Who is told of a read: resume, deletions (when selected), checkpoints, progress."""
    observers: list[reading.ReadObserver] = [stream.resume]
    if stream.deletions is not None and stream.selected:
        observers.append(stream.deletions)
    if stream.parent_stream_type is None:
        tap = stream._tap  # the SDK's; its state writer sends STATE (run/state_markers.py)
        names = [stream.name, *(child.name for child in stream.child_streams)]
        write_state = partial(tap.state_writer.write_state, stream.tap_state)
        checkpoints = stream.runtime.checkpoints
        observers.append(reading.Checkpointing(checkpoints, stream.resume.markers, write_state))
        observers.append(reading.ProgressTelling(stream.runtime.progress, names))
    return observers


def utc_cursor(stream: str, row: dict[str, Any], key: str, value: Any) -> str:
    """The cursor value in UTC; a value that is not an instant stops the run, naming it."""
    if isinstance(value, str):
        try:
            return time_rules.utc_text(value)
        except ValueError:
            pass
    raise FatalAPIError(
        f"{stream}: row id={row.get('id')!r} has {key}={value!r}, not an ISO 8601 "
        "instant (spec 1); the bookmark cannot be moved past it"
    )
