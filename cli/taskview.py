"""Reading a task for `state`, `watch` and `timeline`: the TaskFeedback status when a watcher
wrote one, else the task's events through the same fold; plus the table view of a state."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from tidings._compat import UTC
from tidings.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    Connection,
    not_found,
    safe,
)
from tidings.cli.kube import (
    NO_CRD,
    Action,
    ApiError,
    Kube,
    connect_with,
    found_elsewhere,
    watch_message,
)
from tidings.kube import ListWatch, WatchLines
from tidings.kube.objects import Event, KubeObject, TaskFeedback
from tidings.kube.watch import Listing
from tidings.schemas import (
    KIND,
    ParsedEvent,
    TaskRef,
    TaskState,
    fold,
    fold_all,
    parse_event,
    parse_watch_line,
)
from tidings.schemas.contract import (
    FAILED,
    POD_FACTS_SELECTOR,
    SUCCEEDED,
    TASKFEEDBACK_RESOURCE,
    lineage_selector,
    task_selector,
    taskfeedback_path,
)
from tidings.schemas.health import judge
from tidings.schemas.observed import PodVerdict, gone, pod_verdict
from tidings.schemas.observing import observe
from tidings.schemas.payloads import NON_FINITE
from tidings.schemas.platform import PodTask, pod_task
from tidings.schemas.rejection import Rejection, RejectReason
from tidings.schemas.status_decoder import NOTHING_UNREAD, Unread, read_status
from tidings.schemas.status_encoder import to_status
from tidings.schemas.times import format_seconds
from tidings.schemas.view import (
    CURVE_HEADERS,
    RegisterRow,
    RegisterTable,
    TaskView,
    fmt_seconds,
    read_refused,
    scalar_text,
    task_view,
)

if TYPE_CHECKING:
    from tidings.watcher.platform import PlatformTasks
    from tidings.watcher.senders import Senders

SOURCE_CR = "TaskFeedback"
SOURCE_EVENTS = "events"


# --- which namespace ----------------------------------------------------------------------


def open_task(task: str, namespace: str | None, all_namespaces: bool, conn: Connection,
              from_events: bool) -> tuple[Kube, TaskRef]:
    """Connect and find the task: the common start of state, watch and timeline."""
    k = connect_with(conn, namespace)
    ns = resolve_namespace(k, task, "task", task_selector(task), all_namespaces,
                           with_cr=not from_events)
    return k, TaskRef(ns, task)


def open_app(app: str, namespace: str | None, all_namespaces: bool, conn: Connection
             ) -> tuple[Kube, str]:
    """Connect and find the app's namespace: the common start of lineage and logs (by its
    PodSpawned records, or its TaskFeedback when it has no lineage controller)."""
    k = connect_with(conn, namespace)
    return k, resolve_namespace(k, app, "app", lineage_selector(app), all_namespaces,
                                with_cr=True)


def resolve_namespace(kube: Kube, name: str, what: str, selector: str, all_namespaces: bool,
                      with_cr: bool = False) -> str:
    """-A: the one namespace where `name` has bus events (or a TaskFeedback)."""
    if not all_namespaces:
        return kube.namespace
    found: set[str] = set()
    items, _ = kube.list_events(None, selector)
    found.update(str((i.get("metadata") or {}).get("namespace") or "") for i in items)
    if with_cr:
        try:
            crs, _ = kube.list_all(taskfeedback_path(),
                                   {"fieldSelector": f"metadata.name={name}"},
                                   action=Action("list", TASKFEEDBACK_RESOURCE))
            found.update(str((i.get("metadata") or {}).get("namespace") or "") for i in crs)
        except ApiError as err:
            if not (err.forbidden or err.not_found):
                raise
    found.discard("")
    if not found:
        not_found(f"{what} {name!r} in any namespace")
    if len(found) > 1:
        raise CliError(f"invalid input: {what} {name!r} exists in namespaces "
                       f"{', '.join(sorted(found))}; choose one with -n", EXIT_INVALID)
    return found.pop()


# --- one snapshot -------------------------------------------------------------------------

# Groups of (reason, sender) kept and shown: a flood from many senders stays a few lines
# (the rest is counted, under "other senders").
MAX_REFUSAL_GROUPS = 20
OTHER_SENDERS = "(other senders)"
# Not a fact of this task: regarding another kind of object (lineage of an app, say).
NOT_A_TASK_FACT = "not_a_task_fact"


@dataclass
class Refusals:
    """The events a local fold refused, grouped by (reason, sender), bounded; each group
    keeps the message of its first refusal (what tells a missing grant from a spoof)."""

    groups: dict[tuple[str, str], int] = field(default_factory=dict)
    details: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, reason: str, sender: str, detail: str) -> None:
        key = (reason, sender)
        if key not in self.groups and len(self.groups) >= MAX_REFUSAL_GROUPS:
            key = (reason, OTHER_SENDERS)
        self.groups[key] = self.groups.get(key, 0) + 1
        self.details.setdefault(key, detail)

    @property
    def total(self) -> int:
        return sum(self.groups.values())

    def rows(self) -> list[tuple[str, str, int, str]]:
        """(reason, sender, events, detail), the largest groups first."""
        return sorted(((r, p, n, self.details.get((r, p), ""))
                       for (r, p), n in self.groups.items()),
                      key=lambda x: (-x[2], x[0], x[1]))

    def copy(self) -> Refusals:
        return Refusals(dict(self.groups), dict(self.details))


@dataclass
class Snapshot:
    state: TaskState
    source: str  # SOURCE_CR or SOURCE_EVENTS
    # Events the local fold refused (SOURCE_EVENTS), by reason and sender.
    refusals: Refusals = field(default_factory=Refusals)
    resource_version: str = ""
    # The watcher's count of events it refused for the task, by reason (status.refused).
    refused: dict[str, int] = field(default_factory=dict)
    # uid of the task's TaskFeedback for a local fold ("": none exists; None: unreadable).
    object_uid: str | None = None
    # The TaskFeedback status the state was read from (None: a local fold), and what it held
    # that could not be read (kept, shown: never hidden behind an empty state).
    status: Mapping[str, Any] | None = None
    unread: Unread = NOTHING_UNREAD

    @property
    def rejected(self) -> int:
        return self.refusals.total

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "task": {"namespace": self.state.task.namespace, "name": self.state.task.name},
            "source": self.source, "rejected_events": self.rejected}
        if self.refusals.groups:
            data["rejections"] = [{"reason": r, "sender": p, "events": n, "detail": d}
                                  for r, p, n, d in self.refusals.rows()]
        if self.status is not None:  # what the status says, as the watcher wrote it
            status = dict(self.status)
        else:
            status = to_status(self.state, health=judge(self.state, datetime.now(UTC)))
            if self.refused:
                status["refused"] = dict(self.refused)
        data["status"] = status
        if self.unread:
            data["unreadable"] = {"entries": list(self.unread.problems),
                                  "partial": self.unread.partial}
        return data


def _read_cr(kube: Kube, ref: TaskRef) -> tuple[TaskFeedback | None, ApiError | None]:
    try:
        return cast(TaskFeedback, kube.get_json(
            taskfeedback_path(ref.namespace, ref.name),
            action=Action("get", TASKFEEDBACK_RESOURCE, ref.namespace, ref.name))), None
    except ApiError as err:
        if err.forbidden or err.not_found:  # forbidden or no CRD/object: the events still tell
            return None, err
        raise


def _refused(status: dict[str, Any]) -> dict[str, int]:
    return {safe(k): v for k, v in read_refused(status)}


def _cr_snapshot(ref: TaskRef, status: dict[str, Any], rv: str) -> Snapshot:
    """The snapshot of a TaskFeedback status: read entry by entry (what cannot be read is
    shown, never hidden behind an empty state)."""
    state, unread = read_status(ref, status)
    return Snapshot(state, SOURCE_CR, Refusals(), rv, _refused(status), status=status,
                    unread=unread)


def _status_of(obj: Mapping[str, object] | None) -> dict[str, Any] | None:
    status = (obj or {}).get("status")
    return status if isinstance(status, dict) and status.get("schemaVersion") else None


def senders(kube: Kube) -> Senders:
    """The watcher's own sender check over this client (one per client: its pod cache), so
    the CLI's fold of raw events and the watcher's status cannot disagree (issue 10, item 6)."""
    found = getattr(kube, "_tidings_senders", None)
    if found is None:
        from tidings.watcher.senders import ProofPolicy, SenderLookupError, Senders

        def get(path: str) -> Any:
            parts = path.split("/")  # /api/v1/namespaces/<ns>/pods/<name>, or the policy
            pod = len(parts) == 7 and parts[5] == "pods"
            action = Action("get", "pods", parts[4], parts[6]) if pod else None
            try:
                return kube.get_json(path, action=action)
            except ApiError as err:
                if err.not_found:
                    return None
                if pod and err.forbidden:
                    # Without reading pods no sender can be verified: say so, never guess.
                    raise ApiError(f"{err.message} (needed to verify the senders of the "
                                   "task's events)", err.code, err.status, action) from None
                raise SenderLookupError(err.message, retry=not err.denied) \
                    from None

        found = Senders(get, policy=ProofPolicy(get, quiet=True))
        kube._tidings_senders = found  # type: ignore[attr-defined]
    return found


def platform(kube: Kube) -> PlatformTasks:
    """The watcher's reading of platform objects over this client (one per client), read by
    name here (the watcher has them from its watches)."""
    found = getattr(kube, "_tidings_platform", None)
    if found is None:
        from tidings.watcher.platform import PlatformTasks

        found = PlatformTasks(kube.client)
        kube._tidings_platform = found  # type: ignore[attr-defined]
    return found


def _unreachable(what: str) -> CliError:
    return CliError(f"cannot verify {what}: the API server did not answer", EXIT_UNREACHABLE)


def refusal(kube: Kube, ref: TaskRef, p: object, uid: str | None = None
            ) -> tuple[str, str] | None:
    """Why the watcher would not apply a parse result to task ``ref`` whose TaskFeedback has
    ``uid`` ("": none exists; None: unknown, not checked): (a RejectReason value, or
    ``not_a_task_fact``; the message); None when it would."""
    if isinstance(p, Rejection):
        return p.reason.value, p.message
    if not (isinstance(p, ParsedEvent) and p.task == ref and p.regarding_kind == KIND):
        return NOT_A_TASK_FACT, "regarding another kind of object than a TaskFeedback"
    from tidings.watcher.senders import Retry

    verdict = senders(kube).check(p)
    if verdict is Retry.LATER:
        raise _unreachable(f"the sender of event {safe(p.name)}")
    if verdict is not None:
        return verdict.reason.value, verdict.message
    s = p.sender
    known, info = senders(kube).lookup((s.namespace or ref.namespace, s.name, s.uid))
    claim = platform(kube).check_claim(
        ref, info if known and isinstance(info, PodTask) and info.task == ref.name else None,
        s.name)
    if claim is Retry.LATER:
        raise _unreachable(f"the owner the sender of event {safe(p.name)} claims")
    if isinstance(claim, Rejection):
        return claim.reason.value, claim.message
    if p.regarding_uid and uid is not None and p.regarding_uid != uid:
        return (RejectReason.OTHER_OBJECT.value, f"the event names TaskFeedback uid "
                f"{safe(p.regarding_uid)}, not the task's object ({uid or 'none exists'})")
    return None


def sender_of(p: object, raw: Any = None) -> str:
    """The pod an event says it comes from, ``namespace/name`` (sanitised, bounded)."""
    if isinstance(p, ParsedEvent):
        return safe(f"{p.sender.namespace or p.task.namespace}/{p.sender.name}")
    related = raw.get("related") if isinstance(raw, dict) else None
    if isinstance(related, dict) and isinstance(related.get("name"), str):
        ns = related.get("namespace") if isinstance(related.get("namespace"), str) else ""
        return safe(f"{ns}/{related['name']}"[:300])
    return "(unknown sender)"


def _task_events(kube: Kube, ref: TaskRef, events: list[Event], uid: str | None
                 ) -> tuple[list[ParsedEvent], Refusals]:
    parsed: list[ParsedEvent] = []
    refusals = Refusals()
    for raw in events:
        p = parse_event(raw)
        why = refusal(kube, ref, p, uid)
        if why is None:
            parsed.append(p)  # type: ignore[arg-type]
        else:
            refusals.add(why[0], sender_of(p, raw), why[1])
    return parsed, refusals


def _pod_facts(kube: Kube, ref: TaskRef) -> list[ParsedEvent]:
    """The facts pods of the namespace sent about themselves whose labels name ``ref`` (as
    the watcher folds them: an emitter that knows no task id); the others are not this
    task's, so they are neither folded nor counted here."""
    raw, _ = kube.list_events(ref.namespace, POD_FACTS_SELECTOR)
    return [fact for obj in raw if (fact := _as_task_fact(kube, ref, parse_event(obj)))]


def _as_task_fact(kube: Kube, ref: TaskRef, p: object) -> ParsedEvent | None:
    """A pod's fact about itself as a fact of task ``ref`` when the pod's labels name it
    (as the watcher retargets it); None when it is another task's, or no pod fact."""
    from tidings.watcher.senders import Retry, as_task_fact

    if not (isinstance(p, ParsedEvent) and p.regarding_kind == "Pod"):
        return None
    info = senders(kube).task_of(p)
    if info is Retry.LATER:
        raise _unreachable(f"the sender of event {safe(p.name)}")
    if isinstance(info, Rejection) or info.task != ref.name:
        return None
    return as_task_fact(p, info.task)


def _object_uid(obj: TaskFeedback | None, cr_error: ApiError | None) -> str | None:
    """The TaskFeedback's uid for the local fold: "" when it does not exist, None when it
    could not be read (then events are not checked against it)."""
    if obj is not None:
        return str(obj.get("metadata", {}).get("uid") or "") or None
    return "" if cr_error is not None and cr_error.not_found else None


def from_events(kube: Kube, ref: TaskRef, cr_error: ApiError | None = None,
                uid: str | None = None) -> Snapshot:
    try:
        raw, rv = kube.list_events(ref.namespace, task_selector(ref.name))
    except ApiError as err:
        if err.forbidden and cr_error is not None and cr_error.forbidden:
            raise ApiError(f"{err.message} (nor get {TASKFEEDBACK_RESOURCE})", err.code, 403,
                           err.action) from None
        raise
    parsed, refusals = _task_events(kube, ref, raw, uid)
    for fact in _pod_facts(kube, ref):  # the same checks as the task's own events
        why = refusal(kube, ref, fact, uid)
        if why is None:
            parsed.append(fact)
        else:
            refusals.add(why[0], sender_of(fact), why[1])
    state = fold_all(ref, parsed)
    return Snapshot(_observed(kube, ref, state), SOURCE_EVENTS, refusals, rv, object_uid=uid)


def _observed(kube: Kube, ref: TaskRef, state: TaskState) -> TaskState:
    """What the task's pods and its platform object say now (their objects, as the watcher
    reads them), folded beside its facts. What only a watcher that watched can know is
    missing here: how a pod that is gone ended (it shows as deleted), and a wait that is
    over."""
    from tidings.cli.lineage import list_labelled, task_keys
    from tidings.watcher.senders import Retry

    now = datetime.now(UTC)
    verdicts: list[PodVerdict] = []
    listed: set[tuple[str, str]] = set()
    for key in task_keys():
        try:
            pods, _ = list_labelled(kube, ref.namespace, ref.name, key)
        except ApiError as err:
            if not err.forbidden:
                raise
            # Without the right to list pods, the facts still say what they say (get on
            # pods verifies their senders).
            return observe(state, platform=platform(kube).outcome(ref))
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = str(meta.get("name") or "")
            listed.add((name, str(meta.get("uid") or "")))
            v = pod_verdict(pod, seen=now)
            if v is not None:
                verdicts.append(v)
            if platform(kube).check_claim(ref, pod_task(meta, task_keys()), name) \
                    is Retry.LATER:
                raise _unreachable(f"the owner pod {safe(name)} claims")
    if state.counters.get("events_applied", 0) and not state.finished:
        verdicts += [gone(name, uid, now) for name, uid in state.pods
                     if (name, uid) not in listed]
    return observe(state, [v for v in verdicts if v.terminal],
                   waiting=[v for v in verdicts if not v.terminal],
                   platform=platform(kube).outcome(ref))


def load(kube: Kube, ref: TaskRef, use_events: bool = False, must_exist: bool = True
         ) -> Snapshot:
    """The task's state: its TaskFeedback status, else (or with use_events) the folded events."""
    # The object is read with --from-events too: its uid says which events are this run's.
    obj, cr_error = _read_cr(kube, ref)
    uid = _object_uid(obj, cr_error)
    if not use_events:
        status = _status_of(obj)
        if status is not None:
            rv = str((obj or {}).get("metadata", {}).get("resourceVersion") or "")
            return _cr_snapshot(ref, status, rv)
        if obj is not None:
            must_exist = False  # the object exists; its watcher has not written yet
    snap = from_events(kube, ref, cr_error, uid)
    if must_exist and snap.state.counters.get("events_applied", 0) == 0 and snap.rejected == 0:
        if cr_error is not None and cr_error.message == NO_CRD:
            raise CliError(f"{NO_CRD} (and task {ref.name!r} has no events in namespace "
                           f"{ref.namespace})", EXIT_NOT_FOUND)
        not_found(f"task {ref.name!r} in namespace {ref.namespace} "
                  "(no TaskFeedback and no events)"
                  + found_elsewhere(kube, ref.name, ref.namespace))
    return snap


# --- a live sequence of snapshots (watch) -------------------------------------------------


def follow(kube: Kube, ref: TaskRef, use_events: bool = False, must_exist: bool = True
           ) -> Iterator[Snapshot]:
    """Snapshots of the task as it changes: from TaskFeedback watches when the object has a
    status, else from the task's events and its pods' facts about themselves, folded locally,
    while a watch of the object waits for its status (unless ``use_events``): the moment a
    watcher writes one, the status is followed instead. Whenever a watch cannot resume the
    task is read afresh, and watched on from that read."""
    snap = load(kube, ref, use_events, must_exist)
    yield snap
    while True:
        if snap.source != SOURCE_CR:
            snap = yield from _follow_events(kube, ref, snap, use_events)
            continue
        loop = kube.list_watch(taskfeedback_path(ref.namespace),
                               {"fieldSelector": f"metadata.name={ref.name}"},
                               action=Action("watch", TASKFEEDBACK_RESOURCE, ref.namespace),
                               resource_version=snap.resource_version, lists=False)
        for change in loop:
            if isinstance(change, WatchLines):
                snap = yield from _cr_changes(kube, ref, snap, change.lines, loop)
                continue
            fresh = load(kube, ref, use_events, must_exist=False)
            if _differs(fresh, snap):
                yield fresh
            snap = fresh
            if fresh.source != SOURCE_CR:
                break
            loop.listed(fresh.resource_version)


def _differs(a: Snapshot, b: Snapshot) -> bool:
    return a.source != b.source or a.state != b.state or a.refused != b.refused \
        or a.rejected != b.rejected or a.unread != b.unread


def _follow_events(kube: Kube, ref: TaskRef, snap: Snapshot, use_events: bool
                   ) -> Generator[Snapshot, None, Snapshot]:
    """Follow a task with no status yet: its own events and the facts pods send about
    themselves whose labels name it (a zero-wiring task's), folded here, and (unless
    ``use_events``) its TaskFeedback, until a status appears: the snapshot of that status
    is returned (the caller follows the object from it)."""
    mux = _Mux()
    rv = snap.resource_version
    mux.add("task", kube.watch_events(ref.namespace, task_selector(ref.name), rv, lists=False))
    mux.add("pods", kube.watch_events(ref.namespace, POD_FACTS_SELECTOR, rv, lists=False))
    if not use_events:
        # (One list+watch version space: the events' list version is where the object's
        # watch starts too; one too old for the object's watch cache makes a fresh read.)
        mux.add("object", kube.list_watch(
            taskfeedback_path(ref.namespace), {"fieldSelector": f"metadata.name={ref.name}"},
            action=Action("watch", TASKFEEDBACK_RESOURCE, ref.namespace),
            resource_version=rv, lists=False), quiet=_unwatchable)
    try:
        for name, loop, change in mux:
            if isinstance(change, WatchLines):
                if name != "object":
                    snap = yield from _event_changes(kube, ref, snap, change.lines, loop,
                                                     pods=name == "pods")
                    continue
                found = _status_in(ref, change.lines, loop)
                if found is not None:
                    yield found
                    return found
                continue
            if not isinstance(change, Listing):
                continue  # a watch ended at its timeout and resumes where it was
            fresh = load(kube, ref, use_events, must_exist=False)
            if _differs(fresh, snap):
                yield fresh
            snap = fresh
            if fresh.source != SOURCE_EVENTS:
                return snap
            loop.listed(fresh.resource_version)
    finally:
        mux.stop()
    return snap


def _unwatchable(err: Exception) -> bool:
    """The object cannot be watched (no grant, no CRD): its events are followed alone."""
    return isinstance(err, ApiError) and (err.forbidden or err.not_found)


def _status_in(ref: TaskRef, lines: list[bytes], loop: ListWatch) -> Snapshot | None:
    """The snapshot of the first object in these watch lines that has a status, if any."""
    for line in lines:
        kind, obj = watch_message(line) or ("", None)
        if kind == "ERROR" or obj is None:
            loop.relist("error")
            return None
        loop.advance(str(obj.get("metadata", {}).get("resourceVersion") or ""))
        status = _status_of(obj) if kind in ("ADDED", "MODIFIED") else None
        if status is not None:
            return _cr_snapshot(ref, status, str(obj["metadata"].get("resourceVersion") or ""))
    return None


class _Mux:
    """Several list+watch loops read at once: each runs on a daemon thread that hands every
    change to the one reader, and waits until the reader is done with it (a loop must not go
    on before its reader advanced it). A loop's error ends the reading, unless ``quiet``
    says that loop may just stop."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[str, ListWatch, Any, threading.Event | None]] = \
            queue.SimpleQueue()
        self._loops: list[ListWatch] = []

    def add(self, name: str, loop: ListWatch,
            quiet: Callable[[Exception], bool] = lambda err: False) -> None:
        self._loops.append(loop)

        def run() -> None:
            try:
                for change in loop:
                    done = threading.Event()
                    self._q.put((name, loop, change, done))
                    while not done.wait(0.5):
                        if loop.stopped:
                            return
            except Exception as err:
                if not quiet(err) and not loop.stopped:
                    self._q.put((name, loop, err, None))

        threading.Thread(target=run, name=f"follow-{name}", daemon=True).start()

    def __iter__(self) -> Iterator[tuple[str, ListWatch, Any]]:
        while True:
            name, loop, change, done = self._q.get()
            if isinstance(change, Exception):
                raise change
            try:
                yield name, loop, change
            finally:
                if done is not None:
                    done.set()

    def stop(self) -> None:
        for loop in self._loops:
            loop.stop()


def _cr_changes(kube: Kube, ref: TaskRef, snap: Snapshot, lines: list[bytes], loop: ListWatch
                ) -> Generator[Snapshot, None, Snapshot]:
    for line in lines:
        kind, found = watch_message(line) or ("", None)
        obj: KubeObject = found if found is not None else {}
        if kind == "ERROR":
            loop.relist("error")
            break
        loop.advance(str(obj.get("metadata", {}).get("resourceVersion") or ""))
        if kind not in ("ADDED", "MODIFIED"):
            continue
        status = _status_of(obj)
        if status is None:
            continue
        rv = str(obj.get("metadata", {}).get("resourceVersion") or "")
        snap = _cr_snapshot(ref, status, rv)
        yield snap
    return snap


def _event_changes(kube: Kube, ref: TaskRef, snap: Snapshot, lines: list[bytes],
                   loop: ListWatch, pods: bool = False) -> Generator[Snapshot, None, Snapshot]:
    """Fold the events of these watch lines into ``snap``; ``pods``: they are facts pods sent
    about themselves, and only those whose labels name the task are its (the others are
    other tasks', neither folded nor counted)."""
    state, refusals = snap.state, snap.refusals.copy()
    for line in lines:
        item = parse_watch_line(line)
        if item.type == "ERROR":
            loop.relist("error")
            break
        loop.advance(item.resource_version)
        if item.type != "ADDED":
            continue
        result: object = item.result
        if pods:
            result = _as_task_fact(kube, ref, result)
            if result is None:
                continue
        why = refusal(kube, ref, result, snap.object_uid)
        if why is None:
            assert isinstance(result, ParsedEvent)
            new = fold(state, result)
            if new != state:
                state = new
                snap = Snapshot(state, SOURCE_EVENTS, refusals.copy(),
                                item.resource_version, object_uid=snap.object_uid)
                yield snap
        else:
            # Counted, and shown with the next change (a refused flood is no change).
            refusals.add(why[0], sender_of(result), why[1])
            snap = Snapshot(state, SOURCE_EVENTS, refusals.copy(), item.resource_version,
                            object_uid=snap.object_uid)
    return snap


# --- the table view -----------------------------------------------------------------------


def _t(value: object, style: str = "") -> Any:
    from rich.text import Text

    return Text(safe(value), style=style)


def _ago(t: datetime | None) -> str:
    if t is None:
        return "never"
    secs = max(0, int((datetime.now(UTC) - t).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{secs}s ago"


def _until(t: datetime) -> str:
    secs = int((t - datetime.now(UTC)).total_seconds())
    if secs < 0:  # passed while the task still runs: the estimate was wrong
        return f"overdue {fmt_seconds(-secs)}"
    return "now" if secs == 0 else f"in {fmt_seconds(secs)}"


# Cells of a sparkline: one per history point, at most this many.
SPARK_WIDTH = 32
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-~=+*#"  # when the terminal's encoding has no block characters


def sparkline(values: list[float], width: int = SPARK_WIDTH, ascii_only: bool = False) -> str:
    """A one-line curve of ``values`` (oldest first): one cell per value (the points are
    spread over the run), the lowest value the lowest block; ASCII levels on request."""
    levels = SPARK_ASCII if ascii_only else SPARK_BLOCKS
    values = values[-width:] if width > 0 else []
    if not values:
        return ""
    lo, hi = min(values), max(values)
    top = len(levels) - 1
    if not hi > lo:  # flat (or one point): the middle level
        return levels[top // 2] * len(values)
    return "".join(levels[round((v - lo) / (hi - lo) * top)] for v in values)


class Sparkline:
    """A rich renderable of ``sparkline``: block characters, or ASCII when the console's
    encoding cannot show them (``LANG=C``, a legacy code page)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def text(self, ascii_only: bool) -> str:
        return sparkline(self.values, ascii_only=ascii_only)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(self.text(options.ascii_only), style="green", no_wrap=True)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        n = len(self.text(True))
        return Measurement(n, n)


def progress_bar(fraction: float, width: int = 24) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def view(snap: Snapshot) -> TaskView:
    """The snapshot's view model (schemas/view.py): what the page shows too. A local fold's
    health is judged now, with the watcher's default thresholds."""
    return task_view(snap.state, snap.status, now=datetime.now(UTC))


def render(snap: Snapshot) -> Any:
    """A rich renderable of one state: summary, then links, decks, spans, pods, counters."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    v = view(snap)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("Task", _t(f"{v.task.namespace}/{v.task.name}"))
    head.add_row("Source", _t("TaskFeedback status" if snap.source == SOURCE_CR
                              else "events (folded locally; no watcher status)"))
    if v.progress is not None:
        pct = f"{v.progress.fraction * 100:5.1f}%"
        head.add_row("Progress", _t(f"{progress_bar(v.progress.fraction)} {pct}"))
        if v.progress.message:
            head.add_row("Message", _t(v.progress.message))
        if v.progress.eta is not None:
            eta = v.progress.eta
            head.add_row("ETA", _t(f"{format_seconds(eta)} ({_until(eta)})"))
        workers = f"{v.workers_final} of {v.workers_total} final"
        if v.workers_failed:
            workers += f", {v.workers_failed} {v.failed_word}"
        if v.workers_ended:
            workers += f" ({v.workers_ended} by their pod's end)"
        head.add_row("Workers", _t(workers))
    else:
        head.add_row("Progress", _t("no progress reported"))
    phase = v.phase
    if snap.unread.partial and snap.status is not None:
        # What could be read does not decide the outcome: show the watcher's word for it.
        phase = safe(snap.status.get("phase", "")) or "unknown"
        head.add_row("Status", _t("partly unreadable: the watcher does not write over it "
                                  "(see below)", "red"))
        written = snap.status.get("progress")
        if isinstance(written, dict) and "percent" in written:
            head.add_row("As written", _t(f"{safe(written.get('percent'))}% "
                                          f"{safe(written.get('message', ''))}"))
    head.add_row("Phase", _t(phase, {SUCCEEDED: "green", FAILED: "red"}.get(phase, "yellow")))
    if v.health_summary:
        judged = "" if v.judged_at is None or snap.source != SOURCE_CR \
            else f" (judged {_ago(v.judged_at)} by the watcher)"
        head.add_row("Health", _t(v.health_summary + judged,
                                  "green" if v.health_summary == "Healthy" else "red"))
    for c in v.notable:  # a failure, a pod waiting, what health says
        head.add_row(c.type, _t(f"{c.reason}: {c.message}", "red" if c.type == FAILED
                                else "yellow"))
    if v.platform is not None:
        pl = v.platform
        head.add_row("Platform", _t(f"{pl.kind} {pl.name} {pl.phase}"
                                    + (f" ({pl.reason})" if pl.reason else "")))
    head.add_row("Last event", _t(_ago(v.last_event)))
    if v.warnings:
        # What the number counts: a bare "Warnings 2" left people guessing.
        head.add_row("Warnings", _t(f"{v.warnings} failure report"
                                    f"{'s' if v.warnings != 1 else ''} (events of type "
                                    "Warning: kubectl describe lists them)", "red"))
    parts: list[Any] = [head]

    def table(title: str, *cols: str) -> Table:
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        for c in cols:
            t.add_column(c, overflow="fold")
        return t

    for reg in v.tables:  # links, decks, ...: one table each, as the registry says
        kind = reg.kind
        t = table(reg.title, "NAME", *reg.headers, *(CURVE_HEADERS if reg.curve else ()),
                  *(["UPDATED"] if kind.age else []))
        for row in reg.rows:
            t.add_row(*register_cells(reg, row))
        parts.append(t)
    if v.spans:
        t = table("Spans", "NAME", "COUNT", "TOTAL", "MIN", "MAX", "ERRORS")
        for s in v.spans:
            t.add_row(_t(s.name), _t(s.count), _t(fmt_seconds(s.total_s)),
                      _t(fmt_seconds(s.min_s)), _t(fmt_seconds(s.max_s)),
                      _t(s.errors, "red" if s.errors else ""))
        parts.append(t)
    if v.shows_workers:
        ends = v.has_pod_ends
        t = table("Workers", "POD", "PROGRESS", "STATE", "HEALTH", "MESSAGE",
                  *(("POD ENDED",) if ends else ()))
        for w in v.workers:
            flag = ", ".join(w.flags)
            cells = [_t(w.pod), _t("-" if w.fraction is None else f"{w.fraction * 100:.1f}%"),
                     _t(w.state, "red" if w.bad else ""), _t(flag, "red"), _t(w.message)]
            if ends:
                cells.append(_t(w.ended, "red" if w.ended_failed else ""))
            t.add_row(*cells)
        parts.append(t)
    if v.waiting:
        t = table("Waiting pods", "POD", "REASON", "SINCE", "MESSAGE")
        for wp in v.waiting:
            t.add_row(_t(wp.pod), _t(wp.reason, "yellow"), _t(_ago(wp.since)), _t(wp.message))
        parts.append(t)
    if v.pods:
        t = table("Reporting pods", "POD", "UID", "EVENTS")
        for p in v.pods:
            t.add_row(_t(p.name), _t(p.uid), _t(p.events))
        parts.append(t)
    noisy = dict(v.counters)
    if snap.rejected:
        noisy["rejected_events"] = snap.rejected
        t = table("Refused events (not applied)", "REASON", "SENDER", "EVENTS", "WHY")
        for reason, sender, n, detail in snap.refusals.rows():
            t.add_row(_t(reason, "red"), _t(sender), _t(n), _t(detail))
        parts.append(t)
    if snap.unread:
        t = table("Unreadable in the status (kept as written)", "ENTRY", "WHY")
        for problem in snap.unread.problems:
            where, _, why = problem.partition(": ")
            t.add_row(_t(where, "red"), _t(why))
        parts.append(t)
    if v.refused:
        t = table("Refused by the watcher", "REASON", "EVENTS")
        for reason, n in v.refused:
            t.add_row(_t(reason, "red"), _t(n))
        parts.append(t)
    footer = f"{v.events_applied} events applied"
    if noisy:
        footer += "; " + ", ".join(f"{k}={n}" for k, n in sorted(noisy.items()))
    parts.append(_t(footer, "dim"))
    return Group(*parts)


def register_cells(reg: RegisterTable, row: RegisterRow) -> list[Any]:
    """The table cells of one register of a named kind: its name, its value fields, its
    extremes and history when the kind keeps a curve, and how long ago it was written when
    the kind shows that."""
    kind = reg.kind
    cells = [_t(row.name), *(_t(text, "red" if f.non_finite and text in NON_FINITE else f.style)
                             for f, text in zip(kind.values, row.values, strict=True))]
    if reg.curve:
        cells += [_t(scalar_text(row.low)), _t(scalar_text(row.high)),
                  Sparkline(list(row.points))]
    if kind.age:
        cells.append(_t(_ago(row.at)))
    return cells


def one_line(snap: Snapshot) -> str:
    """A compact, sanitised line for one state (what `watch` prints when piped)."""
    v = view(snap)
    now = datetime.now(UTC).strftime("%H:%M:%S")
    pr = v.progress
    progress = "no progress" if pr is None else f"{pr.fraction * 100:5.1f}% {pr.message}"
    if pr is not None and pr.eta is not None:
        progress += f" (eta {format_seconds(pr.eta)})"
    values = ""
    counts = {reg.kind.section: len(reg.rows) for reg in v.tables}
    for reg in v.tables:  # metrics: their latest values, the first few names
        if reg.kind.inline:
            shown = reg.rows[:INLINE_MAX]
            values += "".join(f" {row.name}={row.values[0]}" for row in shown)
            if len(reg.rows) > INLINE_MAX:
                values += f" (+{len(reg.rows) - INLINE_MAX} {reg.kind.section})"
    tail = f" {v.phase.lower()}" if v.finished else ""
    if v.health_summary and v.health_summary != "Healthy":
        tail += f" health={v.health_summary}"
    return safe(f"{now} {v.task.namespace}/{v.task.name} {progress} "
                f"(links {counts.get('links', 0)}, decks {counts.get('decks', 0)}, "
                f"spans {len(v.spans)}){values}{tail}")


# Registers of an inline kind that one `watch` line shows (the table view shows them all).
INLINE_MAX = 6
