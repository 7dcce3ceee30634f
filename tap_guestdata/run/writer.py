"""Singer output: the SDK's msgspec writer (ecosystem notes: about twice the default's speed),
flushing stdout only after non-RECORD messages, and each stream's SCHEMA written once.

Order is unchanged: every record is flushed, at the latest, with the next STATE or SCHEMA
message or at exit. The SDK sends a child stream's SCHEMA once per parent record (ecosystem
notes); the identical repeats are dropped here.
"""

from __future__ import annotations

import sys
from typing import Any

from singer_sdk.contrib.msgspec import MsgSpecWriter
from singer_sdk.singerlib import RecordMessage, SchemaMessage


class GuestDataWriter(MsgSpecWriter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._schemas_sent: dict[str, bytes] = {}

    def write_message(self, message: Any) -> None:
        line = bytes(self.format_message(message))
        if isinstance(message, SchemaMessage):
            if self._schemas_sent.get(message.stream) == line:
                return
            self._schemas_sent[message.stream] = line
        sys.stdout.buffer.write(line)
        if not isinstance(message, RecordMessage):
            sys.stdout.flush()
