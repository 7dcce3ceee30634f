"""What a part of a stream may ask of the stream that holds it (a Protocol, not the class).

The parts (transport.py, window.py, resume.py, deletions.py, planning.py) sit below
the stream class: they import this, never `base.py`, so no import circle forms (the layer
contract in pyproject.toml keeps it so). A part takes its host when the stream is built
(`Part.bound`), so one declaration on a class serves every instance of it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.run.runtime import Runtime


class StreamHost(Protocol):
    """A stream as its parts see it: its name and cursor, the run, and its state."""

    @property
    def name(self) -> str: ...
    @property
    def replication_key(self) -> str | None: ...
    @property
    def selected(self) -> bool: ...
    @property
    def logger(self) -> logging.Logger: ...
    @property
    def runtime(self) -> Runtime: ...
    @property
    def stream_state(self) -> dict[str, Any]: ...
    @property
    def streams_of_tap(self) -> Mapping[str, Any]: ...
    @property
    def state_manager(self) -> Any: ...  # the SDK's keeper of bookmarks and partitions

    def get_context_state(self, context: Context | None) -> dict[str, Any]: ...


PartT = TypeVar("PartT", bound="Part")


PartitionKey = tuple[tuple[str, Any], ...]  # a partition (context), hashable


def partition_key(context: Context | None) -> PartitionKey:
    return tuple(sorted((context or {}).items()))


def state_key(host: StreamHost, context: Context | None) -> PartitionKey:
    """The state partition `context` belongs to (a child's context may carry more keys)."""
    return partition_key(host.state_manager.get_state_partition_context(context))


class Part:
    """A piece of a stream's behaviour, declared on the class and bound to each instance."""

    def bound(self: PartT, host: Any) -> PartT:
        """A copy of this declaration for `host`, with state of its own."""
        part = copy.copy(self)
        part.attach(host)
        return part

    def attach(self, host: Any) -> None:
        """Keep the host and start this instance's state (a subclass adds its own)."""
