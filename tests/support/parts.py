"""A stand-in for a stream, as its parts see it (tap_guestdata/stream/host.py), for the unit
tests of the parts (tests/unit): no tap, no sandbox, state in plain dictionaries."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from singer_sdk.helpers.types import Context

from tap_guestdata.stream.host import PartitionKey, partition_key
from tap_guestdata.stream.resume import Resume
from tap_guestdata.stream.window import WindowPolicy

UTC = dt.timezone.utc


@dataclass
class FakeSettings:
    start_date: str | None = None
    end_date: str | None = None
    stats_lookback_days: int | None = 2
    stats_history_days: int | None = None
    rewards_lookback_days: int | None = None
    redemptions_lookback_days: int | None = 0
    members_margin_seconds: int = 300


class FakeStateManager:
    """The SDK's bookmark keeper: keeps the greatest value, as the SDK does."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def get_state_partition_context(self, context: Context | None) -> Context | None:
        return context

    def increment_state(
        self, latest: dict[str, Any], *, context: Context | None, replication_key: str
    ) -> None:
        state = self.host.get_context_state(context)
        value = latest[replication_key]
        if state.get("replication_key_value") is None or value > state["replication_key_value"]:
            state.update(replication_key=replication_key, replication_key_value=value)


@dataclass
class FakeHost:
    """A stream with `state` (per partition), a run that started at `started`, and parts."""

    name: str = "stream"
    replication_key: str | None = "created_at"
    selected: bool = True
    started: dt.datetime = dt.datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
    settings: FakeSettings = field(default_factory=FakeSettings)
    partitions: dict[PartitionKey, dict[str, Any]] = field(default_factory=dict)
    others: dict[str, Any] = field(default_factory=dict)
    window: WindowPolicy = field(default_factory=WindowPolicy)
    resume: Resume = field(default_factory=Resume)

    def __post_init__(self) -> None:
        self.logger = logging.getLogger(f"test.{self.name}")
        self.state_manager = FakeStateManager(self)
        self.runtime = SimpleNamespace(
            settings=self.settings,
            window_end=self.started,
            window_end_utc=self.started.isoformat(),
            sync_started_at=self.started,
            completed_reads=[],
            members_bookmark=lambda margin: self.started - margin,
        )

    @property
    def stream_state(self) -> dict[str, Any]:
        return self.get_context_state(None)

    @property
    def streams_of_tap(self) -> Mapping[str, Any]:
        return self.others

    def get_context_state(self, context: Context | None) -> dict[str, Any]:
        return self.partitions.setdefault(partition_key(context), {})

    def with_parts(
        self, *, window: WindowPolicy | None = None, resume: Resume | None = None
    ) -> FakeHost:
        """Bind parts to this host, as GuestDataStream.__init__ does."""
        if resume is not None:
            self.resume = resume.bound(self)
        if window is not None:
            self.window = window.bound(self)
        return self
