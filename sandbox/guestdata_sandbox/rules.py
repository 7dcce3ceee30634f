"""Spec rules with no HTTP in them: London days, time windows, validation (422), masking, times."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from functools import lru_cache
from zoneinfo import ZoneInfo

LONDON = ZoneInfo("Europe/London")  # spec 4.4.2: a bare date is a Europe/London day
PER_PAGE_DEFAULT, PER_PAGE_MAX = 50, 200  # spec 4.3
STATS_DEFAULT_DAYS = 30  # spec 8: stats default period, last 30 days

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# spec 4.4.1: an ISO 8601 instant *with* an offset; an unencoded "+" arrives as a space (PHP).
_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})$")
_INT = re.compile(r"^[+-]?\d+$")


class ValidationError(Exception):
    """A 422 in the Laravel standard validation shape (spec 7)."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        super().__init__(next(iter(errors.values()))[0])
        self.errors = dict(errors)

    def body(self) -> dict:
        messages = [message for field in self.errors.values() for message in field]
        message = messages[0]
        if len(messages) > 1:
            extra = len(messages) - 1
            message += f" (and {extra} more error{'s' if extra > 1 else ''})"
        return {"message": message, "errors": self.errors}


def label(parameter: str) -> str:
    return parameter.replace("_", " ")


# ----------------------------------------------------------------------------- London days


def london_day_start(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=LONDON).timestamp()


def london_day_end(day: dt.date) -> float:
    """The last representable moment of the London day (spec 4.4.3: until = end of that day)."""
    return london_day_start(day + dt.timedelta(days=1)) - 1e-6


def london_date(epoch: float) -> dt.date:
    return dt.datetime.fromtimestamp(epoch, LONDON).date()


def london_today() -> dt.date:
    return dt.datetime.now(LONDON).date()


# ----------------------------------------------------------------------------- rendering


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def iso(epoch: float | None, zone_name: str) -> str | None:
    """spec 1: timestamps are ISO 8601 with a UTC offset (the venue's local offset here)."""
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(int(epoch), zone(zone_name)).isoformat()


def mask_text(value: str, keep: int = 1) -> str:
    """spec 2.8: partly replaced with asterisks (how many: not shown; we keep the first char)."""
    if len(value) <= keep:
        return "*" * len(value)
    return value[:keep] + "*" * (len(value) - keep)


def mask_email(email: str) -> str:
    local, _, domain = email.partition("@")
    return f"{mask_text(local)}@{domain}"


def mask_phone(phone: str) -> str:
    """Keep the "+", country code area and the last two digits; star the middle."""
    if len(phone) <= 6:
        return mask_text(phone)
    return phone[:4] + "*" * (len(phone) - 6) + phone[-2:]


# ----------------------------------------------------------------------------- validation


def integer(query: Mapping[str, str], name: str, minimum: int | None = None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if not _INT.match(raw.strip()):
        raise ValidationError({name: [f"The {label(name)} field must be an integer."]})
    value = int(raw)
    if minimum is not None and value < minimum:
        raise ValidationError({name: [f"The {label(name)} field must be at least {minimum}."]})
    return value


def paging(query: Mapping[str, str]) -> tuple[int, int]:
    """spec 4.3: per_page 1..200 (default 50), page >= 1; outside -> 422 naming the parameter."""
    errors: dict[str, list[str]] = {}
    per_page, page = PER_PAGE_DEFAULT, 1
    raw = query.get("per_page")
    if raw is not None:
        if not _INT.match(raw.strip()):
            errors["per_page"] = ["The per page field must be an integer."]
        elif not 1 <= int(raw) <= PER_PAGE_MAX:
            errors["per_page"] = [f"The per page field must be between 1 and {PER_PAGE_MAX}."]
        else:
            per_page = int(raw)
    raw = query.get("page")
    if raw is not None:
        if not _INT.match(raw.strip()):
            errors["page"] = ["The page field must be an integer."]
        elif int(raw) < 1:
            errors["page"] = ["The page field must be at least 1."]
        else:
            page = int(raw)
    if errors:
        raise ValidationError(errors)
    return per_page, page


def choice(query: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw not in allowed:
        raise ValidationError({name: [f"The selected {label(name)} is invalid."]})
    return raw


def boolean(query: Mapping[str, str], name: str) -> bool | None:
    """Laravel's boolean rule: 1, 0, true, false."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw in ("1", "true"):
        return True
    if raw in ("0", "false"):
        return False
    raise ValidationError({name: [f"The {label(name)} field must be true or false."]})


def moment(query: Mapping[str, str], name: str, end_of_day: bool) -> float | None:
    """spec 4.4: a London date (start, or end as until) or an exact instant with an offset."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        if _DATE.match(raw):
            day = dt.date.fromisoformat(raw)
            return london_day_end(day) if end_of_day else london_day_start(day)
        if _INSTANT.match(raw):
            return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    raise ValidationError({name: [f"The {label(name)} field must be a valid date."]})


def window(query: Mapping[str, str], since: str = "since", until: str = "until") -> tuple:
    """spec 4.4.5: since later than until gives 422 on since."""
    start = moment(query, since, end_of_day=False)
    end = moment(query, until, end_of_day=True)
    if start is not None and end is not None and start > end:
        raise ValidationError(
            {since: [f"The {since} field must be a date before or equal to {until}."]}
        )
    return start, end


def date_param(query: Mapping[str, str], name: str) -> dt.date | None:
    """/guests and /stats take from/to as dates (spec 4.1)."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if _DATE.match(raw):
        try:
            return dt.date.fromisoformat(raw)
        except ValueError:
            pass
    raise ValidationError({name: [f"The {name} field must match the format Y-m-d."]})


def date_range(query: Mapping[str, str]) -> tuple[dt.date | None, dt.date | None]:
    start, end = date_param(query, "from"), date_param(query, "to")
    if start is not None and end is not None and start > end:
        raise ValidationError({"from": ["The from field must be a date before or equal to to."]})
    return start, end
