"""The health clock: silence makes no event, so a running task is judged again when a
worker's silence passes its limit (one status write then, none while nothing changes). The
waiting is the work queue's own delay (``WorkQueue.add_after``), served by one thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from tidings._compat import UTC
from tidings.schemas.event import TaskRef
from tidings.schemas.health import HealthSettings, next_stall
from tidings.schemas.state import TaskState

from .queue import WorkQueue
from .store import Store

log = logging.getLogger("tidings.watcher")


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
                 now: datetime | None = None) -> None:
        """Judge ``task`` again when its next running worker's silence passes its limit (no
        more, when ``state`` is None or no worker will)."""
        due = None if state is None else next_stall(state, now or datetime.now(UTC),
                                                    self._settings)
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
        if self._store.touch(task):  # a status write judges it with the time then
            self._due_now(task)
            self.schedule(task, self._store.get(task), datetime.fromtimestamp(at, UTC))
