"""TTL after finished: delete finished TaskFeedbacks that nobody owns, like a Job's
``ttlSecondsAfterFinished``, together with their bus events.

A TaskFeedback with an ownerReference is left to the garbage collector (it goes with its
owner). An unowned one is deleted once its task is finished and no fact has arrived for
``ttl`` seconds, on the API server's clock: since the newest creationTimestamp of its
folded events (the status keeps it per emitter instance), else the object's own; never the
senders' eventTime, which a worker whose clock is behind would put in the past. The
watcher then refuses the late facts of that run (``Store.bury``). The delete carries uid and
resourceVersion preconditions, so a TaskFeedback that changed since it was read (a late
fact, an owner added) survives this sweep. Its bus events are deleted with it: while they
lived (1 h by default), a relist after a restart would otherwise fold them again and bring
the TaskFeedback back.

The events go first, the object last: a watcher that stops between the two leaves a
finished TaskFeedback that the next sweep deletes, never events without their object (the
other order, after a crash, let a restarted watcher fold them into a new TaskFeedback). An
event that lands meanwhile and is folded changes the object, so its delete fails its
precondition and the object, holding that fact, waits for a later sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import cast

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.kube.objects import TaskFeedback
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.decoder import decode_status, read_status
from tidings.schemas.wire.contract import (
    events_path,
    pod_facts_selector,
    task_selector,
    taskfeedback_path,
)
from tidings.schemas.wire.event import TaskRef
from tidings.schemas.wire.times import from_epoch, parse_time

log = logging.getLogger("tidings.watcher.ttl")


def finished(state: TaskState) -> bool:
    """The task is over (Succeeded or Failed)."""
    # TaskState.finished arrives with the status phases; until then a final progress is it.
    over = getattr(state, "finished", None)
    return bool(state.completed if over is None else over)


def expired(obj: TaskFeedback, now: datetime, ttl: float) -> TaskState | None:
    """The state of ``obj`` when it is unowned, finished and idle for ``ttl``, else None."""
    meta = obj.get("metadata") or {}
    if meta.get("ownerReferences") or meta.get("deletionTimestamp"):
        return None
    task = TaskRef(str(meta.get("namespace", "")), str(meta.get("name", "")))
    state, unread = read_status(task, obj.get("status"))
    if unread.partial or not finished(state):  # (partly unreadable: not known to be over)
        return None
    since = last_fact_received(state, parse_time(meta.get("creationTimestamp")))
    if since is None or (now - since).total_seconds() < ttl:
        return None
    return state


def last_fact_received(state: TaskState, created: datetime | None) -> datetime | None:
    """When the API server received the task's newest folded fact (its creationTimestamp),
    else when it created the object: server stamps only."""
    newest = max(state.instance_times.values(), default=None)
    stamps = [t for t in (created, None if newest is None else from_epoch(newest))
              if t is not None]
    return max(stamps, default=None)


class TtlSweeper:
    """One sweep lists the TaskFeedbacks under ``paths`` and deletes the expired ones."""

    def __init__(self, kube: Client, paths: list[str], ttl: float,
                 on_deleted: Callable[[TaskRef, str, TaskState], object],
                 pods_of: Callable[[TaskRef], list[str]] = lambda task: []) -> None:
        self.kube, self.paths, self.ttl, self.on_deleted = kube, paths, ttl, on_deleted
        # The pods whose labels name a task (the pod cache's), beside those its status lists
        # (capped at 128, and the first thing the byte budget drops).
        self.pods_of = pods_of

    @property
    def interval(self) -> float:
        """Seconds between sweeps: a fraction of the TTL, at least 1 s, at most a minute."""
        return min(60.0, max(1.0, self.ttl / 4))

    def sweep(self, now: datetime | None = None) -> int:
        now = now or datetime.now(UTC)
        deleted = 0
        for obj in self._items():
            state = expired(obj, now, self.ttl)
            if state is not None and self._delete(obj, state):
                deleted += 1
        return deleted

    def _items(self) -> Iterator[TaskFeedback]:
        for path in self.paths:
            for page in self.kube.pages(path, timeout=(5, 60)):
                yield from cast("list[TaskFeedback]", page.get("items") or [])

    def _delete(self, obj: TaskFeedback, state: TaskState | None = None) -> bool:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        task = TaskRef(ns, name)
        if state is None:
            state = decode_status(task, obj.get("status"))
        # Its events first (see the module docstring): a transient failure leaves both for
        # the next sweep; a lasting one (no right to delete events) is logged and the object
        # goes anyway, as the TTL promises.
        failed = self.delete_events(task, state.pods)
        if failed is not None and not failed.denied:
            return False
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {
            "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
        try:
            self.kube.request("DELETE", taskfeedback_path(ns, name), body=body,
                              timeout=(5, 30))
        except KubeError as e:
            if e.not_found or e.conflict:  # gone already, or changed since listed: next sweep
                return False
            raise
        log.info("deleted finished taskfeedback %s/%s (ttl %gs)", ns, name, self.ttl)
        self.on_deleted(task, str(meta.get("uid") or ""), state)
        return True

    def delete_events(self, task: TaskRef, pods: Sequence[tuple[str, str]] = ()
                      ) -> KubeError | None:
        """Delete the task's bus events (before its TaskFeedback, and again after a late fact
        of the deleted run): a relist after a restart finds nothing to fold it back from.
        With them go the facts its reporting ``pods`` (name, uid) sent about themselves,
        folded into it by their labels. Returns the error of a delete that failed."""
        names = sorted({pod for pod, _ in pods} | set(self.pods_of(task)))
        selectors = [task_selector(task.name)] + [pod_facts_selector(pod) for pod in names]
        for selector in selectors:
            try:
                self.kube.request("DELETE", events_path(task.namespace),
                                  query=[("fieldSelector", selector)], timeout=(5, 60))
            except KubeError as e:  # they expire anyway; a relist may recreate it meanwhile
                log.warning("cannot delete the bus events of %s/%s: %s", task.namespace,
                            task.name, e)
                return e
        return None
