"""Status persistence: create the TaskFeedback if absent, then replace its ``/status``, paced.

At most one write per task is in flight; the newest folded state is what the next write
sends. Which task is written next is the ``Coalescer``'s plan (critical changes first, then
the oldest coalescible one); how fast is the global write budget, spent in estimated
API-server CPU (``write_cost`` of each request's body, calibrated by
bench/bench_status_write.py), optionally capped in writes/s as well. A worker waits for the
budget before it takes a task, so no task is held while waiting; a slow task only ever
occupies the one worker writing it.

Every status write carries the resourceVersion its state builds on (optimistic concurrency):
a write from a deposed leader, delayed in flight, gets 409 instead of landing over a newer
leader's status. On 409 the writer re-reads the object and rebases (``Store.rebase``): if the
status holds events ours lacks it becomes the base and our unsaved events are re-applied on
top (version vectors skip what it already has), so nothing is lost or counted twice.
A failed write is retried by the plan's per-task backoff, never inside the write as well.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from tidings._compat import UTC
from tidings.emitter.task import owner_reference
from tidings.kube import JSON, METADATA_ONLY, Client, KubeError
from tidings.kube.flowcontrol import TokenBucket
from tidings.schemas.engine.admission import Retry
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.decoder import NOTHING_UNREAD, Unread
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.status.health import DEFAULT_HEALTH, HEALTH_CONDITIONS, HealthSettings, judge
from tidings.schemas.wire.contract import taskfeedback_body, taskfeedback_path
from tidings.schemas.wire.event import ObjectRef, TaskRef

from .coalesce import Coalescer, ends_stall
from .logs import task_fields
from .metrics import Metrics
from .store import Owner, Store, refused_status

log = logging.getLogger("tidings.watcher.writer")

SLOW_WRITE_ENV = "TIDINGS_TEST_SLOW_WRITE_TASK"
# (connect, read) seconds of one write attempt: short, so a write of a replica that stopped
# renewing its lease is rarely still in flight when a standby takes over (and if it is, the
# resourceVersion precondition refuses it).
WRITE_TIMEOUT = (2.0, 3.0)
# Who owns .status in managedFields (the API server would say "OpenAPI-Generator" or nothing).
FIELD_MANAGER = "tidings-watcher"
# Conflicts resolved (re-read, rebase, write again) within one write before it counts as a
# failure and waits for the coalescer's backoff.
MAX_CONFLICTS = 4
# API-server CPU of one request, in milliseconds, from what its body holds. bench_status_write
# measured, in units of a bus event's create in the same run: 3.0x for a minimal status (41
# JSON values, 0.8 kB), 4.9x for a typical one (125 values, 2.7 kB), 11x for one at every cap
# (439 values, 65 kB). The API server's work per write (decode, prune, validate, copy, encode,
# garbage) goes with the number of values far more than with bytes, so the estimate counts
# values: at a create of ~0.9 ms (a quiet 2-core machine), ~1.9 ms a request plus ~0.02 ms a
# value and ~0.02 ms a kB.
COST_BASE_MS = 1.9
COST_MS_PER_VALUE = 0.02
COST_MS_PER_BYTE = 0.02e-3
# The tasks whose last phase the writer remembers, to log a task's end once (an operator
# follows tasks in the log without `kubectl get`): bounded, the oldest forgotten first.
PHASES_REMEMBERED = 10_000


_NONE_STALLED: tuple[frozenset[str], bool] = (frozenset(), False)


def write_cost(nbytes: int, values: int = 0) -> float:
    """Estimated API-server milliseconds of one request carrying ``nbytes`` of body that
    hold ``values`` JSON values (objects, arrays and scalars)."""
    return COST_BASE_MS + COST_MS_PER_VALUE * values + COST_MS_PER_BYTE * nbytes


def json_values(o: object) -> int:
    """How many JSON values ``o`` holds, itself included."""
    if isinstance(o, dict):
        return 1 + sum(json_values(v) for v in o.values())
    if isinstance(o, list):
        return 1 + sum(json_values(v) for v in o)
    return 1


class NotLeader(Exception):
    """Writing is not allowed right now (the lease is not held)."""


class Conflict(Exception):
    """The object is not at the resourceVersion our state builds on (409/404)."""


def parse_slow_writes(spec: str | None) -> dict[str, float]:
    """``"taskA:2.5,taskB:1"`` -> {"taskA": 2.5, "taskB": 1.0} (a test hook; bad parts ignored)."""
    out: dict[str, float] = {}
    for part in (spec or "").split(","):
        name, _, secs = part.strip().rpartition(":")
        try:
            if name:
                out[name] = float(secs)
        except ValueError:
            continue
    return out


def status_body(state: TaskState, refused: dict[str, int] | None = None,
                unread: Unread = NOTHING_UNREAD, *, now: datetime | None = None,
                health: HealthSettings = DEFAULT_HEALTH) -> dict[str, Any]:
    """The whole ``.status`` as written: the fold's camelCase status with its health judged
    at ``now`` (default: the clock now), cut to the byte budget (``STATUS_BUDGET``, dropping
    detail in ``BUDGET_DROP_ORDER``) so a write never fails for its size, the entries of the
    status it was read from that could not be read, as they were (``unread``: a status is
    never written with less than it held), and the events refused for the task by reason
    (``refused``: a handful of counters, never dropped)."""
    judged = judge(state, now or datetime.now(UTC), health)
    status = unread.merge_into(to_status(state, budget=STATUS_BUDGET, health=judged), state)
    counts = refused_status(refused or {})
    if counts:
        status["refused"] = counts
    return status



class StatusWriter:
    """Paced status writes on a bounded pool of write workers.

    ``budget``: API-server CPU (cores, i.e. seconds per second) the writes may spend, 0:
    unlimited; ``max_rate``: writes/s over all tasks as well, 0: unlimited. ``interval``
    spaces the writes of a task with a critical change, ``coalesce_interval`` (default:
    ``interval``) those with coalescible changes only; ``priority=False`` is the old single
    FIFO.
    """

    def __init__(self, kube: Client, store: Store, metrics: Metrics, *, interval: float = 0.5,
                 coalesce_interval: float | None = None, workers: int = 8,
                 slow: dict[str, float] | None = None,
                 may_write: Callable[[], bool] = lambda: True, max_rate: float = 0.0,
                 budget: float = 0.0, priority: bool = True,
                 owner_of: Callable[[TaskRef], ObjectRef | Retry | None] = lambda task: None,
                 owner_gone: Callable[[ObjectRef], bool] = lambda owner: False,
                 health: HealthSettings = DEFAULT_HEALTH,
                 announce: Callable[[TaskRef, str | None, dict[str, Any]], None]
                 = lambda task, uid, status: None) -> None:
        self.kube, self.store, self.metrics = kube, store, metrics
        # Told each status written (the object's uid, the body): announce.py's Events.
        self.announce = announce
        self.health = health
        # The health conditions that hold for each running task, as last written (the
        # tasks_unhealthy gauge counts them: bounded labels, the task is in the status).
        self._unhealthy: dict[TaskRef, frozenset[str]] = {}
        self._unhealthy_counts: Counter[str] = Counter()
        # The workers each running task's written status names stalled (its list, and
        # whether the list is cut): their next report is written as soon as a stall was.
        self._stalled: dict[TaskRef, tuple[frozenset[str], bool]] = {}
        # The platform object (Job, JobSet, Workflow, ...) a new TaskFeedback is owned by, and
        # whether a TaskFeedback's owner is known to be gone.
        self.owner_of, self.owner_gone = owner_of, owner_gone
        self.co: Coalescer[TaskRef] = Coalescer(interval, coalesce_interval, priority=priority)
        self.workers = workers
        self.slow = slow if slow is not None else parse_slow_writes(os.environ.get(SLOW_WRITE_ENV))
        self.may_write = may_write
        # Status writes are the watcher's main cost to the API server (decode, schema
        # validation and managedFields of a large object): the budgets bound it globally.
        # The cost bucket counts milliseconds of API-server CPU, with one second's worth
        # as its burst.
        self.cost = TokenBucket(budget * 1000, burst=budget * 1000) if budget > 0 else None
        self.rate = TokenBucket(max_rate, burst=max(1, int(max_rate))) if max_rate > 0 else None
        self._cond = threading.Condition()
        self._stopped = False
        self._ends = 0
        self._threads: list[threading.Thread] = []
        self._unreadable_logged: set[tuple[TaskRef, object]] = set()
        self._phases: OrderedDict[TaskRef, str] = OrderedDict()
        self._phases_lock = threading.Lock()

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"writer-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def changed(self, task: TaskRef, critical: bool = True) -> None:
        """A fold changed ``task``'s state (``critical``: see ``coalesce.critical_change``)."""
        with self._cond:
            if self.co.changed(task, time.monotonic(), critical):
                self._cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return self.co.idle()

    def is_processing(self, task: TaskRef) -> bool:
        """A worker is writing ``task`` right now."""
        with self._cond:
            return self.co.in_flight(task)

    def backlog(self) -> int:
        """Tasks waiting for a status write (due or within their interval)."""
        with self._cond:
            return self.co.due()

    def oldest(self) -> float:
        """Seconds the oldest unwritten change has waited (0: everything is written)."""
        with self._cond:
            return self.co.oldest(time.monotonic())

    def flush(self, timeout: float) -> bool:
        """Wait until every changed state is written (or ``timeout``); True when idle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.idle():
                return True
            time.sleep(0.02)
        return self.idle()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    # --- workers ------------------------------------------------------------------------
    def _budget_wait(self) -> float:
        """Seconds until the budgets allow another write (0: now)."""
        return max(0.0 if self.cost is None else self.cost.wait_time(0),
                   0.0 if self.rate is None else self.rate.wait_time(0))

    def _next(self) -> TaskRef | None:
        """The next task to write, once the budget allows; None once stopped."""
        with self._cond:
            while not self._stopped:
                budget_wait = self._budget_wait()
                if budget_wait > 0:
                    self._cond.wait(budget_wait)
                    continue
                task, wait = self.co.next(time.monotonic())
                if task is not None:
                    return task
                self._cond.wait(wait)  # None: until a change or a finished write
            return None

    def _work(self) -> None:
        while (task := self._next()) is not None:
            ok = False
            try:
                ok = self._one(task)
            except Exception:
                log.exception("status write of %s/%s failed", task.namespace, task.name,
                              extra=task_fields(task))
            finally:
                with self._cond:
                    self.co.end(task, time.monotonic(), ok)
                    self._ends += 1
                    if self._ends % 1024 == 0:
                        self.co.sweep(time.monotonic())
                    self._cond.notify()

    def _one(self, task: TaskRef) -> bool:
        if self.store.unwritten(task) is None:
            return True  # written meanwhile (a rebase found the status already has it all)
        if self.rate is not None:
            self.rate.take()
        return self.may_write() and self._write(task)

    def _spend(self, nbytes: int, values: int = 0) -> None:
        """Charge one request to the cost budget (its real size, after admission: a write
        admitted while the balance is positive may take it into debt, which later writes
        wait out)."""
        ms = write_cost(nbytes, values)
        self.metrics.status_write_cost.inc(ms / 1000)
        if self.cost is not None:
            self.cost.take(ms)

    def _write(self, task: TaskRef) -> bool:
        self.metrics.writes_in_flight.inc()
        try:
            return self._write_now(task)
        finally:
            self.metrics.writes_in_flight.dec()

    def _write_now(self, task: TaskRef) -> bool:
        """Write the newest state over the object version it builds on; on a conflict, re-read
        and rebase (``Store.rebase``) and write again. One attempt of the whole: a failure is
        retried by the coalescer's backoff, never here as well."""
        t0 = time.perf_counter()
        try:
            for _ in range(MAX_CONFLICTS):
                snap = self.store.unwritten(task)
                if snap is None:
                    return True
                state, version, rv = snap
                unread = self.store.unread(task)
                if unread.partial:
                    if not self._readable(task):
                        return True  # (refused, counted; tried again on the task's next change)
                    continue  # repaired: write over what it holds now
                body = status_body(state, self.store.refused(task), unread,
                                   health=self.health)
                try:
                    new_rv, uid, owner = self._persist(task, body, rv)
                except Conflict as e:
                    self.metrics.status_writes.labels("conflict").inc()
                    log.info("status write %s/%s: %s; re-reading", task.namespace, task.name, e,
                             extra=task_fields(task))
                    self._reread(task)
                    continue
                self.store.written(task, version, new_rv, uid, owner)
                self._written_health(task, body)
                self._log_phase(task, state)
                try:
                    self.announce(task, uid, body)
                except Exception:  # (an announcement never fails the write it follows)
                    log.exception("announcing %s/%s failed", task.namespace, task.name)
                self.metrics.write_seconds.observe(time.perf_counter() - t0)
                self.metrics.status_writes.labels("ok").inc()
                return True
            log.warning("status write %s/%s: still conflicting after %d attempts",
                        task.namespace, task.name, MAX_CONFLICTS, extra=task_fields(task))
            return False
        except NotLeader:
            self.metrics.status_writes.labels("fenced").inc()
            return False
        except KubeError as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e,
                        extra=task_fields(task))
            # Permanent refusals (422 invalid name, 403, ...) wait for the task's next change
            # instead of being retried forever; transient ones are rescheduled with backoff.
            return not e.retryable
        except Exception as e:
            self.metrics.status_writes.labels("error").inc()
            log.warning("status write %s/%s failed: %s", task.namespace, task.name, e,
                        extra=task_fields(task))
            return False

    def ends_stall(self, task: TaskRef, reporting: set[str]) -> bool:
        """Whether a progress report of the pods ``reporting`` clears a stall the task's
        written status says: a change as urgent as the stall was."""
        with self._cond:
            stalled, more = self._stalled.get(task, _NONE_STALLED)
        return ends_stall(reporting, stalled, more)

    def _written_health(self, task: TaskRef, status: dict[str, Any]) -> None:
        held = frozenset(c["type"] for c in status.get("conditions", ())
                         if c["type"] in HEALTH_CONDITIONS and c["status"] == "True") \
            if status.get("phase") == "Running" else frozenset()
        said = status.get("health") or {}
        listed = frozenset(said.get("stalled", ())) if "Stalled" in held else frozenset()
        more = bool(listed) and said.get("counts", {}).get("stalled", 0) > len(listed)
        with self._cond:
            if listed:
                self._stalled[task] = (listed, more)
            else:
                self._stalled.pop(task, None)
            before = self._unhealthy.pop(task, frozenset())
            if held:
                self._unhealthy[task] = held
            if held != before:
                self._unhealthy_counts.subtract(before)
                self._unhealthy_counts.update(held)
                for condition in HEALTH_CONDITIONS:
                    self.metrics.tasks_unhealthy.labels(condition).set(
                        self._unhealthy_counts[condition])

    def forget(self, task: TaskRef) -> None:
        """The task is gone (deleted): it no longer counts as unhealthy."""
        self._written_health(task, {})

    def _readable(self, task: TaskRef) -> bool:
        """The state builds on a status that could not be fully read: read it again (someone
        may have repaired it); while it stays unreadable, never write over it (that would
        write less than it holds). False when the write must not happen: counted as
        ``unreadable``, logged once per object version."""
        self._reread(task)
        unread = self.store.unread(task)
        if not unread.partial:
            return True
        self.metrics.status_writes.labels("unreadable").inc()
        snap = self.store.unwritten(task)
        key = (task, snap[2] if snap is not None else None)
        if key not in self._unreadable_logged:
            if len(self._unreadable_logged) > 10_000:
                self._unreadable_logged.clear()
            self._unreadable_logged.add(key)
            log.warning("status of %s/%s is not fully readable (%s); not writing over it until "
                        "it is repaired (kubectl edit --subresource=status, or delete the "
                        "object to start the task's state anew)", task.namespace, task.name,
                        "; ".join(unread.problems), extra=task_fields(task))
        return False

    def _log_phase(self, task: TaskRef, state: TaskState) -> None:
        """One INFO line when a written task completes or fails (once per phase)."""
        phase = state.phase
        with self._phases_lock:
            if self._phases.get(task) == phase:
                return
            self._phases[task] = phase
            self._phases.move_to_end(task)
            while len(self._phases) > PHASES_REMEMBERED:
                self._phases.popitem(last=False)
        if state.finished:
            progress = state.progress
            said = f": {progress.message[:120]}" if progress and progress.message else ""
            log.info("task %s/%s %s%s", task.namespace, task.name,
                     "failed" if state.failed else "completed", said, extra=task_fields(task))

    def _fence(self) -> None:
        if not self.may_write():
            # A replica that can no longer prove its lease sends nothing more.
            raise NotLeader("lease not held")

    def _persist(self, task: TaskRef, status: dict[str, Any], rv: str | None
                 ) -> tuple[str | None, str | None, Owner | None]:
        """Replace the whole ``.status`` (keys the fold dropped vanish too) of the object at
        resourceVersion ``rv``; returns the new resourceVersion, the object's uid and its
        owner's. The API server refuses the write with 409 when the object changed since
        ``rv``, so a stale writer never wins."""
        self._fence()
        coll = taskfeedback_path(task.namespace)
        if rv is None:
            rv = self._create(task, coll)
            if rv is None:
                raise Conflict("created, version unknown")
            self._fence()
        delay = self.slow.get(task.name)
        if delay:
            time.sleep(delay)  # test hook: this task's writes are slow (in flight), nobody else's
        data = orjson.dumps(taskfeedback_body(task.namespace, task.name, resource_version=rv,
                                              status=status))
        self._spend(len(data), json_values(status))
        try:
            # Only the new resourceVersion is needed back: the answer is the metadata alone.
            obj = self.kube.request("PUT", taskfeedback_path(task.namespace, task.name, "status"),
                                    data=data, content_type=JSON, accept=METADATA_ONLY,
                                    query=[("fieldManager", FIELD_MANAGER)],
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.not_found or e.conflict:  # changed (or deleted) since rv
                raise Conflict(str(e)) from e
            raise
        return _resource_version(obj), _uid(obj), controller_of(obj)

    def _reread(self, task: TaskRef) -> None:
        """After a conflict: the object as it is now becomes the base of our state."""
        self._fence()
        self._spend(0)
        try:
            obj = self.kube.request("GET", taskfeedback_path(task.namespace, task.name),
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if not e.not_found:
                raise
            # Deleted with its owner (the garbage collector), the run is over: what was not
            # written of it goes with it, never into a new object.
            owner = self.store.owner(task)
            self.store.absent(task, new_run=owner is not None and self.owner_gone(owner))
            return
        if self.store.rebase(task, obj.get("status"), _resource_version(obj), _uid(obj),
                             controller_of(obj)):
            log.info("status of %s/%s had events we lacked: merged", task.namespace, task.name,
                     extra=task_fields(task))

    def _create(self, task: TaskRef, coll: str) -> str | None:
        """Create the TaskFeedback; its resourceVersion. Conflict when it already exists (we
        must read what it holds before writing over it)."""
        owner = self.owner_of(task)
        if owner is Retry.LATER:  # its owner cannot be verified now: create it later
            raise KubeError(503, f"the owner of {task.namespace}/{task.name} cannot be "
                            "verified now")
        # Owned by the platform's object (a Job, a Workflow): deleted with it.
        owners = [owner_reference(owner)] if owner is not None else []
        body = taskfeedback_body(task.namespace, task.name, owner_references=owners)
        self._spend(0)
        try:
            obj = self.kube.request("POST", coll, body=body, accept=METADATA_ONLY,
                                    query=[("fieldManager", FIELD_MANAGER)],
                                    timeout=WRITE_TIMEOUT)
        except KubeError as e:
            if e.conflict:
                raise Conflict("already exists") from e
            raise
        log.info("task %s/%s created%s", task.namespace, task.name,
                 f" (owned by {owner.kind}/{owner.name})" if owner is not None else "",
                 extra=task_fields(task))
        return _resource_version(obj)


def controller_of(obj: object) -> Owner | None:
    """The object's controller (its ownerReference with ``controller: true``)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            api, kind, name, uid = (ref.get(k) for k in ("apiVersion", "kind", "name", "uid"))
            if all(isinstance(x, str) for x in (api, kind, name, uid)):
                assert isinstance(meta, dict)
                return Owner(str(api), str(kind), str(name), str(meta.get("namespace") or ""),
                             str(uid))
    return None


def _uid(obj: object) -> str | None:
    """The object's uid (None if the answer lacks one)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return str(uid or "") or None


def _resource_version(obj: object) -> str | None:
    """The object's resourceVersion (None if the answer lacks one: the next write re-reads)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(rv or "") or None
