"""Time windows: London days, UTC bookmarks and the since/until parameters (spec 4.4).

Every rule about time lives here, so a stream only declares which parameters it sends:
- a bare date is a day in Europe/London (spec 4.4.2), as `since` its start, as `until` its end;
- instants are sent with their offset, which `requests` percent-encodes (`+` -> `%2B`);
- bookmarks are rendered in UTC, because the SDK compares bookmarks as JSON strings.
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
    ) -> dict[str, Any]:
        """Query parameters for a window from `start` (bookmark or start_date) to `until`.

        The upper bound is the sync's start (or where an interrupted run got to), so rows
        created while paging newest-first cannot shift pages (spec 4.2 lists are newest first).
        """
        params: dict[str, Any] = {}
        if start is not None:
            since = parse_boundary(start) - dt.timedelta(days=lookback_days)
            params[self.since] = (
                london_day(since).isoformat() if self.dates else instant_param(since)
            )
        if self.until is not None:
            params[self.until] = (
                london_day(until).isoformat() if self.dates else instant_param(until)
            )
        return params
