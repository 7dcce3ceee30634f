"""The shared rate budget through its store's faults: a share while it is down, one window to
re-learn when it is back (docs/scale-out.md, "Faults: the rate budget's store").

Each grant from the store also says who shares the key and the address (processes that asked
within two windows) and how many slots each holds (http/budget.py, `Sighting`). When the store
fails, this process keeps to a share of what it last saw:

- in every rolling window, at most `limit // processes` of its own requests per key and per
  address (never more than its own per-process limits);
- while the window of its last sighting is still open, its requests since then stay within
  `(limit - count seen) // processes`, so the others' requests already in that window and
  every process's new ones add up to the limit at most.

A store that answers again (the same one, or one restarted empty, known by its new epoch) is
not trusted at once: each process re-records its own slots of the last window and keeps its
share for one more window, recording each new slot meanwhile. When that window ends, every
slot still in a window is in the store again (a process that died holds nothing), so grants
from the store are exact again. Waiting for a window costs nothing the shares do not already
allow: the processes together still send at the limit.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tap_guestdata.http.budget import (
    UNANSWERED_MARGIN_SECONDS,
    BudgetUnavailable,
    Grant,
    Sighting,
    Store,
)

SHARE_WARNING = (
    "Shared rate budget unavailable (%s); this process keeps to its share of the limits "
    "(%d processes last seen on address %s) until the store answers again and one window has "
    "passed."
)


@dataclass(frozen=True)
class Seen:
    """One scope (a key, or the address) as the store last described it."""

    processes: int
    count: int  # slots in its window then, every process's
    at: float  # local clock


@dataclass
class OwnSlot:
    key_id: str
    taken: float  # local clock
    dated: float  # local clock: taken, then its answer
    counted: bool  # granted by the store, so in the counts of every sighting since


class ShareFallback:
    """A `SharedBudget` over a store, that keeps spec 8's limits while the store fails."""

    def __init__(
        self,
        store: Store,
        logger: logging.Logger,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.limits = store.limits
        self.description = store.description
        self._logger = logger
        self._clock = clock
        self._lock = threading.Lock()
        self._window = store.limits.window_seconds + UNANSWERED_MARGIN_SECONDS
        self._probe_seconds = min(1.0, store.limits.window_seconds / 20)
        self._own: dict[str, OwnSlot] = {}
        self._keys: dict[str, Seen] = {}
        self._address: Seen | None = None
        self._epoch: str | None = None
        self._offset = 0.0  # store clock minus local clock
        self._down = False
        self._down_since = 0.0
        self._warned = False
        self._last_probe = 0.0
        self._trusted_from = 0.0  # local clock: the store's grants are exact again

    @property
    def on_share(self) -> bool:
        """True while this process keeps to its share (the store is down or re-learning)."""
        return self._down or self._clock() < self._trusted_from

    def take(self, key_id: str) -> Grant:
        with self._lock:
            now = self._clock()
            self._forget(now)
            if not self._down and now >= self._trusted_from:
                try:
                    grant = self._store.take(key_id)
                except BudgetUnavailable as error:
                    self._failed(error, now)
                else:
                    if grant.seen is not None and not self._learn(grant.seen, key_id, now):
                        if grant.slot is not None:
                            self._own[grant.slot] = OwnSlot(key_id, now, now, counted=True)
                        return grant
                    # The store came back empty: its grant counts nothing of the last window.
            if self._down and now - self._last_probe >= self._probe_seconds:
                self._probe(now)
            return self._take_share(key_id, now)

    def answered(self, key_id: str, slot: str) -> None:
        with self._lock:
            own = self._own.get(slot)
            if own is not None:
                own.dated = self._clock()
            if self._down:
                return
            try:
                self._store.answered(key_id, slot)
            except BudgetUnavailable as error:
                self._failed(error, self._clock())

    def close(self) -> None:
        self._store.close()

    def _learn(self, seen: Sighting, key_id: str, now: float) -> bool:
        """Note what the store said; True when it came back empty (a new epoch)."""
        self._offset = seen.store_now - now
        if self._epoch is not None and seen.epoch != self._epoch:
            self._epoch = seen.epoch
            self._logger.warning(
                "%s came back empty; re-recording this process's slots of the last window "
                "and keeping to its share for one window.",
                self.description,
            )
            self._relearn(now)
            return True
        self._epoch = seen.epoch
        self._keys[key_id] = Seen(seen.key_processes, seen.key_count, now)
        self._address = Seen(seen.address_processes, seen.address_count, now)
        return False

    def _teach(self, now: float) -> None:
        """Re-record this process's slots of the last window; trust the store a window later.

        Raises BudgetUnavailable if the store does not answer."""
        slots = [(slot, own.key_id, own.dated + self._offset) for slot, own in self._own.items()]
        epoch, store_now = self._store.record(slots)
        self._offset, self._epoch = store_now - now, epoch
        self._trusted_from = now + self._window

    def _relearn(self, now: float) -> None:
        try:
            self._teach(now)
        except BudgetUnavailable as error:
            self._failed(error, now)

    def _probe(self, now: float) -> None:
        """While down: does the store answer again? (At most once per `_probe_seconds`.)"""
        self._last_probe = now
        try:
            self._teach(now)
        except BudgetUnavailable:
            return  # still down: said once already
        self._down = False
        self._logger.info(
            "%s answers again after %.1f s; its grants are trusted again in %.1f s.",
            self.description,
            now - self._down_since,
            self._window,
        )

    def _failed(self, error: BudgetUnavailable, now: float) -> None:
        if self._down:
            return
        self._down, self._down_since, self._last_probe = True, now, now
        level = logging.INFO if self._warned else logging.WARNING
        self._warned = True
        address = self._address.processes if self._address else 1
        self._logger.log(level, SHARE_WARNING, error, address, self.limits.address)

    def _forget(self, now: float) -> None:
        for slot in [slot for slot, own in self._own.items() if own.dated + self._window < now]:
            del self._own[slot]

    def _take_share(self, key_id: str, now: float) -> Grant:
        limits = self.limits
        # Unseen before the fault: as many sharers as the address, and its window taken as full.
        unseen = Seen(self._address.processes if self._address else 1, limits.per_key, now)
        wait = max(
            self._share_wait(limits.per_key, self._keys.get(key_id, unseen), key_id, now),
            self._share_wait(limits.per_address, self._address or unseen, None, now),
        )
        if wait > 0:
            return Grant(None, max(0.001, wait))
        slot = secrets.token_hex(8)
        self._own[slot] = OwnSlot(key_id, now, now, counted=False)
        if not self._down:  # re-learning: the store counts it for when it is trusted again
            try:
                self._store.record([(slot, key_id, now + self._offset)])
            except BudgetUnavailable as error:
                self._failed(error, now)
        return Grant(slot)

    def _share_wait(self, limit: int, seen: Seen, key_id: str | None, now: float) -> float:
        """0 if this process's share of `limit` has room now, else seconds until it may."""
        processes = max(1, seen.processes)
        share = max(1, limit // processes)
        mine = [own for own in self._own.values() if key_id is None or own.key_id == key_id]
        dated = sorted(own.dated for own in mine if own.dated + self._window > now)
        wait = 0.0
        if len(dated) >= share:
            wait = dated[len(dated) - share] + self._window - now
        if now < seen.at + self._window:  # others' slots seen then may still be in the window
            since = sum(1 for own in mine if not own.counted and own.taken >= seen.at)
            if since >= max(0, limit - seen.count) // processes:
                wait = max(wait, seen.at + self._window - now)
        return wait
