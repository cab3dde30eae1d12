"""TTL after finished: delete finished TaskFeedbacks that nobody owns, like a Job's
``ttlSecondsAfterFinished``, together with their bus events.

A TaskFeedback with an ownerReference is left to the garbage collector (it goes with its
owner). An unowned one is deleted once its task is finished and no fact has arrived for
``ttl`` seconds (its last event time, else its creation time). The delete carries uid and
resourceVersion preconditions, so a TaskFeedback that changed since it was read (a late
fact, an owner added) survives this sweep. Its bus events are deleted with it: while they
lived (1 h by default), a relist after a restart would otherwise fold them again and bring
the TaskFeedback back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import cast

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.kube.objects import TaskFeedback
from tidings.schemas.contract import (
    events_path,
    pod_facts_selector,
    task_selector,
    taskfeedback_path,
)
from tidings.schemas.event import TaskRef
from tidings.schemas.state import TaskState
from tidings.schemas.times import parse_time

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
    state = TaskState.from_status(task, obj.get("status"))
    if not finished(state):
        return None
    since = state.last_event_time or parse_time(meta.get("creationTimestamp"))
    if since is None or (now - since).total_seconds() < ttl:
        return None
    return state


class TtlSweeper:
    """One sweep lists the TaskFeedbacks under ``paths`` and deletes the expired ones."""

    def __init__(self, kube: Client, paths: list[str], ttl: float,
                 on_deleted: Callable[[TaskRef], object]) -> None:
        self.kube, self.paths, self.ttl, self.on_deleted = kube, paths, ttl, on_deleted

    @property
    def interval(self) -> float:
        """Seconds between sweeps: a fraction of the TTL, at least 1 s, at most a minute."""
        return min(60.0, max(1.0, self.ttl / 4))

    def sweep(self, now: datetime | None = None) -> int:
        now = now or datetime.now(UTC)
        deleted = 0
        for obj in self._items():
            if expired(obj, now, self.ttl) is not None and self._delete(obj):
                deleted += 1
        return deleted

    def _items(self) -> Iterator[TaskFeedback]:
        for path in self.paths:
            for page in self.kube.pages(path, timeout=(5, 60)):
                yield from cast("list[TaskFeedback]", page.get("items") or [])

    def _delete(self, obj: TaskFeedback) -> bool:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
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
        self.on_deleted(TaskRef(ns, name))
        # Its events: those about the TaskFeedback, and those its pods sent about themselves
        # (folded into it by their labels), or a relist would bring it back all the same.
        pods = TaskState.from_status(TaskRef(ns, name), obj.get("status")).pods
        selectors = [task_selector(name)] + [pod_facts_selector(pod) for pod, _ in pods]
        for selector in selectors:
            try:
                self.kube.request("DELETE", events_path(ns), query=[("fieldSelector", selector)],
                                  timeout=(5, 60))
            except KubeError as e:  # they expire anyway; a relist may recreate it meanwhile
                log.warning("cannot delete the bus events of %s/%s: %s", ns, name, e)
                break
        return True
