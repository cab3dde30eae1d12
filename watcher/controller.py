"""The active watcher: event reflectors feed per-task keys; fold workers apply; the writer persists.

watch loop --(parse, push, add key)--> WorkQueue --(one worker per key)--> sender check + fold
--> Store --(changed)--> StatusWriter (coalesced). Nothing slow ever runs on the watch loop.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import orjson

from tidings._compat import UTC
from tidings.kube import Client, KubeError, paginate
from tidings.kube.objects import KubeObject
from tidings.schemas.constants import API_VERSION, KIND
from tidings.schemas.contract import (
    BUS_SELECTOR,
    events_path,
    pods_path,
    taskfeedback_path,
)
from tidings.schemas.event import ObjectRef, ParsedEvent, TaskRef, WatchItem, parse_event
from tidings.schemas.fastpath import fast_watch_line
from tidings.schemas.folding import fold_checked
from tidings.schemas.health import next_stall, stalled_since_written
from tidings.schemas.payloads import PodSpawned, Progress
from tidings.schemas.platform import PodTask
from tidings.schemas.rejection import Rejection, RejectReason
from tidings.schemas.state import Limits, TaskState

from .coalesce import critical_change
from .logs import OncePerEvent, event_key, task_fields
from .metrics import Metrics
from .platform import PlatformTasks
from .queue import WorkQueue
from .reflector import Reflector
from .senders import Retry, Senders, as_task_fact, kube_getter
from .settings import Settings, health_settings, task_keys
from .store import Observations, Store
from .ttl import TtlSweeper
from .writer import StatusWriter, controller_of

log = logging.getLogger("tidings.watcher")

# How long the facts of a new run wait for the garbage collector to delete the TaskFeedback
# of the object it replaced (it takes seconds where kube-controller-manager runs).
GC_GRACE_S = 60


class EventSource:
    """Reflector source for bus events: parse, count, buffer per task, add the task key."""

    resource = "events"

    def __init__(self, controller: Controller) -> None:
        self.c = controller

    def list_begin(self) -> None:
        pass

    def list_page(self, items: list[KubeObject]) -> None:
        self.c.deliver_many([parse_event(obj) for obj in items], items)

    def list_done(self, resource_version: str) -> None:
        pass

    def watch_line(self, line: bytes) -> WatchItem:
        item = fast_watch_line(line)  # parse_watch_line's result, faster
        if item.type in ("ADDED", "MODIFIED"):
            self.c.deliver(item.result, line)
        elif item.type == "DELETED":
            self.c.metrics.events_skipped.labels("deleted").inc()  # TTL expiry; state outlives it
        return item

    def watch_lines(self, lines: list[bytes]) -> list[WatchItem]:
        """``watch_line`` for the lines of one socket read, delivered as one batch. Stops
        after a line that ends the watch (ERROR, or a line that is not a watch event), as the
        reflector stops reading there."""
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
            self.c.deliver_many(results, raws)
        if deleted:
            self.c.metrics.events_skipped.labels("deleted").inc(deleted)
        return items


class Controller:
    """Everything the leader runs; ``start`` returns once the workers and watches are running."""

    def __init__(self, kube: Client, settings: Settings, metrics: Metrics,
                 watch_kube: Client | None = None,
                 may_write: Any = None) -> None:
        self.kube, self.s, self.metrics = kube, settings, metrics
        self.watch_kube = watch_kube or kube
        self.store = Store(Limits(clock_skew=timedelta(seconds=settings.clock_skew),
                                  event_ttl=timedelta(seconds=settings.event_ttl),
                                  max_instances=settings.max_instances),
                           on_saved=metrics.saved)
        # A relist delivers every event again: each rejection is logged once per event.
        self.rejections_logged = OncePerEvent()
        # Tasks the TTL deleted that got a late fact since: the next sweep deletes the bus
        # events of each again, so a restart's relist cannot bring the task back either.
        self.late_after_ttl: set[TaskRef] = set()
        self.queue: WorkQueue[TaskRef] = WorkQueue()
        self.senders = Senders(kube_getter(kube), keys=task_keys(settings),
                               on_change=self._observed_changed, holds=self._holds)
        self.platform = PlatformTasks(kube, on_change=self._observed_changed)
        # Tasks whose TaskFeedback is owned by an object a newer one of that name replaced:
        # since when their new run's facts wait for the garbage collector to delete it.
        self._replaced: dict[TaskRef, float] = {}
        # Facts about a sender's own pod, waiting for its labels to name their task.
        self._unresolved: queue.SimpleQueue[ParsedEvent] = queue.SimpleQueue()
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
                                   health=health_settings(settings))
        # The health clock: silence makes no event, so a running task is judged again when a
        # worker's silence passes its limit (one write then, none while nothing changes).
        # task -> that time (epoch s); the heap holds (time, task), stale entries skipped.
        self._stall_due: dict[TaskRef, float] = {}
        self._stall_heap: list[tuple[float, TaskRef]] = []
        self._stall_lock = threading.Lock()
        self._stall_wake = threading.Event()
        self.ready = threading.Event()
        self._reflectors: list[Reflector] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # --- wiring -------------------------------------------------------------------------
    def _paths(self, collection: Callable[[str | None], str]) -> list[str]:
        """``collection``'s path once per watched namespace (one cluster-wide path if none)."""
        return [collection(ns) for ns in self.s.namespaces] or [collection(None)]

    def _thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _reflector(self, path: str, selector: list[tuple[str, str]], source: Any) -> Reflector:
        resource = source.resource
        r = Reflector(
            self.watch_kube, path, selector, source,
            on_relist=lambda cause: self.metrics.relists.labels(cause).inc()
            if resource == "events" else None,
            on_restart=lambda: self.metrics.watch_restarts.labels(resource).inc(),
            watch_timeout=self.s.watch_timeout, page_size=self.s.page_size,
            quiet=getattr(source, "quiet", None))
        self._reflectors.append(r)
        self._thread(r.run, f"reflector-{resource}")
        return r

    def start(self) -> None:
        t0 = time.monotonic()
        loaded = self._load()
        log.info("loaded %d task states in %.2fs", loaded, time.monotonic() - t0)
        # One pod informer per task key and namespace: a selector cannot say "any of these".
        pods = [self._reflector(p, [("labelSelector", src.key)], src)
                for p in self._paths(pods_path) for src in self.senders.sources()]
        # One informer per platform kind and namespace (Jobs, JobSets, Workflows, TrainJobs).
        objects = [self._reflector(src.kind.path(ns), [], src)
                   for ns in [*self.s.namespaces] or [""] for src in self.platform.sources()]
        # Best effort (a cache miss falls back to a GET anyway), and never long for the
        # platform kinds, some of which may not be served here at all.
        for readers, seconds in ((pods, 10.0), (objects, 2.0)):
            deadline = time.monotonic() + seconds
            for r in readers:
                r.synced.wait(max(0.0, deadline - time.monotonic()))
        self.writer.start()
        for i in range(self.s.concurrency):
            self._thread(self._fold_worker, f"fold-{i}")
        # The unfinished tasks' pods may have ended, or gone, while no watcher watched.
        self.queue.add_many(dict.fromkeys(self.store.unfinished()))
        self._thread(self._resolve_worker, "resolve")
        events = [self._reflector(p, [("fieldSelector", BUS_SELECTOR)], EventSource(self))
                  for p in self._paths(events_path)]
        self._thread(lambda: self._monitor(events), "monitor")
        self._thread(self._health_clock, "health")
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
                    self.schedule_health(task, state)
                    n += 1
        return n

    # --- the health clock -----------------------------------------------------------------
    def schedule_health(self, task: TaskRef, state: TaskState | None,
                        now: datetime | None = None) -> None:
        """Judge ``task`` again when its next running worker's silence passes its limit."""
        due = None if state is None else next_stall(
            state, now or datetime.now(UTC), self.writer.health)
        with self._stall_lock:
            if due is None:
                self._stall_due.pop(task, None)
                return
            at = due.timestamp()
            if self._stall_due.get(task) == at:
                return
            self._stall_due[task] = at
            heapq.heappush(self._stall_heap, (at, task))
            soonest = self._stall_heap[0][0] == at
        if soonest:
            self._stall_wake.set()

    def _health_clock(self) -> None:
        while not self._stopping.is_set():
            with self._stall_lock:
                wait = 60.0
                due: list[tuple[float, TaskRef]] = []
                now = time.time()
                while self._stall_heap:
                    at, task = self._stall_heap[0]
                    if self._stall_due.get(task) != at:
                        heapq.heappop(self._stall_heap)  # superseded by a newer schedule
                    elif at <= now:
                        heapq.heappop(self._stall_heap)
                        del self._stall_due[task]
                        due.append((at, task))
                    else:
                        wait = min(wait, at - now)
                        break
            for at, task in due:
                if self.store.touch(task):  # a status write judges it with the time then
                    self.writer.changed(task, critical=True)
                    self.schedule_health(task, self.store.get(task),
                                         datetime.fromtimestamp(at, UTC))
            self._stall_wake.wait(max(0.01, wait))
            self._stall_wake.clear()

    def stall_pending(self, task: TaskRef) -> bool:
        """The health clock will judge ``task`` again (so it stays in memory until then)."""
        with self._stall_lock:
            return task in self._stall_due

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
                    and self.queue.pending() == 0 and self._unresolved.empty():
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
                while self.late_after_ttl:
                    sweeper.delete_events(self.late_after_ttl.pop())
                self.metrics.ttl_deleted.inc(sweeper.sweep())
            except Exception as e:  # unreachable, forbidden: the next sweep tries again
                log.warning("ttl sweep failed: %s", e)

    def _deleted(self, task: TaskRef, uid: str, state: TaskState) -> None:
        self.store.bury(task, uid, frozenset(state.applied.instances))
        self.writer.forget(task)
        self.schedule_health(task, None)

    # --- the watch loop's side ----------------------------------------------------------
    def deliver(self, result: ParsedEvent | Rejection | None, raw: Any = None) -> None:
        """O(1): count, buffer the event under its task, mark the task key dirty. ``raw`` (the
        Event object or its watch line) names a rejected event in the log."""
        self.deliver_many([result], [raw])

    def deliver_many(self, results: Sequence[ParsedEvent | Rejection | None],
                     raws: Sequence[Any] = ()) -> None:
        """``deliver`` for a batch (``raws[i]`` names ``results[i]`` in the log): the counters,
        the store and the queue once per batch, so a socket read wakes the fold workers once,
        not once per event."""
        m = self.metrics
        m.events_seen.inc(len(results))
        events: list[ParsedEvent] = []
        not_task = 0
        for i, r in enumerate(results):
            if type(r) is ParsedEvent:
                if r.regarding_kind == KIND and r.regarding_api_version == API_VERSION:
                    events.append(r)
                elif r.regarding_kind == "Pod" and type(r.payload) is not PodSpawned:
                    # About its sender's own pod: its task is the one the pod's labels name.
                    known = self._task_known(r)
                    if known is not None:
                        events.append(known)
                    else:
                        self._unresolved.put(r)
                else:
                    not_task += 1  # lineage (PodSpawned) is not a task fact
            elif isinstance(r, Rejection):
                m.events_rejected.labels(r.reason.value).inc()  # per delivery, as documented
                self._log_refused(r, raws[i] if i < len(raws) else None)
        if not_task:
            m.events_skipped.labels("not_task").inc(not_task)
        if events:
            self.store.push_many(events)
            self.queue.add_many(dict.fromkeys(ev.task for ev in events))

    # --- facts about a pod: the task its labels name -------------------------------------
    def _task_known(self, ev: ParsedEvent) -> ParsedEvent | None:
        """The fact retargeted to its pod's task when the pod cache already knows it (O(1),
        on the watch loop); None: the resolver looks (a GET, or a refusal)."""
        s = ev.sender
        known, info = self.senders.lookup((s.namespace or ev.task.namespace, s.name, s.uid))
        if known and isinstance(info, PodTask) and not info.error:
            return self._retarget(ev, info)
        return None

    def _retarget(self, ev: ParsedEvent, info: PodTask) -> ParsedEvent:
        return as_task_fact(ev, info.task)

    def _resolve_worker(self) -> None:
        """Facts about pods the cache does not know yet: read the pod (or refuse the fact),
        then hand it to the fold like any other."""
        while not self._stopping.is_set():
            try:
                ev = self._unresolved.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._resolve(ev)
            except Exception:
                log.exception("resolving the task of %s/%s failed", ev.task.namespace, ev.name)

    def _resolve(self, ev: ParsedEvent) -> None:
        verdict = self.senders.task_of(ev)
        if verdict is Retry.LATER:
            self._stopping.wait(self.s.sender_retry)
            self._unresolved.put(ev)
            return
        if isinstance(verdict, Rejection):
            self._refused(ev.task, ev, verdict)  # no task to count it in: the metric and log
            return
        assert isinstance(verdict, PodTask)
        fact = self._retarget(ev, verdict)
        self.store.push_many([fact])
        self.queue.add_many({fact.task: None})

    def _log_refused(self, rejection: Rejection, raw: Any) -> None:
        """Log an unparseable event once (by namespace, name, resourceVersion) when it can be
        named; a nameless one is counted only, its reason being all there is to say."""
        if isinstance(raw, bytes | str):
            try:
                raw = orjson.loads(raw).get("object")
            except Exception:  # not JSON, or not a watch event: nameless
                raw = None
        key = event_key(raw)
        if key is not None and self.rejections_logged.first(key):
            log.info("rejected %s/%s: %s: %s", key[0], key[1], rejection.reason.value,
                     rejection.message, extra={"namespace": key[0], "event": key[1],
                                               "reason": rejection.reason.value})

    # --- workers ------------------------------------------------------------------------
    def _fold_worker(self) -> None:
        self.queue.serve(self.fold_task, lambda task: log.exception(
            "fold of %s/%s failed", task.namespace, task.name, extra=task_fields(task)))

    def fold_task(self, task: TaskRef) -> None:
        """Fold every pending event of ``task`` (runs in one worker; never two for one key)."""
        m = self.metrics
        # The sender check's verdict per (sender, proof) within this fold: every input of
        # ``verify`` for a task fact is in the key (the pod's namespace, name and uid, the
        # sender proof; the task is this fold's), so a repeat asks nothing new. Keyed by the
        # PodRef's identity: the events hold their senders, so no id is reused meanwhile.
        # Lineage (PodSpawned, judged by the pod it names) and Retry are never kept.
        verdicts: dict[tuple[int, str], str | Rejection] = {}
        # Verdicts given before the fold (the checks below), by event: the fold takes them
        # as they were, so each event's lookup is counted once and under how it was made.
        screened: dict[int, str | Rejection | Retry] = {}

        def verdict_of(ev: ParsedEvent) -> str | Rejection | Retry:
            given = screened.pop(id(ev), None)
            if given is not None:
                return given
            key = (id(ev.sender), ev.sender_proof)
            lineage = type(ev.payload) is PodSpawned
            kept = None if lineage else verdicts.get(key)
            if kept is not None:
                return kept
            fresh = self.senders.verify(ev)
            if not lineage and not isinstance(fresh, Retry):
                # A pod fetched by "get" is in the pod cache from then on: a repeat would
                # be answered from it.
                verdicts[key] = "cache" if fresh == "get" else fresh
            return fresh

        if not self.store.seeded(task) and not self.store.pending(task):
            # Only what its pods' objects say brought it here: a task this watcher let go of
            # (evicted) is read back; one it never held gets nothing.
            if not self.store.evicted(task):
                return
            if not self._seed(task):
                self.queue.add_after(task, self.s.sender_retry)
                return
        if not self.store.seeded(task):
            # A task new to this watcher: its senders are checked before anything is kept
            # or read for it, so a name that only refused events claim costs no lasting
            # memory and no API call (issue 18, item 4).
            pending = self.store.pending(task)
            said = [verdict_of(ev) for ev in pending]
            screened.update(zip(map(id, pending), said, strict=True))
            if not any(type(v) is str for v in said):
                if any(v is Retry.LATER for v in said):
                    self.queue.add_after(task, self.s.sender_retry)
                    return
                for ev, v in zip(pending, said, strict=True):
                    assert isinstance(v, Rejection)
                    self._refused(task, ev, v)
                self.store.drop_unseeded(task, pending)
                return
            if not self._seed(task):
                self.queue.add_after(task, self.s.sender_retry)
                return
        # Only a verified sender's event makes the watcher read the object: a refused one
        # naming random uids costs no API call.
        foreign: set[str] = set()
        for ev in self.store.foreign(task):
            screened[id(ev)] = verdict_of(ev)
            if type(screened[id(ev)]) is str:
                foreign.add(ev.regarding_uid)
        if foreign and not self._check_object(task, foreign):
            self.queue.add_after(task, self.s.sender_retry)
            return
        if not self._same_run(task):
            self.queue.add_after(task, self.s.sender_retry)
            return
        uid, stale, buried = self.store.identity(task)
        base, events = self.store.take(task)
        later: list[ParsedEvent] = []
        events = self._with_job_workers(task, events, later)
        skipped = m.events_skipped
        # Counted here and added to the metrics once per fold (a labelled inc costs about as
        # much as the fold of an event); the same totals as counting each event.
        accepted: dict[str, int] = {}
        refused: dict[str, int] = {}
        late_n = 0
        late_after_ttl = False
        claims: dict[int, Rejection | Retry | None] = {}  # per sender (PodRef identity)

        def claim_of(ev: ParsedEvent) -> Rejection | Retry | None:
            """A Rejection when the sender's pod claims an owner no live object is."""
            got = claims.get(id(ev.sender), Retry.LATER)
            if got is Retry.LATER:
                got = self._verify_claim(task, ev)
                if got is not Retry.LATER:
                    claims[id(ev.sender)] = got
            return got

        def admit(ev: ParsedEvent, late: bool) -> bool:
            nonlocal late_n, late_after_ttl
            if late:
                # Created before the compaction watermark: the fold skips it and counts it
                # (lateSkipped); no sender lookup for it.
                late_n += 1
                return True
            # Every event is checked (a repeat by its verdict above): a (name, uid) seen before
            # says nothing about the namespace an event now claims (issue 10, item 1).
            verdict = verdict_of(ev)
            if isinstance(verdict, Retry):
                later.append(ev)
                return False
            if not isinstance(verdict, Rejection):
                claim = claim_of(ev)
                if claim is Retry.LATER:
                    later.append(ev)
                    return False
                # A verified sender still speaks only for the object its event names (a
                # re-run deletes and re-creates the TaskFeedback), and a run the TTL
                # deleted is over.
                if claim is not None:
                    verdict = claim
                elif ev.regarding_uid and (ev.regarding_uid != uid
                                           or ev.regarding_uid in stale):
                    verdict = Rejection.of(
                        RejectReason.OTHER_OBJECT,
                        f"the event names TaskFeedback uid {ev.regarding_uid}, not the "
                        f"task's object ({uid or 'none exists'}): an earlier run's")
                elif ev.instance in buried:
                    late_after_ttl = True
                    verdict = Rejection.of(
                        RejectReason.DELETED_TASK,
                        f"emitter instance {ev.instance} belongs to a finished run whose "
                        "TaskFeedback the TTL deleted; a late fact does not re-create it")
            if isinstance(verdict, Rejection):
                if self._refused(task, ev, verdict):
                    refused[verdict.reason.value] = refused.get(verdict.reason.value, 0) + 1
                return False
            accepted[verdict] = accepted.get(verdict, 0) + 1
            return True

        # One batch fold of everything pending; duplicates are skipped before the fold (and
        # not counted in the state), so the persisted counters don't depend on delivery.
        try:
            state, applied, duplicates = fold_checked(base, events, admit)
        finally:
            if late_n:
                skipped.labels("late").inc(late_n)
            for how, n in accepted.items():
                m.sender_lookups.labels(how).inc(n)
            if accepted:
                m.events_applied.inc(sum(accepted.values()))
        if duplicates:
            skipped.labels("duplicate").inc(duplicates)
        if applied:
            self.store.put(task, state, base=base, events=applied)
        if refused and self.store.refuse(task, refused) and not applied:
            # Only the refusal counts changed: never urgent, so a refused sender cannot
            # buy the task status writes faster than the coalescing interval.
            self.writer.changed(task, critical=False)
        if applied:
            self.writer.changed(task, critical=critical_change(base, state, applied))
            if state.workers is not base.workers:  # (a worker reported: paces moved)
                self.schedule_health(task, self.store.get(task))
        if late_after_ttl:
            self.late_after_ttl.add(task)
        if later:
            for ev in later:
                self.store.push(ev)
            self.queue.add_after(task, self.s.sender_retry)
        self._observe(task)

    # --- what the objects say -------------------------------------------------------------
    def _holds(self, task: TaskRef) -> bool:
        return self.store.holds(task)

    def _observed_changed(self, task: TaskRef) -> None:
        """A pod of ``task`` ended or waits (on the watch loop: O(1)): fold it, when the task
        is held (an observation alone never makes a task)."""
        if self.store.holds(task):
            self.queue.add_many({task: None})

    def _observe(self, task: TaskRef) -> None:
        """Fold what the task's pods' objects (and its platform object) say now into its
        state, beside its facts; the first time in this term, with its reporting pods that
        went while no watcher watched."""
        verdicts = self.senders.verdicts(task)
        check = not self.store.pods_checked(task)
        if check:
            state = self.store.get(task)
            if state is not None and not state.finished and state.pods:
                seen = {(v.pod, v.uid) for v in verdicts}
                verdicts += [v for v in self.senders.gone(
                    task, [p for p in state.pods if p not in seen])]
        platform = self.platform.outcome(task)
        if platform is None:
            # No pod of this term verified its claim yet (a restart): the object the status
            # already follows still decides.
            state = self.store.get(task)
            known = state.observed.platform if state is not None else None
            platform = self.platform.current(task, known) if known is not None else None
        seen_now = Observations(tuple(v for v in verdicts if v.terminal),
                                tuple(v for v in verdicts if not v.terminal), platform)
        changed = self.store.observe(task, seen_now, check_pods=check)
        if changed is not None:
            before, after = changed
            # A phase it moves is written within the write interval; the rest (a retried
            # attempt's end, a pod waiting) with the coalesced changes.
            self.writer.changed(task, critical=before.phase != after.phase)
            self.schedule_health(task, after)  # (an ended pod's worker is no longer judged)

    def _with_job_workers(self, task: TaskRef, events: list[ParsedEvent],
                          later: list[ParsedEvent]) -> list[ParsedEvent]:
        """What the senders' platform labels add to the task: its owner (for the TaskFeedback
        the writer creates) and, when the task is a batch/v1 Job, its ``spec.completions`` as
        the worker count of its pods' progress (unless a pod declared more), so the task
        completes only once that many pods reported a final. A Job that cannot be read right
        now holds its pods' progress back (``later``)."""
        out: list[ParsedEvent] = []
        infos: dict[int, PodTask | None] = {}  # per sender (the events hold their PodRefs)
        for ev in events:
            s = ev.sender
            if id(s) in infos:
                info = infos[id(s)]
            else:
                info = infos[id(s)] = self._pod_task(task, ev)
            p = ev.payload
            if info is None or type(p) is not Progress or info.job != task.name:
                out.append(ev)
                continue
            completions = self.platform.completions(task, info)
            if completions is Retry.LATER:
                later.append(ev)
            elif isinstance(completions, int) and completions > p.workers:
                out.append(replace(ev, payload=p.model_copy(update={"workers": completions})))
            else:
                out.append(ev)
        return out

    def _pod_task(self, task: TaskRef, ev: ParsedEvent) -> PodTask | None:
        """What the sender pod's labels say of ``task`` (from the pod cache), when they name
        it."""
        s = ev.sender
        known, got = self.senders.lookup((s.namespace or task.namespace, s.name, s.uid))
        return got if known and isinstance(got, PodTask) and not got.error \
            and got.task == task.name else None

    def _verify_claim(self, task: TaskRef, ev: ParsedEvent) -> Rejection | Retry | None:
        """The owner the sender's pod claims for ``task`` (a Job's controller-uid, its
        controller ownerReference, a JobSet's uid label) is believed only for the live
        object with that uid (then it owns the TaskFeedback and decides the task); a claim no
        live object bears is refused, with the pod's facts (issue 25, item 4)."""
        return self.platform.check_claim(task, self._pod_task(task, ev), ev.sender.name)

    def _same_run(self, task: TaskRef) -> bool:
        """False while the task's TaskFeedback is owned by an object that a live one of the
        same kind and name replaced (``kubectl replace --force``, a CI re-run): it is the
        earlier run's, which the garbage collector deletes with its owner; the new run's
        facts wait for that (at most ``GC_GRACE_S``), then go to a new TaskFeedback owned by
        the new object. True when the facts may be folded now."""
        owner = self.store.owner(task)
        if owner is None:
            return True
        kind, name, uid = owner.kind, owner.name, owner.uid
        newer = False
        senders = {id(ev.sender): ev for ev in self.store.pending(task)}
        for ev in senders.values():
            info = self._pod_task(task, ev)
            o = self.platform.claimed(info, ev.sender.name) if info is not None else None
            if isinstance(o, ObjectRef) and (o.kind, o.name) == (kind, name) and o.uid != uid \
                    and self.platform.verify(o) is True:
                newer = True
                break
        if not newer:
            self._replaced.pop(task, None)
            return True
        try:
            obj = self.kube.request("GET", taskfeedback_path(task.namespace, task.name),
                                    timeout=(5, 30))
        except KubeError as e:
            if not e.not_found:
                return False
            log.info("taskfeedback %s/%s of the replaced %s %s is gone: a new run", task.namespace,
                     task.name, kind, name, extra=task_fields(task))
            self.store.absent(task, new_run=True)
            self._replaced.pop(task, None)
            return True
        meta = obj.get("metadata") or {}
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

    def _refused(self, task: TaskRef, ev: ParsedEvent, rejection: Rejection) -> bool:
        """Count and log a refused event; True the first time this event is refused (a relist
        delivers it again: the task's status counts it once)."""
        self.metrics.events_rejected.labels(rejection.reason.value).inc()
        if not self.rejections_logged.first((task.namespace, ev.name, ev.resource_version)):
            return False
        log.info("rejected %s/%s: %s", task.namespace, ev.name, rejection.message,
                 extra={**task_fields(task), "event": ev.name,
                        "reason": rejection.reason.value})
        return True

    def _check_object(self, task: TaskRef, claimed: set[str]) -> bool:
        """Pending events name TaskFeedback uids the state does not belong to: read the object
        once. A re-created one (another uid) replaces the state, which starts from its status;
        every claimed uid that is not the object's is stale from then on (uids are never
        reused). False when the API could not tell."""
        try:
            obj = self.kube.request("GET", taskfeedback_path(task.namespace, task.name),
                                    timeout=(5, 30))
        except KubeError as e:
            if not e.not_found:
                log.warning("cannot read %s/%s: %s", task.namespace, task.name, e,
                            extra=task_fields(task))
                return False
            obj = None
        meta = (obj or {}).get("metadata") or {}
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
        if self.store.unwritten(task) is not None:
            self.writer.changed(task)
        return True

    def _seed(self, task: TaskRef) -> bool:
        """Load a task that is new to this watcher (or was evicted) from its TaskFeedback, so
        its fold continues the persisted state. False when the API could not tell."""
        path = taskfeedback_path(task.namespace, task.name)
        try:
            obj = self.kube.request("GET", path, timeout=(5, 30))
        except KubeError as e:
            if not e.not_found:
                log.warning("cannot load %s/%s: %s", task.namespace, task.name, e,
                            extra=task_fields(task))
                return False
            self.store.load(task, None, exists=False)
            return True
        meta = obj.get("metadata") or {}
        self.schedule_health(task, self.store.load(
            task, obj.get("status"), rv=meta.get("resourceVersion"), uid=meta.get("uid"),
            owner=controller_of(obj)))
        return True

    def evict_idle(self) -> int:
        """Drop idle, fully written tasks from memory (their state lives in their status)."""
        if self.s.evict_after <= 0:
            return 0
        n = self.store.evict_idle(self.s.evict_after, lambda t: self.queue.is_processing(t)
                                  or self.writer.is_processing(t) or self.stall_pending(t))
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
        self._stall_wake.set()
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
        self._stopping.set()
        self._stall_wake.set()
        self.queue.shutdown()
        self.writer.stop()
        return flushed
