"""Run tap-guestdata with SDK switches applied from outside, to measure what a change would buy
before anyone edits the tap (the benchmarks never change `tap_guestdata/`).

    python bench/tap_variant.py [--writer asis|default|msgspec|buffered]
                                [--conformance asis|recursive|root|none]
                                [--drift asis|off] [--record-messages asis|sdk]
                                [--tap tap_guestdata.tap:TapGuestData] -- <tap arguments>

--writer: `default` is the SDK's SingerWriter, `msgspec` the SDK's MsgSpecWriter
(`singer_sdk.contrib.msgspec`), `buffered` MsgSpecWriter that flushes stdout only after
non-RECORD messages (SCHEMA, STATE, ...) instead of after every record.
--conformance: `TYPE_CONFORMANCE_LEVEL` of every stream class.
--drift off: no schema-drift check of the rows (`tap_guestdata.stream.drift.check_row` does
nothing), to measure what the check costs.
--record-messages sdk: the SDK's own `_generate_record_messages` in every stream, where the tap
has (or had) its own copy: what a copy of it would buy.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from singer_sdk.contrib.msgspec import MsgSpecWriter
from singer_sdk.helpers.conform import TypeConformanceLevel
from singer_sdk.io_base import SingerWriter
from singer_sdk.singerlib import RecordMessage
from singer_sdk.streams.core import Stream


class BufferedMsgSpecWriter(MsgSpecWriter):
    """MsgSpecWriter without a flush per RECORD; STATE and SCHEMA still flush, so a target sees
    every state message right after the records it covers (order is the buffer's order)."""

    def write_message(self, message: Any) -> None:
        sys.stdout.buffer.write(self.format_message(message))
        if not isinstance(message, RecordMessage):
            sys.stdout.flush()


WRITERS: dict[str, type | None] = {
    "asis": None,
    "default": SingerWriter,
    "msgspec": MsgSpecWriter,
    "buffered": BufferedMsgSpecWriter,
}
CONFORMANCE: dict[str, TypeConformanceLevel | None] = {
    "asis": None,
    "recursive": TypeConformanceLevel.RECURSIVE,
    "root": TypeConformanceLevel.ROOT_ONLY,
    "none": TypeConformanceLevel.NONE,
}


def all_subclasses(base: type) -> list[type]:
    found: list[type] = []
    for subclass in base.__subclasses__():
        found += [subclass, *all_subclasses(subclass)]
    return found


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writer", choices=WRITERS, default="asis")
    parser.add_argument("--conformance", choices=CONFORMANCE, default="asis")
    parser.add_argument("--drift", choices=("asis", "off"), default="asis")
    parser.add_argument("--record-messages", choices=("asis", "sdk"), default="asis")
    parser.add_argument("--tap", default="tap_guestdata.tap:TapGuestData", help="module:Class")
    options = parser.parse_args(argv[:split])
    if options.drift == "off":
        from tap_guestdata.stream import drift

        drift.check_row = lambda stream, row: None

    module_name, _, class_name = options.tap.partition(":")
    tap_class = getattr(importlib.import_module(module_name), class_name)
    writer = WRITERS[options.writer]
    if writer is not None:
        tap_class.message_writer_class = writer
    if options.record_messages == "sdk":
        for stream_class in all_subclasses(Stream):
            if "_generate_record_messages" in stream_class.__dict__:
                delattr(stream_class, "_generate_record_messages")
    level = CONFORMANCE[options.conformance]
    if level is not None:
        for stream_class in [Stream, *all_subclasses(Stream)]:
            stream_class.TYPE_CONFORMANCE_LEVEL = level  # type: ignore[attr-defined]
    sys.argv = ["tap-guestdata", *argv[split + 1 :]]
    tap_class.cli()


if __name__ == "__main__":
    main()
