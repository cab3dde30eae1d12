"""Delivery: the bus events of the watch, parsed, each handed to its task (buffered in the
store, the task's key marked dirty in the work queue), O(1) per event on the watch loop. A
fact its sender sent about its own pod goes to the task the pod's labels name: at once when
the pod cache knows the pod, else by a resolver (a GET), keyed by pod, whose retries wait
on the queue's delay so that a pod the API cannot answer for stalls no other.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.kube.objects import KubeObject
from tidings.schemas.engine.admission import Retry, about_its_pod, as_task_fact, regards_a_task
from tidings.schemas.engine.deletions import Deletions, of_deleted_run
from tidings.schemas.wire.event import ParsedEvent, TaskRef, WatchItem, parse_event
from tidings.schemas.wire.fastpath import fast_watch_line
from tidings.schemas.wire.platform import PodTask
from tidings.schemas.wire.rejection import Rejection

from .logs import RejectionLog
from .metrics import Metrics
from .placements import PodKey
from .queue import WorkQueue
from .senders import Senders
from .store import Store

log = logging.getLogger("tidings.watcher")


@dataclass
class Delivery:
    """Hands parsed events to their tasks: ``deliver_many`` on the watch loop, the resolver's
    workers (``run_resolver``) for pods the cache does not know yet."""

    store: Store
    queue: WorkQueue[TaskRef]
    senders: Senders
    metrics: Metrics
    rejections: RejectionLog
    retry_after: float  # seconds before a pod the API could not answer for is read again
    # The deleted TaskFeedbacks (``deletions.py``): a list's events of their runs are dropped.
    deletions: Deletions = field(default_factory=Deletions)
    # Facts about pods the cache does not know yet, by pod, until the resolver reads it (and
    # whether a list brought each).
    _unresolved: dict[PodKey, list[tuple[ParsedEvent, bool]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _resolve: WorkQueue[PodKey] = field(default_factory=WorkQueue)

    def deliver_many(self, results: Sequence[ParsedEvent | Rejection | None],
                     raws: Sequence[Any] = (), listed: bool = False) -> None:
        """Count, buffer each event under its task, mark the tasks dirty: the counters, the
        store and the queue once per batch, so a socket read wakes the fold workers once, not
        once per event. ``raws[i]`` (the Event object or its watch line) names ``results[i]``
        in the log when it is refused. ``listed``: a list brought them (a deleted run's are
        dropped: ``_not_deleted``)."""
        m = self.metrics
        m.events_seen.inc(len(results))
        events: list[ParsedEvent] = []
        not_task = 0
        for i, r in enumerate(results):
            if type(r) is ParsedEvent:
                if regards_a_task(r):
                    events.append(r)
                elif about_its_pod(r):
                    known = self._task_known(r)
                    if known is not None:
                        events.append(known)
                    else:
                        self._defer(r, listed)
                else:
                    not_task += 1  # lineage (PodSpawned) is not a task fact
            elif isinstance(r, Rejection):
                self.rejections.unparsed(r, raws[i] if i < len(raws) else None)
        if not_task:
            m.events_skipped.labels("not_task").inc(not_task)
        if listed:
            events = self._not_deleted(events)
        if events:
            self.store.push_many(events)
            self.queue.add_many(dict.fromkeys(ev.task for ev in events))

    def _not_deleted(self, events: list[ParsedEvent]) -> list[ParsedEvent]:
        """The listed events but those of a deleted TaskFeedback's run (a list brings them
        again after the deletion, and they would make the object again), counted. A watch
        brings events as they are created: this term folds them as they come (a deleted
        object's state is started anew by the writer, which finds it gone)."""
        deletions = self.deletions
        if not deletions:  # (no deletion remembered: nothing to look up)
            return events
        kept = [ev for ev in events if not of_deleted_run(
            ev.created, ev.regarding_uid, deletions.deleted(ev.task))]
        if len(kept) != len(events):
            self.metrics.events_skipped.labels("deleted_run").inc(len(events) - len(kept))
        return kept

    def _task_known(self, ev: ParsedEvent) -> ParsedEvent | None:
        """The fact retargeted to its pod's task when the pod cache already knows it (O(1),
        on the watch loop); None: the resolver looks (a GET, or a refusal)."""
        s = ev.sender
        known, info = self.senders.lookup((s.namespace or ev.task.namespace, s.name, s.uid))
        if known and isinstance(info, PodTask) and not info.error:
            return as_task_fact(ev, info.task)
        return None

    # --- the resolver -------------------------------------------------------------------
    def _defer(self, ev: ParsedEvent, listed: bool) -> None:
        s = ev.sender
        pod = (s.namespace or ev.task.namespace, s.name, s.uid)
        with self._lock:
            self._unresolved.setdefault(pod, []).append((ev, listed))
        self._resolve.add(pod)

    def unresolved(self) -> int:
        """Pods whose facts wait for their task (queued, retrying or being read)."""
        return self._resolve.pending()

    def run_resolver(self) -> None:
        """A resolver worker's loop, until ``stop``."""
        self._resolve.serve(self._resolve_pod, lambda pod: log.exception(
            "resolving the task of pod %s/%s failed", pod[0], pod[1]))

    def stop(self) -> None:
        self._resolve.shutdown()

    def _resolve_pod(self, pod: PodKey) -> None:
        """Read the pod (or refuse its facts), then hand its facts to the fold like any
        other; when the API cannot answer, ask again after ``retry_after``."""
        with self._lock:
            facts = self._unresolved.get(pod)
        if not facts:
            return
        verdict = self.senders.task_of(facts[0][0])
        if verdict is Retry.LATER:
            self._resolve.add_after(pod, self.retry_after)
            return
        with self._lock:
            facts = self._unresolved.pop(pod, [])
        if isinstance(verdict, Rejection):
            for ev, _ in facts:  # no task to count it in: the metric and the log
                self.rejections.refused(ev.task, ev, verdict)
            return
        assert isinstance(verdict, PodTask)
        retargeted = [as_task_fact(ev, verdict.task) for ev, listed in facts if not listed]
        retargeted += self._not_deleted([as_task_fact(ev, verdict.task)
                                         for ev, listed in facts if listed])
        if not retargeted:
            return
        self.store.push_many(retargeted)
        self.queue.add_many(dict.fromkeys(ev.task for ev in retargeted))


class EventSource:
    """Reflector source for bus events: parse, then deliver (``Delivery``). From when it is
    made until its first list is all in, and during every relist, no task of its namespace
    is folded (``Store.hold``): a list comes in name order, which is no order of creation, in
    pages, so a fold between two pages could take a worker's final without the windows it
    sent before it, or skip on-time events as late past the instance cap; and a new term's
    pod watch (listed first) may see a worker's end before its last facts are listed."""

    resource = "events"

    def __init__(self, delivery: Delivery, namespace: str | None = None) -> None:
        self.delivery = delivery
        self.namespace = namespace  # whose events it lists (None: every namespace's)
        # (a list that failed midway begins again: held once)
        self._listing = True
        delivery.store.hold(namespace)

    def list_begin(self) -> None:
        # The whole list is folded as one batch (``Store.hold``).
        if not self._listing:
            self._listing = True
            self.delivery.store.hold(self.namespace)

    def list_page(self, items: list[KubeObject]) -> None:
        self.delivery.deliver_many([parse_event(obj) for obj in items], items, listed=True)

    def list_done(self, resource_version: str) -> None:
        if self._listing:
            self._listing = False
            held = self.delivery.store.release(self.namespace)
            if held:
                self.delivery.queue.add_many(dict.fromkeys(held))

    def watch_line(self, line: bytes) -> WatchItem:
        return self.watch_lines([line])[0]

    def watch_lines(self, lines: list[bytes]) -> list[WatchItem]:
        """The lines of one socket read, parsed (``parse_watch_line``'s results, faster) and
        delivered as one batch. Stops after a line that ends the watch (ERROR, or a line that
        is not a watch event), as the reflector stops reading there."""
        items: list[WatchItem] = []
        results: list[ParsedEvent | Rejection | None] = []
        raws: list[bytes] = []
        deleted = 0
        for line in lines:
            item = fast_watch_line(line)
            items.append(item)
            t = item.type
            if t in ("ADDED", "MODIFIED"):
                results.append(item.result)
                raws.append(line)
            elif t == "DELETED":
                deleted += 1
            elif t != "BOOKMARK":
                break
        if results:
            self.delivery.deliver_many(results, raws)
        if deleted:  # TTL expiry; state outlives it
            self.delivery.metrics.events_skipped.labels("deleted").inc(deleted)
        return items
