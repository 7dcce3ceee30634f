"""Issue #7.6: odd and hostile list answers, generated with hypothesis and served by a local HTTP
server to the tap running in-process (its own stream classes, paginator and error policy).

For every generated answer sequence the sync must
- stop after a bounded number of requests (the server refuses more than REQUEST_CAP),
- either succeed or fail with an API error that names the request (never a bare TypeError,
  ValueError or KeyError from deep inside),
- lose nothing silently: on success every row of every page the server answered is emitted
  (a row repeated by id may be dropped), and when the paging meta is consistent every page up
  to `last_page` was asked for, empty pages included.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from singer_sdk.exceptions import FatalAPIError, RetriableAPIError
from singer_sdk.singerlib import RecordMessage

from support.reliability import LEAK_WATCH, RecordingServer, json_body, recording_server
from support.sandbox import OWNER_KEY
from tap_guestdata.run.writer import GuestDataWriter
from tap_guestdata.tap import TapGuestData

REQUEST_CAP = 30
BASE_PATH = "/api/v1/customer"
EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# ------------------------------------------------------------------ generated answers

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8)
)
UNKNOWN_FIELDS = st.dictionaries(
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=10).map(lambda name: f"x_{name}"),
    st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=3)),
    max_size=3,
)
# Not instants, where the spec says timestamp (the stream's cursor field).
ODD_TIMESTAMPS: list[Any] = ["yesterday", "", "2026-13-01T00:00:00Z", 12345, True]
REDEMPTION_STATUSES = ["completed", "voided", "restored", "", "COMPLETED", "pending_review"]
CHANNELS = ["staff_scan", "staff_code", "terminal_pin", "pos_api", "self_serve", "drone"]


def guest_row(row_id: int, when: Any, draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": row_id,
        "venue_id": draw(st.one_of(st.none(), st.integers(1, 9))),
        "name": draw(st.one_of(st.none(), st.text(max_size=12))),
        "first_name": draw(st.one_of(st.none(), st.text(max_size=6))),
        "last_name": draw(st.one_of(st.none(), st.text(max_size=6))),
        "email": draw(st.one_of(st.none(), st.emails())),
        "phone": draw(st.one_of(st.none(), st.just("+447700900123"))),
        "marketing_consent": draw(st.one_of(st.none(), st.booleans())),
        "is_return_visit": draw(st.one_of(st.none(), st.booleans())),
        "visited_at": when,
    }


def redemption_row(row_id: int, when: Any, draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": row_id,
        "reference": draw(st.one_of(st.none(), st.just("RDM-ABC123"))),
        "offer_id": draw(st.one_of(st.none(), st.integers(1, 99))),
        "member_reward_id": draw(st.one_of(st.none(), st.integers(1, 99))),
        "member_id": draw(st.one_of(st.none(), st.integers(1, 99))),
        "site_id": draw(st.one_of(st.none(), st.integers(1, 9))),
        "channel": draw(st.one_of(st.none(), st.sampled_from(CHANNELS))),
        "face_value_minor": draw(st.one_of(st.none(), st.integers(0, 10_000))),
        "currency": draw(st.one_of(st.none(), st.sampled_from(["GBP", "EUR", "gbp"]))),
        "status": draw(st.one_of(st.none(), st.sampled_from(REDEMPTION_STATUSES))),
        "restored_at": draw(st.one_of(st.none(), st.just("2026-05-01T10:00:00+01:00"))),
        "created_at": when,
    }


STREAMS = {
    "guests": ("/guests", guest_row),
    "redemptions": ("/rewards/redemptions", redemption_row),
}
META_MODES = [
    "consistent",
    "no_meta",
    "meta_null",
    "no_current_page",
    "last_page_zero",
    "last_page_text",
    "last_page_varies",
    "ignores_page",
]


@dataclass
class Answers:
    """What the server answers for each page of one stream, and what it served."""

    path: str
    pages: list[list[dict[str, Any]]]
    mode: str
    last_page: Any
    extra_meta: dict[str, Any]
    served: list[int] = field(default_factory=list)
    served_ids: set[int] = field(default_factory=set)
    capped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consistent(self) -> bool:
        return self.mode == "consistent"

    def meta(self, page: int) -> Any:
        base: dict[str, Any] = {"per_page": 200, "total": sum(map(len, self.pages))}
        base.update(self.extra_meta)
        if self.mode == "no_meta":
            return None
        if self.mode == "meta_null":
            return "null"
        if self.mode == "no_current_page":
            return {**base, "last_page": self.last_page}
        if self.mode == "last_page_zero":
            return {**base, "current_page": page, "last_page": 0}
        if self.mode == "last_page_text":
            return {**base, "current_page": page, "last_page": self.last_page}
        if self.mode == "last_page_varies":
            return {**base, "current_page": page, "last_page": (page * 7 + 3) % 5}
        return {**base, "current_page": page, "last_page": self.last_page}

    def answer(self, page: int) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.served.append(page)
            if len(self.served) > REQUEST_CAP:
                self.capped = True
                return 500, {}, json_body({"message": "request cap of the test server"})
            index = 0 if self.mode == "ignores_page" else page - 1
            rows = self.pages[index] if 0 <= index < len(self.pages) else []
            self.served_ids.update(row["id"] for row in rows)
        body: dict[str, Any] = {"data": rows}
        meta = self.meta(1 if self.mode == "ignores_page" else page)
        if meta == "null":
            body["meta"] = None
        elif meta is not None:
            body["meta"] = meta
        return 200, {}, json_body(body)


@st.composite
def answers(draw: st.DrawFn, stream: str) -> Answers:
    path, make_row = STREAMS[stream]
    page_sizes = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
    when = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc)
    pages: list[list[dict[str, Any]]] = []
    row_id = 1000
    for size in page_sizes:
        rows = []
        for _ in range(size):
            when -= dt.timedelta(seconds=draw(st.sampled_from([0, 1, 60, 3600])))
            row_id += 1
            hours = draw(st.sampled_from([0, 1, -5]))
            rendered: Any = when.astimezone(dt.timezone(dt.timedelta(hours=hours))).isoformat()
            if hours == 0 and draw(st.booleans()):
                rendered = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            odd = draw(st.integers(0, 19))
            if odd < 2:
                rendered = None  # a null where the spec says timestamp
            elif odd == 2:
                rendered = draw(st.sampled_from(ODD_TIMESTAMPS))
            row = make_row(row_id, rendered, draw)
            row.update(draw(UNKNOWN_FIELDS))
            rows.append(row)
        pages.append(rows)
    mode = draw(st.sampled_from(META_MODES))
    last_page: Any = len(pages)
    if mode == "last_page_text":
        last_page = draw(st.sampled_from([str(len(pages)), "many", None, 2.5]))
    extra_meta = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "next_page_url": st.just("http://127.0.0.2:9/elsewhere?page=2"),
                "links": st.lists(st.just({"url": None, "label": "&laquo;"}), max_size=2),
                "from": st.one_of(st.none(), st.integers(0, 5)),
            },
        )
    )
    return Answers(path, pages, mode, last_page, extra_meta)


# ------------------------------------------------------------------ the tap in-process


class CapturingWriter(GuestDataWriter):
    """The tap's writer, keeping RECORD messages in memory instead of writing stdout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[dict[str, Any]] = []
        self.text: list[str] = []

    def write_message(self, message: Any) -> None:
        self.text.append(bytes(self.format_message(message)).decode())
        if isinstance(message, RecordMessage):
            self.records.append(message.record)


class LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class Outcome:
    records: list[dict[str, Any]]
    error: BaseException | None
    log: str


def catalog_selecting(tap: TapGuestData, stream: str) -> dict:
    catalog = tap.catalog_dict
    for entry in catalog["streams"]:
        for metadata in entry["metadata"]:
            if not metadata["breadcrumb"]:
                metadata["metadata"]["selected"] = entry["tap_stream_id"] == stream
    return catalog


_CATALOG: dict[str, dict] = {}


def sync_in_process(base_url: str, stream: str) -> Outcome:
    config = {
        "api_key": OWNER_KEY,
        "base_url": base_url,
        "start_date": "2026-01-01",
        "max_retries": 0,
        "requests_per_minute": 100000,
        "request_timeout_seconds": 5,
        "max_workers": 1,
    }
    if stream not in _CATALOG:
        _CATALOG[stream] = catalog_selecting(TapGuestData(config=config), stream)
    writer = CapturingWriter()
    capture = LogCapture()
    root = logging.getLogger()
    root.addHandler(capture)
    error: BaseException | None = None
    try:
        tap = TapGuestData(config=config, catalog=_CATALOG[stream], message_writer=writer)
        tap.sync_all()
    except Exception as caught:
        error = caught
    finally:
        root.removeHandler(capture)
    log = "\n".join(capture.lines)
    LEAK_WATCH.add("in-process log", log)
    LEAK_WATCH.add("in-process messages", "\n".join(writer.text))
    if error is not None:
        LEAK_WATCH.add("in-process exception", f"{error!r} {error}")
    return Outcome(writer.records, error, log)


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[RecordingServer, dict[str, Answers]]]:
    current: dict[str, Answers] = {}

    def respond(raw: str) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(raw)
        answers_now = current.get("answers")
        if answers_now is None or url.path != BASE_PATH + answers_now.path:
            return 404, {}, json_body({"message": f"not served here: {url.path}"})
        page = int(parse_qs(url.query).get("page", ["1"])[0])
        return answers_now.answer(page)

    with recording_server(respond) as server:
        yield server, current


def check_outcome(outcome: Outcome, answers_given: Answers, stream: str) -> None:
    assert not answers_given.capped, (
        f"unbounded paging: {len(answers_given.served)} requests, pages {answers_given.served[:12]}"
    )
    if outcome.error is not None:
        error = outcome.error
        message = str(error)
        named = answers_given.path in message or message.startswith(f"{stream}:")
        clear = isinstance(error, FatalAPIError | RetriableAPIError) and named
        assert clear, f"failed without a clear message naming the request or stream: {error!r}"
        return
    emitted = {record["id"] for record in outcome.records}
    lost = answers_given.served_ids - emitted
    assert not lost, f"{len(lost)} served rows not emitted (pages {answers_given.served})"
    if answers_given.consistent():
        declared = set(range(1, len(answers_given.pages) + 1))
        skipped = declared - set(answers_given.served)
        assert not skipped, (
            f"pages {sorted(skipped)} of last_page={len(answers_given.pages)} never requested "
            f"(sizes {[len(page) for page in answers_given.pages]}), no error raised"
        )


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_odd_list_answers_end_bounded_clear_and_lossless(
    stream: str, api: tuple[RecordingServer, dict[str, Answers]]
) -> None:
    server, current = api

    @EXAMPLES
    @given(answers(stream))
    def check(answers_given: Answers) -> None:
        current["answers"] = answers_given
        outcome = sync_in_process(server.origin + BASE_PATH, stream)
        check_outcome(outcome, answers_given, stream)

    check()


def test_unknown_enum_and_fields_pass_through_unchanged(
    api: tuple[RecordingServer, dict[str, Answers]],
) -> None:
    """A redemption status the spec does not list (`restored`), a channel it does not list and
    a null where it says int are emitted as the API sent them: the row is not dropped, the
    values are not coerced, the run does not fail. A field the spec does not name may be
    dropped (the schema is fixed) but never fails the run."""
    server, current = api
    row = {
        "id": 77,
        "status": "restored",
        "channel": "drone",
        "x_future_field": {"nested": [1, 2]},
        "created_at": "2026-05-01T10:00:00+01:00",
        "face_value_minor": None,
    }
    current["answers"] = Answers(
        "/rewards/redemptions", [[row]], "consistent", 1, {"next_page_url": None}
    )
    outcome = sync_in_process(server.origin + BASE_PATH, "redemptions")
    assert outcome.error is None, outcome.error
    assert len(outcome.records) == 1
    record = outcome.records[0]
    assert record["status"] == "restored" and record["channel"] == "drone"
    assert record.get("x_future_field", {"nested": [1, 2]}) == {"nested": [1, 2]}
    assert json.dumps(record["face_value_minor"]) == "null"
