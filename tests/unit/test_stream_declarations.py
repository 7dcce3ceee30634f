"""The streams are declarations of parts: the base class stays small, streams plug in parts
instead of overriding the SDK's hooks, and the catalog agrees with the windows they declare."""

from __future__ import annotations

import inspect

from tap_guestdata.run import catalog
from tap_guestdata.stream.base import GuestDataStream
from tap_guestdata.stream.resume import Resume
from tap_guestdata.stream.window import WindowPolicy
from tap_guestdata.streams import rewards
from tap_guestdata.tap import STREAM_TYPES

# The hooks a resume or window part answers for; a stream overriding one bypasses its parts.
PART_HOOKS = {
    "window_params",
    "window_start",
    "window_until",
    "lookback_days",
    "bookmark",
    "row_written",
    "listing_finished",
    "resume_markers",
    "listing_progress",
    "get_records",
}


def test_the_base_class_keeps_at_most_20_methods_and_a_short_read_loop() -> None:
    methods = [
        name
        for name, member in vars(GuestDataStream).items()
        if inspect.isfunction(member) or isinstance(member, property)
    ]
    assert len(methods) <= 20, methods
    lines, _ = inspect.getsourcelines(GuestDataStream.get_records)
    assert len(lines) <= 15


def test_streams_override_no_resume_or_window_hook() -> None:
    for stream_type in STREAM_TYPES:
        overridden = PART_HOOKS & set(vars(stream_type))
        assert not overridden, f"{stream_type.__name__} overrides {overridden}"
    assert rewards.Rewards.resume.oldest_open_key == "oldest_open_issued_at"


def test_every_part_is_declared_as_one() -> None:
    for stream_type in STREAM_TYPES:
        assert isinstance(stream_type.window, WindowPolicy), stream_type.__name__
        assert isinstance(stream_type.resume, Resume), stream_type.__name__


def test_a_stream_read_in_a_time_window_is_windowed_in_the_catalog() -> None:
    windowed = {stream_type.name for stream_type in STREAM_TYPES if stream_type.window.windowed}
    assert windowed == {
        "guests",
        "daily_stats",
        "daily_account_stats",
        "member_ledger",
        "rewards",
        "redemptions",
    }
    assert windowed <= set(catalog.windowed_streams())
