"""What the watcher knows of platform tasks (a Job, JobSet, TrainJob, Workflow named by its
pods' labels): the objects themselves, read through one list+watch per kind and watched
namespace (``sources``; a kind whose CRD is not installed, or that the watcher may not read,
is tried again quietly), so that

- an owner a pod claims (its Job's ``controller-uid``, its controller ownerReference, a
  JobSet's uid label, or its Job's controller ownerReference, ``claimed``) is believed only
  for the live object with that uid (``verify``): a forged uid, or the uid of a deleted object
  whose name a new one took, is refused;
- the TaskFeedback is created owned by that verified object (``owner``);
- the object's own outcome, as its controller reports it, decides the task it owns
  (``outcome``; schemas/engine/observed.py reads it);
- a batch/v1 Job's ``spec.completions`` is its task's worker count (``completions``);
- an object that is the outermost platform object of a task (``Seen.root``: no JobSet or
  TrainJob controls it, and its pod template names no task by a key read before its own)
  makes that task exist before any of its pods speaks (``root``): owned by it, decided by
  it.

A cache miss (an object newer than its watch's last event, a kind no watch covers, such as
training-operator's jobs) reads the object once (cached briefly): never a GET per event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from tidings.kube import Client, KubeError
from tidings.kube.objects import KubeObject
from tidings.schemas.engine.admission import Retry
from tidings.schemas.engine.observed import PlatformOutcome, platform_outcome
from tidings.schemas.wire.constants import WORKERS_MAX
from tidings.schemas.wire.event import ObjectRef, TaskRef, WatchItem
from tidings.schemas.wire.platform import (
    DEFAULT_TASK_KEYS,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    TRAINJOB_LABEL,
    WORKFLOW_LABEL,
    PodTask,
    jobset_of,
)
from tidings.schemas.wire.rejection import Rejection, RejectReason

from .interning import Interner
from .reflector import object_line
from .tracking import OFF, Tracking

log = logging.getLogger("tidings.watcher.platform")

# Tasks whose verified owner is remembered (beyond: the oldest is forgotten, and a
# TaskFeedback created after that is simply unowned).
MAX_TASKS = 50_000
# How long a direct read of an object (a cache miss) is trusted.
READ_TTL_S = 10.0
# How old a read may be that refuses a claim (at most one read per object a second).
FRESH_S = 1.0
_UNREADABLE: Final = object()  # such objects cannot be read here (not served, forbidden)


@dataclass(frozen=True, slots=True)
class PlatformKind:
    """A kind of platform object the watcher watches: where it lives, and the pod label
    key that names the task it is."""

    api_version: str
    kind: str
    plural: str
    key: str

    def path(self, namespace: str | None = None, name: str = "") -> str:
        group = "/api" if "/" not in self.api_version else "/apis"
        base = f"{group}/{self.api_version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


JOB: Final = PlatformKind("batch/v1", "Job", "jobs", JOB_NAME_LABEL)
JOBSET: Final = PlatformKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", JOBSET_NAME_LABEL)
WORKFLOW: Final = PlatformKind("argoproj.io/v1alpha1", "Workflow", "workflows", WORKFLOW_LABEL)
TRAINJOB: Final = PlatformKind("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs",
                               TRAINJOB_LABEL)
PLATFORM_KINDS: Final = (JOB, JOBSET, WORKFLOW, TRAINJOB)
_BY_KIND: Final = {k.kind: k for k in PLATFORM_KINDS}


@dataclass(frozen=True, slots=True)
class Seen:
    """One platform object as the watcher keeps it: its uid, its controller ownerReference
    (a JobSet's Job: the JobSet; a TrainJob's JobSet: the TrainJob), a Job's completions, and
    its outcome (None: its controller has not reported on it yet); ``root``: it is the
    outermost platform object of the task of its name (``_is_root``)."""

    uid: str
    controller: ObjectRef | None
    completions: int | None
    outcome: PlatformOutcome | None
    root: bool = False


# The kinds whose objects make others part of their task (a JobSet's Jobs, a TrainJob's
# JobSet): an object they control is never a task of its own.
_PARENT_KINDS: Final = frozenset({("jobset.x-k8s.io", "JobSet"),
                                  ("trainer.kubeflow.org", "TrainJob")})


def _templates(kind: PlatformKind, obj: object) -> list[object]:
    """The pod templates' labels of a Job or a JobSet (its replicated Jobs')."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict):
        return []
    jobs = [spec] if kind is JOB else [
        (rj.get("template") or {}).get("spec") for rj in spec.get("replicatedJobs") or []
        if isinstance(rj, dict) and isinstance(rj.get("template"), dict)]
    out: list[object] = []
    for job in jobs:
        template = job.get("template") if isinstance(job, dict) else None
        meta = template.get("metadata") if isinstance(template, dict) else None
        out.append(meta.get("labels") if isinstance(meta, dict) else None)
    return out


def _is_root(kind: PlatformKind, obj: object, controller: ObjectRef | None,
             keys: tuple[str, ...]) -> bool:
    """Whether the object is the task its name names, as its pods' labels will say (the
    first of ``keys`` they carry): not when a JobSet or TrainJob controls it (its pods name
    that one's task), nor when its pod template carries a key read before its own (its pods
    name that task: it is found from them), nor when its own key is not read at all."""
    if kind.key not in keys:
        return False
    if controller is not None and (controller.api_version.split("/")[0],
                                   controller.kind) in _PARENT_KINDS:
        return False
    before = keys[:keys.index(kind.key)]
    return not any(isinstance(labels, dict) and any(k in labels for k in before)
                   for labels in _templates(kind, obj))


def _seen(kind: PlatformKind, obj: object, keys: tuple[str, ...] = DEFAULT_TASK_KEYS,
          tracking: Tracking = OFF, intern: Callable[[str], str] = str
          ) -> tuple[tuple[str, str], Seen] | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    if not (isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str)):
        return None
    ns = intern(ns)
    controller = None
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True and all(
                isinstance(ref.get(f), str) for f in ("apiVersion", "kind", "name", "uid")):
            controller = ObjectRef(ref["apiVersion"][:253], ref["kind"][:63], ref["name"][:253],
                                   ns, ref["uid"][:64])
    completions = None
    if kind is JOB:
        spec = obj.get("spec") if isinstance(obj, dict) else None
        raw = spec.get("completions") if isinstance(spec, dict) else None
        completions = min(raw, WORKERS_MAX) if type(raw) is int and raw > 0 else None
    return (ns, name), Seen(uid, controller, completions,
                            platform_outcome(kind.api_version, kind.kind, obj),
                            tracking.selects(ns, meta.get("labels"))
                            and _is_root(kind, obj, controller, keys))


class ObjectSource:
    """The reflector source of one platform kind in one namespace (or all), feeding the
    cache of ``PlatformTasks``. A relist forgets the objects it no longer lists."""

    def __init__(self, platform: PlatformTasks, kind: PlatformKind) -> None:
        self.platform, self.kind = platform, kind
        self.resource = kind.plural
        self._mine: set[tuple[str, str]] = set()
        self._listed: set[tuple[str, str]] = set()

    def list_begin(self) -> None:
        self._listed = set()

    def list_page(self, items: list[KubeObject]) -> None:
        self.platform.served(self.kind, True)
        for obj in items:
            got = _seen(self.kind, obj, self.platform.keys, self.platform.tracking,
                        self.platform.intern)
            if got is not None:
                self._listed.add(got[0])
                self.platform.put(self.kind, *got)

    def list_done(self, resource_version: str) -> None:
        for key in self._mine - self._listed:
            self.platform.delete(self.kind, key)
        self._mine, self._listed = set(self._listed), set()  # (a copy is half the size)

    def watch_line(self, line: bytes) -> WatchItem:
        wtype, obj, item = object_line(line)
        got = None if obj is None else _seen(self.kind, obj, self.platform.keys,
                                             self.platform.tracking, self.platform.intern)
        if got is not None and wtype in ("ADDED", "MODIFIED"):
            self._mine.add(got[0])
            self.platform.put(self.kind, *got)
        elif got is not None and wtype == "DELETED":
            self._mine.discard(got[0])
            self.platform.delete(self.kind, got[0])
        return item

    def quiet(self, err: Exception) -> bool:
        """A kind that is not served here (no CRD: 404) or that the watcher may not read
        (403) is said once, not at every retry."""
        if isinstance(err, KubeError) and (err.not_found or err.denied):
            self.platform.served(self.kind, False, err)
            return True
        return False


class PlatformTasks:
    """Thread-safe: the reflectors put, the fold workers verify and learn, the status writers
    ask for owners. ``on_change(task)``: an object's outcome (or uid) changed (on the watch
    loop: must be cheap)."""

    def __init__(self, kube: Client | None,
                 on_change: Callable[[TaskRef], None] = lambda task: None,
                 keys: tuple[str, ...] = DEFAULT_TASK_KEYS, tracking: Tracking = OFF) -> None:
        self.kube = kube
        self.on_change = on_change
        self.keys, self.tracking = keys, tracking
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str, str], Seen] = {}  # (kind, namespace, name)
        self.intern = Interner()  # (the namespaces: one copy each)
        self._served: dict[str, bool] = {}
        # A direct read's answer (a cache miss): (kind, namespace, name) -> (until, the
        # object, or None when there is none), trusted READ_TTL_S.
        self._fetched: dict[tuple[str, str, str], tuple[float, Seen | None]] = {}
        # Per task: the pod claim the watcher verified last (its owner, its key, its Job).
        self._claims: OrderedDict[TaskRef, PodTask] = OrderedDict()

    def sources(self) -> list[ObjectSource]:
        """One informer source per platform kind."""
        return [ObjectSource(self, k) for k in PLATFORM_KINDS]

    # --- the cache --------------------------------------------------------------------
    def put(self, kind: PlatformKind, key: tuple[str, str], seen: Seen) -> None:
        ns, name = key
        with self._lock:
            before = self._objects.get((kind.kind, ns, name))
            if before != seen:  # (an update that changes nothing keeps the copy held)
                self._objects[(kind.kind, ns, name)] = seen
            self._fetched.pop((kind.kind, ns, name), None)
        if before is None or before.uid != seen.uid or before.outcome != seen.outcome:
            self.on_change(TaskRef(ns, name))

    def delete(self, kind: PlatformKind, key: tuple[str, str]) -> None:
        ns, name = key
        with self._lock:
            gone = self._objects.pop((kind.kind, ns, name), None)
        if gone is not None:
            self.on_change(TaskRef(ns, name))

    def served(self, kind: PlatformKind, served: bool, err: Exception | None = None) -> None:
        with self._lock:
            was = self._served.get(kind.kind)
            self._served[kind.kind] = served
        if was is not served and not served:
            log.info("%s not readable here (%s): pods claiming one are not believed, and its "
                     "tasks follow their workers (a CRD installed later is picked up)",
                     kind.plural, err)

    # --- owners ---------------------------------------------------------------------
    def verify(self, ref: ObjectRef) -> bool | Retry | None:
        """Whether a live object is ``ref`` (kind, namespace, name and uid): True; False when
        the object of that name has another uid or none exists (a forged claim, or one of a
        deleted object whose name a new one took); None when the watcher cannot read such
        objects (that kind is not served, or not readable: the claim is then neither believed
        nor refused); Retry.LATER when the API cannot answer now."""
        got = self._object(ref.kind, ref.namespace, ref.name, ref.api_version)
        if isinstance(got, Seen) and got.uid == ref.uid:
            return True
        # A refusal is for good: it rests on a read of this second, never on a watch that
        # may not have delivered the new object yet (a Job replaced, its pod already up).
        got = self._object(ref.kind, ref.namespace, ref.name, ref.api_version, fresh=True)
        if got is Retry.LATER or got is _UNREADABLE:
            return None if got is _UNREADABLE else Retry.LATER
        return isinstance(got, Seen) and got.uid == ref.uid

    def _object(self, kind_name: str, namespace: str, name: str, api_version: str,
                fresh: bool = False) -> Seen | object | None:
        """The object from the watch cache, else read once (kept READ_TTL_S; ``fresh``: the
        read, kept FRESH_S at most): a Seen, None when there is no such object,
        ``_UNREADABLE`` when such objects cannot be read here (not served, forbidden), or
        Retry.LATER."""
        key = (kind_name, namespace, name)
        with self._lock:
            seen = self._objects.get(key)
            fetched = self._fetched.get(key)
        if seen is not None and (not fresh or self.kube is None):  # (no API: all there is)
            return seen
        if fetched is not None and fetched[0] > time.monotonic() + (
                READ_TTL_S - FRESH_S if fresh else 0):
            return fetched[1]
        got = self._get(kind_name, namespace, name, api_version)
        if got is Retry.LATER or got is _UNREADABLE:
            return got
        assert got is None or isinstance(got, Seen)
        with self._lock:
            if len(self._fetched) >= MAX_TASKS:
                now = time.monotonic()
                self._fetched = {k: v for k, v in self._fetched.items() if v[0] > now}
            self._fetched[key] = (time.monotonic() + READ_TTL_S, got)
        return got

    def _get(self, kind_name: str, namespace: str, name: str, api_version: str) -> object:
        kind = _BY_KIND.get(kind_name)
        if self.kube is None:
            return _UNREADABLE
        if kind is not None and kind.api_version == api_version:
            if self._served.get(kind.kind) is False:
                return _UNREADABLE
            path = kind.path(namespace, name)
        else:
            kind = PlatformKind(api_version, kind_name, "", "")
            found = self._discover(api_version, kind_name, namespace, name)
            if found is None:
                return _UNREADABLE
            path = found
        try:
            obj: Any = self.kube.request("GET", path, timeout=(3, 10))
        except KubeError as e:
            if e.retryable:
                return Retry.LATER
            return None if e.not_found else _UNREADABLE
        got = _seen(kind, obj, self.keys, self.tracking)
        return None if got is None else got[1]

    def _discover(self, api_version: str, kind: str, namespace: str, name: str) -> str | None:
        """The path of an object of a kind no watch covers (such as training-operator's
        PyTorchJob), its resource name read from the API's discovery; None when the API does
        not serve that kind (or may not be asked)."""
        assert self.kube is not None
        group = "/api" if "/" not in api_version else "/apis"
        try:
            found: Any = self.kube.request("GET", f"{group}/{api_version}", timeout=(3, 10))
        except KubeError:
            return None
        for res in (found.get("resources") if isinstance(found, dict) else None) or []:
            if isinstance(res, dict) and res.get("kind") == kind \
                    and "/" not in str(res.get("name")) and res.get("namespaced") is True:
                return f"{group}/{api_version}/namespaces/{namespace}/{res['name']}/{name}"
        return None

    def claimed(self, info: PodTask, pod: str) -> ObjectRef | Rejection | Retry | None:
        """The owner a pod's labels claim for its task: the one it shows (``info.owner``), or
        the controller of the Job that controls it (``info.via``: a JobSet that labels no uid
        on its pods), that Job verified first and read from the Jobs' watch. A Rejection when
        that Job is no live one (a forged chain); None when there is no claim, or it cannot be
        read here."""
        if info.owner is not None or info.via is None:
            return info.owner
        job = info.via
        verified = self.verify(job)
        if verified is not True:
            return self._refusal(job, pod) if verified is False else verified
        seen = self._object(JOB.kind, job.namespace, job.name, JOB.api_version)
        if not isinstance(seen, Seen) or seen.uid != job.uid:
            return None  # (deleted since it was verified: the next fact checks again)
        return jobset_of(info.task, job.namespace, seen.controller)

    def check_claim(self, task: TaskRef, info: PodTask | None, pod: str
                    ) -> Rejection | Retry | None:
        """The owner a pod of ``task`` claims (``info``, its labels; ``claimed``) is believed
        only for the live object with that uid: then it is learned (it owns the TaskFeedback
        and decides the task); a claim no live object bears is a Rejection (the pod's facts
        are refused); None when there is no claim, or it cannot be checked here."""
        if info is None:
            return None
        o = self.claimed(info, pod)
        if not isinstance(o, ObjectRef):
            return o
        verified = self.verify(o)
        if verified is Retry.LATER:
            return Retry.LATER
        if verified is False:
            return self._refusal(o, pod)
        if verified is True:
            self.learn(task, info if info.owner == o else replace(info, owner=o))
        return None

    @staticmethod
    def _refusal(o: ObjectRef, pod: str) -> Rejection:
        return Rejection.of(RejectReason.UNVERIFIED_OWNER,
                            f"pod {pod} claims {o.kind} {o.name} uid {o.uid}, which no live "
                            f"{o.kind} has (forged, or a deleted one's)")

    def learn(self, task: TaskRef, info: PodTask) -> None:
        """A pod whose claim on ``task``'s owner was verified (``verify``): the TaskFeedback
        is created owned by it, and its outcome decides the task. The latest wins (a new
        object of the name is a new run)."""
        if info.owner is None:
            return
        with self._lock:
            self._claims[task] = info
            self._claims.move_to_end(task)
            while len(self._claims) > MAX_TASKS:
                self._claims.popitem(last=False)

    def root(self, task: TaskRef) -> tuple[PlatformKind, Seen] | None:
        """The watched object that is ``task`` itself (``Seen.root``), before any pod of it
        spoke: of the kinds in the order their keys are read, the first with an object of
        the task's name."""
        with self._lock:
            for kind in sorted(PLATFORM_KINDS, key=lambda k: self.keys.index(k.key)
                               if k.key in self.keys else len(self.keys)):
                seen = self._objects.get((kind.kind, task.namespace, task.name))
                if seen is not None and seen.root and self.tracking.fresh(
                        seen.outcome.at if seen.outcome and seen.outcome.terminal else None):
                    return kind, seen
        return None

    def owner(self, task: TaskRef) -> ObjectRef | Retry | None:
        """The live object the TaskFeedback of ``task`` is created owned by, if known: the
        task's own platform object (the outermost: a TrainJob, not its JobSet), else a pod's
        verified claim; Retry.LATER when the API cannot tell now (the create waits: an owner
        missed at the create is missed for good)."""
        root = self.root(task)
        if root is not None:
            kind, seen = root
            return ObjectRef(kind.api_version, kind.kind, task.name, task.namespace, seen.uid)
        with self._lock:
            info = self._claims.get(task)
        if info is None or info.owner is None:
            return None
        verified = self.verify(info.owner)
        if verified is Retry.LATER:
            return Retry.LATER
        return info.owner if verified is True else None

    def outcome(self, task: TaskRef) -> PlatformOutcome | None:
        """The outcome of the verified platform object that owns ``task`` (a Job, JobSet,
        Workflow or TrainJob, the one its pods' first task key names), as its controller
        reports it; None when none does, or its controller has not reported yet."""
        with self._lock:
            info = self._claims.get(task)
        if info is None or info.owner is None:
            root = self.root(task)  # (no pod of it spoke yet: the object itself decides)
            return None if root is None else root[1].outcome
        o = info.owner
        deciding = next((k for k in PLATFORM_KINDS if k.key == info.key), None)
        owner = self._object(o.kind, task.namespace, o.name, o.api_version)
        if deciding is None or not isinstance(owner, Seen) or owner.uid != o.uid:
            return None
        if _BY_KIND.get(o.kind) is deciding:
            return owner.outcome
        # A TrainJob's pods show their JobSet's uid; the TrainJob owns that JobSet.
        top = self._object(deciding.kind, task.namespace, task.name, deciding.api_version)
        if not isinstance(top, Seen) or owner.controller is None \
                or top.uid != owner.controller.uid:
            return None
        return top.outcome

    def current(self, task: TaskRef, known: PlatformOutcome) -> PlatformOutcome | None:
        """The outcome now of the object a task's status already follows (``known``), while
        that object lives (the same uid)."""
        seen = self._object(known.kind, task.namespace, known.name, known.api_version)
        return seen.outcome if isinstance(seen, Seen) and seen.uid == known.uid else None

    # --- a Job's completions -------------------------------------------------------------
    def completions(self, task: TaskRef, info: PodTask) -> int | Retry | None:
        """The Job's ``spec.completions`` (at most WORKERS_MAX), None when it has none, is
        not the Job the pod names (another uid), or cannot be read (forbidden, gone);
        Retry.LATER when the API cannot answer now."""
        seen = self._object(JOB.kind, task.namespace, info.job, JOB.api_version)
        if seen is Retry.LATER:
            return Retry.LATER
        if not isinstance(seen, Seen):
            return None
        owner = info.owner
        if owner is not None and owner.kind == JOB.kind and owner.uid != seen.uid:
            return None  # a Job of that name, but not the one the pod belongs to
        return seen.completions
