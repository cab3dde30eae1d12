"""A work queue keyed by task, with client-go semantics (dirty set, processing set).

A key is handed to at most one worker at a time; adding a key that is already waiting is a
no-op, and a key added while it is being processed is queued again when the worker calls
``done``. ``add_after`` delays an add, keeping the earliest time of a key that already waits
(client-go's delaying queue): the fold's retries, the health clock. Pure threading, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and drained."""


class WorkQueue(Generic[K]):
    """FIFO of distinct keys; one worker per key at a time; re-queue on ``done`` if re-added."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cond = threading.Condition()
        self._order: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []  # a heap; superseded entries skipped
        self._waiting: dict[K, float] = {}  # key -> when its delayed add is due
        self._tie = itertools.count()
        self._shutdown = False
        self._clock = clock

    # --- producers ---------------------------------------------------------------
    def add(self, key: K) -> None:
        """Mark ``key`` as needing work. Collapsed if already waiting; deferred if in progress."""
        with self._cond:
            self._add_locked(key)

    def add_many(self, keys: Iterable[K]) -> None:
        """``add`` for each key, with one wake-up call for the batch (not one per key)."""
        with self._cond:
            queued = sum(self._add_locked(k, wake=False) for k in keys)
            if queued:
                self._cond.notify(queued)  # one call, waking at most one getter per new key

    def _add_locked(self, key: K, wake: bool = True) -> bool:
        if self._shutdown or key in self._dirty:
            return False
        self._dirty.add(key)
        if key in self._processing:
            return False  # done() re-queues it
        self._order.append(key)
        if wake:
            self._cond.notify()
        return True

    def add_after(self, key: K, delay: float) -> None:
        """``add(key)`` once ``delay`` seconds have passed (immediately when delay <= 0). A key
        already waiting keeps the earlier of its two times: one delayed add per key, so a
        key rescheduled at every change never piles up entries."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            at = self._clock() + delay
            if self._waiting.get(key, at) < at:
                return
            self._waiting[key] = at
            heapq.heappush(self._delayed, (at, next(self._tie), key))
            self._cond.notify_all()  # a waiting getter may need to wake earlier

    # --- consumers ---------------------------------------------------------------
    def get(self, timeout: float | None = None) -> K | None:
        """The next key to work on (now owned by the caller until ``done``).

        Returns None on timeout; raises ShutDown once shut down.
        """
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due_locked()
                if self._order:
                    key = self._order.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    raise ShutDown()
                now = self._clock()
                wait = None if deadline is None else deadline - now
                if wait is not None and wait <= 0:
                    return None
                if self._delayed:
                    due = self._delayed[0][0] - now
                    wait = due if wait is None else min(wait, due)
                self._cond.wait(None if wait is None else max(wait, 0.0))

    def done(self, key: K) -> None:
        """The worker finished ``key``; if it was re-added meanwhile, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._order.append(key)
                self._cond.notify()

    def _promote_due_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            at, _, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) == at:
                del self._waiting[key]
                self._add_locked(key)

    def serve(self, handle: Callable[[K], None], on_error: Callable[[K], None]) -> None:
        """A worker's loop: handle keys one at a time until shutdown, always marking done.

        ``on_error`` is called (inside the except) when ``handle`` raises, so one bad key
        never ends the worker.
        """
        while True:
            try:
                key = self.get()
            except ShutDown:
                return
            if key is None:
                continue
            try:
                handle(key)
            except Exception:
                on_error(key)
            finally:
                self.done(key)

    # --- lifecycle and introspection --------------------------------------------
    def shutdown(self) -> None:
        """Stop accepting keys; getters drain what is queued, then get ShutDown."""
        with self._cond:
            self._shutdown = True
            self._delayed.clear()
            self._waiting.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        """Keys waiting (not counting keys being processed or delayed)."""
        with self._cond:
            return len(self._order)

    def pending(self) -> int:
        """Keys waiting, delayed or being processed: 0 means fully idle."""
        with self._cond:
            return len(self._order) + len(self._processing) + len(self._waiting)

    def is_processing(self, key: K) -> bool:
        with self._cond:
            return key in self._processing
