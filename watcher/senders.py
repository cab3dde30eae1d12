"""The sender check, shared by the watcher and `tidings state --from-events`: may this event's
related pod speak for the event's task (or, for PodSpawned, does the spawned pod confirm it)?

Trust is keyed by (namespace, name, uid), never name and uid alone. The rules, in order
(deploy/README.md, "Sender authentication", states them for users):

1. A task fact comes from a pod in the task's own namespace whose labels name the task
   (the first key of the task key list it carries: ``tidings.dev/task``, else its
   platform's, ``schemas/wire/platform.py``): the live pod. A fact about
   the pod itself (an emitter that knows no task id) belongs to the task its labels name
   (``task_of``); a pod never seen, whose labels cannot be read, has no known task: such a
   fact is refused (``unknown_task``), never guessed.
2. A pod that is gone: its event counts only when it carries the sender proof
   (``tidings.dev/sender-uid`` equal to ``related.uid``) and the admission policy that makes
   the proof unforgeable is installed and enforcing. The proof authenticates the sender pod
   and its namespace. A pod seen deleted while this process watched is remembered (bounded)
   with its labels, which must still name the task (and route a fact about the pod itself,
   ``task_of``); a pod never seen has no labels to read, so its proven event is trusted as a
   fact from that pod about a task of its own namespace.
3. Lineage (PodSpawned regarding a TaskFeedback): nobody's word is taken; the spawned pod it
   names must be a pod of the task's namespace with that uid, labelled for the task.

Pods are cached by label-filtered informers (one reflector source per task key, since a
label selector cannot say "any of these keys"); a cache miss falls back to a direct GET,
since a new pod may race its first event.

The same watches say how each pod ended or why it waits (``schemas/engine/observed.py``): the cache
keeps that verdict beside the pod's task, indexed by task, and tells ``on_change`` when a
pod's verdict changes, so the watcher reads the pods' ends with no watch and no GET more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.kube.objects import KubeObject
from tidings.schemas.engine.admission import Retry
from tidings.schemas.engine.observed import NodeLoss, PodVerdict, gone, pod_verdict
from tidings.schemas.wire.constants import TASK_LABEL
from tidings.schemas.wire.contract import SENDER_POLICY as POLICY
from tidings.schemas.wire.contract import SENDER_POLICY_BINDING_PATH as BINDING_PATH
from tidings.schemas.wire.contract import SENDER_POLICY_PATH as POLICY_PATH
from tidings.schemas.wire.contract import pods_path
from tidings.schemas.wire.event import ParsedEvent, PodRef, TaskRef, WatchItem
from tidings.schemas.wire.payloads import PodSpawned
from tidings.schemas.wire.platform import DEFAULT_TASK_KEYS, PodTask, other_keys, pod_task
from tidings.schemas.wire.rejection import Rejection, RejectReason

from .interning import Interner
from .kubelet_events import creating_since
from .placements import Placements, PodKey, node_of, runs_since
from .reflector import object_line
from .tracking import OFF, Tracking

log = logging.getLogger("tidings.watcher.senders")


class SenderLookupError(Exception):
    """A GET that could not answer: ``retry`` when transient (5xx, network), else forbidden."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


# GET path -> the object, or None when it does not exist; raises SenderLookupError otherwise.
Getter = Callable[[str], Any]


def kube_getter(kube: Client) -> Getter:
    """A Getter over the watcher's client."""
    def get(path: str) -> Any:
        try:
            return kube.request("GET", path, timeout=(3, 10))
        except KubeError as e:
            if e.not_found:
                return None
            raise SenderLookupError(str(e), retry=not e.denied) from None

    return get


_ABSENT = object()  # cache value: no pod of that namespace/name carries that uid


def _pod(obj: object, keys: Sequence[str], intern: Interner
         ) -> tuple[PodKey, PodTask | None] | None:
    """The pod's key and what its labels say, the values it shares with other pods (its
    namespace, its task's claim) interned."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    key = (intern(str(meta.get("namespace", ""))), str(meta.get("name", "")),
           str(meta.get("uid", "")))
    found = pod_task(meta, keys)
    if found is not None:
        found = intern(found)
    if found is not None and log.isEnabledFor(logging.DEBUG):
        others = other_keys(meta, keys, found.key)
        if others:
            log.debug("pod %s/%s carries the task keys %s; its task is %s=%s (the first)",
                      key[0], key[1], ", ".join([found.key, *others]), found.key,
                      found.task or "(invalid)")
    return key, found


def _spoofed(message: str) -> Rejection:
    return Rejection.of(RejectReason.SPOOFED_SENDER, message)


class ProofPolicy:
    """Whether the sender proof can be trusted: the admission policy and its Deny binding are
    installed. Looked up at most every ``ttl`` seconds; unreadable counts as not installed
    (deny by default), so the proof is never trusted where it could have been forged."""

    def __init__(self, get: Getter | None, ttl: float = 30.0, *, quiet: bool = False) -> None:
        self.get, self.ttl, self.quiet = get, ttl, quiet
        self._until = 0.0
        self._trusted = False
        self._lock = threading.Lock()

    def trusted(self) -> bool | None:
        """True or False; None when the API could not tell right now (try again later)."""
        with self._lock:
            if time.monotonic() < self._until:
                return self._trusted
            looked = self._look()
            if looked is None:
                return None
            self._trusted, self._until = looked, time.monotonic() + self.ttl
            return looked

    def _look(self) -> bool | None:
        if self.get is None:
            return False
        try:
            policy, binding = self.get(POLICY_PATH), self.get(BINDING_PATH)
        except SenderLookupError as e:
            if e.retry:
                return None
            if not self.quiet:
                log.warning("cannot read admission policy %s (%s): sender proofs not trusted",
                            POLICY, e)
            return False
        spec = (binding or {}).get("spec") or {}
        ok = policy is not None and spec.get("policyName") == POLICY \
            and "Deny" in (spec.get("validationActions") or [])
        if not ok and not self.quiet:
            log.warning("admission policy %s with a Deny binding is not installed: sender "
                        "proofs not trusted (kubectl apply -k deploy/)", POLICY)
        return ok


class PodSource:
    """The informer source of one task key (``/pods?labelSelector=<key>``), feeding the
    shared cache of ``Senders``. A relist forgets (as deleted: remembered, bounded) only the
    pods this source listed before and no longer lists."""

    resource = "pods"

    def __init__(self, senders: Senders, key: str) -> None:
        self.senders, self.key = senders, key
        self._mine: set[PodKey] = set()
        self._listed: set[PodKey] = set()

    def list_begin(self) -> None:
        self._listed = set()

    def list_page(self, items: list[KubeObject]) -> None:
        now = datetime.now(UTC)
        for obj in items:
            p = _pod(obj, self.senders.keys, self.senders.intern)
            if p is not None:
                self._listed.add(p[0])
                self._put(p, obj, now)

    def _put(self, p: tuple[PodKey, PodTask | None], obj: object, now: datetime) -> None:
        """The pod as its object reads now: its verdict, whether it makes its task, where
        it runs or is being created."""
        verdict = pod_verdict(obj, seen=now)
        intern = self.senders.intern
        running, creating = runs_since(obj, verdict), creating_since(obj)
        self.senders.put(*p, verdict, track=self.senders.tracking.pod_makes_task(obj, verdict),
                         running=None if running is None else intern(running),
                         creating=None if creating is None else intern(creating),
                         node=intern(node_of(obj)))

    def list_done(self, resource_version: str) -> None:
        for k in self._mine - self._listed:  # deleted while the watch was down
            self.senders.delete(k)
        # A copy: the set grown one add at a time holds twice the slots a copy needs.
        self._mine, self._listed = set(self._listed), set()

    def watch_line(self, line: bytes) -> WatchItem:
        wtype, obj, item = object_line(line)
        if obj is None:
            return item
        p = _pod(obj, self.senders.keys, self.senders.intern)
        if p is not None and wtype in ("ADDED", "MODIFIED"):
            self._mine.add(p[0])
            self._put(p, obj, datetime.now(UTC))
        elif p is not None and wtype == "DELETED":
            self._mine.discard(p[0])
            self.senders.delete(p[0], pod_verdict(obj, deleted=True, seen=datetime.now(UTC)))
        return item


class Senders:
    """Pod cache (fed by one ``PodSource`` per task key) + the check.

    ``how`` of the last check is one of cache, get, proof (for the metrics)."""

    def __init__(self, get: Getter | None, *, max_deleted: int = 20000,
                 negative_ttl: float = 5.0, policy: ProofPolicy | None = None,
                 keys: Sequence[str] = DEFAULT_TASK_KEYS,
                 on_change: Callable[[TaskRef], None] = lambda task: None,
                 holds: Callable[[TaskRef], bool] = lambda task: True,
                 max_verdicts: int = 50_000, tracking: Tracking = OFF) -> None:
        self.get = get
        self.keys = tuple(keys)
        # What the cached pods share (namespaces, nodes, claims, tasks, times): one copy each.
        self.intern = Interner()
        self.tracking = tracking
        # Tasks a selected pod makes exist (``--track``), with the first such pod's name and
        # labels (its owner claim is checked before the task is made), oldest first; bounded
        # like the verdicts (beyond, the oldest forgotten: a task already held stays held).
        self._tracked: OrderedDict[TaskRef, tuple[str, PodTask]] = OrderedDict()
        # Where each task's pods are: running (since, on which node), being created.
        self._places = Placements()
        self.policy = policy or ProofPolicy(get)
        # Told (on the watch loop: it must be cheap) the task of a pod whose verdict changed.
        self.on_change = on_change
        self._lock = threading.Lock()
        self._live: dict[PodKey, PodTask | None] = {}
        self._deleted: OrderedDict[PodKey, PodTask | None] = OrderedDict()
        self._negative: dict[PodKey, tuple[float, object]] = {}
        self.max_deleted, self.negative_ttl = max_deleted, negative_ttl
        # How each pod of a task ended or why it waits, by task (pods that run normally have
        # no verdict): what the fold observes beside the task's facts. Bounded: beyond
        # ``max_verdicts`` only the pods of tasks the watcher holds (``holds``) are kept (a
        # cluster's other Jobs end by the thousand).
        self._verdicts: dict[TaskRef, dict[PodKey, PodVerdict]] = {}
        self._verdict_count = 0
        self.holds, self.max_verdicts = holds, max_verdicts

    def sources(self) -> list[PodSource]:
        """One informer source per task key."""
        return [PodSource(self, k) for k in self.keys]

    # --- cache --------------------------------------------------------------------------
    def put(self, key: PodKey, task: PodTask | None, verdict: PodVerdict | None = None,
            *, track: bool = False, running: datetime | None = None,
            creating: datetime | None = None, node: str = "") -> None:
        """The pod ``key`` as its object reads now; ``track``: it makes its task exist;
        ``running``: its phase is Running, since then; ``creating``: it is being created
        (``kubelet_events.creating_since``), since then."""
        with self._lock:
            self._live[key] = task
            self._deleted.pop(key, None)
            self._negative.pop(key, None)
            changed = self._judge(key, task, verdict)
            if isinstance(task, PodTask) and not task.error and self._places.update(
                    key, self.intern(TaskRef(key[0], task.task)), running=running,
                    creating=creating, node=node):
                changed = TaskRef(key[0], task.task)
            if track and isinstance(task, PodTask) and not task.error:
                ref = TaskRef(key[0], task.task)
                if ref not in self._tracked:
                    self._tracked[ref] = (key[1], task)
                    if len(self._tracked) > self.max_verdicts:
                        self._tracked.popitem(last=False)
                    changed = ref
        if changed is not None:
            self.on_change(changed)

    def creating(self, task: TaskRef) -> list[tuple[PodKey, datetime]]:
        """The pods of ``task`` being created now, and since when."""
        with self._lock:
            return self._places.creating(task)

    def tasks_on(self, node: str) -> set[TaskRef]:
        """The tasks of the pods running on ``node``."""
        with self._lock:
            return self._places.tasks_on(node)

    def on_lost_nodes(self, task: TaskRef, lost: Callable[[str], NodeLoss | None]
                      ) -> list[PodVerdict]:
        """The pods of ``task`` still Running on a node that is not Ready (NodeLost)."""
        with self._lock:
            return self._places.on_lost_nodes(task, lost)

    def running(self, task: TaskRef, lost: Callable[[str], NodeLoss | None]
                = lambda node: None) -> tuple[int, datetime | None]:
        """How many pods of ``task`` run now (on a node that is Ready), and since when."""
        with self._lock:
            return self._places.running(task, lost)

    def tracked(self, task: TaskRef) -> tuple[str, PodTask] | None:
        """The first pod selected by ``--track`` that names ``task`` (its name, its labels'
        claim), if any."""
        with self._lock:
            return self._tracked.get(task)

    def delete(self, key: PodKey, verdict: PodVerdict | None = None) -> None:
        """The pod ``key`` is gone; ``verdict``: how its last object read (None: it was not
        seen, as after a relist)."""
        with self._lock:
            if key in self._live:
                task = self._live.pop(key)
            elif key in self._deleted:  # (each task key's informer tells the same delete)
                task = self._deleted[key]
            else:
                task = None
            self._deleted[key] = task
            self._deleted.move_to_end(key)
            while len(self._deleted) > self.max_deleted:
                old, old_task = self._deleted.popitem(last=False)
                self._forget(old, old_task)
            ended = verdict if verdict is not None and verdict.terminal else \
                gone(key[1], key[2], datetime.now(UTC))
            if isinstance(task, PodTask) and not task.error:
                self._places.forget(key, TaskRef(key[0], task.task))
            changed = self._judge(key, task, ended)
        if changed is not None:
            self.on_change(changed)

    def _judge(self, key: PodKey, task: PodTask | None, verdict: PodVerdict | None
               ) -> TaskRef | None:
        """Record the pod's verdict (under the lock); the task to tell when it changed. An
        end stays (only a better-explained one replaces it); a waiting reason does not."""
        if not isinstance(task, PodTask) or task.error:
            return None
        ref = TaskRef(key[0], task.task)
        pods = self._verdicts.get(ref)
        known = pods.get(key) if pods is not None else None
        if known is not None and known.terminal and (
                verdict is None or not verdict.terminal or verdict.order() <= known.order()):
            return None  # an end is final: what the object says later changes nothing
        if known == verdict:
            return None
        if verdict is None:
            assert pods is not None
            del pods[key]
            self._verdict_count -= 1
            if not pods:
                del self._verdicts[ref]
        else:
            if known is None:
                if self._verdict_count >= self.max_verdicts and not self.holds(ref):
                    return None
                self._verdict_count += 1
            if pods is None:
                pods = self._verdicts[self.intern(ref)] = {}
            pods[key] = self._compact(key, verdict)
        return ref

    def _compact(self, key: PodKey, v: PodVerdict) -> PodVerdict:
        """``v`` holding the pod's own name and uid, and shared copies of what pods share
        (a thousand pods that cannot pull one image wait with one message)."""
        i = self.intern
        return PodVerdict(key[1] if v.pod == key[1] else v.pod,
                          key[2] if v.uid == key[2] else v.uid, i(v.phase), i(v.reason),
                          i(v.message), v.exit_code, i(v.at), v.explained)

    def _forget(self, key: PodKey, task: PodTask | None) -> None:
        if isinstance(task, PodTask):
            pods = self._verdicts.get(TaskRef(key[0], task.task))
            if pods is not None and pods.pop(key, None) is not None:
                self._verdict_count -= 1
                if not pods:
                    del self._verdicts[TaskRef(key[0], task.task)]

    def pods_of(self, task: TaskRef) -> list[str]:
        """The pods (live, or remembered gone) whose labels name ``task``: what the TTL
        deletes the facts of, beside the reporting pods its status lists (capped)."""
        with self._lock:
            return sorted({k[1] for d in (self._live, self._deleted) for k, info in d.items()
                           if k[0] == task.namespace and isinstance(info, PodTask)
                           and info.task == task.name})

    def verdicts(self, task: TaskRef) -> list[PodVerdict]:
        """How the pods of ``task`` ended or why they wait (pods running normally: none)."""
        with self._lock:
            return list(self._verdicts.get(task, {}).values())

    def gone(self, task: TaskRef, pods: Sequence[tuple[str, str]]) -> list[PodVerdict]:
        """Of the reporting ``pods`` (name, uid) of ``task``, those that are gone although no
        delete was seen (deleted while no watcher watched), as ended verdicts. Asks the API
        (one GET) only for a pod the cache does not know; Retry-worthy answers count as
        not gone."""
        out: list[PodVerdict] = []
        for name, uid in pods:
            key = (task.namespace, name, uid)
            with self._lock:
                live = key in self._live
                ended = self._verdicts.get(task, {}).get(key)
            if live:
                continue
            if ended is not None and ended.terminal:
                out.append(ended)
                continue
            known, info = self.lookup(key)
            if (known and (info is _ABSENT or key in self._deleted)) or (
                    not known and self._fetch(key) is _ABSENT):
                out.append(gone(name, uid, datetime.now(UTC)))
        return out

    def lookup(self, key: PodKey) -> tuple[bool, object]:
        """(known, task label | None | _ABSENT) from the cache alone."""
        with self._lock:
            if key in self._live:
                return True, self._live[key]
            if key in self._deleted:
                return True, self._deleted[key]
            neg = self._negative.get(key)
            if neg is not None and neg[0] > time.monotonic():
                return True, neg[1]
            return False, None

    def deleted(self, key: PodKey) -> bool:
        """The pod ``key`` was seen deleted (and is still remembered)."""
        with self._lock:
            return key in self._deleted

    def pod_task(self, task: TaskRef, sender: PodRef) -> PodTask | None:
        """What the sender pod's labels say of ``task`` (from the cache alone), when they
        name it: its owner claim, its Job."""
        known, got = self.lookup((sender.namespace or task.namespace, sender.name, sender.uid))
        return got if known and isinstance(got, PodTask) and not got.error \
            and got.task == task.name else None

    def label(self, key: PodKey) -> tuple[object, str] | Retry:
        """(PodTask | None (no task key, or unreadable) | _ABSENT, how) for the pod ``key``."""
        known, task = self.lookup(key)
        if known:
            return task, "cache"
        fetched = self._fetch(key)
        return fetched if fetched is Retry.LATER else (fetched, "get")

    # --- the check ----------------------------------------------------------------------
    def check(self, ev: ParsedEvent) -> Rejection | Retry | None:
        """None when the event may be applied to its task; a Rejection when it may not."""
        verdict = self.verify(ev)
        return verdict if isinstance(verdict, Rejection | Retry) else None

    def verify(self, ev: ParsedEvent) -> Rejection | Retry | str:
        """Like ``check``, but says how an accepted event was verified (cache, get, proof)."""
        if type(ev.payload) is PodSpawned:
            return self._lineage(ev)
        s = ev.sender
        ns = s.namespace or ev.task.namespace
        if ns != ev.task.namespace:
            return _spoofed(f"related pod {ns}/{s.name} is not in the namespace of the task "
                            f"it claims ({ev.task.namespace}/{ev.task.name})")
        key = (ns, s.name, s.uid)
        got = self.label(key)
        if got is Retry.LATER:
            return Retry.LATER
        info, how = got
        # A pod seen deleted is gone as much as one never seen: its name and uid are in every
        # event it sent, so anyone who may create events could name it. Its remembered labels
        # still say which task it was for; only its proof says that it sent the event.
        dead = info is _ABSENT or self.deleted(key)
        ours = isinstance(info, PodTask) and not info.error and info.task == ev.task.name
        if ours and not dead:
            return how
        if dead and (ours or info is _ABSENT) and ev.sender_proof == s.uid:
            trusted = self.policy.trusted()
            if trusted is None:
                return Retry.LATER
            if trusted:
                return "proof"  # the API server authenticated this pod; it is gone now
        if isinstance(info, PodTask) and info.error:
            return Rejection.of(RejectReason.BAD_TASK_ID, f"related pod {s.name}: {info.error}")
        # The pod's own label and the task the event claims, each named as what it is: an
        # operator must not read the claim as the pod's label.
        why = ("is gone (seen deleted), and no trusted sender proof" if ours else
               f"is labelled {info.key}={info.task}" if isinstance(info, PodTask) else
               "is gone, and no trusted sender proof" if info is _ABSENT else
               f"has no {TASK_LABEL} label (or is unreadable)")
        return _spoofed(f"related pod {s.name} {why}; the event claims task {ev.task.name}")

    def task_of(self, ev: ParsedEvent) -> PodTask | Rejection | Retry:
        """The task a fact about its sender's own pod belongs to: the one the pod's labels
        name (live, or remembered). A pod never seen, or one naming no valid task, gives a
        Rejection: the task is never guessed."""
        s = ev.sender
        got = self.label((s.namespace or ev.task.namespace, s.name, s.uid))
        if got is Retry.LATER:
            return Retry.LATER
        info, _how = got
        if isinstance(info, PodTask):
            if info.error:
                return Rejection.of(RejectReason.BAD_TASK_ID,
                                    f"pod {s.name} names no valid task: {info.error}")
            return info
        why = ("was never seen and is gone: its task cannot be known" if info is _ABSENT
               else "carries none of the task keys " + ", ".join(self.keys))
        return Rejection.of(RejectReason.UNKNOWN_TASK, f"pod {s.name} {why}")

    def _lineage(self, ev: ParsedEvent) -> Rejection | Retry | str:
        p = ev.payload
        assert isinstance(p, PodSpawned)
        got = self.label((ev.task.namespace, p.pod_name, p.pod_uid))
        if got is Retry.LATER:
            return Retry.LATER
        info, how = got
        if isinstance(info, PodTask) and not info.error and info.task == ev.task.name:
            return how
        label = (f"is labelled {info.key}={info.task or '(invalid)'}"
                 if isinstance(info, PodTask) else
                 f"is no pod of {ev.task.namespace} with that uid" if info is _ABSENT else
                 f"has no {TASK_LABEL} label (or is unreadable)")
        return Rejection.of(RejectReason.UNVERIFIED_LINEAGE,
                            f"spawned pod {p.pod_name} {label}; the record claims it for "
                            f"task {ev.task.name}")

    def _fetch(self, key: PodKey) -> object:
        ns, name, _uid = key
        if self.get is None:
            return None
        try:
            obj = self.get(pods_path(ns, name))
        except SenderLookupError as e:
            if e.retry:
                return Retry.LATER
            log.warning("cannot read pod %s/%s: %s", ns, name, e)
            obj, result = None, None  # unreadable: not known to be gone
        else:
            result = _ABSENT
        p = _pod(obj, self.keys, self.intern) if obj is not None else None
        if p is not None and p[0] == key:
            self.put(*p, pod_verdict(obj, seen=datetime.now(UTC)))
            return p[1]
        with self._lock:
            self._negative[key] = (time.monotonic() + self.negative_ttl, result)
            if len(self._negative) > 10000:
                now = time.monotonic()
                self._negative = {k: v for k, v in self._negative.items() if v[0] > now}
        return result

