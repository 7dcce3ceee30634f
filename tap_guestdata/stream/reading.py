"""The read loop: a stream's rows, with its parts told what happened (before the read, each row
written, the end, or a failure and why). `GuestDataStream.get_records` is this loop.

Observers, in the order they are told: the resume part (resume.py), the deletions part
(deletions.py), the checkpoints (a STATE message at most every `state_interval_seconds`) and
the progress lines (run/progress.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tap_guestdata.http.errors import StreamForbidden, StreamSkipped

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.run.progress import Progress
    from tap_guestdata.run.state_markers import Checkpoints


class ReadObserver(Protocol):
    def before_read(self, context: Context | None) -> None: ...
    def row_written(self, row: dict[str, Any], context: Context | None) -> None: ...
    def read_ended(self, context: Context | None) -> None: ...
    def read_failed(self, context: Context | None, why: str) -> None: ...


class ReadEvents:
    """An observer that does nothing; a part overrides the events it cares about."""

    def before_read(self, context: Context | None) -> None:
        """A partition's read is about to start."""

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        """The SDK has written `row` (and synced its children): it counts as done."""

    def read_ended(self, context: Context | None) -> None:
        """The partition was read to its end."""

    def read_failed(self, context: Context | None, why: str) -> None:
        """The partition was not read, or not to its end, because of `why`."""


def read_told(
    read: Callable[[], Iterable[dict[str, Any]]],
    observers: Sequence[ReadObserver],
    context: Context | None,
    *,
    forbidden: Callable[[StreamForbidden], None],
) -> Iterator[dict[str, Any]]:
    """The rows `read()` gives, each observer told what happened. A 403 (`forbidden` decides
    whether the run fails, spec 4.5) or a skipped group ends the read quietly; any other
    failure is raised as it was."""
    for observer in observers:
        observer.before_read(context)
    try:
        for row in read():
            yield row
            # The SDK asks for the next row only once it has written this one (and synced
            # its children): from here on the row counts as done (run/state_markers.py).
            for observer in observers:
                observer.row_written(row, context)
    except StreamForbidden as error:
        forbidden(error)
        tell_failed(observers, context, f"the read stopped: {error}")
        return
    except StreamSkipped as skipped:
        tell_failed(observers, context, f"the read stopped: {skipped}")
        return
    except BaseException as error:  # a failed page, a stop: told, then raised as it was
        tell_failed(observers, context, f"the read did not finish ({type(error).__name__})")
        raise
    for observer in observers:
        observer.read_ended(context)


def tell_failed(observers: Sequence[ReadObserver], context: Context | None, why: str) -> None:
    for observer in observers:
        observer.read_failed(context, why)


class Checkpointing(ReadEvents):
    """A STATE message, carrying how far the stream got, when one is due (run/state_markers.py)."""

    def __init__(
        self,
        checkpoints: Checkpoints,
        markers: Callable[[], None],
        write_state: Callable[[], None],
    ) -> None:
        self.checkpoints = checkpoints
        self.markers = markers  # the resume markers into the stream's state (resume.py)
        self.write_state = write_state

    def row_written(self, row: dict[str, Any], context: Context | None) -> None:
        if self.checkpoints.due():
            self.markers()
            self.write_state()


class ProgressTelling(ReadEvents):
    """Tells the progress lines a stream and its children are done (run/progress.py)."""

    def __init__(self, progress: Progress, names: list[str]) -> None:
        self.progress = progress
        self.names = names

    def read_ended(self, context: Context | None) -> None:
        self.progress.finished(*self.names)
