"""The tap's settings: their JSON schema (what `--about` shows), validation and a typed view.

Validation runs before any request and raises `ConfigValidationError` naming the setting;
messages about api_key / api_keys never repeat the value.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from singer_sdk import typing as th
from singer_sdk.typing import DEFAULT_JSONSCHEMA_VALIDATOR, extend_validator_with_defaults

from tap_guestdata.http.errors import BASE_PATH
from tap_guestdata.run import time_rules
from tap_guestdata.run.state_markers import BOOKMARK_TIME_KEYS, RESUME_TIME_KEYS

MAX_KEYS = 5  # spec 5.3: at most 5 keys per account
SECRET_SETTINGS = ("api_key", "api_keys")
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}  # plain http allowed only here

SETTINGS_SCHEMA: dict[str, Any] = th.PropertiesList(
    th.Property(
        "api_key",
        th.StringType,
        secret=True,
        description="API key from the dashboard's API Keys page (spec 5). Required unless "
        "api_keys is set.",
    ),
    th.Property(
        "api_keys",
        th.ArrayType(th.StringType),
        secret=True,
        description="1 to 5 distinct keys of the same account (spec 5.3); requests are spread "
        "over them, each key with its own per-minute budget.",
    ),
    th.Property(
        "base_url",
        th.StringType,
        required=True,
        description="API root ending in /api/v1/customer (spec 9); https unless the host is "
        "loopback (127.0.0.1, ::1, localhost).",
    ),
    th.Property(
        "start_date",
        th.StringType,
        description="Earliest data for time-windowed streams on a first run: YYYY-MM-DD (a "
        "Europe/London day) or an ISO 8601 instant with offset; not in the future. A lookback "
        "re-reads days before a bookmark, never before start_date. Two streams reach further, "
        "so that what is read adds up: member_ledger is read whole (a balance is the sum of "
        "its ledger), and rewards from the longest offer validity before start_date (every "
        "reward a redemption from start_date can be of).",
    ),
    th.Property(
        "end_date",
        th.StringType,
        description="The last day read, inclusive: YYYY-MM-DD (a Europe/London day), on or "
        "after start_date. guests, daily_stats and daily_account_stats read the London days "
        "from start_date to end_date; rewards, redemptions and member_ledger read up to the "
        "end of end_date's London day; members are listed whole (their ledgers read up to "
        "that end). account, venues, offers, offer_stats, programme, programme_venues and "
        "tiers have no time window and ignore start_date and end_date. Unset, today or later: "
        "up to the run's start. No bookmark is written past the end of end_date. To re-load a "
        "period without touching the daily state, run it under its own state id: "
        "`meltano run --full-refresh --state-id-suffix=reload-START-END tap-guestdata "
        "TARGET` with TAP_GUESTDATA_START_DATE and TAP_GUESTDATA_END_DATE set.",
    ),
    th.Property(
        "requests_per_minute",
        th.IntegerType(minimum=1),
        default=120,
        description="Requests per key per rolling window (spec 8 allows 120 per minute).",
    ),
    th.Property(
        "rate_limit_window_seconds",
        th.NumberType(exclusive_minimum=0),
        default=60,
        description="Length in seconds of the rolling 'minute' the per-key budget applies to.",
    ),
    th.Property(
        "rate_budget_store",
        th.StringType,
        default="sqlite",
        description="Where every process of a deployment counts its requests, so that they "
        "share each key's 120 and each address's 600 a minute (spec 8): `sqlite` (a file in "
        "the machine's temp directory: every process of one machine), `sqlite:///PATH`, "
        "`redis://HOST:PORT/DB` (every machine that reaches it), or `off` (this process only). "
        "If the store cannot be used the run keeps to its own limits and warns once.",
    ),
    th.Property(
        "rate_budget_address",
        th.StringType,
        description="The name of the address this process's requests leave from, for the "
        "per-address 600 a minute (spec 8): processes that give the same name share it. "
        "Default: the host name. Give each worker (or each egress queue) its own.",
    ),
    th.Property(
        "rewards_lookback_days",
        th.IntegerType(minimum=0),
        description="A fixed number of days of issued rewards to re-read before the bookmark. "
        "Unset (recommended): re-read from the oldest reward still open at the last run, since "
        "only an open reward can be redeemed, voided or expire (spec 3); with state from before "
        "that rule, the longest valid_days_after_issue among offers.",
    ),
    th.Property(
        "redemptions_lookback_days",
        th.IntegerType(minimum=0),
        default=30,
        description="Days of redemptions re-read before the bookmark (voids and restores).",
    ),
    th.Property(
        "stats_lookback_days",
        th.IntegerType(minimum=0),
        default=0,
        description="Days of daily statistics re-read before the bookmark's day (which is "
        "always re-read). Raise it if venues report visits late; the weekly full refresh "
        "catches opt-ins withdrawn on older days.",
    ),
    th.Property(
        "stats_history_days",
        th.IntegerType(minimum=1),
        description="On a first run (no bookmark), daily_stats and daily_account_stats read at "
        "most this many London days back from today (and not before start_date). Unset: every "
        "day since the venue opened. Days left out are only read later by a full refresh "
        "without this setting.",
    ),
    th.Property(
        "members_margin_seconds",
        th.IntegerType(minimum=0),
        default=60,
        description="Safety margin subtracted from the sync start (the earlier of the tap's "
        "clock and the API's Date header, so clock skew is covered) for the members bookmark, "
        "sent as updated_since on the next run.",
    ),
    th.Property(
        "on_forbidden",
        th.StringType,
        allowed_values=["warn", "fail"],
        default="warn",
        description="On a 403 that closes streams (Rewards off or not in plan, missing team "
        "permission): warn and skip them, or fail the run.",
    ),
    th.Property(
        "schema_drift",
        th.StringType,
        allowed_values=["include", "drop", "fail"],
        default="include",
        description="A field the API sends that the stream's schema does not declare (always "
        "with one warning): include it (the SCHEMA is sent again with the field, so SQL "
        "targets add the column), drop it, or fail the run.",
    ),
    th.Property(
        "max_workers",
        th.IntegerType(minimum=1, maximum=16),
        default=4,
        description="Concurrent requests per key for ledger lines, offer stats and per-day "
        "statistics (worker threads = max_workers x number of keys).",
    ),
    th.Property(
        "request_timeout_seconds",
        th.NumberType(exclusive_minimum=0),
        default=30,
        description="Seconds to wait for an answer before the request is retried.",
    ),
    th.Property(
        "max_retries",
        th.IntegerType(minimum=0),
        default=8,
        description="Retries (exponential backoff) after a 5xx, timeout, dropped connection or "
        "unreadable body, per request; 429s wait Retry-After and do not count.",
    ),
    th.Property(
        "state_interval_seconds",
        th.NumberType(minimum=0),
        default=10,
        description="Seconds between STATE messages while a stream runs, each saying how far "
        "it got, so a killed sync resumes from there (0: after every row). The target saves "
        "state only when it flushes, so its own flush interval applies too.",
    ),
    th.Property(
        "progress_interval_seconds",
        th.NumberType(exclusive_minimum=0),
        default=30,
        description="Seconds between progress lines (requests done of expected, rate, time "
        "left) while a stream runs.",
    ),
    th.Property(
        "log_request_metrics",
        th.BooleanType,
        default=False,
        description="Log the SDK's per-request and per-partition METRIC lines (also shown at "
        "debug log level). Off: the log grows with minutes and streams, not with requests.",
    ),
).to_dict()


@dataclass(frozen=True)
class Settings:
    """Validated settings with their defaults applied."""

    keys: tuple[str, ...]
    base_url: str
    start_date: str | None
    end_date: str | None
    requests_per_minute: int
    rate_limit_window_seconds: float
    rate_budget_store: str
    rate_budget_address: str | None
    rewards_lookback_days: int | None
    redemptions_lookback_days: int
    stats_lookback_days: int
    stats_history_days: int | None
    members_margin_seconds: int
    on_forbidden: str
    schema_drift: str
    max_workers: int
    request_timeout_seconds: float
    max_retries: int
    state_interval_seconds: float
    progress_interval_seconds: float
    log_request_metrics: bool

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Settings:
        """The validated config; every default is already in it (filled from the schema)."""
        return cls(
            keys=tuple(api_keys(config)),
            base_url=str(config["base_url"]).rstrip("/"),
            start_date=config.get("start_date") or None,
            end_date=config.get("end_date") or None,
            requests_per_minute=int(config["requests_per_minute"]),
            rate_limit_window_seconds=float(config["rate_limit_window_seconds"]),
            rate_budget_store=str(config["rate_budget_store"]).strip(),
            rate_budget_address=config.get("rate_budget_address") or None,
            rewards_lookback_days=config.get("rewards_lookback_days"),
            redemptions_lookback_days=int(config["redemptions_lookback_days"]),
            stats_lookback_days=int(config["stats_lookback_days"]),
            stats_history_days=config.get("stats_history_days"),
            members_margin_seconds=int(config["members_margin_seconds"]),
            on_forbidden=str(config["on_forbidden"]),
            schema_drift=str(config["schema_drift"]),
            max_workers=int(config["max_workers"]),
            request_timeout_seconds=float(config["request_timeout_seconds"]),
            max_retries=int(config["max_retries"]),
            state_interval_seconds=float(config["state_interval_seconds"]),
            progress_interval_seconds=float(config["progress_interval_seconds"]),
            log_request_metrics=bool(config["log_request_metrics"]),
        )


def api_keys(config: Mapping[str, Any]) -> list[str]:
    """api_keys, plus api_key when both are set, without repeats."""
    keys = list(config.get("api_keys") or [])
    single = config.get("api_key")
    if single and single not in keys:
        keys.insert(0, single)
    return keys


def validate(config: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Every problem with the config, each naming its setting; [] when valid. Fills in the
    schema's defaults as the SDK does (its validator, extended with defaults): they live in the
    schema alone."""
    validator = extend_validator_with_defaults(DEFAULT_JSONSCHEMA_VALIDATOR)(schema)
    errors = [_schema_error(error) for error in validator.iter_errors(config)]
    errors += _key_errors(config)
    if isinstance(config.get("base_url"), str):
        errors += _base_url_errors(config["base_url"])
    if isinstance(config.get("start_date"), str):
        errors += _start_date_errors(config["start_date"])
    if isinstance(config.get("end_date"), str):
        errors += _end_date_errors(config["end_date"], config.get("start_date"))
    return list(dict.fromkeys(errors))


def _schema_error(error: Any) -> str:
    setting = str(error.absolute_path[0]) if error.absolute_path else ""
    if setting in SECRET_SETTINGS:  # never echo a key: describe the rule instead
        return f"{setting}: must be {_KEY_RULES[setting]} (value not shown)"
    if not setting and error.validator == "required":
        return f"{error.message.split(' ')[0].strip(chr(39))}: required setting is missing"
    return f"{setting or 'config'}: {error.message}"


_KEY_TOKEN = re.compile(r"^[!-~]+$")
_KEY_RULES = {
    "api_key": "a non-empty string of visible characters without spaces",
    "api_keys": f"a list of 1 to {MAX_KEYS} (at most {MAX_KEYS}) distinct non-empty strings",
}


def _key_errors(config: dict[str, Any]) -> list[str]:
    single, many = config.get("api_key"), config.get("api_keys")
    errors: list[str] = []
    if single is None and not many:
        errors.append("api_key: required unless api_keys is set")
    if single is not None and not _is_key(single):
        errors.append(f"api_key: must be {_KEY_RULES['api_key']} (value not shown)")
    if many is None:
        return errors
    if not isinstance(many, list) or not all(_is_key(key) for key in many):
        return [*errors, f"api_keys: every key must be {_KEY_RULES['api_key']} (values not shown)"]
    distinct = set(many) | ({single} if _is_key(single) else set())
    if not many:
        errors.append("api_keys: must hold at least 1 key")
    if len(set(many)) != len(many):
        errors.append("api_keys: the same key is listed twice; keys must be distinct")
    if len(distinct) > MAX_KEYS:
        errors.append(
            f"api_keys: at most {MAX_KEYS} keys (an account holds at most 5, spec 5.3), "
            f"got {len(distinct)}"
        )
    return errors


def _is_key(value: Any) -> bool:
    """A key is one token: visible ASCII, no spaces or line breaks (it goes in a header)."""
    return isinstance(value, str) and bool(_KEY_TOKEN.match(value))


def _base_url_errors(base_url: str) -> list[str]:
    parts = urlsplit(base_url)
    errors: list[str] = []
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return [f"base_url: must be an http(s) URL ending in {BASE_PATH}"]
    if not parts.path.rstrip("/").endswith(BASE_PATH) or parts.query or parts.fragment:
        errors.append(f"base_url: must end in {BASE_PATH} (spec 9), got path {parts.path!r}")
    if parts.scheme != "https" and not _is_loopback(parts.hostname):
        errors.append("base_url: must use https unless the host is loopback (the key is sent)")
    return errors


def _is_loopback(host: str) -> bool:
    return host.lower() in LOOPBACK_HOSTS


def _start_date_errors(value: str) -> list[str]:
    if time_rules.is_bare_date(value):
        try:
            day = dt.date.fromisoformat(value)
        except ValueError:
            return [f"start_date: {value!r} is not a valid date"]
        future = day > time_rules.london_day(dt.datetime.now(time_rules.UTC))
    elif time_rules.is_instant_with_offset(value):
        try:
            future = time_rules.parse_instant(value) > dt.datetime.now(time_rules.UTC)
        except ValueError:
            return [f"start_date: {value!r} is not a valid ISO 8601 instant"]
    else:
        return [
            f"start_date: {value!r} must be YYYY-MM-DD (a London day) or an ISO 8601 instant "
            "with offset, e.g. 2024-01-31T00:00:00+00:00"
        ]
    return [f"start_date: {value!r} is in the future"] if future else []


def _end_date_errors(value: str, start_date: Any) -> list[str]:
    """end_date is a London day (inclusive) not before start_date's; today or later is fine
    (the run reads up to its start)."""
    try:
        day = dt.date.fromisoformat(value) if time_rules.is_bare_date(value) else None
    except ValueError:
        return [f"end_date: {value!r} is not a valid date"]
    if day is None:
        return [f"end_date: {value!r} must be YYYY-MM-DD (a London day, the last one read)"]
    if isinstance(start_date, str) and not _start_date_errors(start_date):
        first = time_rules.london_day(start_date)
        if day < first:
            return [
                f"end_date: {value!r} is before start_date's London day {first.isoformat()}; "
                "the window would be empty"
            ]
    return []


def state_errors(state: Any, streams: Mapping[str, Any]) -> list[str]:
    """Problems with an input state: not an object, or a bookmark that is not a date/instant."""
    if not isinstance(state, dict) or not isinstance(state.get("bookmarks", {}), dict):
        return ["state: must be a JSON object with a 'bookmarks' object"]
    errors: list[str] = []
    for name, bookmark in state.get("bookmarks", {}).items():
        if name not in streams:
            continue  # a stream this tap no longer has: ignored
        if not isinstance(bookmark, dict):
            errors.append(f"state: bookmark of {name} is not an object")
            continue
        for entry in [bookmark, *(bookmark.get("partitions") or [])]:
            if isinstance(entry, dict) and not _readable_bookmark(entry):
                errors.append(f"state: bookmark of {name} is not a date or instant: {entry}")
    return errors


def _readable_bookmark(entry: dict[str, Any]) -> bool:
    """replication_key_value (and the rewards' oldest open issued_at) is a date or instant, and
    so is every time in a resume marker (run/state_markers.py)."""
    marker = entry.get("resume")
    if marker is not None and not (
        isinstance(marker, dict) and _readable_times(marker, RESUME_TIME_KEYS)
    ):
        return False
    return _readable_times(entry, BOOKMARK_TIME_KEYS)


def _readable_times(entry: dict[str, Any], keys: tuple[str, ...]) -> bool:
    for key in keys:
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            return False
        try:
            if time_rules.is_bare_date(value):
                dt.date.fromisoformat(value)
            else:
                time_rules.parse_instant(value)
        except ValueError:
            return False
    return True
