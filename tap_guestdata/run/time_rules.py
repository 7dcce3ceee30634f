"""Time windows: London days, UTC bookmarks and the since/until parameters (spec 4.4).

Every rule about time lives here, so a stream only declares which parameters it sends:
- a bare date is a day in Europe/London (spec 4.4.2), as `since` its start, as `until` its end;
- instants are sent with their offset, which `requests` percent-encodes (`+` -> `%2B`);
- bookmarks are rendered in UTC, because the SDK compares bookmarks as JSON strings;
- every window of a run ends at the same instant, `window_end`: the run's start, or the end of
  end_date's London day when that is earlier, and starts no earlier than start_date.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

LONDON = ZoneInfo("Europe/London")  # spec 4.4.2: bare dates are London days
UTC = dt.timezone.utc
_BARE_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_INSTANT_WITH_OFFSET = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|z|[+-]\d{2}:?\d{2})$"
)


def is_bare_date(value: str) -> bool:
    return bool(_BARE_DATE.match(value))


def is_instant_with_offset(value: str) -> bool:
    return bool(_INSTANT_WITH_OFFSET.match(value))


def parse_instant(value: str) -> dt.datetime:
    """An ISO 8601 instant with offset; a naive one is read as UTC (SDK signposts)."""
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_boundary(value: str) -> dt.datetime:
    """A setting or bookmark as an instant: a bare date is the start of that London day."""
    if is_bare_date(value):
        return start_of_london_day(dt.date.fromisoformat(value))
    return parse_instant(value)


def start_of_london_day(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(0), tzinfo=LONDON).astimezone(UTC)


def end_of_london_day(day: dt.date) -> dt.datetime:
    """The instant a London day ends: the start of the next one (23 or 25 hours on DST days)."""
    return start_of_london_day(day + dt.timedelta(days=1))


def is_london_midnight(instant: dt.datetime) -> bool:
    return instant.astimezone(LONDON).time() == dt.time(0)


def window_end(sync_started_at: dt.datetime, end_date: str | None) -> dt.datetime:
    """Where every window of a run ends: the run's start, or the end of end_date's London day
    (spec 4.4.3: a bare date as until is the end of that day) when that is earlier."""
    if end_date is None:
        return sync_started_at
    return min(sync_started_at, end_of_london_day(london_day(end_date)))


def last_day(window_end: dt.datetime) -> dt.date:
    """The last London day a window ending at `window_end` reads: the day before a London
    midnight (the window stops just before it), else the day the instant falls on."""
    day = london_day(window_end)
    return day - dt.timedelta(days=1) if is_london_midnight(window_end) else day


def london_day(value: str | dt.datetime) -> dt.date:
    """The Europe/London calendar day of an instant (or of a bare London date)."""
    if isinstance(value, str):
        if is_bare_date(value):
            return dt.date.fromisoformat(value)
        value = parse_instant(value)
    return value.astimezone(LONDON).date()


def utc_text(value: str | dt.datetime) -> str:
    """One rendering for every bookmark, so string comparison matches time order."""
    if isinstance(value, str) and value.endswith("+00:00") and "." not in value:
        return value  # already this rendering
    instant = parse_instant(value) if isinstance(value, str) else value
    return instant.astimezone(UTC).isoformat()


def instant_param(value: dt.datetime) -> str:
    """An instant for a query string, with its offset (spec 4.4.1; `+` is sent as %2B)."""
    return value.astimezone(UTC).isoformat()


def days_between(first: dt.date, last: dt.date) -> list[dt.date]:
    """Every day from `first` to `last`, both included."""
    return [first + dt.timedelta(days=offset) for offset in range((last - first).days + 1)]


@dataclass(frozen=True)
class TimeWindow:
    """How a stream bounds its list request in time.

    since/until: the query parameter names; `dates=True` when the endpoint only takes London
    dates (/guests `from`/`to`, spec 4.1), else instants. `lookback_setting` names the setting
    holding the days re-read before the bookmark (rows that change after their first read).
    """

    since: str
    until: str | None = None
    dates: bool = False
    lookback_setting: str | None = None

    def params(
        self,
        start: str | None,
        until: dt.datetime,
        lookback_days: int = 0,
        start_date: str | None = None,
    ) -> dict[str, Any]:
        """Query parameters for a window from `start` (bookmark or start_date) to `until`.

        The upper bound is the window's end (`window_end`, or where an interrupted run got to),
        so rows created while paging newest-first cannot shift pages (spec 4.2 lists are newest
        first). The lookback re-reads days before a bookmark, never before start_date.
        """
        params: dict[str, Any] = {}
        if start is not None:
            since = parse_boundary(start) - dt.timedelta(days=lookback_days)
            if start_date is not None:
                since = max(since, parse_boundary(start_date))
            params[self.since] = (
                london_day(since).isoformat() if self.dates else instant_param(since)
            )
        if self.until is not None:
            params[self.until] = self.until_param(until)
        return params

    def until_param(self, until: dt.datetime) -> str:
        """A London midnight is sent as the bare day before it (spec 4.4.3: the end of that
        day), so the window stops just before that midnight; another instant as itself."""
        if self.dates or is_london_midnight(until):
            return last_day(until).isoformat()
        return instant_param(until)
