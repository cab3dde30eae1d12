"""Status persistence: create the TaskFeedback if absent, then replace its ``/status``, coalesced.

At most one write per task is in flight; writes of a task are spaced by ``interval``; the
newest folded state is what the next write sends. Write pools are per writer, not per task,
and a slow task only ever occupies the one worker writing it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from tidings.schemas.constants import API_GROUP, API_VERSION, KIND, PLURAL
from tidings.schemas.event import TaskRef
from tidings.schemas.state import STATUS_BUDGET, TaskState

from .coalesce import Coalescer, TokenBucket
from .kube import JSON_PATCH, Kube, KubeError
from .metrics import Metrics
from .queue import WorkQueue
from .store import Store

log = logging.getLogger("tidings.watcher.writer")

SLOW_WRITE_ENV = "TIDINGS_TEST_SLOW_WRITE_TASK"
# (connect, read) seconds of one write attempt: short, so that a replica that stopped
# renewing its lease cannot land a write after a standby took over.
WRITE_TIMEOUT = (2.0, 3.0)
# Who owns .status in managedFields (the API server would say "OpenAPI-Generator" or nothing).
FIELD_MANAGER = "tidings-watcher"


class NotLeader(Exception):
    """Writing is not allowed right now (the lease is not held)."""


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


def collection_path(ns: str) -> str:
    """The TaskFeedback collection of namespace ``ns``."""
    return f"/apis/{API_GROUP}/{API_VERSION.split('/')[1]}/namespaces/{ns}/{PLURAL}"


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
        self.budget = TokenBucket(max_rate, burst=max(1, int(max_rate)))
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
            "status write of %s/%s failed", task.namespace, task.name))

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
        wait = self.budget.reserve() if self.store.unwritten(task) is not None else 0.0
        if wait > 0:
            time.sleep(wait)  # holds only this key; its newer folds coalesce meanwhile
        snap = self.store.unwritten(task)
        if snap is not None:
            state, version, exists = snap
            ok = self.may_write() and self._write(task, state, exists)
            if ok:
                self.store.written(task, version)
        with self._lock:
            delay = self.co.end(task, time.monotonic(), ok)
        if delay is not None:
            self.queue.add_after(task, delay)

    def _write(self, task: TaskRef, state: TaskState, exists: bool) -> bool:
        self.metrics.writes_in_flight.inc()
        try:
            return self._write_now(task, state, exists)
        finally:
            self.metrics.writes_in_flight.dec()

    def _write_now(self, task: TaskRef, state: TaskState, exists: bool) -> bool:
        delay = self.slow.get(task.name)
        if delay:
            time.sleep(delay)  # test hook: this task's writes are slow, nobody else's
        t0 = time.perf_counter()
        try:
            self._persist(task, status_body(state), exists)
        except KubeError as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e)
            # Permanent refusals (422 invalid name, 403, ...) wait for the task's next change
            # instead of being retried forever; transient ones are rescheduled with backoff.
            return not e.retryable
        except Exception as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e)
            return False
        self.metrics.write_seconds.observe(time.perf_counter() - t0)
        self.metrics.status_writes.labels("ok").inc()
        return True

    @retry(retry=retry_if_exception(lambda e: isinstance(e, KubeError) and e.retryable),
           stop=stop_after_attempt(5), wait=wait_random_exponential(multiplier=0.1, max=2.0),
           reraise=True)
    def _persist(self, task: TaskRef, status: dict[str, Any], exists: bool) -> None:
        if not self.may_write():
            # Fencing: a replica that can no longer prove its lease writes nothing more.
            raise NotLeader("lease not held")
        coll = collection_path(task.namespace)
        if not exists:
            self._create(task, coll)
        # JSON Patch "add /status" replaces the whole status atomically: keys the fold dropped
        # (e.g. a link evicted by a cap) vanish too, which a merge patch would leave behind.
        patch = [{"op": "add", "path": "/status", "value": status}]
        query = [("fieldManager", FIELD_MANAGER)]
        try:
            self.kube.request("PATCH", f"{coll}/{task.name}/status", body=patch, query=query,
                              content_type=JSON_PATCH, timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.status != 404:
                raise
            self._create(task, coll)  # deleted under us: recreate, then patch once more
            self.kube.request("PATCH", f"{coll}/{task.name}/status", body=patch, query=query,
                              content_type=JSON_PATCH, timeout=WRITE_TIMEOUT)

    def _create(self, task: TaskRef, coll: str) -> None:
        body = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": task.name, "namespace": task.namespace},
                "spec": {"task": task.name}}
        try:
            self.kube.request("POST", coll, body=body, query=[("fieldManager", FIELD_MANAGER)],
                              timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.status != 409:  # AlreadyExists is what we wanted
                raise
