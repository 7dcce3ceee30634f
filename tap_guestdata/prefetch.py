"""Child streams read ahead: while a parent's rows are written, worker threads already fetch
the children of the rows just read (members -> ledgers, offers -> offer stats).

The SDK syncs a child inside its parent's record loop, one partition at a time (ecosystem
notes); with one request per member that is one round trip per row. Here the parent's rows go
through `lookahead` (concurrency.py): each row read starts its children's requests in the pool,
and the SDK's child sync then takes the finished rows. State, messages and order stay on the
main thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from tap_guestdata.concurrency import Prefetched, Rows, lookahead
from tap_guestdata.http.errors import ResourceNotFound

if TYPE_CHECKING:
    from singer_sdk import Stream
    from singer_sdk.helpers.types import Context

    from tap_guestdata.runtime import Runtime

PartitionKey = tuple[tuple[str, Any], ...]  # a partition (context), hashable


class ChildPrefetch:
    """Mixed into the stream base class; `prefetched_by_parent = True` on a child turns it on."""

    prefetched_by_parent: ClassVar[bool] = False  # child partitions fetched by worker threads
    skip_missing_partition: ClassVar[bool] = False  # 404: the parent vanished, skip it

    if TYPE_CHECKING:  # provided by the stream classes this is mixed into
        name: str
        selected: bool
        child_streams: list[Stream]

        @property
        def runtime(self) -> Runtime: ...

        def list_rows(self, context: Context | None) -> Iterator[dict[str, Any]]: ...
        def window_params(self, context: Context | None) -> dict[str, Any]: ...
        def get_child_context(
            self, record: dict[str, Any], context: Context | None
        ) -> Context | None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefetched = Prefetched()

    # ------------------------------------------------------------------ as a child

    def prefetched_rows(self, context: Context | None) -> Rows:
        """This partition's rows: fetched ahead by the parent, or now if they were not."""
        future = self._prefetched.take(partition_key(context))
        return future.result() if future is not None else self.fetch_partition(context)

    def fetch_partition(self, context: Context | None) -> Rows:
        """All rows of one child partition (runs in a worker thread)."""
        try:
            return list(self.list_rows(context))
        except ResourceNotFound as error:
            if not self.skip_missing_partition:
                raise
            self.runtime.logger.warning(
                "%s: skipping %s: its parent is gone (%s)", self.name, dict(context or {}), error
            )
            return []

    def prefetch(self, context: Context) -> None:
        """Start this child's requests for `context` in the worker pool (main thread)."""
        self.window_params(context)  # state is read on the main thread only
        self._prefetched.submit(
            self.runtime.executor, partition_key(context), lambda: self.fetch_partition(context)
        )

    # ------------------------------------------------------------------ as a parent

    def child_already_read(self, row: dict[str, Any]) -> bool:
        """True when an interrupted run this one resumes wrote this row's children."""
        return False

    def with_children_prefetched(
        self, rows: Iterable[dict[str, Any]], context: Context | None
    ) -> Iterable[dict[str, Any]]:
        """`rows`, each starting its selected prefetched children's requests as it is read."""
        children = [
            child
            for child in self.child_streams
            if isinstance(child, ChildPrefetch)
            if child.prefetched_by_parent and child.selected
        ]
        if not children:
            return rows

        def start_children(row: dict[str, Any]) -> None:
            child_context = self.get_child_context(row, context)
            if child_context is not None and not self.child_already_read(row):
                for child in children:
                    child.prefetch(child_context)

        return self._drain(lookahead(rows, start_children, 4 * self.runtime.workers), children)

    def _drain(
        self, rows: Iterator[dict[str, Any]], children: Sequence[ChildPrefetch]
    ) -> Iterator[dict[str, Any]]:
        try:
            yield from rows
        finally:  # a failed or finished parent leaves no child request queued
            for child in children:
                child._prefetched.clear()


def partition_key(context: Context | None) -> PartitionKey:
    return tuple(sorted((context or {}).items()))
