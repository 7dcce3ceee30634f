"""tap-guestdata: the Guest Data Read API as Singer streams.

Settings: `run/settings.py` (schema, validation). Streams: the list below, declared in
`streams/core.py` and `streams/rewards.py`. Shared HTTP rules: `stream/base.py` and `http/`.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from functools import cached_property
from typing import IO, Any, ClassVar

from singer_sdk import Stream, Tap
from singer_sdk.exceptions import ConfigValidationError, FatalAPIError, RetriableAPIError
from singer_sdk.helpers.capabilities import CapabilitiesEnum, PluginCapabilities, TapCapabilities

from tap_guestdata.run import settings as settings_module
from tap_guestdata.run.progress import QuietLog
from tap_guestdata.run.runtime import Runtime
from tap_guestdata.run.settings import SETTINGS_SCHEMA, Settings, state_errors
from tap_guestdata.run.time_rules import UTC
from tap_guestdata.run.writer import GuestDataWriter
from tap_guestdata.stream import drift, planning
from tap_guestdata.stream.base import GuestDataStream
from tap_guestdata.streams import STREAM_TYPES as STREAM_TYPES  # its old home: tests import it


class TapGuestData(Tap):
    """Singer tap for the Guest Data Read API."""

    name = "tap-guestdata"
    config_jsonschema = SETTINGS_SCHEMA
    message_writer_class = GuestDataWriter
    capabilities: ClassVar[list[CapabilitiesEnum]] = [
        TapCapabilities.CATALOG,
        TapCapabilities.DISCOVER,
        TapCapabilities.STATE,
        PluginCapabilities.ABOUT,
        PluginCapabilities.STREAM_MAPS,
        PluginCapabilities.FLATTENING,
        PluginCapabilities.BATCH,
    ]

    def _validate_config(self, *, raise_errors: bool = True) -> list[str]:
        """The SDK's step (defaults filled from the schema, errors raised before any request),
        with messages that never repeat a key and the checks a schema cannot say (run/settings.py).
        Override register: docs/development-sdk.md."""
        self.append_builtin_config(self.config_jsonschema)
        errors = settings_module.validate(self._config, self.config_jsonschema)
        if errors and raise_errors:
            raise ConfigValidationError(
                "Config validation failed: " + "; ".join(errors),
                errors=errors,
                schema=self.config_jsonschema,
            )
        return errors

    @classmethod
    def invoke(cls, *, state: IO[str] | None = None, **options: Any) -> None:
        """The SDK's, refusing a state file that is not JSON with a message, and ending a run
        the API stopped (spec 7) with its one-line message rather than a traceback."""
        if state is not None:
            text = state.read()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                message = "state: the state file is not a JSON object; fix it or run without it"
                raise ConfigValidationError(f"Invalid state: {message}", errors=[message])
            state = io.StringIO(text)
        try:
            super().invoke(state=state, **options)
        except (FatalAPIError, RetriableAPIError) as error:
            # Our messages name the request, the cause and what to do; the stack adds nothing.
            logger = logging.getLogger(cls.name)
            logger.debug("Traceback of the failure:", exc_info=True)
            logger.error("Sync failed: %s", error)
            raise SystemExit(1) from None

    def load_state(self, state: dict[str, Any]) -> None:
        """Refuse a state the run could not resume from, before any request."""
        errors = state_errors(state, self.streams)
        if errors:
            raise ConfigValidationError("Invalid state: " + "; ".join(errors), errors=errors)
        super().load_state(state)

    def discover_streams(self) -> list[Stream]:
        return [stream_type(tap=self) for stream_type in STREAM_TYPES]

    @cached_property
    def runtime(self) -> Runtime:
        """The run's shared state, created at the first request (never in discovery)."""
        started = dt.datetime.fromtimestamp(self.initialized_at / 1000, UTC)
        return Runtime(
            Settings.from_config(dict(self.config)), started.replace(microsecond=0), self.logger
        )

    def sync_all(self) -> None:  # type: ignore[misc]
        """A plan line per stream, the SDK's sync, then one summary line per stream (also when
        the run fails). The log stays quiet per request unless asked (run/progress.py)."""
        verbose = self.runtime.settings.log_request_metrics or self.logger.isEnabledFor(
            logging.DEBUG
        )
        streams = list(self.streams.values())
        try:
            with QuietLog(self.metrics_logger, loggers_of(streams), per_request=verbose):
                self.log_plan()
                self.runtime.progress.start()
                drift.streams_starting(streams)
                super().sync_all()
                drift.streams_ended(streams)  # declared fields that never arrived (stream/drift.py)
        finally:
            if "runtime" in self.__dict__:
                self.log_summary()
                self.__dict__.pop("runtime").close()  # a later sync starts afresh

    def log_plan(self) -> None:
        plans = [
            plan
            for stream in self.streams.values()
            if isinstance(stream, GuestDataStream) and stream.selected
            if (plan := planning.plan(stream)) is not None
        ]
        self.runtime.progress.log_plan(plans)

    def log_summary(self) -> None:
        for stream in self.streams.values():
            if not stream.selected or not isinstance(stream, GuestDataStream):
                continue
            counters = self.runtime.counters_for(stream.name)
            reason = self.runtime.gate.reason(stream.scopes)
            if reason is not None and counters.records == 0:
                counters.skipped = reason
                self.logger.warning(counters.line(stream.name))
            else:
                self.logger.info(counters.line(stream.name))


def loggers_of(streams: list[Stream]) -> list[logging.Logger]:
    """The streams' loggers themselves (singer-sdk 0.55 wraps each in a LoggerAdapter)."""
    return [logging.getLogger(stream.logger.name) for stream in streams]


def main(*args: Any) -> None:  # pragma: no cover - console entry point alias
    TapGuestData.cli(*args)
