"""The record of deleted TaskFeedbacks, kept across restarts and handovers (what a deletion
means, and the record's form: ``schemas/engine/deletions.py``).

A metadata-only list+watch of the TaskFeedbacks sees each deletion (a user's, the garbage
collector's, the TTL's; a relist, those made while its watch was down); delivery then drops
the listed bus events of that task, naming no TaskFeedback uid, that the API server created
up to that second (``events_skipped{cause="deleted_run"}``), so a relist cannot fold the
deleted run into a new TaskFeedback. The record is written by the leader alone (fenced by
its lease) to one ConfigMap beside its Lease, in the watcher's own namespace, where no
workload may write (RBAC: the watcher's Role there names that one ConfigMap), and read at the
start of every term before the bus is listed. Deletions are remembered for the event TTL
(after it the deleted run's events are gone too), within a byte budget (the newest kept).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.kube.objects import KubeObject
from tidings.schemas.engine.deletions import MAX_BYTES, Deletions
from tidings.schemas.wire.event import TaskRef, WatchItem

from .metrics import Metrics
from .reflector import object_line

log = logging.getLogger("tidings.watcher.deletions")

# The ConfigMap key the record is kept under.
KEY = "deletions.json"
# Seconds between two writes of the record at least: a mass deletion costs one write a
# second, each holding every deletion seen meanwhile.
WRITE_EVERY = 1.0


def configmap_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


class DeletionRecord:
    """The deletions this term knows of (``deletions``: read by delivery without a lock, a
    dict's reads being atomic), loaded from and written to the ConfigMap ``namespace/name``
    (None: kept in memory only)."""

    def __init__(self, kube: Client | None, where: tuple[str, str] | None, keep: int,
                 metrics: Metrics, may_write: Callable[[], bool] = lambda: True,
                 max_bytes: int = MAX_BYTES,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube, self.where, self.keep, self.metrics = kube, where, keep, metrics
        self.may_write, self.max_bytes, self.clock = may_write, max_bytes, clock
        self.deletions = Deletions()
        self._cond = threading.Condition()
        self._dirty = False
        self._rv: str | None = None  # the ConfigMap's resourceVersion as last read or written
        self._denied_logged = False

    # --- what the term sees -------------------------------------------------------------
    def seen_deleted(self, task: TaskRef, at: datetime | None = None) -> None:
        """``task``'s TaskFeedback was deleted (seen now, or at ``at``)."""
        with self._cond:
            if self.deletions.record(task, at or self.clock()):
                log.info("taskfeedback %s/%s deleted: the bus events of its run are not "
                         "folded again", task.namespace, task.name)
                self._dirty = True
                self._cond.notify_all()
            self.metrics.deletions_remembered.set(len(self.deletions))

    def deleted_at(self, task: TaskRef) -> int | None:
        return self.deletions.deleted(task)

    # --- the durable form ---------------------------------------------------------------
    def load(self) -> None:
        """Read the record at the start of a term, before the bus is listed. A record the
        watcher may not read (its RBAC older than this version) is logged and left: deletions
        are then remembered only while this term lasts. Any other failure raises: the term
        starts once the record is read (else a relist could bring a deleted run back)."""
        if self.kube is None or self.where is None:
            return
        try:
            cm = self._get()
        except KubeError as e:
            if not e.denied:
                raise
            self._denied(e)
            return
        with self._cond:
            if cm is not None:
                self.deletions.merge(_decoded(cm))
            self.deletions.prune(self.clock(), self.keep)
            self.metrics.deletions_remembered.set(len(self.deletions))
        log.info("%d TaskFeedback deletions remembered", len(self.deletions))

    def run(self, stopping: threading.Event) -> None:
        """Write the record whenever it changed (at most every ``WRITE_EVERY`` seconds),
        until ``stopping``; a failed write is tried again after a backoff."""
        delay = WRITE_EVERY
        while not stopping.is_set():
            with self._cond:
                self._cond.wait_for(lambda: self._dirty or stopping.is_set(), 1.0)
                if not self._dirty:
                    continue
            delay = WRITE_EVERY if self.flush() else min(30.0, delay * 2)
            stopping.wait(delay)

    def stop(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def flush(self) -> bool:
        """Write the record if it changed; False when that failed (or this replica may not
        write: it is fenced)."""
        with self._cond:
            if not self._dirty:
                return True
            if self.kube is None or self.where is None:
                self._dirty = False
                return True
        if not self.may_write():
            return False
        with self._cond:
            self._dirty = False
        try:
            self._write()
        except KubeError as e:
            with self._cond:
                self._dirty = True
            if e.denied:
                self._denied(e)
            else:
                log.warning("cannot write the record of deleted TaskFeedbacks: %s", e)
            self.metrics.deletion_record_writes.labels("error").inc()
            return False
        self.metrics.deletion_record_writes.labels("ok").inc()
        return True

    def _write(self) -> None:
        """Write the record (pruned, cut to the byte budget); on a conflict (another term
        wrote it) read it, take its deletions in, and write again."""
        assert self.kube is not None and self.where is not None
        ns, name = self.where
        for _ in range(5):
            with self._cond:
                self.deletions.prune(self.clock(), self.keep)
                text, left_out = self.deletions.encode(self.max_bytes)
                self.metrics.deletions_remembered.set(len(self.deletions))
            if left_out:
                log.warning("the record of deleted TaskFeedbacks is full: the %d oldest of "
                            "%d deletions are left out of it (a restart may bring their "
                            "runs back)", left_out, len(self.deletions))
            body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": name, "namespace": ns},
                                    "data": {KEY: text}}
            try:
                if self._rv is None:
                    out = self.kube.request("POST", configmap_path(ns), body=body,
                                            timeout=(5, 30))
                else:
                    body["metadata"]["resourceVersion"] = self._rv
                    out = self.kube.request("PUT", configmap_path(ns, name), body=body,
                                            timeout=(5, 30))
            except KubeError as e:
                if not (e.conflict or e.not_found):
                    raise
                cm = self._get()  # (it exists, or changed since: take it in, write again)
                if cm is not None:
                    with self._cond:
                        self.deletions.merge(_decoded(cm))
                continue
            self._rv = str(((out or {}).get("metadata") or {}).get("resourceVersion") or "") \
                or None
            return
        raise KubeError(409, "the record of deleted TaskFeedbacks kept changing",
                        reason="Conflict")

    def _get(self) -> KubeObject | None:
        """The ConfigMap (its resourceVersion kept for the next write), None when absent."""
        assert self.kube is not None and self.where is not None
        try:
            cm: KubeObject = self.kube.request("GET", configmap_path(*self.where),
                                               timeout=(5, 30))
        except KubeError as e:
            if e.not_found:
                self._rv = None
                return None
            raise
        self._rv = str((cm.get("metadata") or {}).get("resourceVersion") or "") or None
        return cm

    def _denied(self, e: KubeError) -> None:
        if not self._denied_logged:
            self._denied_logged = True
            assert self.where is not None
            log.warning("may not keep the record of deleted TaskFeedbacks in ConfigMap %s/%s "
                        "(%s): a deleted task's run may come back after a restart; grant "
                        "the watcher's Role of deploy/rbac.yaml", *self.where, e)

    # --- the TaskFeedbacks' deletions ---------------------------------------------------
    def source(self) -> TaskFeedbackDeletions:
        return TaskFeedbackDeletions(self)


def _decoded(cm: KubeObject) -> Deletions:
    data = cm.get("data")
    return Deletions.decode(data.get(KEY) if isinstance(data, dict) else None)


class TaskFeedbackDeletions:
    """Reflector source of the TaskFeedbacks' metadata: each deletion goes to the record. A
    relist finds the objects deleted while the watch was down (those known before that are
    not listed now, by uid)."""

    resource = "taskfeedbacks"

    def __init__(self, record: DeletionRecord) -> None:
        self.record = record
        self._known: set[TaskRef] | None = None  # by the last list and the watch since
        self._listing: set[TaskRef] = set()

    def list_begin(self) -> None:
        self._listing = set()

    def list_page(self, items: list[KubeObject]) -> None:
        for obj in items:
            task = _task(obj)
            if task is not None:
                self._listing.add(task)

    def list_done(self, resource_version: str) -> None:
        known, self._known, self._listing = self._known, self._listing, set()
        # (one deleted and made again meanwhile is listed: its deletion is not known, and
        # its new object holds what its new run said)
        for task in (known or set()) - self._known:
            self.record.seen_deleted(task)

    def watch_line(self, line: bytes) -> WatchItem:
        wtype, obj, item = object_line(line)
        task = _task(obj) if obj is not None else None
        if task is not None and self._known is not None:
            if wtype == "DELETED":
                self._known.discard(task)
                self.record.seen_deleted(task)
            elif wtype in ("ADDED", "MODIFIED"):
                self._known.add(task)
        return item


def _task(obj: Any) -> TaskRef | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    ns, name = meta.get("namespace"), meta.get("name")
    if not (isinstance(ns, str) and isinstance(name, str) and ns and name):
        return None
    return TaskRef(ns, name)
