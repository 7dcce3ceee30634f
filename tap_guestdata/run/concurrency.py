"""Bounded concurrency: HTTP in worker threads, records written by the main thread in order.

Only requests run in the workers; the SDK's record loop (state, messages) stays on the main
thread. At most `window` partitions are in flight or waiting, which bounds memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

Item = TypeVar("Item")
Rows = list[dict[str, Any]]  # one partition's rows
Result = TypeVar("Result")


def ordered_map(
    executor: Executor, work: Callable[[Item], Result], items: Iterable[Item], window: int
) -> Iterator[Result]:
    """`map(work, items)` run in the pool, `window` ahead, results yielded in input order."""
    pending: deque[Future[Result]] = deque()
    try:
        for item in items:
            pending.append(executor.submit(work, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


class Prefetched:
    """A child stream's partitions fetched ahead by its parent, keyed by partition."""

    def __init__(self) -> None:
        self._futures: dict[Hashable, Future[Rows]] = {}

    def submit(self, executor: Executor, key: Hashable, work: Callable[[], Rows]) -> None:
        self._futures[key] = executor.submit(work)

    def take(self, key: Hashable) -> Future[Rows] | None:
        return self._futures.pop(key, None)

    def clear(self) -> None:
        for future in self._futures.values():
            future.cancel()
        self._futures.clear()


def lookahead(
    records: Iterable[dict[str, Any]], on_read: Callable[[dict[str, Any]], None], window: int
) -> Iterator[dict[str, Any]]:
    """Yield `records` `window` behind reading them, calling `on_read` as each is read, so the
    work `on_read` starts (a child's requests) runs while earlier records are written."""
    held: deque[dict[str, Any]] = deque()
    for record in records:
        on_read(record)
        held.append(record)
        if len(held) > window:
            yield held.popleft()
    while held:
        yield held.popleft()
