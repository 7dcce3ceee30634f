"""The test-only control surface under /_sandbox/ (no auth; loopback clients only)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import orjson

from guestdata_sandbox import mutations, truth
from guestdata_sandbox.accounts import KEYS
from guestdata_sandbox.server_state import FAULT_KINDS, Fault, ServerState


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1")


def handle(
    state: ServerState, client_ip: str, method: str, path: str, raw_query: str, body: bytes
) -> tuple[int, bytes]:
    """The status and JSON body answering one control call (`path` is below /_sandbox)."""
    if not is_loopback(client_ip):
        return 403, b'{"message":"The control surface answers loopback clients only."}'
    query = dict(parse_qsl(raw_query, keep_blank_values=True))
    try:
        payload: Any = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        return 400, b'{"message":"The body must be JSON."}'
    try:
        return route(state, method, path.rstrip("/"), query, payload)
    except mutations.MutationError as failure:
        return failure.status, orjson.dumps({"ok": False, "message": str(failure)})


def route(
    state: ServerState, method: str, path: str, query: dict, payload: Any
) -> tuple[int, bytes]:
    store = state.store
    if (method, path) == ("GET", "/health"):
        info = {"ok": True, "size": store.size, "seed": store.seed, "anchor": str(store.anchor)}
        info["as_of"] = store.as_of_text()
        info["generation_seconds"] = round(store.dataset.generation_seconds, 3)
        return 200, orjson.dumps(info)
    if (method, path) == ("GET", "/keys"):
        keys = [
            {"key": k.key, "account_id": k.account_id, "description": k.description}
            for k in KEYS.values()
            if k.account_id in store.dataset.accounts  # the colliding account's: when served
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
        with state.lock:
            entries = [entry for entry in state.log if entry["seq"] > after]
        return 200, orjson.dumps(entries)
    if (method, path) == ("DELETE", "/requests"):
        with state.lock:
            state.log.clear()
        return 200, b'{"ok":true}'
    if (method, path) == ("POST", "/mutate"):
        fields = dict(payload)
        action = fields.pop("action", None)
        result = mutations.apply(store, str(action), fields)
        return 200, orjson.dumps({"ok": True, **result})
    if (method, path) == ("POST", "/faults"):
        return add_fault(state, payload)
    if (method, path) == ("DELETE", "/faults"):
        with state.lock:
            state.faults.clear()
        return 200, b'{"ok":true}'
    if (method, path) == ("POST", "/latency"):
        state.latency = max(0.0, float(payload.get("seconds", 0)))
        return 200, orjson.dumps({"ok": True, "seconds": state.latency})
    if (method, path) == ("POST", "/limits"):
        state.limiter.configure(payload.get("enabled"), payload.get("time_scale"))
        limiter = state.limiter
        return 200, orjson.dumps(
            {"ok": True, "enabled": limiter.enabled, "time_scale": limiter.time_scale}
        )
    if (method, path) == ("POST", "/reset"):
        store.load()
        with state.lock:
            state.log.clear()
            state.faults.clear()
            state.latency = 0.0
        state.limiter.configure()
        return 200, b'{"ok":true}'
    return 404, orjson.dumps({"message": f"no control call {method} /_sandbox{path}"})


def add_fault(state: ServerState, payload: dict) -> tuple[int, bytes]:
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
    with state.lock:
        state.faults.append(fault)
    return 200, b'{"ok":true}'
