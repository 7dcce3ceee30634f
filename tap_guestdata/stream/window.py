"""Window policies: which part of a stream's history a run reads, as a part the stream declares.

The rules of time themselves (London days, UTC bookmarks, the parameters) are in `time_rules.py`;
a policy applies them to one stream: its bookmark, start_date, the lookback, and the window's
end (the run's `window_end`, or where an interrupted run got to: the stream's resume part).

    window = ListingWindow(since="from", until="to", dates=True)   # guests (spec 4.1)
    window = DayByDayWindow(since="from", until="to", lookback_setting="stats_lookback_days")
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tap_guestdata.run import time_rules
from tap_guestdata.run.time_rules import TimeWindow
from tap_guestdata.stream.host import Part, PartitionKey, StreamHost, state_key

if TYPE_CHECKING:
    from singer_sdk.helpers.types import Context

    from tap_guestdata.stream.resume import Resume


class WindowHost(StreamHost, Protocol):
    """A stream as its window sees it: its state partitions and how far a resumed read got."""

    @property
    def resume(self) -> Resume: ...


def bookmark(host: StreamHost, context: Context | None) -> str | None:
    """The previous run's bookmark of this partition (progress of this run is kept apart in
    resume markers until the end, so this is stable during the run)."""
    state = host.get_context_state(context)
    if state.get("replication_key") != host.replication_key:
        return None
    value: str | None = state.get("replication_key_value")
    return value


class WindowPolicy(Part):
    """No window: the whole answer every run."""

    windowed = False
    since: str | None = None  # the lower bound's query parameter

    def attach(self, host: WindowHost) -> None:
        self.host = host

    def params(self, context: Context | None) -> dict[str, Any]:
        """The window's query parameters for this partition (fixed for the run)."""
        return {}

    def since_value(self, context: Context | None) -> str | None:
        """What the window's lower bound was sent as; None: no lower bound."""
        return self.params(context).get(self.since) if self.since else None


class ListingWindow(WindowPolicy):
    """A list request bounded by `since`/`until` parameters: from the bookmark (less the
    lookback, never before `earliest`) to the run's window end or a resumed read's point."""

    windowed = True

    def __init__(
        self,
        since: str,
        until: str | None = None,
        *,
        dates: bool = False,
        lookback_setting: str | None = None,
    ) -> None:
        self.since = since
        self.shape = TimeWindow(since, until, dates, lookback_setting)

    def attach(self, host: WindowHost) -> None:
        super().attach(host)
        self._params: dict[PartitionKey, dict[str, Any]] = {}

    def params(self, context: Context | None) -> dict[str, Any]:
        key = state_key(self.host, context)
        if key not in self._params:
            self._params[key] = self.shape.params(
                self.start(context),
                self.until(context),
                self.lookback_days(),
                start_date=self.earliest(),
            )
        return self._params[key]

    def until(self, context: Context | None) -> dt.datetime:
        """The run's window end (the sync start, or the end of end_date's London day), or
        where an interrupted run got to (the resume part)."""
        return self.host.resume.window_until(context, self.host.runtime.window_end)

    def start(self, context: Context | None) -> str | None:
        """The previous run's bookmark, or `earliest` on a first run, whichever is later."""
        previous = bookmark(self.host, context)
        earliest = self.earliest()
        if previous and earliest:
            return max(previous, earliest, key=time_rules.parse_boundary)
        return previous or earliest

    def earliest(self) -> str | None:
        """The earliest instant any run reads, a lookback included: start_date."""
        return self.host.runtime.settings.start_date

    def lookback_days(self) -> int:
        setting = self.shape.lookback_setting
        return int(getattr(self.host.runtime.settings, setting) or 0) if setting else 0


class WholeHistoryWindow(ListingWindow):
    """A listing start_date does not cut: a first run reads from the first row, later runs
    from the bookmark (a member's ledger, whose sum is the member's balance, spec 2.9)."""

    def earliest(self) -> str | None:
        return None


class OpenRowsWindow(ListingWindow):
    """A listing whose rows change while open (rewards, spec 3): the next run starts at the
    oldest row still open at the last read (kept in state under `oldest_open_key`); without
    one (state from an older version), a lookback of `longest_open(host)` days, the longest a
    row stays open. It reaches back before start_date by as much: a row open at start_date
    can change inside the window (a reward issued before it, redeemed after it)."""

    def __init__(
        self,
        since: str,
        until: str,
        *,
        lookback_setting: str,
        oldest_open_key: str,
        longest_open: Callable[[Any], int],
    ) -> None:
        super().__init__(since, until, lookback_setting=lookback_setting)
        self.oldest_open_key = oldest_open_key
        self.longest_open = longest_open

    def earliest(self) -> str | None:
        start_date = super().earliest()
        if start_date is None:
            return None
        days = dt.timedelta(days=self.longest_open(self.host))
        return (time_rules.parse_boundary(start_date) - days).isoformat()

    def start(self, context: Context | None) -> str | None:
        start = super().start(context)
        oldest_open = self.host.stream_state.get(self.oldest_open_key)
        if start is None or not oldest_open or self.fixed_lookback():
            return start
        return str(min(start, oldest_open, key=time_rules.parse_boundary))

    def fixed_lookback(self) -> bool:
        """A lookback in days: set by the user, or the fallback when state has no oldest open."""
        return self.user_lookback() is not None or not self.host.stream_state.get(
            self.oldest_open_key
        )

    def user_lookback(self) -> int | None:
        value = getattr(self.host.runtime.settings, str(self.shape.lookback_setting))
        return None if value is None else int(value)

    def lookback_days(self) -> int:
        if (days := self.user_lookback()) is not None:
            return days
        if bookmark(self.host, None) is None or not self.fixed_lookback():
            return 0  # a first run reads everything; else the oldest open row bounds it
        return self.longest_open(self.host)


class DayByDayWindow(ListingWindow):
    """One request per London day (from = to = that day, spec 2.4), days ascending: from
    max(the partition's first day, start_date, bookmark - lookback) to the window's last day."""

    def __init__(self, since: str, until: str, *, lookback_setting: str) -> None:
        super().__init__(since, until, dates=True, lookback_setting=lookback_setting)
        self.since_parameter = since
        self.until_parameter = until

    def params(self, context: Context | None) -> dict[str, Any]:
        day = (context or {}).get("day")
        return {self.since_parameter: day, self.until_parameter: day} if day else {}

    def last_day(self) -> dt.date:
        """Today, or end_date when that is earlier (time_rules.window_end)."""
        return time_rules.last_day(self.host.runtime.window_end)

    def days(self, context: Context | None, earliest: dt.date) -> list[dt.date]:
        """The days to read, `earliest` being the first day the partition has data."""
        settings = self.host.runtime.settings
        first = earliest
        if (start := self.earliest()) is not None:  # a lookback never reaches before it
            first = max(first, time_rules.london_day(start))
        previous = bookmark(self.host, context)
        if previous is not None:
            lookback = dt.timedelta(self.lookback_days())
            first = max(first, dt.date.fromisoformat(previous) - lookback)
        elif (history_days := settings.stats_history_days) is not None:
            # the last N days, the last day read included
            first = max(first, self.last_day() - dt.timedelta(days=history_days - 1))
        return time_rules.days_between(first, self.last_day())


class UpdatedSinceWindow(WindowPolicy):
    """A listing read in full the first time, then for what changed since the bookmark kept
    under `parameter` (members: updated_since, spec 4.2), unless `read_all(host)` says a run
    needs every row (a ledger selected for the first time needs every member)."""

    def __init__(self, parameter: str, *, read_all: Callable[[Any], bool]) -> None:
        self.parameter = parameter
        self.read_all = read_all

    def params(self, context: Context | None) -> dict[str, Any]:
        state = self.host.stream_state
        since = state.get("replication_key_value")
        if state.get("replication_key") != self.parameter or not since:
            return {}
        if self.read_all(self.host):
            return {}
        return {self.parameter: time_rules.instant_param(time_rules.parse_instant(since))}
