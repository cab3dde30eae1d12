"""The fold: merge parsed events into one bounded, order-insensitive task state, as one engine.

``fold``, ``fold_many`` and ``fold_checked`` (the watcher's) all run ``_run``: one loop that
decides what happens to each event (wrong task, duplicate, late, applied) and one table,
``APPLY`` (schemas/engine/apply.py), of what each payload type does to the state. A run copies each
map it writes once (on its first write) and changes the copy in place, so a batch costs one
copy per map and a single event the copy of the one map it touches; span aggregates are
summed in place during a run and built once at its end (schemas/engine/spans.py). ``fold`` is pure
and total; the state round-trips through the TaskFeedback ``.status`` dict
(schemas/status/encoder.py's ``to_status``, schemas/status/decoder.py's ``read_status``; the
camelCase layout is documented in deploy/crd.yaml). What the pods' and the platform's
objects say is folded beside the events by schemas/engine/observing.py.

Order-insensitivity, precisely: for a set of events with distinct (instance, seq), folding any
permutation, with any duplicates mixed in, yields an identical ``to_status()`` except for
``counters.duplicates``, which counts re-deliveries (applications minus distinct events) and
so depends on the delivery by definition. Every other counter counts distinct events, and
caps keep the lexicographically smallest names, so nothing else depends on arrival order.
Event names bind (instance, seq) to one object per task (see ``parse_event``), so two
different payloads can never share a dedup key. Past the instance cap (below) this holds for
a batch: ``fold_many`` and ``fold_checked`` fold a batch in creation order (``creation_order``),
so any order of it gives one state, the fold of its events one by one in creation order, at
any size. One by one in another order it cannot hold past the cap: a bounded vector cannot
tell an instance it forgot from one it never saw, so events of a batch are never folded
before events created earlier in it (a relist lists by name, a hash: any order at all).

Time: eventTime is the sender's word. When the API server's ``creationTimestamp`` is known,
the time used for ordering is ``min(eventTime, creationTimestamp + CLOCK_SKEW)`` (counted in
``time_clamped`` when it cuts; 2 s, the watcher's ``--clock-skew``), so a sender claiming the
future gains at most that over another sender. A past eventTime is kept: it can only make
the sender lose. Order keys are (time, instance, seq), a total order, so registers stay
order-insensitive; within one emitter instance its seq orders its facts because the emitter
never lets its eventTimes go back and the server's bound only grows with its seq.

Spans are kept per name and, beside each name's totals, per (name, sender pod): a lane, the
same merge of that pod's summaries, for the ``span_lanes`` smallest pairs of the kept names
(a pair beyond them adds its summaries to its name's ``unlaned``), so the lanes, like the
names, are a function of the set of events.

Many workers, one task: progress is kept per reporting pod (its own last-writer-wins, a
final beating any non-final) in detail for the ``workers`` smallest pod names, and every
pod is in the roster (schemas/engine/roster.py: its final and failed flags OR-ed, its largest
fraction, by a hash of its name; the largest declared count, the earliest failed final and
the latest final as registers), which is all the completion rule reads, so no cap hides an
outcome. The rule: a task *fails* as soon as any worker reports a failed final; it
*succeeds* once every pod that reported progress has reported a final, and at least
``workers`` of them when a worker count was declared (the largest ``Progress.workers``
seen). A worker that has not spoken yet cannot be known, so tasks with several workers
declare their count (``TIDINGS_EMIT_WORKERS``). The task's fraction is the sum of the
workers' fractions over ``max(declared, reporting)`` workers, shown below 100 % until the
rule holds; with a declared count another worker speaking can only raise it.

Dedup compaction (bounded by construction): the API server deletes an event ``event_ttl``
(1 h by default) after its creation, so once the fold has seen an event created at ``c``, no
event created before ``c - event_ttl - ttl_margin`` can be listed or watched again. That
time is the *watermark*. Instances whose newest event was created before it are compacted
out of the version vector, and an event created before it is skipped (``late_skipped``)
instead of being checked against the vector. When more than ``max_instances`` instances
remain, the watermark is raised to the creation time of the oldest quarter, and their
entries go the same way, but never past the creation second of the event that compacts, so
an event created in or after it is never skipped, and a batch folded in creation order
loses none of its events to a compaction it caused: the vector holds at most
``max_instances`` instances plus those created in that second or after (the API server's own
create rate bounds them). Why this never double counts: an instance is forgotten only when
all its known events were created before the watermark, and from then on *every* event
created before the watermark is skipped, applied or not; an event created at or after it
still finds its instance in the vector. What raising the watermark for the cap can cost is
an event delivered after events created well after it from ``max_instances`` other
instances (a later batch, not the same one): it is skipped and counted, never applied twice.
One by one, order-insensitivity holds for any set of events whose creation times lie within
``event_ttl + ttl_margin`` of each other from at most ``max_instances`` instances; as one
batch, for any number of instances (events without a creationTimestamp are never
compacted). So the watcher folds a relist as one batch (watcher/fold.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple, TypeVar

from tidings._compat import UTC

from ..wire.caps import insert_capped, one_each
from ..wire.event import ParsedEvent, PodRef, TaskRef
from ..wire.times import epoch
from .apply import APPLY, Carry, Work
from .state import DEFAULT_LIMITS, Limits, TaskState, new_state, new_task_state, with_counter
from .version_vector import VersionVector

V = TypeVar("V")

# admit(event, late) -> fold it? Asked once per event that is not a duplicate; for a late
# event (created before the watermark) the answer is ignored: it is always counted.
Admit = Callable[[ParsedEvent, bool], bool]


# --- the engine ---------------------------------------------------------------------------


_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)
_LAST_TIME = datetime.max.replace(tzinfo=UTC)


@lru_cache(maxsize=64)  # a few Limits per process; asked once per run
def _horizon(lim: Limits) -> int:
    return int((lim.event_ttl + lim.ttl_margin).total_seconds())


class _Ran(NamedTuple):
    """What one run did: the state, the index after the last event it folded, that event's
    creation second when compaction may forget (the caller compacts; else None), and the
    duplicates it skipped without counting them in the state (``count_dups=False``)."""

    state: TaskState
    end: int
    due: int | None
    uncounted: int


def _run(state: TaskState, events: Sequence[ParsedEvent], start: int, count_dups: bool,
         admit: Admit | None, taken: list[ParsedEvent] | None, carry: Carry | None = None
         ) -> _Ran:
    """Fold ``events[start:]`` into ``state`` until an applied event may make compaction
    forget instances (a raise of the watermark that forgets nobody, the run makes itself)."""
    run = _Run(state, admit, taken, carry)
    duplicate, admitted_time, apply = run.duplicate, run.admitted_time, run.apply
    task, k, n = state.task, start, len(events)
    while k < n and run.due is None:
        ev = events[k]
        k += 1
        if ev.task is not task and ev.task != task:
            run.n_wrong += 1
        elif not duplicate(ev):
            t = admitted_time(ev)
            if t is not None:
                apply(ev, t)
    new, uncounted = run.result(count_dups)
    return _Ran(new, k, run.due, uncounted)


class _Run:
    """One run's bookkeeping: what it applied (by instance), the maps it copied, its clock
    and watermark, and its counts; the steps an event goes through, in the order ``_run``
    takes them (duplicate? admitted, and at what time? apply), and the state at the end."""

    # What every run starts with (class defaults: a fold of one event builds a run too).
    # Consecutive events often share one creationTimestamp object (it has second precision
    # and the parsers intern it): its epoch and clock bound are computed once per object;
    # likewise a sender's key and locality once per sender object.
    last_created: datetime | None = None
    last_c = 0
    bound = _EPOCH0
    last_sender: PodRef | None = None
    key = ("", "")
    local = True
    n_wrong = n_dups = n_late = n_clamped = n_applied = 0
    due: int | None = None
    pods: dict[tuple[str, str], int] | None = None
    times_w: dict[str, int] | None = None

    def __init__(self, state: TaskState, admit: Admit | None,
                 taken: list[ParsedEvent] | None, carry: Carry | None = None) -> None:
        self.state, self.admit, self.taken = state, admit, taken
        self.w = w = Work(state, carry)
        self.skew, self.horizon, self.max_instances = (w.lim.clock_skew, _horizon(w.lim),
                                                       w.lim.max_instances)
        self.contains = state.applied.contains
        self.added: dict[str, set[int]] = {}  # (instance, seq) applied in this run
        self.times: Mapping[str, int] = state.instance_times
        self.watermark = state.watermark
        self.first, self.last = state.first_event_time, state.last_event_time
        self.warnings = state.warnings

    def duplicate(self, ev: ParsedEvent) -> bool:
        """Whether ``ev`` was applied already (before this run or in it): counted, skipped.
        Relists and retries are decided by the version vector before any work."""
        seen = self.added.get(ev.instance)
        if (seen is not None and ev.seq in seen) or self.contains(ev.instance, ev.seq):
            self.n_dups += 1
            return True
        return False

    def admitted_time(self, ev: ParsedEvent) -> datetime | None:
        """The time ``ev`` is ordered by when it is to be applied; None when it is not: late
        (created before the watermark: counted, and taken) or refused by ``admit``."""
        created, admit = ev.created, self.admit
        if created is None:
            return ev.event_time if admit is None or admit(ev, False) else None
        if created is not self.last_created:
            self.last_created, self.last_c = created, epoch(created)
            try:
                self.bound = created + self.skew
            except OverflowError:  # created within the skew of year 9999's end
                self.bound = _LAST_TIME
        c = self.last_c
        if c < self.watermark:
            if admit is not None:
                admit(ev, True)
            if self.taken is not None:
                self.taken.append(ev)
            self.n_late += 1
            return None
        if admit is not None and not admit(ev, False):
            return None
        self._saw_created(ev.instance, c)
        if ev.event_time > self.bound:
            self.n_clamped += 1
            return self.bound
        return ev.event_time

    def _saw_created(self, instance: str, c: int) -> None:
        """``instance`` has an event created in second ``c``: its newest creation time, and
        whether compaction is due. A superset of "``_compact`` would change something": the
        run ends after this event, unless all it would do is raise the watermark to ``c -
        horizon`` without forgetting anyone (every event of a new creation second asks):
        then the run raises it itself and goes on, the events after this one judged against
        the new one."""
        times = self.times
        tc = times.get(instance)
        if tc is None or tc < c:
            if self.times_w is None:
                self.times = self.times_w = dict(times)
            self.times_w[instance] = c
            times = self.times
        if c - self.horizon > self.watermark or len(times) > self.max_instances:
            if len(times) <= self.max_instances and min(times.values()) >= c - self.horizon:
                self.watermark = c - self.horizon
            else:
                self.due = c

    def apply(self, ev: ParsedEvent, t: datetime) -> None:
        """Apply ``ev`` at time ``t``: its payload (the ``APPLY`` table), its sender's count,
        the task's first and last event times, its warning, and its (instance, seq)."""
        if self.taken is not None:
            self.taken.append(ev)
        self.n_applied += 1
        p = ev.payload
        apply = APPLY.get(type(p))
        if apply is not None:
            apply(self.w, ev, p, t)
        self._count_sender(ev.sender)
        if self.first is None or t < self.first:
            self.first = t
        if self.last is None or t > self.last:
            self.last = t
        if ev.warning:
            self.warnings += 1
        seen = self.added.get(ev.instance)
        if seen is None:
            self.added[ev.instance] = {ev.seq}
        else:
            seen.add(ev.seq)

    def _count_sender(self, sender: PodRef) -> None:
        if self.pods is None:
            self.pods = dict(self.state.pod_events)
        if sender is not self.last_sender:
            self.last_sender, self.key = sender, (sender.name, sender.uid)
            # ``pods`` lists the task's reporting pods by name and uid, pods of the task's
            # namespace: a controller recording lineage from its own namespace is no such
            # pod (read as one, its live pod would show as a dead pod of the task).
            self.local = sender.namespace in ("", self.state.task.namespace)
        if self.local:
            pods, key = self.pods, self.key
            cur = pods.get(key)
            if cur is not None:
                pods[key] = cur + 1
            else:
                capped = insert_capped(pods, key, 1, self.w.lim.pods, one_each)
                if capped:
                    counters = self.w.counters
                    counters["pods_capped"] = counters.get("pods_capped", 0) + capped

    def result(self, count_dups: bool) -> tuple[TaskState, int]:
        """The state this run made, and the duplicates it did not count in it."""
        state, w, counters = self.state, self.w, self.w.counters
        uncounted = 0 if count_dups else self.n_dups
        if self.n_applied:
            counters["events_applied"] = counters.get("events_applied", 0) + self.n_applied
        dups = self.n_dups - uncounted
        if self.n_wrong or dups or self.n_late or self.n_clamped:  # (rarely: one test a run)
            for name, m in (("wrong_task", self.n_wrong), ("duplicates", dups),
                            ("late_skipped", self.n_late), ("time_clamped", self.n_clamped)):
                if m:
                    counters[name] = counters.get(name, 0) + m
        return new_task_state(
            task=state.task,
            named=state.named if w.named_w is None else _merged(state.named, w.named_w),
            spans=state.spans if w.spans_w is None else w.spans_w.result(),
            workers=state.workers if w.workers_w is None else w.workers_w,
            pod_events=state.pod_events if self.pods is None else self.pods,
            applied=state.applied.with_seqs(self.added),
            instance_times=self.times,
            watermark=self.watermark,
            first_event_time=self.first,
            last_event_time=self.last,
            counters=counters,
            unknown=state.unknown if w.unknown_w is None else w.unknown_w,
            warnings=self.warnings,
            roster=w.roster(),
            observed=state.observed,
            limits=w.lim,
            beyond=state.beyond if w.beyond_w is None else _merged(state.beyond, w.beyond_w),
        ), uncounted


def _merged(named: Mapping[str, Mapping[str, V]], written: dict[str, dict[str, V]]
            ) -> dict[str, Mapping[str, V]]:
    # A section is present only while it holds a register (a cap of 0 keeps none), so
    # states equal in content compare equal.
    out = dict(named)
    for section, entries in written.items():
        if entries:
            out[section] = entries
    return out


def _compact(applied: VersionVector, times: Mapping[str, int], watermark: int, c: int,
             lim: Limits) -> tuple[VersionVector, Mapping[str, int], int, int]:
    """Raise the watermark (TTL horizon, then the instance cap) and forget the instances
    whose newest event is older. Returns the new vector, times, watermark and how many
    instances were forgotten."""
    new = max(watermark, c - _horizon(lim))
    if len(times) > lim.max_instances:
        ordered = sorted(times.values())
        keep = max(1, lim.max_instances * 3 // 4)
        cut = ordered[len(ordered) - keep]
        # Creation times have second precision: when the oldest second alone holds more than
        # the cap allows, that whole second goes; but never past the second of the event
        # that compacts (``c``): the events created in it or after it that the fold has not
        # reached yet (a final right after a burst, the rest of a batch) are still applied.
        new = max(new, min(cut if cut > ordered[0] else cut + 1, c))
    if new == watermark:
        return applied, times, watermark, 0
    drop = [i for i, t in times.items() if t < new]
    if not drop:
        return applied, times, new, 0
    return applied.without(drop), {i: t for i, t in times.items() if t >= new}, new, len(drop)


def _compacted(state: TaskState, c: int) -> TaskState:
    applied, times, watermark, n = _compact(state.applied, state.instance_times,
                                            state.watermark, c, state.limits)
    if watermark == state.watermark:
        return state
    counters = state.counters
    if n:
        counters = dict(counters)
        counters["instances_compacted"] = counters.get("instances_compacted", 0) + n
    return replace(state, applied=applied, instance_times=times, watermark=watermark,
                   counters=counters)


_BY_CREATION = attrgetter("created", "instance", "seq")


def _creation_key(ev: ParsedEvent) -> tuple[datetime, str, int]:
    return (ev.created or _EPOCH0, ev.instance, ev.seq)


def creation_order(events: Sequence[ParsedEvent]) -> Sequence[ParsedEvent]:
    """``events`` in the order the API server created them (ties by instance, then seq: a
    total order of distinct events; those without a creation time first): the order every
    batch is folded in. A relist lists by name, a hash of (instance, seq); folded in that
    order, compaction past the instance cap would raise the watermark over events of the
    same batch it has not reached yet and skip them as late."""
    if len(events) < 2:
        return events
    try:
        return sorted(events, key=_BY_CREATION)  # (a key built in C: the common case)
    except TypeError:  # an event without a creation time (None does not compare)
        return sorted(events, key=_creation_key)


def _fold_events(state: TaskState, events: Sequence[ParsedEvent], count_dups: bool = True,
                 admit: Admit | None = None, taken: list[ParsedEvent] | None = None
                 ) -> tuple[TaskState, int]:
    """``events`` folded into ``state`` run by run, compacting between runs; and the
    duplicates skipped without counting them (``count_dups=False``)."""
    i, n, uncounted = 0, len(events), 0
    carry = Carry()  # (the roster's maps, from one run to the next: never the input's)
    while True:
        ran = _run(state, events, i, count_dups, admit, taken, carry)
        state, i, uncounted = ran.state, ran.end, uncounted + ran.uncounted
        if ran.due is not None:
            state = _compacted(state, ran.due)
        if i >= n:
            return state, uncounted


# --- the public folds ---------------------------------------------------------------------


def fold(state: TaskState, ev: ParsedEvent) -> TaskState:
    """Merge one event into ``state``. Pure, total and idempotent per (instance, seq).

    Events of another task are not applied (counted in ``wrong_task``).
    """
    try:
        return _fold_events(state, (ev,))[0]
    except Exception:  # totality beats strictness here; the counter makes the bug visible
        return with_counter(state, "fold_errors")


def fold_many(state: TaskState, events: Iterable[ParsedEvent]) -> TaskState:
    """Merge ``events`` into ``state``; the same state as folding them one by one in
    creation order (``functools.reduce(fold, creation_order(events), state)``), whatever
    order they come in, but each map is copied once per batch instead of once per event.
    Pure and total, like ``fold``."""
    evs = creation_order(events if isinstance(events, list | tuple) else list(events))
    try:
        return _fold_events(state, evs)[0]
    except Exception:
        # Never expected. Redone event by event, each failing event is counted in
        # fold_errors exactly as ``fold`` counts it, so the two stay equivalent even here.
        for ev in evs:
            state = fold(state, ev)
        return state


class Checked(NamedTuple):
    state: TaskState
    taken: list[ParsedEvent]  # the events applied or counted late, in creation order
    duplicates: int  # the events skipped as already applied (not counted in the state)


def fold_checked(state: TaskState, events: Sequence[ParsedEvent], admit: Admit | None = None
                 ) -> Checked:
    """The watcher's fold of a task's pending events: ``fold_many``, except that a duplicate
    is dropped uncounted (so the persisted counters never depend on delivery) and an event
    is applied only when ``admit(ev, False)`` says so (the sender check). A late event is
    always folded (counted in ``lateSkipped``) after ``admit(ev, True)`` is told of it.
    Returns the state, the events it took in and how many duplicates it dropped.

    The same as checking each event, in creation order, against the state folded so far
    and folding it alone, which is what a rebase re-applies. Total like ``fold_many`` (an
    internal error is redone event by event and counted in ``foldErrors``), except that an
    exception of ``admit`` itself propagates."""
    said: list[bool] = []  # admit's answers, in the order asked

    def asked(ev: ParsedEvent, late: bool) -> bool:
        said.append(True if admit is None else admit(ev, late))
        return said[-1]

    events = creation_order(events)
    taken: list[ParsedEvent] = []
    try:
        folded, dups = _fold_events(state, events, False, asked, taken)
        return Checked(folded, taken, dups)
    except Exception:
        pass
    # Never expected: the per-event loop the engine stands for, with ``fold`` (total). It asks
    # in the same order, so the answers already given are replayed, not asked again.
    replay = iter(said)

    def again(ev: ParsedEvent, late: bool) -> bool:
        v = next(replay, None)
        return v if v is not None else (True if admit is None else admit(ev, late))

    taken, dups = [], 0
    for ev in events:
        if state.applied.contains(ev.instance, ev.seq):
            dups += 1
            continue
        if state.late(ev):
            again(ev, True)
        elif not again(ev, False):
            continue
        state = fold(state, ev)
        taken.append(ev)
    return Checked(state, taken, dups)


def fold_all(
    task: TaskRef, events: Iterable[ParsedEvent], limits: Limits = DEFAULT_LIMITS
) -> TaskState:
    """Fold ``events`` into a fresh state of ``task``."""
    return fold_many(new_state(task, limits), events)
