"""The test-only control surface under /_sandbox/ (no auth; loopback clients only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson

from guestdata_sandbox import mutations, truth
from guestdata_sandbox.accounts import KEYS

if TYPE_CHECKING:
    from guestdata_sandbox.server import Handler

FAULT_KINDS = (
    "rate_limit",
    "server_error",
    "bad_gateway_html",
    "slow",
    "drop",
    "truncated",
    "not_found",
)


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


def handle(handler: Handler, method: str, path: str, raw_query: str, body: bytes) -> None:
    if not is_loopback(handler.client_address[0]):
        handler.reply(403, b'{"message":"The control surface answers loopback clients only."}')
        return
    query = dict(parse_qsl(raw_query, keep_blank_values=True))
    try:
        payload: Any = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        handler.reply(400, b'{"message":"The body must be JSON."}')
        return
    try:
        status, answer = route(handler, method, path.rstrip("/"), query, payload)
    except mutations.MutationError as failure:
        status, answer = failure.status, orjson.dumps({"ok": False, "message": str(failure)})
    handler.reply(status, answer)


def route(handler: Handler, method: str, path: str, query: dict, payload: Any) -> tuple[int, bytes]:
    server = handler.server
    store = server.store
    if (method, path) == ("GET", "/health"):
        info = {"ok": True, "size": store.size, "seed": store.seed, "anchor": str(store.anchor)}
        info["generation_seconds"] = round(store.dataset.generation_seconds, 3)
        return 200, orjson.dumps(info)
    if (method, path) == ("GET", "/keys"):
        keys = [
            {"key": k.key, "account_id": k.account_id, "description": k.description}
            for k in KEYS.values()
        ]
        return 200, orjson.dumps(keys)
    if (method, path) == ("GET", "/truth"):
        key, resource = query.get("key", ""), query.get("resource") or None
        if key not in KEYS:
            return 404, orjson.dumps({"message": f"unknown key {key!r}"})
        if resource is not None and resource not in truth.RESOURCES:
            return 404, orjson.dumps({"message": f"unknown resource {resource!r}"})
        return 200, truth.truth(store, key, resource)
    if (method, path) == ("GET", "/requests"):
        after = int(query.get("after") or 0)
        with server.state_lock:
            entries = [entry for entry in server.log if entry["seq"] > after]
        return 200, orjson.dumps(entries)
    if (method, path) == ("DELETE", "/requests"):
        with server.state_lock:
            server.log.clear()
        return 200, b'{"ok":true}'
    if (method, path) == ("POST", "/mutate"):
        fields = dict(payload)
        action = fields.pop("action", None)
        result = mutations.apply(store, str(action), fields)
        return 200, orjson.dumps({"ok": True, **result})
    if (method, path) == ("POST", "/faults"):
        return add_fault(handler, payload)
    if (method, path) == ("DELETE", "/faults"):
        with server.state_lock:
            server.faults.clear()
        return 200, b'{"ok":true}'
    if (method, path) == ("POST", "/latency"):
        server.latency = max(0.0, float(payload.get("seconds", 0)))
        return 200, orjson.dumps({"ok": True, "seconds": server.latency})
    if (method, path) == ("POST", "/limits"):
        server.limiter.configure(payload.get("enabled"), payload.get("time_scale"))
        limiter = server.limiter
        return 200, orjson.dumps(
            {"ok": True, "enabled": limiter.enabled, "time_scale": limiter.time_scale}
        )
    if (method, path) == ("POST", "/reset"):
        store.load()
        with server.state_lock:
            server.log.clear()
            server.faults.clear()
            server.latency = 0.0
        server.limiter.configure()
        return 200, b'{"ok":true}'
    return 404, orjson.dumps({"message": f"no control call {method} /_sandbox{path}"})


def add_fault(handler: Handler, payload: dict) -> tuple[int, bytes]:
    from guestdata_sandbox.server import Fault

    kind = payload.get("kind")
    if kind not in FAULT_KINDS:
        return 400, orjson.dumps({"ok": False, "message": f"kind must be one of {FAULT_KINDS}"})
    fault = Fault(
        kind=kind,
        count=int(payload.get("count", 1)),
        path=str(payload.get("path") or ""),
        retry_after=int(payload.get("retry_after", 1)),
        seconds=float(payload.get("seconds", 1.0)),
    )
    with handler.server.state_lock:
        handler.server.faults.append(fault)
    return 200, b'{"ok":true}'
