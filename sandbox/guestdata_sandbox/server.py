"""HTTP: a threading stdlib server answering the API under /api/v1/customer and /_sandbox/.

Responses are written by hand (status line, headers, body in one write) for speed and for the
faults that need low-level control: a dropped connection, a truncated body.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import orjson

from guestdata_sandbox import control, routes
from guestdata_sandbox.ratelimit import RateLimiter
from guestdata_sandbox.server_state import Fault, ServerState
from guestdata_sandbox.store import Store

BASE_PATH = "/api/v1/customer"
CONTROL_PATH = "/_sandbox"
BAD_GATEWAY_PAGE = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
NOT_FOUND_REWARD = b'{"message":"Not found.","error":"REWARD_NOT_FOUND"}'  # spec 7


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], store: Store, limiter: RateLimiter) -> None:
        super().__init__(address, Handler)
        self.state = ServerState(store, limiter)


def bearer_token(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else authorization


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "GuestDataSandbox/1.0"
    sys_version = ""
    server: SandboxServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # the request log is /_sandbox/requests

    def do_GET(self) -> None:
        self.handle_any("GET")

    def do_HEAD(self) -> None:
        self.handle_any("HEAD")

    def do_POST(self) -> None:
        self.handle_any("POST")

    def do_PUT(self) -> None:
        self.handle_any("PUT")

    def do_PATCH(self) -> None:
        self.handle_any("PATCH")

    def do_DELETE(self) -> None:
        self.handle_any("DELETE")

    def request_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def reply(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        length: int | None = None,
    ) -> None:
        """spec 1: JSON always, whatever Accept says (the HTML 502 is a proxy's page)."""
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        lines = [
            f"HTTP/1.1 {status} {phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body) if length is None else length}",
            f"Server: {self.server_version}",
        ]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(head if self.command == "HEAD" else head + body)

    def handle_any(self, method: str) -> None:
        received = time.time()
        body = self.request_body()
        path, _, raw_query = self.path.partition("?")
        if path == CONTROL_PATH or path.startswith(CONTROL_PATH + "/"):
            ip, path = self.client_address[0], path[len(CONTROL_PATH) :]
            self.reply(*control.handle(self.server.state, ip, method, path, raw_query, body))
        elif path == BASE_PATH or path.startswith(BASE_PATH + "/"):
            self.api(method, path[len(BASE_PATH) :] or "/", raw_query, received)
        else:
            not_found = {"message": "Endpoint not found.", "error": "endpoint_not_found"}
            self.reply(404, orjson.dumps(not_found))

    def api(self, method: str, path: str, raw_query: str, received: float) -> None:
        """Each answer is logged before it is sent, so a client that reads the log sees it."""
        state = self.server.state
        authorization = self.headers.get("Authorization")
        key, ip = bearer_token(authorization), self.client_address[0]

        def record(status: int) -> None:
            state.record(received, key, ip, path, raw_query, status)

        fault = state.take_fault(path)
        if fault is not None and fault.kind != "slow":
            self.fault(fault, method, path, raw_query, authorization, record)
            return
        delay = state.latency + (fault.seconds if fault is not None else 0.0)
        if delay > 0:
            time.sleep(delay)
        decision = state.limiter.check(ip, key)
        headers = {
            "X-RateLimit-Limit": str(decision.limit),
            "X-RateLimit-Remaining": str(decision.remaining),
        }
        if not decision.allowed:  # spec 8: 429, message only, Retry-After
            headers["Retry-After"] = str(decision.retry_after)
            record(429)
            self.reply(429, b'{"message":"Too Many Attempts."}', headers)
            return
        query = dict(parse_qsl(raw_query, keep_blank_values=True))  # PHP: "+" becomes a space
        status, body = routes.dispatch(state.store, method, authorization, path, query)
        record(status)
        self.reply(status, body, headers)

    def fault(
        self,
        fault: Fault,
        method: str,
        path: str,
        raw_query: str,
        authorization: str | None,
        record: Callable[[int], None],
    ) -> None:
        """Injected failures of a proxy in front of the API (docs/sandbox.md)."""
        headers = {"X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "0"}
        if fault.kind == "rate_limit":
            headers["Retry-After"] = str(fault.retry_after)
            record(429)
            self.reply(429, b'{"message":"Too Many Attempts."}', headers)
        elif fault.kind == "server_error":
            record(500)
            self.reply(500, b'{"message":"Server Error"}')
        elif fault.kind == "bad_gateway_html":
            record(502)
            self.reply(502, BAD_GATEWAY_PAGE, content_type="text/html")
        elif fault.kind == "not_found":  # the record vanished between two reads (spec 4.5.8-9)
            record(404)
            coded = path.startswith("/rewards")
            self.reply(404, NOT_FOUND_REWARD if coded else b'{"message":"Not found."}', headers)
        elif fault.kind == "drop":
            record(0)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        else:  # truncated: the real answer cut in half, Content-Length matching what is sent
            query = dict(parse_qsl(raw_query, keep_blank_values=True))
            _, body = routes.dispatch(self.server.state.store, method, authorization, path, query)
            record(200)
            self.reply(200, body[: len(body) // 2], headers)


def make_server(host: str, port: int, store: Store, limiter: RateLimiter) -> SandboxServer:
    return SandboxServer((host, port), store, limiter)
