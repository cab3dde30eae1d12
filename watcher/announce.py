"""Transitions announced as Kubernetes Events on the TaskFeedback, where `kubectl describe`,
event exporters and alerting already look: a task that failed, a worker stalled, a pod that
waits for a reason (ImagePullBackOff, Unschedulable, ...). At most one Event per transition:
a transition is a condition's (type, reason, lastTransitionTime) in a written status, and its
Event's name is a digest of it and the object's uid, so a second create of it (after a
restart, or by a new leader) answers 409 and adds nothing.

These Events carry ``reportingController: tidings.dev/watcher``: the bus's selector and
admission policy (``tidings.dev/bus``) never see them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any, Final, NamedTuple

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.schemas.wire.constants import API_VERSION, KIND
from tidings.schemas.wire.contract import events_path
from tidings.schemas.wire.event import TaskRef
from tidings.schemas.wire.payloads import cut_text
from tidings.schemas.wire.times import format_time

log = logging.getLogger("tidings.watcher.announce")

CONTROLLER: Final = "tidings.dev/watcher"
# The conditions whose turning is news, and the status that is: (type, status).
_NEWS: Final = (("Failed", "True"), ("Stalled", "True"), ("PodsReady", "False"))
# PodsReady reasons that are no news (the task has not started, or its failure is said).
_QUIET: Final = frozenset({"PodsPending", "TaskFailed"})
# Tasks whose last announced transitions are remembered (beyond: the oldest forgotten, and
# its next write tries its creates again, which the API answers 409).
MAX_TASKS: Final = 50_000
NOTE_LIMIT: Final = 1000  # bytes of an Event's note the API server takes (1 kB)


class Transition(NamedTuple):
    """A condition that turned to news in a written status."""

    type: str
    reason: str
    message: str
    since: str  # the condition's lastTransitionTime, as written

    @property
    def key(self) -> str:
        return f"{self.type}/{self.reason}/{self.since}"


def transitions(status: dict[str, Any]) -> list[Transition]:
    """The news a status holds: a failed task, a stalled one (while it runs), a pod that
    waits for a reason."""
    out = []
    for c in status.get("conditions") or ():
        if not isinstance(c, dict) or (c.get("type"), c.get("status")) not in _NEWS:
            continue
        if c["type"] == "PodsReady" and c.get("reason") in _QUIET:
            continue
        if c["type"] == "Stalled" and status.get("phase") != "Running":
            continue
        out.append(Transition(str(c["type"]), str(c.get("reason") or c["type"]),
                              str(c.get("message") or ""), str(c.get("lastTransitionTime"))))
    return out


def event_body(task: TaskRef, uid: str, t: Transition, instance: str) -> dict[str, Any]:
    """The Event announcing ``t`` on the TaskFeedback ``task`` (uid ``uid``)."""
    digest = hashlib.sha256(f"{uid}/{t.key}".encode()).hexdigest()[:16]
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{task.name}.{digest}", "namespace": task.namespace},
        "eventTime": format_time(datetime.now(UTC)),
        "reportingController": CONTROLLER, "reportingInstance": instance[:128],
        "action": "Transition", "reason": t.reason[:128],
        "type": "Normal" if t.type == "PodsReady" and t.reason == "PodsRunning" else "Warning",
        "regarding": {"apiVersion": API_VERSION, "kind": KIND, "namespace": task.namespace,
                      "name": task.name, "uid": uid},
        "note": _note(f"{t.type}: {t.message}" if t.message else t.type),
    }


def _note(text: str) -> str:
    """``text`` cut to the note's limit, which counts UTF-8 bytes (a character: 1 to 4)."""
    limit, note = NOTE_LIMIT, cut_text(text, NOTE_LIMIT)
    while len(size := note.encode()) > NOTE_LIMIT:
        limit = limit * NOTE_LIMIT // len(size) - 1
        note = cut_text(text, limit)
    return note


class Announcer:
    """Posts each new transition of a written status once (``written``, called by the
    status writer after each write; it must not fail the write)."""

    def __init__(self, kube: Client | None, instance: str = "") -> None:
        self.kube = kube
        self.instance = instance or os.environ.get("POD_NAME") or "tidings-watcher"
        self._lock = threading.Lock()
        self._said: OrderedDict[TaskRef, frozenset[str]] = OrderedDict()

    def written(self, task: TaskRef, uid: str | None, status: dict[str, Any]) -> None:
        news = transitions(status)
        keys = frozenset(t.key for t in news)
        with self._lock:
            before = self._said.pop(task, frozenset())
            if keys:
                self._said[task] = keys
                while len(self._said) > MAX_TASKS:
                    self._said.popitem(last=False)
        if self.kube is None or not uid:
            return
        for t in news:
            if t.key in before:
                continue
            try:
                self.kube.request("POST", events_path(task.namespace),
                                  body=event_body(task, uid, t, self.instance),
                                  timeout=(3, 10))
            except KubeError as e:
                if e.status != 409:  # (409: announced before, by this term or another)
                    log.warning("cannot announce %s on %s/%s: %s", t.reason, task.namespace,
                                task.name, e)
