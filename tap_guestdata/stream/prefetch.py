"""Child streams read ahead: while a parent's rows are written, worker threads already fetch
the children of the rows just read (members -> ledgers, offers -> offer stats).

The SDK syncs a child inside its parent's record loop, one partition at a time (ecosystem
notes); with one request per member that is one round trip per row. Here the parent's rows go
through `lookahead` (run/concurrency.py): each row read starts its children's requests in the pool,
and the SDK's child sync then takes the finished rows. State, messages and order stay on the
main thread. A stream holds this part as `prefetcher`; `prefetched_by_parent = True` on a child
turns it on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tap_guestdata.http.errors import ResourceNotFound
from tap_guestdata.run.concurrency import Prefetched, Rows, lookahead
from tap_guestdata.stream.host import Part, StreamHost, partition_key

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.stream.resume import Resume
    from tap_guestdata.stream.window import WindowPolicy


class PrefetchHost(StreamHost, Protocol):
    """A stream as its prefetcher sees it: its children, its listing, its window."""

    @property
    def prefetched_by_parent(self) -> bool: ...
    @property
    def skip_missing_partition(self) -> bool: ...
    @property
    def window(self) -> WindowPolicy: ...
    @property
    def resume(self) -> Resume: ...

    @property
    def child_streams(self) -> list[Any]: ...

    def list_rows(self, context: Context | None) -> Iterator[dict[str, Any]]: ...
    def get_child_context(
        self, record: dict[str, Any], context: Context | None
    ) -> Context | None: ...


class ChildPrefetch(Part):
    """A stream's children read ahead (as a parent), or its rows taken from that (as a child)."""

    def attach(self, host: PrefetchHost) -> None:
        self.host = host
        self._prefetched = Prefetched()

    # ------------------------------------------------------------------ as a child

    def rows(self, context: Context | None) -> Rows:
        """This partition's rows: fetched ahead by the parent, or now if they were not."""
        future = self._prefetched.take(partition_key(context))
        return future.result() if future is not None else self.fetch_partition(context)

    def fetch_partition(self, context: Context | None) -> Rows:
        """All rows of one child partition (runs in a worker thread)."""
        try:
            return list(self.host.list_rows(context))
        except ResourceNotFound as error:
            if not self.host.skip_missing_partition:
                raise
            self.host.runtime.logger.warning(
                "%s: skipping %s: its parent is gone (%s)",
                self.host.name,
                dict(context or {}),
                error,
            )
            return []

    def start(self, context: Context) -> None:
        """Start this child's requests for `context` in the worker pool (main thread)."""
        self.host.window.params(context)  # state is read on the main thread only
        self._prefetched.submit(
            self.host.runtime.executor,
            partition_key(context),
            lambda: self.fetch_partition(context),
        )

    # ------------------------------------------------------------------ as a parent

    def with_children(
        self, rows: Iterable[dict[str, Any]], context: Context | None
    ) -> Iterable[dict[str, Any]]:
        """`rows`, each starting its selected prefetched children's requests as it is read."""
        children: list[ChildPrefetch] = [
            child.prefetcher
            for child in self.host.child_streams
            if getattr(child, "prefetched_by_parent", False) and child.selected
        ]
        if not children:
            return rows

        def start_children(row: dict[str, Any]) -> None:
            child_context = self.host.get_child_context(row, context)
            if child_context is not None and not self.host.resume.child_already_read(row):
                for child in children:
                    child.start(child_context)

        workers = 4 * self.host.runtime.workers
        return self._drain(lookahead(rows, start_children, workers), children)

    def _drain(
        self, rows: Iterator[dict[str, Any]], children: Sequence[ChildPrefetch]
    ) -> Iterator[dict[str, Any]]:
        try:
            yield from rows
        finally:  # a failed or finished parent leaves no child request queued
            for child in children:
                child._prefetched.clear()
