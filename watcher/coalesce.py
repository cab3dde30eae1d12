"""Write pacing: per key, at most one write in flight and writes spaced by an interval
(``Coalescer``, pure); across keys, a global budget (the kit's ``TokenBucket``).

The writer asks the coalescer when to schedule a key; whatever state is newest when the
write begins is what gets written, so any number of folds between two writes cost one write.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidings.kube.flowcontrol import Backoff

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Key:
    last_start: float = float("-inf")
    in_flight: bool = False
    dirty: bool = False
    scheduled: bool = False
    failures: int = 0


class Coalescer(Generic[K]):
    """Bookkeeping of dirty, scheduled and in-flight writes; not thread-safe (caller locks).

    Returned delays are "schedule this key after N seconds"; None means "nothing to schedule"
    (already scheduled, in flight, or clean).
    """

    def __init__(self, interval: float, retry_base: float = 0.5, retry_cap: float = 10.0) -> None:
        self.interval = max(0.0, interval)
        # Failed writes of a key back off by its own count of failures in a row.
        self.backoff = Backoff(base=retry_base, cap=retry_cap, jitter=0.0)
        self._keys: dict[K, _Key] = {}

    def _k(self, key: K) -> _Key:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        return k

    def _next_delay(self, k: _Key, now: float) -> float:
        delay = max(0.0, k.last_start + self.interval - now)
        return max(delay, self.backoff.delay(k.failures))

    def changed(self, key: K, now: float) -> float | None:
        """The key's state changed; returns the delay to schedule a write, or None."""
        k = self._k(key)
        k.dirty = True
        if k.in_flight or k.scheduled:
            return None
        k.scheduled = True
        return self._next_delay(k, now)

    def begin(self, key: K, now: float) -> bool:
        """A write worker picked the key up. False: nothing to write (clean, or already busy)."""
        k = self._k(key)
        k.scheduled = False
        if not k.dirty or k.in_flight:
            return False
        k.dirty = False
        k.in_flight = True
        k.last_start = now
        return True

    def end(self, key: K, now: float, ok: bool) -> float | None:
        """The write finished (ok or not); returns the delay for the next write, or None."""
        k = self._k(key)
        k.in_flight = False
        if ok:
            k.failures = 0
        else:
            k.failures += 1
            k.dirty = True  # the state is still unwritten
        if not k.dirty or k.scheduled:
            return None
        k.scheduled = True
        return self._next_delay(k, now)

    def idle(self) -> bool:
        """No key dirty, scheduled or in flight."""
        return not any(k.dirty or k.scheduled or k.in_flight for k in self._keys.values())

    def is_dirty(self, key: K) -> bool:
        k = self._keys.get(key)
        return k is not None and (k.dirty or k.in_flight)
