"""References to objects (a task, a pod, any object) and the shape of an object uid: plain
values with no dependency, so the emitter's workload side uses them without loading the
payload models (``event.py`` builds and parses the Events that carry them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = re.compile(r"^[A-Za-z0-9\-]{1,64}\Z")


@dataclass(frozen=True, slots=True, order=True)
class TaskRef:
    """A task: the TaskFeedback object ``namespace/name`` (for lineage: the app or owner)."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """A pod by name and uid (the sender of an event, or a spawned pod)."""

    name: str
    uid: str
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Any Kubernetes object, used as the ``regarding`` subject of lineage events."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""


def valid_uid(uid: str) -> bool:
    """True for a string shaped like a Kubernetes object uid (what a reference may carry)."""
    return bool(_UID.match(uid))
