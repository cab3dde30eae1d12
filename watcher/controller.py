"""The active watcher, wired: event reflectors deliver per-task keys (``delivery.py``); fold
workers admit and fold (``fold.py``); the writer persists (``writer.py``); the health clock
(``health_clock.py``) and the TTL (``ttl.py``) run beside them.

watch loop --(parse, push, add key)--> WorkQueue --(one worker per key)--> admission + fold
--> Store --(changed)--> StatusWriter (coalesced). Nothing slow ever runs on the watch loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tidings.kube import Client, paginate
from tidings.schemas.engine.admission import Retry
from tidings.schemas.engine.deletions import keep_for
from tidings.schemas.engine.state import Limits, TaskState
from tidings.schemas.status.health import stalled_since_written
from tidings.schemas.wire.contract import (
    BUS_SELECTOR,
    events_path,
    pods_path,
    taskfeedback_path,
)
from tidings.schemas.wire.event import TaskRef
from tidings.schemas.wire.rejection import Rejection

from .announce import Announcer
from .deletions import DeletionRecord
from .delivery import Delivery, EventSource
from .fold import Folder
from .health_clock import HealthClock
from .kubelet_events import KubeletEvents
from .logs import RejectionLog
from .metrics import Metrics
from .nodes import Nodes
from .platform import PlatformTasks
from .queue import WorkQueue
from .reflector import Reflector
from .runs import Runs
from .senders import Senders, kube_getter
from .settings import Settings, health_settings, task_keys
from .store import Store
from .tracking import Tracking
from .ttl import TtlSweeper
from .writer import StatusWriter, controller_of

log = logging.getLogger("tidings.watcher")


class Controller:
    """Everything the leader runs; ``start`` returns once the workers and watches are running."""

    def __init__(self, kube: Client, settings: Settings, metrics: Metrics,
                 watch_kube: Client | None = None,
                 may_write: Any = None, deletions_at: tuple[str, str] | None = None) -> None:
        self.kube, self.s, self.metrics = kube, settings, metrics
        self.watch_kube = watch_kube or kube
        self.store = Store(Limits(clock_skew=timedelta(seconds=settings.clock_skew),
                                  event_ttl=timedelta(seconds=settings.event_ttl),
                                  max_instances=settings.max_instances),
                           on_saved=metrics.saved)
        self.queue: WorkQueue[TaskRef] = WorkQueue()
        tracking = Tracking.of(settings, os.environ.get("POD_NAMESPACE", ""))
        self.senders = Senders(kube_getter(kube), keys=task_keys(settings),
                               on_change=self._observed_changed, holds=self.store.holds,
                               tracking=tracking)
        self.nodes = Nodes(on_change=self._node_changed)
        self.platform = PlatformTasks(kube, on_change=self._observed_changed,
                                      keys=task_keys(settings), tracking=tracking)
        self.writer = StatusWriter(kube, self.store, metrics, interval=settings.write_interval,
                                   coalesce_interval=settings.coalesce_interval,
                                   workers=settings.write_concurrency,
                                   slow=settings.slow_writes,
                                   may_write=may_write or (lambda: True),
                                   max_rate=settings.max_write_rate,
                                   budget=settings.write_budget,
                                   priority=settings.write_policy != "fifo",
                                   owner_of=self.platform.owner,
                                   owner_gone=lambda o: self.platform.verify(o) is False,
                                   health=health_settings(settings),
                                   announce=Announcer(kube).written)
        self.health = HealthClock(self.store, self.writer.health,
                                  due=lambda task: self.writer.changed(task, critical=True))
        # A relist delivers every event again: each rejection is logged once per event.
        rejections = RejectionLog(lambda reason: metrics.events_rejected.labels(reason).inc())
        # Deleted TaskFeedbacks, kept in the ConfigMap ``deletions_at`` (namespace, name)
        # across terms: a relist does not fold their runs back.
        self.deletions = DeletionRecord(kube, deletions_at,
                                        keep_for(settings.event_ttl, settings.clock_skew),
                                        metrics, may_write=may_write or (lambda: True))
        self.delivery = Delivery(self.store, self.queue, self.senders, metrics, rejections,
                                 retry_after=settings.sender_retry,
                                 deletions=self.deletions.deletions)
        self.folder = Folder(self.store, self.queue, self.writer, metrics, self.senders,
                             self.platform,
                             Runs(kube, self.store, self.platform, self.senders, self.health),
                             self.health, rejections, retry_after=settings.sender_retry,
                             tracked=self.tracked, kubelet_events=KubeletEvents(kube),
                             nodes=self.nodes)
        self.ready = threading.Event()
        self._reflectors: list[Reflector] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    def _observed_changed(self, task: TaskRef) -> None:
        """A pod of ``task`` appeared, ended or waits, or its platform object changed (on the
        watch loop: cheap): fold it, when the task is held or tracked (``--track``: else an
        observation alone never makes a task)."""
        if self.store.holds(task) or self.senders.tracked(task) is not None \
                or self.platform.root(task) is not None:
            self.queue.add_many({task: None})

    def _node_changed(self, node: str) -> None:
        """A node stopped or started being Ready: fold the tasks of its running pods."""
        tasks = self.senders.tasks_on(node)
        if tasks:  # (a task neither held nor tracked gets nothing from its fold)
            self.queue.add_many(dict.fromkeys(tasks))

    def tracked(self, task: TaskRef) -> bool | Retry:
        """``task`` exists before it speaks (``--track``): its own platform object is watched
        here, or a selected pod of it whose owner claim (if it makes one) is a live object's
        (a forged claim makes nothing); Retry.LATER when that cannot be told now. For the
        fold workers (it may read the claimed object)."""
        if self.platform.root(task) is not None:
            return True
        first = self.senders.tracked(task)
        if first is None:
            return False
        pod, info = first
        said = self.platform.check_claim(task, info, pod)
        return said if said is Retry.LATER else not isinstance(said, Rejection)

    # --- wiring -------------------------------------------------------------------------
    def _paths(self, collection: Callable[[str | None], str]) -> list[str]:
        """``collection``'s path once per watched namespace (one cluster-wide path if none)."""
        return [collection(ns) for ns in self.s.namespaces] or [collection(None)]

    def _thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _reflector(self, path: str, selector: list[tuple[str, str]], source: Any,
                   metadata_only: bool = False) -> Reflector:
        resource = source.resource
        r = Reflector(
            self.watch_kube, path, selector, source,
            on_relist=lambda cause: self.metrics.relists.labels(cause).inc()
            if resource == "events" else None,
            on_restart=lambda: self.metrics.watch_restarts.labels(resource).inc(),
            watch_timeout=self.s.watch_timeout, page_size=self.s.page_size,
            quiet=getattr(source, "quiet", None), metadata_only=metadata_only)
        self._reflectors.append(r)
        self._thread(r.run, f"reflector-{resource}")
        return r

    def start(self) -> None:
        # The reads first: a start that fails on one is tried again on this controller, and
        # must leave no hold behind (it would never be released: no task would be folded).
        # The deletions the terms before saw are read before any bus event is listed.
        self.deletions.load()
        t0 = time.monotonic()
        loaded = self._load()
        log.info("loaded %d task states in %.2fs", loaded, time.monotonic() - t0)
        # Held from here, before anything can be folded (the pods are listed first).
        listed: list[str | None] = [*self.s.namespaces] or [None]
        sources = [EventSource(self.delivery, ns) for ns in listed]
        # Each deletion from now on (the TaskFeedbacks' metadata alone).
        deleted = [self._reflector(p, [], self.deletions.source(), metadata_only=True)
                   for p in self._paths(taskfeedback_path)]
        self._thread(lambda: self.deletions.run(self._stopping), "deletions")
        # One pod informer per task key and namespace: a selector cannot say "any of these".
        pods = [self._reflector(p, [("labelSelector", src.key)], src)
                for p in self._paths(pods_path) for src in self.senders.sources()]
        # One informer per platform kind and namespace (Jobs, JobSets, Workflows, TrainJobs).
        objects = [self._reflector(src.kind.path(ns), [], src)
                   for ns in [*self.s.namespaces] or [""] for src in self.platform.sources()]
        # One list+watch of the Nodes (cluster-scoped): which ones are not Ready.
        objects.append(self._reflector("/api/v1/nodes", [], self.nodes.source()))
        # Best effort (a cache miss falls back to a GET anyway), and never long for the
        # platform kinds, some of which may not be served here at all.
        for readers, seconds in ((pods, 10.0), (objects, 2.0), (deleted, 10.0)):
            deadline = time.monotonic() + seconds
            for r in readers:
                r.synced.wait(max(0.0, deadline - time.monotonic()))
        self.writer.start()
        for i in range(self.s.concurrency):
            self._thread(self.folder.run, f"fold-{i}")
        # The unfinished tasks' pods may have ended, or gone, while no watcher watched.
        self.queue.add_many(dict.fromkeys(self.store.unfinished()))
        for i in range(self.s.concurrency):  # (a pod the API cannot answer for stalls no other)
            self._thread(self.delivery.run_resolver, f"resolve-{i}")
        events = [self._reflector(events_path(ns), [("fieldSelector", BUS_SELECTOR)], source)
                  for ns, source in zip(listed, sources, strict=True)]
        self._thread(lambda: self._monitor(events), "monitor")
        self._thread(self.health.run, "health")
        if self.s.ttl_after_finished > 0:
            self._thread(self._ttl_loop, "ttl")

    def _load(self) -> int:
        """Seed the store from existing TaskFeedback statuses (version vectors included)."""
        n = 0
        for path in self._paths(taskfeedback_path):
            def get(q: list[tuple[str, Any]], path: str = path) -> Any:
                return self.kube.request("GET", path, query=q, timeout=(5, 60))

            for data in paginate(get, None, 500):
                for obj in data.get("items") or []:
                    meta = obj.get("metadata") or {}
                    task = TaskRef(meta.get("namespace", ""), meta.get("name", ""))
                    status = obj.get("status")
                    state = self.store.load(task, status, rv=meta.get("resourceVersion"),
                                            uid=meta.get("uid"), owner=controller_of(obj))
                    if stalled_since_written(state, status, self.writer.health) \
                            and self.store.touch(task):
                        self.writer.changed(task, critical=True)  # silent while we were down
                    self.health.schedule(task, state)
                    n += 1
        return n

    def _monitor(self, events: list[Reflector]) -> None:
        """Readiness (initial list folded and written), the gauges and idle-task eviction."""
        every = min([60.0] + [x for x in (self.s.evict_after, self.s.compact_after) if x > 0])
        next_sweep = time.monotonic() + every
        while not self._stopping.is_set():
            if time.monotonic() >= next_sweep:
                self.evict_idle()
                self.compact_idle()
                next_sweep = time.monotonic() + every
            self.metrics.queue_depth.set(len(self.queue))
            self.metrics.tasks_compact.set(self.store.compacted)
            self.metrics.write_queue_depth.set(self.writer.backlog())
            self.metrics.status_lag.set(self.writer.oldest())
            self.metrics.tasks.set(len(self.store))
            if not self.ready.is_set() and all(r.synced.is_set() for r in events) \
                    and self.queue.pending() == 0 and self.delivery.unresolved() == 0:
                self.ready.set()
                self.metrics.ready.set(1)
                log.info("initial list folded; ready")
            self._stopping.wait(0.2)

    def _ttl_loop(self) -> None:
        sweeper = TtlSweeper(self.kube, self._paths(taskfeedback_path),
                             self.s.ttl_after_finished,
                             on_deleted=self._deleted, pods_of=self.senders.pods_of)
        while not self._stopping.wait(sweeper.interval):
            if not self.writer.may_write():
                continue  # fenced: a replica without the lease deletes nothing either
            try:
                late = self.folder.late_after_ttl
                while late:
                    sweeper.delete_events(late.pop())
                self.metrics.ttl_deleted.inc(sweeper.sweep())
            except Exception as e:  # unreachable, forbidden: the next sweep tries again
                log.warning("ttl sweep failed: %s", e)

    def _deleted(self, task: TaskRef, uid: str, state: TaskState) -> None:
        self.store.bury(task, uid, frozenset(state.applied.instances))
        self.writer.forget(task)
        self.health.schedule(task, None)

    def evict_idle(self) -> int:
        """Drop idle, fully written tasks from memory (their state lives in their status)."""
        if self.s.evict_after <= 0:
            return 0
        n = self.store.evict_idle(self.s.evict_after, lambda t: self.queue.is_processing(t)
                                  or self.writer.is_processing(t) or self.health.pending(t))
        if n:
            self.metrics.tasks_evicted.inc(n)
        return n

    def compact_idle(self) -> int:
        """Keep idle, fully written tasks in their compact form (rebuilt on their next use)."""
        if self.s.compact_after <= 0:
            return 0
        return self.store.compact_idle(self.s.compact_after, lambda t: self.queue.is_processing(t)
                                       or self.writer.is_processing(t))

    # --- shutdown -----------------------------------------------------------------------
    def abort(self) -> None:
        """Stop at once without flushing (the lease is lost: writing more could overwrite a
        newer leader's state). Workers still busy finish their item, fenced by ``may_write``."""
        self._stopping.set()
        self.deletions.stop()
        self.health.stop()
        self.delivery.stop()
        for r in self._reflectors:
            r.stop()
        self.queue.shutdown()
        self.writer.stop()
        m = self.metrics  # this term's gauges no longer describe anything held
        for g in (m.ready, m.tasks, m.queue_depth, m.write_queue_depth, m.tasks_compact,
                  m.status_lag):
            g.set(0)

    def stop(self, flush_timeout: float = 10.0) -> bool:
        """Stop watching, fold what is buffered, write what is folded (bounded by a deadline)."""
        for r in self._reflectors:
            r.stop()
        deadline = time.monotonic() + flush_timeout
        while self.queue.pending() and time.monotonic() < deadline:
            time.sleep(0.02)
        flushed = self.writer.flush(max(0.0, deadline - time.monotonic()))
        self.deletions.flush()  # (a deletion seen in the last second is not lost either)
        self._stopping.set()
        self.deletions.stop()
        self.health.stop()
        self.delivery.stop()
        self.queue.shutdown()
        self.writer.stop()
        return flushed
