"""Following a task for `watch`: a live sequence of snapshots, from the watch of its
TaskFeedback when a watcher writes its status, else from the watches of its events and of
its pods' facts about themselves, folded here as they come (several list+watch loops read at
once through one mux), until a status appears."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from tidings.cli.kube import Action, ApiError, Kube, watch_message
from tidings.cli.snapshot import SOURCE_CR, SOURCE_EVENTS, Snapshot, cr_snapshot, status_of
from tidings.cli.taskread import TaskReader, sender_of
from tidings.kube import ListWatch, WatchLines
from tidings.kube.objects import KubeObject
from tidings.kube.watch import Listing
from tidings.schemas import ParsedEvent, TaskRef, fold, parse_watch_line
from tidings.schemas.wire.contract import (
    POD_FACTS_SELECTOR,
    TASKFEEDBACK_RESOURCE,
    task_selector,
    taskfeedback_path,
)


def follow(kube: Kube, ref: TaskRef, use_events: bool = False, must_exist: bool = True
           ) -> Iterator[Snapshot]:
    """Snapshots of the task as it changes: from TaskFeedback watches when the object has a
    status, else from the task's events and its pods' facts about themselves, folded locally,
    while a watch of the object waits for its status (unless ``use_events``): the moment a
    watcher writes one, the status is followed instead. Whenever a watch cannot resume the
    task is read afresh, and watched on from that read."""
    reader = TaskReader(kube, ref)
    snap = reader.load(use_events, must_exist)
    yield snap
    while True:
        if snap.source != SOURCE_CR:
            snap = yield from _follow_events(reader, snap, use_events)
            continue
        loop = kube.list_watch(taskfeedback_path(ref.namespace),
                               {"fieldSelector": f"metadata.name={ref.name}"},
                               action=Action("watch", TASKFEEDBACK_RESOURCE, ref.namespace),
                               resource_version=snap.resource_version, lists=False)
        for change in loop:
            if isinstance(change, WatchLines):
                snap = yield from _cr_changes(reader, snap, change.lines, loop)
                continue
            fresh = reader.load(use_events, must_exist=False)
            if _differs(fresh, snap):
                yield fresh
            snap = fresh
            if fresh.source != SOURCE_CR:
                break
            loop.listed(fresh.resource_version)


def _differs(a: Snapshot, b: Snapshot) -> bool:
    return a.source != b.source or a.state != b.state or a.refused != b.refused \
        or a.rejected != b.rejected or a.unread != b.unread


def _follow_events(reader: TaskReader, snap: Snapshot, use_events: bool
                   ) -> Generator[Snapshot, None, Snapshot]:
    """Follow a task with no status yet: its own events and the facts pods send about
    themselves whose labels name it (a zero-wiring task's), folded here, and (unless
    ``use_events``) its TaskFeedback, until a status appears: the snapshot of that status
    is returned (the caller follows the object from it)."""
    kube, ref = reader.kube, reader.ref
    mux = WatchMux()
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
                    snap = yield from _event_changes(reader, snap, change.lines, loop,
                                                     pods=name == "pods")
                    continue
                found = _status_in(ref, change.lines, loop)
                if found is not None:
                    yield found
                    return found
                continue
            if not isinstance(change, Listing):
                continue  # a watch ended at its timeout and resumes where it was
            fresh = reader.load(use_events, must_exist=False)
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
        status = status_of(obj) if kind in ("ADDED", "MODIFIED") else None
        if status is not None:
            return cr_snapshot(ref, status, str(obj["metadata"].get("resourceVersion") or ""))
    return None


class WatchMux:
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


def _cr_changes(reader: TaskReader, snap: Snapshot, lines: list[bytes], loop: ListWatch
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
        status = status_of(obj)
        if status is None:
            continue
        rv = str(obj.get("metadata", {}).get("resourceVersion") or "")
        snap = cr_snapshot(reader.ref, status, rv)
        yield snap
    return snap


def _event_changes(reader: TaskReader, snap: Snapshot, lines: list[bytes],
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
            result = reader.pod_fact(result)
            if result is None:
                continue
        why = reader.refusal(result, snap.object_uid)
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
