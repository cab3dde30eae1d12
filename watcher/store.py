"""In-memory task states and their pending (not yet folded) events, keyed by task.

Seeded at start from the TaskFeedback statuses (version vectors included), so a restarted or
newly elected watcher resumes exactly where the last written state left off. Idle, fully
written tasks are evicted to keep memory bounded; an evicted task comes back unseeded, and
is seeded again from its status before its next fold.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidings.schemas.event import ParsedEvent, TaskRef
from tidings.schemas.state import DEFAULT_LIMITS, Limits, TaskState, new_state


@dataclass(slots=True)
class Entry:
    state: TaskState
    pending: list[ParsedEvent] = field(default_factory=list)
    version: int = 0  # bumped by every fold that changed the state
    written: int = -1  # version last persisted (-1: never)
    exists: bool = False  # the TaskFeedback object is known to exist
    # The state came from the persisted status (or the object is known to be absent); an
    # unseeded entry must be seeded before it is folded, or its fold would start from zero.
    seeded: bool = False
    touched: float = field(default_factory=time.monotonic)


class Store:
    """Thread-safe map TaskRef -> Entry. The fold itself runs outside the lock, in a worker."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._entries: dict[TaskRef, Entry] = {}

    def _entry(self, task: TaskRef) -> Entry:
        e = self._entries.get(task)
        if e is None:
            e = self._entries[task] = Entry(new_state(task, self.limits))
        return e

    def load(self, task: TaskRef, status: Any, exists: bool = True) -> TaskState:
        """Seed ``task`` from a persisted ``.status`` (or, with ``exists=False``, as new)."""
        state = TaskState.from_status(task, status, self.limits)
        with self._lock:
            e = self._entry(task)
            e.state, e.exists, e.written, e.seeded = state, exists, e.version, True
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
                del self._entries[task]
        return len(idle)

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

    def take(self, task: TaskRef) -> tuple[TaskState, list[ParsedEvent]]:
        """The current state and all pending events (now owned by the caller)."""
        with self._lock:
            e = self._entry(task)
            pending, e.pending = e.pending, []
            return e.state, pending

    def put(self, task: TaskRef, state: TaskState) -> int:
        """Store a new folded state; returns its version."""
        with self._lock:
            e = self._entry(task)
            e.state = state
            e.version += 1
            return e.version

    def get(self, task: TaskRef) -> TaskState | None:
        with self._lock:
            e = self._entries.get(task)
            return None if e is None else e.state

    def unwritten(self, task: TaskRef) -> tuple[TaskState, int, bool] | None:
        """(state, version, object exists) when the newest state is not persisted yet."""
        with self._lock:
            e = self._entries.get(task)
            if e is None or e.written >= e.version:
                return None
            return e.state, e.version, e.exists

    def written(self, task: TaskRef, version: int) -> None:
        with self._lock:
            e = self._entry(task)
            e.written = max(e.written, version)
            e.exists = True

    def tasks(self) -> list[TaskRef]:
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
