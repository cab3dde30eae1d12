"""Write pacing (pure: no I/O, no threads): which task's status to write next, and when.

Per key: at most one write in flight; whatever state is newest when the write begins is what
gets written, so any number of folds between two writes cost one write. A key with a
*critical* change (a phase change, or a fact its kind declares critical in
schemas/wire/kinds.py: a link, a deck, a final or failed report) may be
written ``interval`` after its last write, and is paced by what the key already wrote in the
last ``hot_window`` (default twice ``interval``: a second): one write per window, with a
burst of two. A task with a steady stream of critical facts costs one write a second instead
of two (status writes are the bus's cost to the API server), and none of its facts waits
more than the window; a task with a critical fact now and then is written ``interval`` after
its last write, as before. One with only *coalescible* changes (span windows, metrics,
non-final progress) waits ``coalesce_interval``. Across keys, due critical keys go first,
then due coalescible ones, each oldest change first: under a budget the coalescible writes
of a task merge until its turn comes, and the oldest change is always the next in line.
The global budget (API-server cost, the kit's ``TokenBucket``) is the writer's: it asks
``next`` only when the budget allows a write.

``priority=False`` is the order before this (the baseline of bench/bench_freshness.py): one
FIFO by due time, one interval for every change.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidings.kube.flowcontrol import Backoff
from tidings.schemas.engine.state import TaskState
from tidings.schemas.wire.event import ParsedEvent
from tidings.schemas.wire.kinds import COALESCIBLE, CRITICAL, Urgency, urgency
from tidings.schemas.wire.payloads import Progress, Quiet, Window

K = TypeVar("K", bound=Hashable)

__all__ = ["COALESCIBLE", "CRITICAL", "Coalescer", "critical_change", "ends_stall", "fact_kind",
           "reporters"]


def fact_kind(ev: ParsedEvent) -> Urgency:
    """The event's urgency, as its kind declares it (schemas/wire/kinds.py): "coalescible" for
    facts a newer one supersedes (span windows, non-final progress), else "critical"
    (links, decks, final progress, warnings, payload types not known here)."""
    return urgency(ev.payload, ev.warning)


def critical_change(before: TaskState, after: TaskState, events: Iterable[ParsedEvent]) -> bool:
    """Whether folding ``events`` onto ``before`` (giving ``after``) is worth writing soon: a
    critical fact, or a phase change (the first fact of a task, a final, a failure), which
    moves the conditions too."""
    return before.phase != after.phase or any(fact_kind(ev) == CRITICAL for ev in events)


def reporters(events: Iterable[ParsedEvent]) -> set[str]:
    """The pods whose progress reports ``events`` hold (a Progress, or a window with one), or
    a quiet period they declared: either moves when the pod's silence is judged."""
    return {ev.sender.name for ev in events if type(p := ev.payload) is Progress
            or type(p) is Quiet or (type(p) is Window and p.progress is not None)}


def ends_stall(reporting: Collection[str], stalled: Collection[str], more: bool) -> bool:
    """Whether a progress report of the pods ``reporting`` ends a stall the written status
    says (``stalled``: the pods it lists; ``more``: the list is cut, so any worker may be
    stalled): the report clears it, as urgent as the stall was (the health clock writes a
    stall as a critical change), not a coalescing interval later."""
    return bool(reporting) and (more or any(pod in stalled for pod in reporting))


@dataclass(slots=True)
class _Key:
    last_start: float = float("-inf")
    # The key's write pacing: a token bucket (one write per hot_window, burst two) kept as
    # the one time it is full again (GCRA's theoretical arrival time), since the plan holds
    # thousands of keys and is pure (the kit's TokenBucket reads a clock and holds a lock).
    full_at: float = float("-inf")
    retry_at: float = float("-inf")  # not before this after a failed write (backoff)
    since: float = 0.0  # when the oldest unwritten change arrived (while dirty)
    in_flight: bool = False
    dirty: bool = False
    critical: bool = False  # the unwritten changes include a critical one
    failures: int = 0
    # What the write in flight took (restored if it fails, so its change stays unwritten).
    taken_since: float = 0.0
    taken_critical: bool = False
    # Bumped whenever the key is queued anew: heap entries of an older generation are stale.
    gen: int = 0
    queued: bool = False
    queued_critical: bool = False


class Coalescer(Generic[K]):
    """The write plan of all keys; not thread-safe (the writer locks around it)."""

    def __init__(self, interval: float, coalesce_interval: float | None = None, *,
                 priority: bool = True, retry_base: float = 0.5, retry_cap: float = 10.0,
                 hot_window: float | None = None) -> None:
        self.interval = max(0.0, interval)
        # 0: no pacing beyond the intervals; off in the old single line (priority=False).
        window = 2 * self.interval if hot_window is None else max(0.0, hot_window)
        self.hot_window = window if priority else 0.0
        self.coalesce_interval = self.interval if coalesce_interval is None \
            else max(self.interval, coalesce_interval)
        self.priority = priority
        # Failed writes of a key back off by its own count of failures in a row.
        self.backoff = Backoff(base=retry_base, cap=retry_cap, jitter=0.0)
        self._keys: dict[K, _Key] = {}
        self._tie = itertools.count()
        # (due, tie, gen, key): queued keys not due yet.
        self._waiting: list[tuple[float, int, int, K]] = []
        # (rank, order, tie, gen, key): due keys; rank 0 critical, 1 coalescible.
        self._due: list[tuple[int, float, int, int, K]] = []

    def _k(self, key: K) -> _Key:
        k = self._keys.get(key)
        if k is None:
            k = self._keys[key] = _Key()
        return k

    def _due_at(self, k: _Key) -> float:
        gap = self.interval if (k.critical or not self.priority) else self.coalesce_interval
        # A write is allowed once the bucket holds one (a burst of two: full_at - one window).
        return max(k.last_start + gap, k.full_at - self.hot_window, k.retry_at)

    def _queue(self, key: K, k: _Key, now: float) -> bool:
        """(Re)queue a dirty key that is not in flight; older heap entries become stale.
        True when a waiting writer must look again (the key is due now, or sooner than any
        other waiting key); otherwise the writers' timed waits already end in time."""
        k.gen += 1
        k.queued, k.queued_critical = True, k.critical
        due = self._due_at(k)
        if due > now:
            heapq.heappush(self._waiting, (due, next(self._tie), k.gen, key))
            return self._waiting[0][3] is key
        self._push_due(key, k, due)
        return True

    def _push_due(self, key: K, k: _Key, due: float) -> None:
        if self.priority:
            rank, order = (0 if k.critical else 1), k.since
        else:
            rank, order = 0, due
        heapq.heappush(self._due, (rank, order, next(self._tie), k.gen, key))

    def changed(self, key: K, now: float, critical: bool = True) -> bool:
        """The key's state changed (``critical``: see ``critical_change``). True when a
        waiting writer must look again (see ``_queue``): most changes of a busy key find it
        queued already, and waking a writer per fold was the watcher's largest CPU cost."""
        k = self._k(key)
        if not k.dirty:
            k.dirty, k.since = True, now
        k.critical = k.critical or critical
        if k.in_flight:
            return False  # ``end`` queues it
        if not k.queued or (k.critical and not k.queued_critical and self.priority):
            return self._queue(key, k, now)  # a critical change jumps from the coalescible line
        return False

    def next(self, now: float) -> tuple[K | None, float | None]:
        """The key to write now (its write has begun), else None and the seconds until one
        is due (None: nothing is queued)."""
        while self._waiting and self._waiting[0][0] <= now:
            due, _, gen, key = heapq.heappop(self._waiting)
            k = self._keys.get(key)
            if k is not None and gen == k.gen:
                self._push_due(key, k, due)
        while self._due:
            *_, gen, key = heapq.heappop(self._due)
            k = self._keys.get(key)
            if k is None or gen != k.gen:
                continue  # stale: queued anew since, or swept
            k.queued = False
            k.gen += 1
            k.in_flight, k.dirty, k.last_start = True, False, now
            k.full_at = max(k.full_at, now) + self.hot_window
            k.taken_since, k.taken_critical = k.since, k.critical
            k.critical = False
            return key, 0.0
        while self._waiting and self._stale(self._waiting[0][3], self._waiting[0][2]):
            heapq.heappop(self._waiting)
        return None, (self._waiting[0][0] - now if self._waiting else None)

    def _stale(self, key: K, gen: int) -> bool:
        k = self._keys.get(key)
        return k is None or k.gen != gen

    def end(self, key: K, now: float, ok: bool) -> None:
        """The write finished (ok or not); a key changed meanwhile, or failed, is queued."""
        k = self._k(key)
        k.in_flight = False
        if ok:
            k.failures, k.retry_at = 0, float("-inf")
        else:
            k.failures += 1
            k.retry_at = now + self.backoff.delay(k.failures)
            # The state is still unwritten: as old and as critical as what the write took.
            k.since = min(k.since, k.taken_since) if k.dirty else k.taken_since
            k.critical = k.critical or k.taken_critical
            k.dirty = True
        if k.dirty:
            self._queue(key, k, now)

    def idle(self) -> bool:
        """No key dirty, queued or in flight."""
        return not any(k.dirty or k.in_flight for k in self._keys.values())

    def is_dirty(self, key: K) -> bool:
        k = self._keys.get(key)
        return k is not None and (k.dirty or k.in_flight)

    def in_flight(self, key: K) -> bool:
        k = self._keys.get(key)
        return k is not None and k.in_flight

    def due(self) -> int:
        """Keys due now or waiting for their interval (not counting writes in flight)."""
        return sum(1 for k in self._keys.values() if k.queued)

    def oldest(self, now: float) -> float:
        """Age in seconds of the oldest unwritten change (0 when everything is written)."""
        ages = [now - (k.taken_since if k.in_flight else k.since)
                for k in self._keys.values() if k.dirty or k.in_flight]
        return max(ages, default=0.0)

    def sweep(self, now: float) -> int:
        """Forget clean keys whose spacing no longer matters (bounded memory); how many."""
        horizon = now - self.coalesce_interval
        gone = [key for key, k in self._keys.items()
                if not (k.dirty or k.in_flight or k.queued or k.failures)
                and k.last_start < horizon]
        for key in gone:
            del self._keys[key]
        return len(gone)
