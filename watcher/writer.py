"""Status persistence: create the TaskFeedback if absent, then replace its ``/status``, coalesced.

At most one write per task is in flight; writes of a task are spaced by ``interval``; the
newest folded state is what the next write sends. Write pools are per writer, not per task,
and a slow task only ever occupies the one worker writing it.

Every status write carries the resourceVersion its state builds on (optimistic concurrency):
a write from a deposed leader, delayed in flight, gets 409 instead of landing over a newer
leader's status. On 409 the writer re-reads the object and rebases (``Store.rebase``): if the
status holds events ours lacks it becomes the base and our unsaved events are re-applied on
top (version vectors skip what it already has), so nothing is lost or counted twice.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tidings.kube.flowcontrol import TokenBucket
from tidings.schemas.constants import API_VERSION, KIND, taskfeedback_collection
from tidings.schemas.event import TaskRef
from tidings.schemas.state import STATUS_BUDGET, TaskState

from .coalesce import Coalescer
from .kube import Kube, KubeError
from .logs import task_fields
from .metrics import Metrics
from .queue import WorkQueue
from .store import Store

log = logging.getLogger("tidings.watcher.writer")

SLOW_WRITE_ENV = "TIDINGS_TEST_SLOW_WRITE_TASK"
# (connect, read) seconds of one write attempt: short, so a write of a replica that stopped
# renewing its lease is rarely still in flight when a standby takes over (and if it is, the
# resourceVersion precondition refuses it).
WRITE_TIMEOUT = (2.0, 3.0)
# Who owns .status in managedFields (the API server would say "OpenAPI-Generator" or nothing).
FIELD_MANAGER = "tidings-watcher"
# Conflicts resolved (re-read, rebase, write again) within one write before it counts as a
# failure and waits for the coalescer's backoff.
MAX_CONFLICTS = 4


class NotLeader(Exception):
    """Writing is not allowed right now (the lease is not held)."""


class Conflict(Exception):
    """The object is not at the resourceVersion our state builds on (409/404)."""


def parse_slow_writes(spec: str | None) -> dict[str, float]:
    """``"taskA:2.5,taskB:1"`` -> {"taskA": 2.5, "taskB": 1.0} (a test hook; bad parts ignored)."""
    out: dict[str, float] = {}
    for part in (spec or "").split(","):
        name, _, secs = part.strip().rpartition(":")
        try:
            if name:
                out[name] = float(secs)
        except ValueError:
            continue
    return out


def status_body(state: TaskState) -> dict[str, Any]:
    """The whole ``.status`` as written: the fold's camelCase status, cut to the byte budget
    (``STATUS_BUDGET``, dropping detail in ``BUDGET_DROP_ORDER``) so a write never fails for
    its size."""
    return state.to_status(budget=STATUS_BUDGET)


collection_path = taskfeedback_collection


class StatusWriter:
    """Coalesced, retried status writes on a bounded pool of write workers."""

    def __init__(self, kube: Kube, store: Store, metrics: Metrics, *, interval: float = 0.5,
                 workers: int = 8, slow: dict[str, float] | None = None,
                 may_write: Callable[[], bool] = lambda: True, max_rate: float = 0.0) -> None:
        self.kube, self.store, self.metrics = kube, store, metrics
        self.co: Coalescer[TaskRef] = Coalescer(interval)
        self.queue: WorkQueue[TaskRef] = WorkQueue()
        self.workers = workers
        self.slow = slow if slow is not None else parse_slow_writes(os.environ.get(SLOW_WRITE_ENV))
        self.may_write = may_write
        # Status patches are the watcher's main cost to the API server (decode, schema
        # validation and managedFields of a large object): the budget bounds it globally.
        self.budget = TokenBucket(max_rate, burst=max(1, int(max_rate))) if max_rate > 0 else None
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"writer-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def changed(self, task: TaskRef) -> None:
        """A fold changed ``task``'s state: schedule a write (coalesced)."""
        with self._lock:
            delay = self.co.changed(task, time.monotonic())
        if delay is not None:
            self.queue.add_after(task, delay)

    def idle(self) -> bool:
        with self._lock:
            return self.co.idle()

    def flush(self, timeout: float) -> bool:
        """Wait until every changed state is written (or ``timeout``); True when idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.02)
        return self.idle()

    def stop(self) -> None:
        self.queue.shutdown()

    # --- workers ------------------------------------------------------------------------
    def _work(self) -> None:
        self.queue.serve(self._write_one, lambda task: log.exception(
            "status write of %s/%s failed", task.namespace, task.name, extra=task_fields(task)))

    def _write_one(self, task: TaskRef) -> None:
        try:
            self._one(task)
        finally:
            self.metrics.write_queue_depth.set(len(self.queue))

    def _one(self, task: TaskRef) -> None:
        with self._lock:
            if not self.co.begin(task, time.monotonic()):
                return
        ok = True
        wait = self.budget.take() if self.budget is not None \
            and self.store.unwritten(task) is not None else 0.0
        if wait > 0:
            time.sleep(wait)  # holds only this key; its newer folds coalesce meanwhile
        if self.store.unwritten(task) is not None:
            ok = self.may_write() and self._write(task)
        with self._lock:
            delay = self.co.end(task, time.monotonic(), ok)
        if delay is not None:
            self.queue.add_after(task, delay)

    def _write(self, task: TaskRef) -> bool:
        self.metrics.writes_in_flight.inc()
        try:
            return self._write_now(task)
        finally:
            self.metrics.writes_in_flight.dec()

    def _write_now(self, task: TaskRef) -> bool:
        """Write the newest state over the object version it builds on; on a conflict, re-read
        and rebase (``Store.rebase``) and write again. One attempt of the whole: a failure is
        retried by the coalescer's backoff, never here as well."""
        t0 = time.perf_counter()
        try:
            for _ in range(MAX_CONFLICTS):
                snap = self.store.unwritten(task)
                if snap is None:
                    return True
                state, version, rv = snap
                try:
                    new_rv = self._persist(task, status_body(state), rv)
                except Conflict as e:
                    self.metrics.status_writes.labels("conflict").inc()
                    log.info("status write %s/%s: %s; re-reading", task.namespace, task.name, e,
                             extra=task_fields(task))
                    self._reread(task)
                    continue
                self.store.written(task, version, new_rv)
                self.metrics.write_seconds.observe(time.perf_counter() - t0)
                self.metrics.status_writes.labels("ok").inc()
                return True
            log.warning("status write %s/%s: still conflicting after %d attempts",
                        task.namespace, task.name, MAX_CONFLICTS, extra=task_fields(task))
            return False
        except NotLeader:
            self.metrics.status_writes.labels("fenced").inc()
            return False
        except KubeError as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e,
                        extra=task_fields(task))
            # Permanent refusals (422 invalid name, 403, ...) wait for the task's next change
            # instead of being retried forever; transient ones are rescheduled with backoff.
            return not e.retryable
        except Exception as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e,
                        extra=task_fields(task))
            return False

    def _fence(self) -> None:
        if not self.may_write():
            # A replica that can no longer prove its lease sends nothing more.
            raise NotLeader("lease not held")

    def _persist(self, task: TaskRef, status: dict[str, Any], rv: str | None) -> str | None:
        """Replace the whole ``.status`` (keys the fold dropped vanish too) of the object at
        resourceVersion ``rv``; returns the new resourceVersion. The API server refuses the
        write with 409 when the object changed since ``rv``, so a stale writer never wins."""
        self._fence()
        coll = collection_path(task.namespace)
        if rv is None:
            rv = self._create(task, coll)
            if rv is None:
                raise Conflict("created, version unknown")
            self._fence()
        delay = self.slow.get(task.name)
        if delay:
            time.sleep(delay)  # test hook: this task's writes are slow (in flight), nobody else's
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": task.name, "namespace": task.namespace,
                             "resourceVersion": rv},
                "status": status}
        try:
            obj = self.kube.request("PUT", f"{coll}/{task.name}/status", body=body,
                                    query=[("fieldManager", FIELD_MANAGER)],
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.status in (404, 409):  # changed (or deleted) since rv
                raise Conflict(str(e)) from e
            raise
        return _resource_version(obj)

    def _reread(self, task: TaskRef) -> None:
        """After a conflict: the object as it is now becomes the base of our state."""
        self._fence()
        try:
            obj = self.kube.request("GET", f"{collection_path(task.namespace)}/{task.name}",
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.status != 404:
                raise
            self.store.absent(task)
            return
        if self.store.rebase(task, obj.get("status"), _resource_version(obj)):
            log.info("status of %s/%s had events we lacked: merged", task.namespace, task.name,
                     extra=task_fields(task))

    def _create(self, task: TaskRef, coll: str) -> str | None:
        """Create the TaskFeedback; its resourceVersion. Conflict when it already exists (we
        must read what it holds before writing over it)."""
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": task.name, "namespace": task.namespace},
                "spec": {"task": task.name}}
        try:
            obj = self.kube.request("POST", coll, body=body,
                                    query=[("fieldManager", FIELD_MANAGER)],
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.status == 409:
                raise Conflict("already exists") from e
            raise
        return _resource_version(obj)


def _resource_version(obj: Any) -> str | None:
    """The object's resourceVersion (None if the answer lacks one: the next write re-reads)."""
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "") or None
