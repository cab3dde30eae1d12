"""Where each task's pods are, from the pod watches: those running now (since when, on which
node) and those stuck being created (since when). The fold reads them: running pods make a
task that has not spoken Running, a pod stuck in creation is explained by the kubelet's
Events about it (``kubelet_events.py``), and a running pod on a node that is not Ready is a
worker on a lost node (``nodes.py``). Kept by ``Senders`` beside its pod cache, under its
lock; a pod that is neither running nor being created costs nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from tidings._compat import UTC
from tidings.schemas.engine.observed import NodeLoss, PodVerdict, lost_on_node
from tidings.schemas.wire.event import TaskRef
from tidings.schemas.wire.times import parse_time

PodKey = tuple[str, str, str]  # namespace, name, uid
_Since = dict[TaskRef, dict[PodKey, datetime]]


def runs_since(obj: object, verdict: PodVerdict | None) -> datetime | None:
    """When the pod started, if it runs: its phase is Running and no container waits for a
    reason (a crash loop's pod is Running by its phase, its container is not)."""
    status = obj.get("status") if isinstance(obj, dict) else None
    if verdict is not None or not isinstance(status, dict) or status.get("phase") != "Running":
        return None
    return (parse_time(status.get("startTime")) or datetime.now(UTC)).replace(microsecond=0)


def node_of(obj: object) -> str:
    """The node a pod is bound to ("": none yet)."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return node[:253] if isinstance(node, str) else ""


def _set_since(by_task: _Since, key: PodKey, task: TaskRef, since: datetime | None) -> bool:
    """Keep the pod in its task's map (since ``since``), or not (None); whether that
    changed."""
    pods = by_task.get(task)
    if (pods.get(key) if pods is not None else None) == since:
        return False
    if since is not None:
        by_task.setdefault(task, {})[key] = since
    else:
        assert pods is not None
        del pods[key]
        if not pods:
            del by_task[task]
    return True


class Placements:
    """Not thread-safe on its own: ``Senders`` calls it under its lock."""

    def __init__(self) -> None:
        self._running: _Since = {}
        self._creating: _Since = {}
        # The node of each running pod, and the running pods of each node with their task.
        self._node_of: dict[PodKey, str] = {}
        self._on_node: dict[str, dict[PodKey, TaskRef]] = {}

    def update(self, key: PodKey, task: TaskRef, *, running: datetime | None = None,
               creating: datetime | None = None, node: str = "") -> bool:
        """The pod ``key`` of ``task`` as its object reads now (None, "": not so); whether
        its task's running or creating pods changed."""
        self._place(key, task, node if running is not None else "")
        return _set_since(self._running, key, task, running) | _set_since(
            self._creating, key, task, creating)

    def forget(self, key: PodKey, task: TaskRef) -> None:
        """The pod is gone."""
        self.update(key, task)

    def _place(self, key: PodKey, task: TaskRef, node: str) -> None:
        before = self._node_of.get(key, "")
        if before == node:
            return
        if before:
            on = self._on_node[before]
            on.pop(key, None)
            if not on:
                del self._on_node[before]
            del self._node_of[key]
        if node:
            self._node_of[key] = node
            self._on_node.setdefault(node, {})[key] = task

    def creating(self, task: TaskRef) -> list[tuple[PodKey, datetime]]:
        """The pods of ``task`` being created now, and since when."""
        return list(self._creating.get(task, {}).items())

    def tasks_on(self, node: str) -> set[TaskRef]:
        """The tasks of the pods running on ``node``."""
        return set(self._on_node.get(node, {}).values())

    def running(self, task: TaskRef, lost: Callable[[str], NodeLoss | None]
                ) -> tuple[int, datetime | None]:
        """How many pods of ``task`` run now on a node that is Ready, and the earliest of
        their starts."""
        pods = [since for k, since in self._running.get(task, {}).items()
                if lost(self._node_of.get(k, "")) is None]
        return (len(pods), min(pods)) if pods else (0, None)

    def on_lost_nodes(self, task: TaskRef, lost: Callable[[str], NodeLoss | None]
                      ) -> list[PodVerdict]:
        """The pods of ``task`` still Running on a node that is not Ready, as waiting
        (NodeLost) verdicts."""
        now = datetime.now(UTC)
        out = []
        for key in self._running.get(task, ()):
            node = self._node_of.get(key, "")
            loss = lost(node) if node else None
            if loss is not None:
                out.append(lost_on_node(key[1], key[2], node, loss, now))
        return out
