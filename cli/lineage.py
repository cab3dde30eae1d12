"""Pod lineage for `lineage` and `logs`: the pods recorded as spawned for an app (PodSpawned
events, matched by name AND uid, never by prefix) and what became of each of them.

Who may speak for an app's lineage: nobody on their word. A record counts only when the pod
it names confirms it: a pod of the app's namespace with that uid, labelled
``tidings.dev/task=<app>`` by whoever created it (the watcher applies the same rule to
PodSpawned regarding a TaskFeedback). A record naming any other live pod is ignored and
reported; a record of a pod that is gone or replaced cannot be confirmed any more, so it is
shown as history, flagged unverified, and never streamed.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tidings.cli.common import CliError, not_found, safe
from tidings.cli.kube import ApiError, Kube, lines
from tidings.cli.taskview import lineage_selector
from tidings.schemas import (
    TASK_LABEL,
    LineageEntry,
    ParsedEvent,
    PodSpawned,
    fold_lineage,
    format_time,
    parse_event,
    parse_watch_line,
)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _ours(p: object, app: str) -> bool:
    return isinstance(p, ParsedEvent) and isinstance(p.payload, PodSpawned) \
        and p.task.name == app


def load(kube: Kube, namespace: str, app: str, must_exist: bool = True
         ) -> tuple[list[LineageEntry], str]:
    """The app's lineage entries (deduplicated by pod uid, oldest first) and the list's RV."""
    raw, rv = kube.list_events(namespace, lineage_selector(app))
    parsed = [p for p in map(parse_event, raw) if _ours(p, app)]
    entries = fold_lineage(parsed)  # type: ignore[arg-type]
    if must_exist and not entries:
        not_found(f"app {app!r} in namespace {namespace} (no PodSpawned events)")
    return entries, rv


def follow(kube: Kube, namespace: str, app: str, resource_version: str,
           stopped: Any) -> Iterator[LineageEntry]:
    """Lineage entries recorded after `resource_version`, until `stopped.is_set()`.

    Relists (yielding everything, the caller deduplicates by uid) when a watch ends."""
    import time

    rv = resource_version
    quick = 0
    while not stopped.is_set():
        started = time.monotonic()
        try:
            resp = kube.watch_events(namespace, lineage_selector(app), rv, timeout_s=30)
        except ApiError as err:
            if err.status == 403:
                raise
            resp = None
        except CliError:
            resp = None  # the cluster went away for a moment: retry below
        if resp is not None:
            try:
                for line in lines(resp):
                    item = parse_watch_line(line)
                    if item.type == "ERROR":
                        rv = ""
                        break
                    if item.resource_version:
                        rv = item.resource_version
                    if item.type == "ADDED" and _ours(item.result, app):
                        yield from fold_lineage([item.result])  # type: ignore[list-item]
            except Exception:
                pass  # broken watch: relist below
            finally:
                resp.release_conn()
        if stopped.is_set():
            return
        quick = quick + 1 if time.monotonic() - started < 1.0 else 0
        if quick:
            stopped.wait(min(0.2 * 2 ** quick, 5.0))
        try:
            entries, rv = load(kube, namespace, app, must_exist=False)
        except CliError as err:
            if isinstance(err, ApiError) and err.status == 403:
                raise
            continue
        yield from entries


# --- what became of each pod --------------------------------------------------------------


def vouches(entry: LineageEntry, pod: dict[str, Any]) -> bool:
    """Whether ``pod`` (the one the record names, same uid) confirms the record."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return isinstance(labels, dict) and labels.get(TASK_LABEL) == entry.subject.name


@dataclass
class PodFate:
    entry: LineageEntry
    state: str  # "current" | "replaced" | "gone" | "unknown" | "disowned"
    phase: str  # the pod's phase when current, else ""
    current_uid: str = ""  # the uid now carrying that name, when replaced
    reason: str = ""

    def label(self) -> str:
        if self.state == "current":
            return self.phase or "Unknown"
        if self.state == "replaced":
            return f"replaced (name now held by uid {self.current_uid})"
        if self.state == "gone":
            return "gone"
        if self.state == "disowned":
            return f"not labelled {TASK_LABEL}={self.entry.subject.name}; ignored"
        return f"unknown ({self.reason})"

    @property
    def verified(self) -> bool:
        """The pod confirmed the record (only a current pod can)."""
        return self.state == "current"

    def to_data(self) -> dict[str, Any]:
        e = self.entry
        return {
            "pod": e.pod.name, "uid": e.pod.uid, "namespace": e.pod.namespace,
            "app": e.app, "role": e.role, "attempt": e.attempt,
            "subject": {"kind": e.subject_kind, "name": e.subject.name},
            "spawned_at": format_time(e.event_time),
            "reported_by": {"pod": e.reported_by.name, "uid": e.reported_by.uid},
            "state": self.state, "phase": self.phase, "verified": self.verified,
            **({"current_uid": self.current_uid} if self.current_uid else {}),
        }


def fate(kube: Kube, entry: LineageEntry) -> PodFate:
    try:
        pod = kube.get_pod(entry.pod.namespace, entry.pod.name)
    except ApiError as err:
        why = "cannot get pods" if err.status == 403 else f"HTTP {err.status}"
        return PodFate(entry, "unknown", "", reason=why)
    return fate_of(entry, pod)


def fate_of(entry: LineageEntry, pod: dict[str, Any] | None) -> PodFate:
    if pod is None:
        return PodFate(entry, "gone", "")
    uid = str((pod.get("metadata") or {}).get("uid") or "")
    if uid != entry.pod.uid:
        return PodFate(entry, "replaced", "", current_uid=uid)
    if not vouches(entry, pod):
        return PodFate(entry, "disowned", "")
    phase = str((pod.get("status") or {}).get("phase") or "Unknown")
    return PodFate(entry, "current", phase)


def fates(kube: Kube, entries: list[LineageEntry]) -> list[PodFate]:
    if len(entries) <= 1:
        return [fate(kube, e) for e in entries]
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(lambda e: fate(kube, e), entries))


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
            "  ", (safe(f.label()), style),
            (f"  spawned {format_time(e.event_time)[:19]}Z by {safe(e.reported_by.name)}",
             "dim"))
        parent.add(label)
    return root
