"""Auth (spec 5): the account's keys as one pool, a key per attempt, at most 5 keys (spec 5.3).

Two public seams carry it: the stream's `authenticator` (the SDK's) is the pool's face, and a
requests `HTTPAdapter` signs each attempt as it goes on the wire. A prepared request carries no
key: the key is the least-loaded one when the attempt is sent (http/limiter.py), and it is taken
off the request again when the answer is in, so no request object kept by an exception, a log
line or a retry ever holds one (spec 5.7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase

from tap_guestdata.http.errors import retry_after_seconds
from tap_guestdata.http.limiter import KeyPool, Lease

REDACTED = "Bearer <redacted>"


class KeyPoolAuthenticator(AuthBase):
    """Bearer keys from the pool (spec 5.1): signs an attempt for exactly its time on the wire."""

    def __init__(self, pool: KeyPool) -> None:
        self.pool = pool

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        # The SDK calls this while preparing and before each attempt; the key is added only
        # by `signed`, as the attempt is sent, so a prepared request never holds one.
        request.headers.pop("Authorization", None)
        return request

    @contextmanager
    def signed(self, request: requests.PreparedRequest) -> Iterator[Lease]:
        """A slot on the least-loaded key, its key in the request while inside the block."""
        lease = self.pool.acquire()
        request.headers["Authorization"] = f"Bearer {lease.key}"
        try:
            yield lease
        finally:
            request.headers["Authorization"] = REDACTED


class KeyPoolAdapter(HTTPAdapter):
    """Every attempt: a key's slot, signed, sent; its answer dates the slot (the key's rolling
    minute) and a 429 pauses that key for Retry-After, or every key at the address cap (spec 8.3).
    """

    def __init__(
        self,
        authenticator: KeyPoolAuthenticator,
        on_send: Callable[[], None],
        on_response: Callable[[requests.Response], None],
    ) -> None:
        super().__init__(pool_connections=2, pool_maxsize=2, max_retries=0)
        self.authenticator = authenticator
        self.on_send = on_send  # a slot was granted: the attempt goes out now
        self.on_response = on_response

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        with self.authenticator.signed(request) as lease:
            self.on_send()
            try:
                response = super().send(request, **kwargs)
            except BaseException:
                lease.release(None)
                raise
        lease.release(response)
        if response.status_code == requests.codes.too_many_requests:
            at_address_cap = response.headers.get("X-RateLimit-Remaining") == "0"
            lease.pause(retry_after_seconds(response), whole_address=at_address_cap)
        self.on_response(response)
        return response
