"""In-memory task states and their pending (not yet folded) events, keyed by task.

Seeded at start from the TaskFeedback statuses (version vectors included), so a restarted or
newly elected watcher resumes exactly where the last written state left off. Each task also
keeps the resourceVersion its state builds on and the events folded since, so that a status
write refused as stale can be rebased on whatever the object holds now. Idle, fully
written tasks are first *compacted* (kept as the zlib-compressed JSON of their full
status, rebuilt losslessly by ``TaskState.from_status`` on their next use: about a quarter
of the live objects' size), then, after longer, evicted; an evicted task comes back
unseeded, and is seeded again from its status before its next fold.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from tidings.schemas.event import ParsedEvent, TaskRef
from tidings.schemas.folding import fold_checked
from tidings.schemas.state import DEFAULT_LIMITS, Limits, TaskState, new_state
from tidings.schemas.version_vector import VersionVector


@dataclass(slots=True)
class Entry:
    # None while compacted: ``packed`` then holds it (see ``Store.compact_idle``).
    state: TaskState | None
    pending: list[ParsedEvent] = field(default_factory=list)
    version: int = 0  # bumped by every fold that changed the state
    written: int = -1  # version last persisted (-1: never)
    # resourceVersion of the TaskFeedback our state builds on (read, or our last write):
    # the precondition of the next status write. None: the object is not known to exist.
    rv: str | None = None
    # Events folded since that object version, tagged with the version that folded them:
    # re-applied on top of a newer status written by someone else (see ``rebase``).
    unsaved: list[tuple[int, ParsedEvent]] = field(default_factory=list)
    # The state came from the persisted status (or the object is known to be absent); an
    # unseeded entry must be seeded before it is folded, or its fold would start from zero.
    seeded: bool = False
    touched: float = field(default_factory=time.monotonic)
    packed: bytes | None = None  # zlib(orjson(state.to_status())) of a compacted entry


# zlib level 1: compacting 100k tasks must not cost a CPU-minute; level 6 saves ~10 % more.
_ZLIB_LEVEL = 1


def pack_state(state: TaskState) -> bytes:
    """The compact form of a state: its full (unbudgeted) status, as compressed JSON."""
    return zlib.compress(orjson.dumps(state.to_status()), _ZLIB_LEVEL)


def unpack_state(task: TaskRef, packed: bytes, limits: Limits) -> TaskState:
    return TaskState.from_status(task, orjson.loads(zlib.decompress(packed)), limits)


class Store:
    """Thread-safe map TaskRef -> Entry. The fold itself runs outside the lock, in a worker."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS,
                 on_saved: Callable[[list[ParsedEvent]], None] | None = None) -> None:
        self.limits = limits
        # Told (outside the lock) which unsaved events a status now holds, once each: the
        # emit-to-status latency is observed there.
        self.on_saved = on_saved
        self._lock = threading.Lock()
        self._entries: dict[TaskRef, Entry] = {}
        self.compacted = 0  # entries held compact now
        self.not_compactable = 0  # states whose status did not rebuild them exactly (kept hot)

    def _entry(self, task: TaskRef) -> Entry:
        e = self._entries.get(task)
        if e is None:
            e = self._entries[task] = Entry(new_state(task, self.limits))
        return e

    def _hot(self, task: TaskRef, e: Entry) -> TaskState:
        """The entry's state, rebuilt from its compact form first if it has one."""
        if e.packed is not None:
            e.state = unpack_state(task, e.packed, self.limits)
            e.packed = None
            self.compacted -= 1
        assert e.state is not None
        return e.state

    def load(self, task: TaskRef, status: object, exists: bool = True,
             rv: str | None = None) -> TaskState:
        """Seed ``task`` from a persisted ``.status`` read at resourceVersion ``rv`` (or, with
        ``exists=False``, as new)."""
        state = TaskState.from_status(task, status, self.limits)
        with self._lock:
            e = self._entry(task)
            if e.packed is not None:
                e.packed = None
                self.compacted -= 1
            e.state, e.written, e.seeded = state, e.version, True
            e.rv, e.unsaved = (rv if exists else None), []
            e.touched = time.monotonic()
        return state

    def seeded(self, task: TaskRef) -> bool:
        with self._lock:
            e = self._entries.get(task)
            return e is not None and e.seeded

    def evict_idle(self, idle_for: float, busy: Callable[[TaskRef], bool]) -> int:
        """Drop tasks untouched for ``idle_for`` seconds, with nothing pending or unwritten,
        that no worker holds (``busy``). Returns how many were dropped."""
        cutoff = time.monotonic() - idle_for
        with self._lock:
            idle = [t for t, e in self._entries.items()
                    if e.touched < cutoff and not e.pending and e.written >= e.version
                    and not busy(t)]
            for task in idle:
                if self._entries.pop(task).packed is not None:
                    self.compacted -= 1
        return len(idle)

    def compact_idle(self, idle_for: float, busy: Callable[[TaskRef], bool]) -> int:
        """Keep tasks untouched for ``idle_for`` seconds, with nothing pending or unwritten,
        that no worker holds, in their compact form. A state is compacted only once its
        status is proven to rebuild it exactly (else it stays as it is, counted in
        ``not_compactable``). Returns how many were compacted."""
        cutoff = time.monotonic() - idle_for
        with self._lock:
            idle = [(t, e) for t, e in self._entries.items()
                    if e.packed is None and e.touched < cutoff and not e.pending
                    and e.written >= e.version and not e.unsaved and not busy(t)]
        n = 0
        for task, e in idle:  # packing runs outside the lock: the watch loop must not wait
            state = e.state
            assert state is not None
            packed = pack_state(state)
            if unpack_state(task, packed, self.limits) != state:
                with self._lock:
                    self.not_compactable += 1
                continue
            with self._lock:
                # Only if nothing happened to the entry meanwhile (the same state object,
                # still clean, idle and unheld).
                if (self._entries.get(task) is e and e.state is state and e.packed is None
                        and not e.pending and e.written >= e.version and not e.unsaved
                        and e.touched < cutoff and not busy(task)):
                    e.state, e.packed = None, packed
                    self.compacted += 1
                    n += 1
        return n

    def forget(self, task: TaskRef) -> bool:
        """Drop ``task`` after its TaskFeedback was deleted, unless facts are pending or
        unwritten (then its next write recreates the object, which is what they ask for)."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or e.pending or e.written < e.version:
                return False
            del self._entries[task]
            return True

    def push(self, ev: ParsedEvent) -> None:
        """Buffer an event for its task's next fold (called from the watch loop: O(1))."""
        with self._lock:
            e = self._entry(ev.task)
            e.pending.append(ev)
            e.touched = time.monotonic()

    def push_many(self, events: Sequence[ParsedEvent]) -> None:
        """``push`` for every event of one socket read, under one lock."""
        now = time.monotonic()
        with self._lock:
            for ev in events:
                e = self._entry(ev.task)
                e.pending.append(ev)
                e.touched = now

    def take(self, task: TaskRef) -> tuple[TaskState, list[ParsedEvent]]:
        """The current state and all pending events (now owned by the caller)."""
        with self._lock:
            e = self._entry(task)
            pending, e.pending = e.pending, []
            return self._hot(task, e), pending

    def put(self, task: TaskRef, state: TaskState, base: TaskState | None = None,
            events: Sequence[ParsedEvent] = ()) -> int:
        """Store ``state``, the fold of ``events`` onto ``base`` (the state ``take`` gave);
        returns its version. If the state was rebased meanwhile, ``events`` are folded onto
        the rebased state instead, so nothing folded is lost either way."""
        with self._lock:
            e = self._entry(task)
            if base is not None and self._hot(task, e) is not base:
                state = _fold_new(self._hot(task, e), events)
            e.state = state
            e.version += 1
            e.unsaved.extend((e.version, ev) for ev in events)
            return e.version

    def rebase(self, task: TaskRef, status: object, rv: str | None) -> bool:
        """Someone wrote the status (resourceVersion ``rv``) since our state's base: make it
        our base. If it holds events our state lacks (a newer leader's work), the state
        becomes that status plus our unsaved events; otherwise ours already contains all of
        it and only the precondition moves. True when the state changed."""
        theirs = TaskState.from_status(task, status, self.limits)
        with self._lock:
            e = self._entry(task)
            e.rv = rv
            changed = not covers(self._hot(task, e).applied, theirs.applied)
            if changed:
                e.state = _fold_new(theirs, [ev for _, ev in e.unsaved])
                e.version += 1
            saved: list[ParsedEvent] = []
            if e.state == theirs:
                # The status already says all we know (we were behind, or our own write
                # landed and only its answer was lost): nothing to write.
                saved = [ev for _, ev in e.unsaved]
                e.written, e.unsaved = e.version, []
        self._saved(saved)
        return changed

    def absent(self, task: TaskRef) -> None:
        """The TaskFeedback object is gone: the next write creates it."""
        with self._lock:
            e = self._entry(task)
            e.rv = None

    def get(self, task: TaskRef) -> TaskState | None:
        with self._lock:
            e = self._entries.get(task)
            if e is None:
                return None
            if e.packed is not None:  # a read does not make the task hot again
                return unpack_state(task, e.packed, self.limits)
            return e.state

    def unwritten(self, task: TaskRef) -> tuple[TaskState, int, str | None] | None:
        """(state, version, resourceVersion to write over) when the newest state is not
        persisted yet."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or e.written >= e.version:
                return None
            return self._hot(task, e), e.version, e.rv

    def written(self, task: TaskRef, version: int, rv: str | None = None) -> None:
        """``version`` is persisted; the object is now at resourceVersion ``rv``."""
        with self._lock:
            e = self._entry(task)
            e.written = max(e.written, version)
            e.rv = rv
            saved = [ev for v, ev in e.unsaved if v <= version]
            e.unsaved = [(v, ev) for v, ev in e.unsaved if v > version]
        self._saved(saved)

    def _saved(self, events: list[ParsedEvent]) -> None:
        if events and self.on_saved is not None:
            self.on_saved(events)

    def tasks(self) -> list[TaskRef]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def covers(ours: VersionVector, theirs: VersionVector) -> bool:
    """Whether every (instance, seq) in ``theirs`` is in ``ours``."""
    for inst in theirs.instances:
        mine = ours.ranges(inst)
        for lo, hi in theirs.ranges(inst):
            if not any(a <= lo and hi <= b for a, b in mine):  # ranges are disjoint, merged
                return False
    return True


def _fold_new(state: TaskState, events: Sequence[ParsedEvent]) -> TaskState:
    """Fold the events ``state`` has not applied yet (duplicates skipped before the fold, as
    the controller does, so the persisted counters never see one)."""
    return fold_checked(state, events).state
