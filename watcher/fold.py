"""The fold workers: a worker takes a task's key and folds every pending event of that task
(never two workers for one key), each admitted by the one rule (``schemas/engine/admission.py``,
answered by ``checks.py``) into the run ``runs.py`` names; then what the task's pods and its
platform object say is folded beside the facts, and the writer and the health clock told.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from tidings._compat import UTC
from tidings.schemas.engine.admission import Retry, TaskObject, admission
from tidings.schemas.engine.folding import fold_checked
from tidings.schemas.engine.observed import PodVerdict
from tidings.schemas.engine.state import TaskState
from tidings.schemas.wire.event import ParsedEvent, TaskRef
from tidings.schemas.wire.payloads import Progress
from tidings.schemas.wire.platform import PodTask
from tidings.schemas.wire.rejection import Rejection, RejectReason

from .checks import AdmissionChecks
from .coalesce import critical_change, reporters
from .health_clock import HealthClock
from .kubelet_events import KubeletEvents
from .logs import RejectionLog, task_fields
from .metrics import Metrics
from .nodes import Nodes
from .platform import PlatformTasks
from .queue import WorkQueue
from .runs import Runs
from .senders import Senders
from .store import Observations, Store
from .writer import StatusWriter

log = logging.getLogger("tidings.watcher")


@dataclass
class Admitted:
    """One fold's admission: the rule's word on each event (``admit``, what ``fold_checked``
    asks), tallied, and added to the metrics once per fold (a labelled inc costs about as much
    as the fold of an event): the same totals as counting each event."""

    task: TaskRef
    obj: TaskObject
    checks: AdmissionChecks
    rejections: RejectionLog
    accepted: dict[str, int] = field(default_factory=dict)  # by how the sender was verified
    refused: dict[str, int] = field(default_factory=dict)  # by reason, each event once
    late: int = 0
    # The events come from a list (a restart's, a relist's): the late ones among them are
    # events of compacted instances listed again, counted apart (``late_relisted``) from a
    # late event a watch brings, which reached the watcher after the watermark passed it.
    listed: bool = False
    after_ttl: bool = False  # a late fact of a run the TTL deleted
    later: list[ParsedEvent] = field(default_factory=list)  # to fold once the API answers

    def admit(self, ev: ParsedEvent, late: bool) -> bool:
        if late:
            # Created before the compaction watermark: the fold skips it and counts it
            # (lateSkipped); no sender lookup for it.
            self.late += 1
            return True
        # Every event is checked (a repeat by its kept verdict): a (name, uid) seen before
        # says nothing about the namespace an event now claims.
        verdict = admission(ev, self.obj, self.checks)
        if verdict is Retry.LATER:
            self.later.append(ev)
            return False
        if isinstance(verdict, Rejection):
            self.after_ttl |= verdict.reason is RejectReason.DELETED_TASK
            if self.rejections.refused(self.task, ev, verdict):
                self.refused[verdict.reason.value] = self.refused.get(verdict.reason.value, 0) + 1
            return False
        assert isinstance(verdict, str)
        self.accepted[verdict] = self.accepted.get(verdict, 0) + 1
        return True

    def count(self, m: Metrics) -> None:
        if self.late:
            m.events_skipped.labels("late_relisted" if self.listed else "late").inc(self.late)
        for how, n in self.accepted.items():
            m.sender_lookups.labels(how).inc(n)
        if self.accepted:
            m.events_applied.inc(sum(self.accepted.values()))


@dataclass
class Folder:
    """What the fold workers share; ``run`` is a worker's loop."""

    store: Store
    queue: WorkQueue[TaskRef]
    writer: StatusWriter
    metrics: Metrics
    senders: Senders
    platform: PlatformTasks
    runs: Runs
    health: HealthClock
    rejections: RejectionLog
    retry_after: float  # seconds before a fold the API could not answer for is tried again
    # Tasks the TTL deleted that got a late fact since: the next sweep deletes the bus
    # events of each again, so a restart's relist cannot bring the task back either.
    late_after_ttl: set[TaskRef] = field(default_factory=set)
    # Whether a task exists before it speaks (``--track``: its platform object or a pod of
    # it is watched); such a task is read and written from what its objects say alone.
    tracked: Callable[[TaskRef], bool | Retry] = lambda task: False
    # Why a pod stuck in creation waits (the kubelet's Events, read for that pod alone).
    kubelet_events: KubeletEvents = field(default_factory=lambda: KubeletEvents(None))
    # Which nodes are not Ready (a pod Running there is a worker on a lost node).
    nodes: Nodes = field(default_factory=Nodes)

    def run(self) -> None:
        self.queue.serve(self.fold_task, lambda task: log.exception(
            "fold of %s/%s failed", task.namespace, task.name, extra=task_fields(task)))

    def _later(self, task: TaskRef) -> bool:
        self.queue.add_after(task, self.retry_after)
        return False

    def _ready(self, task: TaskRef, checks: AdmissionChecks) -> bool:
        """Whether the task's pending events may be folded now, into the state of the run
        they belong to; False when there is nothing to fold, or not yet (asked again)."""
        store = self.store
        if not store.seeded(task) and not store.pending(task):
            # Only what its pods' objects say brought it here: a task this watcher let go of
            # (evicted) is read back, and so is one it tracks; another gets nothing.
            if not store.evicted(task):
                tracked = self.tracked(task)
                if tracked is Retry.LATER:
                    return self._later(task)
                if not tracked:
                    return False
            if not self.runs.seed(task):
                return self._later(task)
        if not store.seeded(task):
            # A task new to this watcher: its senders are checked before anything is kept
            # or read for it, so a name that only refused events claim costs no lasting
            # memory and no API call.
            pending = store.pending(task)
            said = [checks.screen(ev) for ev in pending]
            if not any(type(v) is str for v in said):
                if any(v is Retry.LATER for v in said):
                    return self._later(task)
                for ev, v in zip(pending, said, strict=True):
                    assert isinstance(v, Rejection)
                    self.rejections.refused(task, ev, v)
                store.drop_unseeded(task, pending)
                return False
            if not self.runs.seed(task):
                return self._later(task)
        # Only a verified sender's event makes the watcher read the object: a refused one
        # naming random uids costs no API call.
        foreign = {ev.regarding_uid for ev in store.foreign(task)
                   if type(checks.screen(ev)) is str}
        if foreign:
            if not self.runs.check_object(task, foreign):
                return self._later(task)
            if store.unwritten(task) is not None:
                self.writer.changed(task)
        if not self.runs.same_run(task):
            return self._later(task)
        return True

    def fold_task(self, task: TaskRef) -> None:
        """Fold every pending event of ``task`` (runs in one worker; never two for one key)."""
        if self.store.wait_for_list(task):
            return  # a list in progress: folded once it is all here (its end adds the task)
        checks = AdmissionChecks(self.senders, self.platform, task)
        if not self._ready(task, checks):
            return
        uid, stale, buried = self.store.identity(task)
        base, events = self.store.take(task)
        # (uid None: the state is of no object, so a fact naming any uid is another's.)
        admitted = Admitted(task, TaskObject(uid or "", stale, buried), checks,
                            self.rejections, listed=self.store.listed(task))
        events = self._with_job_workers(task, events, admitted.later)
        # One batch fold of everything pending; duplicates are skipped before the fold (and
        # not counted in the state), so the persisted counters don't depend on delivery.
        try:
            state, applied, duplicates = fold_checked(base, events, admitted.admit)
        finally:
            admitted.count(self.metrics)
        if duplicates:
            self.metrics.events_skipped.labels("duplicate").inc(duplicates)
        if applied:
            self.store.put(task, state, base=base, events=applied)
        if admitted.refused and self.store.refuse(task, admitted.refused) and not applied:
            # Only the refusal counts changed: never urgent, so a refused sender cannot
            # buy the task status writes faster than the coalescing interval.
            self.writer.changed(task, critical=False)
        if applied:
            reporting = reporters(applied)
            # A report of a worker the status says is stalled clears it: as urgent as the
            # stall was (the clock writes it at once), not a coalescing interval later.
            self.writer.changed(task, critical=critical_change(base, state, applied)
                                or self.writer.ends_stall(task, reporting))
            if state.roster is not base.roster:  # (a worker reported: its pace moved)
                self.health.schedule(task, self.store.get(task), pods=reporting)
        if admitted.after_ttl:
            self.late_after_ttl.add(task)
        if admitted.later:
            for ev in admitted.later:
                self.store.push(ev)
            self.queue.add_after(task, self.retry_after)
        self._observe(task)

    def _observe(self, task: TaskRef) -> None:
        """Fold what the task's pods' objects (and its platform object) say now into its
        state, beside its facts; the first time in this term, with its reporting pods that
        went while no watcher watched."""
        verdicts = self.senders.verdicts(task)
        check = not self.store.pods_checked(task)
        state = self.store.get(task)
        if check and state is not None and not state.finished and state.pods:
            seen = {(v.pod, v.uid) for v in verdicts}
            verdicts += [v for v in self.senders.gone(
                task, [p for p in state.pods if p not in seen])]
        platform = self.platform.outcome(task)
        if platform is None:
            # No pod of this term verified its claim yet (a restart): the object the status
            # already follows still decides.
            known = state.observed.platform if state is not None else None
            platform = self.platform.current(task, known) if known is not None else None
        spoke = state is not None and state.counters.get("events_applied", 0) > 0
        seen_now = Observations(tuple(v for v in verdicts if v.terminal),
                                (*(v for v in verdicts if not v.terminal),
                                 *self._stuck(task),
                                 *self.senders.on_lost_nodes(task, self.nodes.lost)), platform,
                                (0, None) if spoke else self.senders.running(task,
                                                                             self.nodes.lost))
        changed = self.store.observe(task, seen_now, check_pods=check,
                                     create=self.tracked(task) is True)
        if changed is not None:
            before, after = changed
            # A phase it moves, a pod's reason to wait, a new tracked task are written within
            # the write interval (people wait on them); the rest (a retried attempt's end)
            # with the coalesced changes.
            self.writer.changed(task, critical=before.phase != after.phase
                                or _reasons(before) != _reasons(after)
                                or self.store.identity(task)[0] is None)
            self.health.schedule(task, after)  # (an ended pod's worker is no longer judged)

    def _stuck(self, task: TaskRef) -> list[PodVerdict]:
        """The task's pods stuck being created past the grace, with the kubelet's reason
        (its Events, read for that pod alone); the task is looked at again when the grace of
        one not yet past ends."""
        out: list[PodVerdict] = []
        for (ns, pod, uid), since in self.senders.creating(task):
            verdict = self.kubelet_events.why(ns, pod, uid, since)
            if verdict is not None:
                out.append(verdict)
            else:  # (before its grace, or unexplained yet: look again then)
                left = self.kubelet_events.grace - (datetime.now(UTC) - since).total_seconds()
                self.queue.add_after(task, left if left > 0 else self.kubelet_events.ttl)
        return out

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
                info = infos[id(s)] = self.senders.pod_task(task, s)
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


def _reasons(state: TaskState) -> set[tuple[str, str]]:
    """The waiting pods' reasons (pod, reason): what the PodsReady condition says."""
    return {(v.pod, v.reason) for v in state.observed.waiting.values()}
