"""Which run of a task its facts fold into: the TaskFeedback is read when the task is new to
this watcher (``seed``), when events name a uid that is not its object's (``check_object``:
a re-created object starts from its own status), and while its owner has been replaced by
a new object of the same name (``same_run``: the new run waits for the garbage collector to
delete the old run's TaskFeedback). Every method returns False when the API could not tell
(the fold tries again later).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tidings.kube import Client, KubeError
from tidings.schemas.wire.contract import taskfeedback_path
from tidings.schemas.wire.event import ObjectRef, TaskRef

from .health_clock import HealthClock
from .logs import task_fields
from .platform import PlatformTasks
from .senders import Senders
from .store import Store
from .writer import controller_of

log = logging.getLogger("tidings.watcher")

# How long the facts of a new run wait for the garbage collector to delete the TaskFeedback
# of the object it replaced (it takes seconds where kube-controller-manager runs).
GC_GRACE_S = 60


class Runs:
    """The reads of a task's TaskFeedback that decide which state its facts fold into; called
    by the fold workers (one per task at a time)."""

    def __init__(self, kube: Client | None, store: Store, platform: PlatformTasks,
                 senders: Senders, health: HealthClock) -> None:
        self.kube = kube
        self.store = store
        self.platform = platform
        self.senders = senders
        self.health = health
        # Tasks whose TaskFeedback is owned by an object a newer one of that name replaced:
        # since when their new run's facts wait for the garbage collector to delete it.
        self._replaced: dict[TaskRef, float] = {}

    def _read(self, task: TaskRef, doing: str = "") -> tuple[bool, Any]:
        """(True, the TaskFeedback, or None when there is none), or (False, None) when the
        API could not tell (logged as what we were ``doing``, if said)."""
        assert self.kube is not None
        try:
            return True, self.kube.request(
                "GET", taskfeedback_path(task.namespace, task.name), timeout=(5, 30))
        except KubeError as e:
            if e.not_found:
                return True, None
            if doing:
                log.warning("cannot %s %s/%s: %s", doing, task.namespace, task.name, e,
                            extra=task_fields(task))
            return False, None

    def seed(self, task: TaskRef) -> bool:
        """Load a task that is new to this watcher (or was evicted) from its TaskFeedback, so
        its fold continues the persisted state."""
        told, obj = self._read(task, "load")
        if not told:
            return False
        if obj is None:
            self.store.load(task, None, exists=False)
            return True
        meta = _meta(obj)
        self.health.schedule(task, self.store.load(
            task, obj.get("status"), rv=meta.get("resourceVersion"), uid=meta.get("uid"),
            owner=controller_of(obj)))
        return True

    def check_object(self, task: TaskRef, claimed: set[str]) -> bool:
        """Pending events name TaskFeedback uids the state does not belong to: read the object
        once. A re-created one (another uid) replaces the state, which starts from its status;
        every claimed uid that is not the object's is stale from then on (uids are never
        reused)."""
        told, obj = self._read(task, "read")
        if not told:
            return False
        meta = _meta(obj)
        now = str(meta.get("uid") or "") or None
        uid, _, _ = self.store.identity(task)
        if obj is None and uid is not None:
            owner = self.store.owner(task)
            self.store.absent(task, new_run=owner is not None
                              and self.platform.verify(owner) is False)
        elif obj is not None and now is not None and now != uid:
            if uid is not None:
                log.info("taskfeedback %s/%s is a new object (uid %s): its state starts from "
                         "its own status", task.namespace, task.name, now,
                         extra=task_fields(task))
            # As the writer's re-read does: a state of no object yet joins this one, a state
            # of a deleted one is replaced by its status (unwritten facts naming no uid kept).
            self.store.rebase(task, obj.get("status"), meta.get("resourceVersion"), now,
                              controller_of(obj))
        self.store.stale(task, {u for u in claimed if u != now})
        return True

    def same_run(self, task: TaskRef) -> bool:
        """False while the task's TaskFeedback is owned by an object that a live one of the
        same kind and name replaced (``kubectl replace --force``, a CI re-run): it is the
        earlier run's, which the garbage collector deletes with its owner; the new run's
        facts wait for that (at most ``GC_GRACE_S``), then go to a new TaskFeedback owned by
        the new object. True when the facts may be folded now."""
        owner = self.store.owner(task)
        if owner is None:
            return True
        if not self._replaced_by_a_live_one(task, owner):
            self._replaced.pop(task, None)
            return True
        kind, name, uid = owner.kind, owner.name, owner.uid
        told, obj = self._read(task)
        if not told:
            return False
        if obj is None:
            log.info("taskfeedback %s/%s of the replaced %s %s is gone: a new run", task.namespace,
                     task.name, kind, name, extra=task_fields(task))
            self.store.absent(task, new_run=True)
            self._replaced.pop(task, None)
            return True
        meta = _meta(obj)
        if controller_of(obj) != owner:  # changed meanwhile: take it in, decide again
            self.store.rebase(task, obj.get("status"), meta.get("resourceVersion"),
                              meta.get("uid"), controller_of(obj))
            return False
        since = self._replaced.setdefault(task, time.monotonic())
        if time.monotonic() - since < GC_GRACE_S:
            return False
        log.warning("taskfeedback %s/%s is still owned by the replaced %s %s (uid %s) after "
                    "%ds: is the garbage collector running? folding the new run into it",
                    task.namespace, task.name, kind, name, uid, GC_GRACE_S,
                    extra=task_fields(task))
        del self._replaced[task]
        # (as if unowned from now on: this object takes the new run's facts)
        self.store.rebase(task, obj.get("status"), meta.get("resourceVersion"),
                          meta.get("uid"), None)
        return True

    def _replaced_by_a_live_one(self, task: TaskRef, owner: ObjectRef) -> bool:
        """A sender of the pending facts claims a live object of the owner's kind and name
        with another uid."""
        senders = {id(ev.sender): ev for ev in self.store.pending(task)}
        for ev in senders.values():
            info = self.senders.pod_task(task, ev.sender)
            o = self.platform.claimed(info, ev.sender.name) if info is not None else None
            if isinstance(o, ObjectRef) and (o.kind, o.name) == (owner.kind, owner.name) \
                    and o.uid != owner.uid and self.platform.verify(o) is True:
                return True
        return False


def _meta(obj: Any) -> Any:
    return (obj or {}).get("metadata") or {}
