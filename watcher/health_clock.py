"""The health clock: silence makes no event, so a running task is judged again when a
worker's silence passes its limit (one status write then, none while nothing changes). The
waiting is the work queue's own delay (``WorkQueue.add_after``), served by one thread.

After a fold only the workers that reported are looked at (O(reports), not O(workers): a
task of 10,000 workers is folded many times a second), so a task's time may come early
(its worker reported since): then the clock finds nobody's limit passed, writes nothing and
waits for the true next time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from tidings._compat import UTC
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.health import HealthSettings, next_stall, next_stall_of
from tidings.schemas.wire.contract import RUNNING
from tidings.schemas.wire.event import TaskRef

from .queue import WorkQueue
from .store import Store

log = logging.getLogger("tidings.watcher")
_SLACK = timedelta(milliseconds=1)


class HealthClock:
    """``schedule`` after every change of a task's workers; when the time comes, ``due``
    (the status writer's) is told the task must be written, its health judged then."""

    def __init__(self, store: Store, settings: HealthSettings,
                 due: Callable[[TaskRef], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._settings = settings
        self._due_now = due
        self._clock = clock
        # task -> when (epoch s) it is judged next. The queue holds one delayed add per task,
        # at the earliest time asked: one that fires before its task's time (the worker
        # reported since) waits again.
        self._due: dict[TaskRef, float] = {}
        self._lock = threading.Lock()
        self._queue: WorkQueue[TaskRef] = WorkQueue()

    def schedule(self, task: TaskRef, state: TaskState | None,
                 now: datetime | None = None, pods: Collection[str] | None = None) -> None:
        """Judge ``task`` again when its next running worker's silence passes its limit (no
        more, when ``state`` is None or no worker will). ``pods``: only these workers'
        paces moved (a fold), so the time already set stands unless one of theirs is
        earlier."""
        now = now or datetime.now(UTC)
        with self._lock:
            known = self._due.get(task)
        if state is None or state.phase != RUNNING:
            due = None  # (a fold that ended the task ends its clock too)
        elif pods is not None and known is not None:
            due = next_stall_of(state, pods, now, self._settings)
            if due is None or due.timestamp() >= known:
                return  # (the time set stands: it may come early, never late)
        else:
            due = next_stall(state, now, self._settings)
        self._set(task, due)

    def _set(self, task: TaskRef, due: datetime | None) -> None:
        with self._lock:
            if due is None:
                self._due.pop(task, None)  # (its queued add finds nothing due)
                return
            at = due.timestamp()
            if self._due.get(task) == at:
                return
            self._due[task] = at
        self._queue.add_after(task, at - self._clock())

    def pending(self, task: TaskRef) -> bool:
        """The clock will judge ``task`` again (so it stays in memory until then)."""
        with self._lock:
            return task in self._due

    def run(self) -> None:
        """The clock's thread, until ``stop``."""
        self._queue.serve(self._judge, lambda task: log.exception(
            "judging the health of %s/%s failed", task.namespace, task.name))

    def stop(self) -> None:
        self._queue.shutdown()

    def _judge(self, task: TaskRef) -> None:
        with self._lock:
            at = self._due.get(task)
            if at is None:
                return  # nothing will stall any more
            early = at - self._clock()
            if early <= 0:
                del self._due[task]
        if early > 0:  # rescheduled later since this add was queued
            self._queue.add_after(task, early)
            return
        when = datetime.fromtimestamp(at, UTC)
        state = self._store.get(task)
        # Was a limit passed at this time? (A time set after a fold may be early: the worker
        # whose time it was reported since.) A millisecond either way: float seconds.
        exact = None if state is None else next_stall(state, when - _SLACK, self._settings)
        if exact is not None and exact > when + _SLACK:
            self._set(task, exact)  # nobody stalled yet: wait for the true time
            return
        if self._store.touch(task):  # a status write judges it with the time then
            self._due_now(task)
            self.schedule(task, self._store.get(task), when)
