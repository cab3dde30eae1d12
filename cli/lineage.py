"""Pod lineage for `lineage` and `logs`: the pods of an app, matched by name AND uid (never
by prefix), and what became of each of them. The pods come from its PodSpawned records, the
reporting pods its TaskFeedback status records, and the pods whose labels name the task
(``tidings.dev/task=<app>``, or their platform's task key: a Job's, JobSet's, TrainJob's or
Workflow's name, the watcher's key list in ``schemas/wire/platform.py``), all of them: a record
never hides the pods found by status and label.

Who may speak for an app's lineage: nobody on their word. A record counts only when the pod
it names confirms it: a pod of the app's namespace with that uid, whose labels name the task
(set by whoever created it; the watcher applies the same rule to PodSpawned regarding a
TaskFeedback). A record naming any other live pod is ignored and reported; a record of a pod
that is gone or replaced cannot be confirmed any more, so it is shown as history, flagged
unverified, and never streamed. The same rule holds for the pods found without a record:
each one streamed is the live pod of that uid, whose labels name the task.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from tidings._compat import UTC
from tidings.cli.common import EXIT_INVALID, CliError, not_found, safe
from tidings.cli.kube import Action, ApiError, Kube, found_elsewhere, watch_message
from tidings.kube import ListWatch, Page, WatchLines
from tidings.kube.objects import Event, KubeObject, ObjectMeta, Pod
from tidings.schemas import (
    KIND,
    TASK_LABEL,
    LineageEntry,
    ParsedEvent,
    PodRef,
    PodSpawned,
    TaskRef,
    fold_lineage,
    format_time,
    parse_event,
    parse_time,
    parse_watch_line,
)
from tidings.schemas.wire.contract import (
    TASKFEEDBACK_RESOURCE,
    lineage_selector,
    pod_selector,
    pods_path,
    taskfeedback_path,
)
from tidings.schemas.wire.platform import (
    DEFAULT_TASK_KEYS,
    parse_task_keys,
    pod_task,
    task_selector,
)
from tidings.schemas.wire.record import POD_FIELDS, fields_of

# Where a pod of the app was found (a pod may be found several ways; see `Found`).
SPAWNED = "spawned"  # a PodSpawned record names it
STATUS = "status"  # the task's TaskFeedback status lists it among the pods that reported
LABEL = "label"  # its labels name the task (tidings.dev/task, or its platform's key)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def task_keys() -> tuple[str, ...]:
    """The pod label keys that name a task, as the watcher has them: its default list, or
    ``$TIDINGS_TASK_LABEL_KEYS`` (as for `tidings watcher run`; a bad list is an error)."""
    raw = os.environ.get("TIDINGS_TASK_LABEL_KEYS", "")
    if not raw.strip():
        return DEFAULT_TASK_KEYS
    try:
        return parse_task_keys(raw)
    except ValueError as e:
        raise CliError(f"invalid input: TIDINGS_TASK_LABEL_KEYS: {e}", EXIT_INVALID) from None


def names_task(pod: KubeObject, app: str) -> bool:
    """Whether the pod's labels name the task ``app`` (the first task key it carries)."""
    info = pod_task(pod.get("metadata"), task_keys())
    return info is not None and info.task == app


def key_of(pod: KubeObject) -> str:
    """The label key that names the pod's task (for messages), or tidings.dev/task."""
    info = pod_task(pod.get("metadata"), task_keys())
    return info.key if info is not None else TASK_LABEL


def _ours(p: object, app: str) -> bool:
    return isinstance(p, ParsedEvent) and isinstance(p.payload, PodSpawned) \
        and p.task.name == app


def load(kube: Kube, namespace: str, app: str, must_exist: bool = True
         ) -> tuple[list[LineageEntry], str]:
    """The app's lineage entries (deduplicated by pod uid, oldest first) and the list's RV."""
    raw, rv = kube.list_events(namespace, lineage_selector(app))
    entries = _recorded(raw, app)
    if must_exist and not entries:
        not_found(f"app {app!r} in namespace {namespace} (no PodSpawned events)")
    return entries, rv


def _recorded(events: Sequence[Event], app: str) -> list[LineageEntry]:
    """The lineage entries of the app's PodSpawned events among ``events``."""
    parsed = [p for p in map(parse_event, events) if _ours(p, app)]
    return fold_lineage(parsed)  # type: ignore[arg-type]


@dataclass
class Found:
    """The app's pods and where each was found: its PodSpawned records, the reporting pods of
    its TaskFeedback status and the pods whose labels name it. Every pod is keyed by uid;
    ``pods`` keeps the objects the label lists returned, so their fate needs no second read."""

    entries: list[LineageEntry]
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)  # uid -> sources
    events: dict[str, int] = field(default_factory=dict)  # uid -> events reported (status)
    pods: dict[str, Pod] = field(default_factory=dict)  # uid -> listed pod
    events_rv: str = ""  # the PodSpawned list's resourceVersion (to watch from)
    pods_rv: str = ""  # the tidings.dev/task list's resourceVersion ("" when not listed)
    fallback: bool = False  # no PodSpawned records: found by status and label alone
    # The task keys whose lists found pods of the app, and each list's resourceVersion.
    key_rvs: dict[str, str] = field(default_factory=dict)


def member(namespace: str, app: str, name: str, uid: str, when: datetime | None = None
           ) -> LineageEntry:
    """An entry for a pod found without a PodSpawned record: it belongs to the task ``app``
    (the label it must carry says so); no role, attempt or reporter."""
    return LineageEntry(subject=TaskRef(namespace, app), subject_kind=KIND,
                        pod=PodRef(name, uid, namespace), app=app, role="", attempt=0,
                        event_time=when or _EPOCH, reported_by=PodRef("", "", namespace))


def _meta(obj: KubeObject) -> ObjectMeta:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def status_pods(kube: Kube, namespace: str, app: str) -> list[tuple[str, str, int]]:
    """(name, uid, events) of the pods the TaskFeedback status records as reporting; none
    when there is no TaskFeedback (or no CRD, or no right to read it)."""
    try:
        obj = kube.get_json(taskfeedback_path(namespace, app),
                            action=Action("get", TASKFEEDBACK_RESOURCE, namespace, app))
    except ApiError as err:
        if err.forbidden or err.not_found:
            return []
        raise
    status = obj.get("status")
    pods = status.get("pods") if isinstance(status, dict) else None
    out = []
    for raw in pods if isinstance(pods, list) else []:
        try:
            p = fields_of(raw, POD_FIELDS)  # a record, or an object (a status of layout 2)
        except ValueError:
            continue
        name, uid, events = p.get("name"), p.get("uid"), p.get("events")
        if name and uid and isinstance(name, str) and isinstance(uid, str):  # never by name alone
            out.append((name, uid, events if type(events) is int else 0))
    return out


def list_labelled(kube: Kube, namespace: str, app: str, key: str = TASK_LABEL
                  ) -> tuple[list[Pod], str]:
    """The pods whose label ``key`` is ``app`` and whose labels name the task ``app`` (the
    first task key a pod carries: a JobSet's pod also carries its child Job's name)."""
    pods, rv = kube.list_pods(namespace, task_selector(key, app))
    return [p for p in pods if names_task(p, app)], rv


def discover(kube: Kube, namespace: str, app: str, must_exist: bool = True) -> Found:
    """The app's pods (see `Found`); not found when no source knows any. A PodSpawned record
    never hides the pods found by status and label: any pod of the namespace may write one,
    and a record is judged (``fate_of``) only by the pod it names."""
    entries, events_rv = load(kube, namespace, app, must_exist=False)
    found = Found([], events_rv=events_rv, fallback=not entries)
    by_uid: dict[str, LineageEntry] = {}
    for e in entries:
        by_uid[e.pod.uid] = e
        found.sources[e.pod.uid] = (SPAWNED,)
    for name, uid, events in status_pods(kube, namespace, app):
        by_uid.setdefault(uid, member(namespace, app, name, uid))
        found.sources[uid] = (*found.sources.get(uid, ()), STATUS)
        found.events[uid] = events
    for key in task_keys():
        try:
            pods, rv = list_labelled(kube, namespace, app, key)
        except ApiError as err:
            # Without the right to list pods, the records and the status still say something
            # (and each pod is then read by name); with nothing else found, that is the error.
            if not err.forbidden or not by_uid:
                raise
            break
        if key == TASK_LABEL:
            found.pods_rv = rv
        if pods:
            found.key_rvs[key] = rv
        for pod in pods:
            meta = _meta(pod)
            name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
            if not name or not uid:
                continue
            when = parse_time(meta.get("creationTimestamp"))
            by_uid.setdefault(uid, member(namespace, app, name, uid, when))
            found.sources[uid] = (*found.sources.get(uid, ()), LABEL)
            found.pods[uid] = pod
    found.entries = sorted(by_uid.values(), key=lambda e: (e.pod.name, e.pod.uid))
    if must_exist and not found.entries:
        # Said without implying a TaskFeedback exists: there may be none.
        not_found(f"app {app!r} in namespace {namespace} (no PodSpawned events, no "
                  f"TaskFeedback that lists reporting pods, no pods labelled "
                  f"{pod_selector(app)})" + found_elsewhere(kube, app, namespace))
    return found


# One watch line -> (its type, its resourceVersion, the entries it brings).
Pick = Callable[[bytes], tuple[str, str, list[LineageEntry]]]


def _follow(loop: ListWatch, pick: Pick,
            listed: Callable[[list[KubeObject]], list[LineageEntry]],
            stopped: threading.Event) -> Iterator[LineageEntry]:
    """Entries from the loop's watch lines (through ``pick``) and, whenever it relists, from
    its list (everything again: the caller deduplicates by uid), until ``stopped.is_set()``."""
    for change in loop:
        if stopped.is_set():
            return
        if isinstance(change, WatchLines):
            for line in change.lines:
                kind, line_rv, entries = pick(line)
                if kind == "ERROR":
                    loop.relist("error")
                    break
                loop.advance(line_rv)
                yield from entries
        elif isinstance(change, Page):
            yield from listed(change.items)


def follow(kube: Kube, namespace: str, app: str, resource_version: str,
           stopped: threading.Event) -> Iterator[LineageEntry]:
    """Lineage entries recorded after `resource_version`, until `stopped.is_set()`."""
    def pick(line: bytes) -> tuple[str, str, list[LineageEntry]]:
        item = parse_watch_line(line)
        new = item.type == "ADDED" and _ours(item.result, app)
        return item.type, item.resource_version, \
            fold_lineage([item.result]) if new else []  # type: ignore[list-item]

    loop = kube.watch_events(namespace, lineage_selector(app), resource_version, timeout_s=30)
    return _follow(loop, pick, lambda events: _recorded(cast("list[Event]", events), app),
                   stopped)


def follow_labelled(kube: Kube, namespace: str, app: str, resource_version: str,
                    stopped: threading.Event, key: str = TASK_LABEL
                    ) -> Iterator[LineageEntry]:
    """The pods whose label ``key`` names the app that appear after `resource_version` (a
    reporting pod carries the label, so this also finds every new reporting pod), until
    stopped."""
    def entry(pod: KubeObject) -> Iterator[LineageEntry]:
        meta = _meta(pod)
        if meta.get("name") and meta.get("uid") and names_task(pod, app):
            yield member(namespace, app, str(meta["name"]), str(meta["uid"]),
                         parse_time(meta.get("creationTimestamp")))

    def pick(line: bytes) -> tuple[str, str, list[LineageEntry]]:
        kind, obj = watch_message(line) or ("", None)
        if obj is None:
            return "", "", []
        rv = str(_meta(obj).get("resourceVersion") or "")
        if kind == "ERROR":
            return kind, "", []
        return kind, rv, list(entry(obj)) if kind in ("ADDED", "MODIFIED") else []

    loop = kube.list_watch(pods_path(namespace), {"labelSelector": task_selector(key, app)},
                           action=Action("watch", "pods", namespace),
                           resource_version=resource_version, watch_timeout=30)
    return _follow(loop, pick, lambda pods: [e for p in pods for e in entry(p)], stopped)


# --- what became of each pod --------------------------------------------------------------


def vouches(entry: LineageEntry, pod: Pod) -> bool:
    """Whether ``pod`` (the one the record names, same uid) confirms the record: its labels
    name the task."""
    return names_task(pod, entry.subject.name)


@dataclass
class PodFate:
    entry: LineageEntry
    state: str  # "current" | "replaced" | "gone" | "unknown" | "disowned"
    phase: str  # the pod's phase when current, else ""
    current_uid: str = ""  # the uid now carrying that name, when replaced
    reason: str = ""
    sources: tuple[str, ...] = (SPAWNED,)  # where the pod was found
    events: int = 0  # events it reported, when the TaskFeedback status lists it
    key: str = TASK_LABEL  # the label key naming its task, when found by label

    def label(self) -> str:
        if self.state == "current":
            return self.phase or "Unknown"
        if self.state == "replaced":
            return f"replaced (name now held by uid {self.current_uid})"
        if self.state == "gone":
            return "gone"
        if self.state == "disowned":
            return f"not labelled for task {self.entry.subject.name}; ignored"
        return f"unknown ({self.reason})"

    def origin(self) -> str:
        """Who recorded the pod, or (no lineage controller) where it was found."""
        e = self.entry
        if self.spawned:
            return f"spawned {format_time(e.event_time)[:19]}Z by {e.reported_by.name}"
        return "found by " + ", ".join(
            f"{STATUS} ({self.events} events)" if s == STATUS else
            f"{LABEL} {task_selector(self.key, e.app)}" if s == LABEL else s
            for s in self.sources)

    @property
    def verified(self) -> bool:
        """The pod confirmed the record (only a current pod can)."""
        return self.state == "current"

    @property
    def spawned(self) -> bool:
        return SPAWNED in self.sources

    def to_data(self) -> dict[str, Any]:
        e = self.entry
        return {
            "pod": e.pod.name, "uid": e.pod.uid, "namespace": e.pod.namespace,
            "app": e.app, "role": e.role, "attempt": e.attempt,
            "subject": {"kind": e.subject_kind, "name": e.subject.name},
            "sources": list(self.sources),
            "spawned_at": format_time(e.event_time) if self.spawned else None,
            "reported_by": {"pod": e.reported_by.name, "uid": e.reported_by.uid}
            if self.spawned else None,
            **({"events": self.events} if STATUS in self.sources else {}),
            "state": self.state, "phase": self.phase, "verified": self.verified,
            **({"current_uid": self.current_uid} if self.current_uid else {}),
        }


def fate(kube: Kube, entry: LineageEntry) -> PodFate:
    try:
        pod = kube.get_pod(entry.pod.namespace, entry.pod.name)
    except ApiError as err:
        why = "cannot get pods" if err.forbidden else f"HTTP {err.status}"
        return PodFate(entry, "unknown", "", reason=why)
    return fate_of(entry, pod)


def fate_of(entry: LineageEntry, pod: Pod | None) -> PodFate:
    if pod is None:
        return PodFate(entry, "gone", "")
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    if uid != entry.pod.uid:
        return PodFate(entry, "replaced", "", current_uid=uid)
    if not vouches(entry, pod):
        return PodFate(entry, "disowned", "")
    phase = str((pod.get("status") or {}).get("phase") or "Unknown")
    return PodFate(entry, "current", phase)


def fates(kube: Kube, found: Found) -> list[PodFate]:
    """What became of each pod: the labelled pods as listed, the others read by name (and
    then matched by uid)."""
    def one(e: LineageEntry) -> PodFate:
        uid = e.pod.uid
        listed = found.pods.get(uid)
        f = fate_of(e, listed) if listed is not None else fate(kube, e)
        f.sources = found.sources.get(uid, (SPAWNED,))
        f.events = found.events.get(uid, 0)
        if listed is not None:
            f.key = key_of(listed)
        return f

    entries = found.entries
    if len(entries) <= 1:
        return [one(e) for e in entries]
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(one, entries))


# --- the tree -----------------------------------------------------------------------------

_PHASE_STYLE = {"Running": "green", "Succeeded": "blue", "Pending": "yellow", "Failed": "red"}


def render(namespace: str, app: str, items: list[PodFate]) -> Any:
    from rich.text import Text
    from rich.tree import Tree

    kinds = sorted({safe(f.entry.subject_kind) for f in items}) or ["app"]
    root = Tree(Text.assemble((f"{'/'.join(kinds)} ", "dim"), (safe(app), "bold"),
                              (f"  ({namespace}, {len(items)} pods)", "dim")))
    by_role: dict[str, Any] = {}
    for f in items:
        e = f.entry
        parent = root
        if e.role:
            role = safe(e.role)
            if role not in by_role:
                by_role[role] = root.add(Text.assemble(("role ", "dim"), (role, "bold cyan")))
            parent = by_role[role]
        style = _PHASE_STYLE.get(f.phase, "") if f.state == "current" else "dim red"
        label = Text.assemble(
            (safe(e.pod.name), "bold" if f.state == "current" else "strike"),
            (f"  uid {safe(e.pod.uid)[:8]}", "dim"),
            (f"  attempt {e.attempt}" if e.attempt else "", "dim"),
            "  ", (safe(f.label()), style), (f"  {safe(f.origin())}", "dim"))
        parent.add(label)
    return root
