"""The fold: merge parsed events into one bounded, order-insensitive task state, as one engine.

``fold``, ``fold_many`` and ``fold_checked`` (the watcher's) all run ``_run``: one loop that
decides what happens to each event (wrong task, duplicate, late, applied) and one table,
``APPLY``, of what each payload type does to the state. A run copies each map it writes once
(on its first write) and changes the copy in place, so a batch costs one copy per map and a
single event the copy of the one map it touches; span aggregates are summed in place during
a run and built once at its end. ``fold`` is pure and total; the state round-trips through
the TaskFeedback ``.status`` dict (``TaskState.to_status``/``from_status``, both in
schemas/state.py; the camelCase layout is documented in deploy/crd.yaml).

Order-insensitivity, precisely: for a set of events with distinct (instance, seq), folding any
permutation, with any duplicates mixed in, yields an identical ``to_status()`` except for
``counters.duplicates``, which counts re-deliveries (applications minus distinct events) and
so depends on the delivery by definition. Every other counter counts distinct events, and
caps keep the lexicographically smallest names, so nothing else depends on arrival order.
Event names bind (instance, seq) to one object per task (see ``parse_event``), so two
different payloads can never share a dedup key.

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
pod is in the roster (schemas/roster.py: its final and failed flags OR-ed, its largest
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
entries go the same way, but never past the newest creation second: the vector holds at most
``max_instances`` instances plus those created in the newest second (the API server's own
create rate bounds them). Why this never double counts: an instance is forgotten only when
all its known events were created before the watermark, and from then on *every* event
created before the watermark is skipped, applied or not; an event created at or after it
still finds its instance in the vector. What raising the watermark for the cap can cost is
an event that arrives later than the newest ``max_instances`` instances' events: it is
skipped and counted, never applied twice. Order-insensitivity holds for any set of events
whose creation times lie within ``event_ttl + ttl_margin`` of each other from at most
``max_instances`` instances (events without a creationTimestamp are never compacted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple, cast

from tidings._compat import UTC

from .event import ParsedEvent, TaskRef
from .history import merge as merge_report
from .kinds import KINDS, Kind, Report
from .observed import Observed, PlatformOutcome, PodVerdict
from .payloads import (
    Metric,
    Payload,
    PodSpawned,
    Progress,
    SpanSummaries,
    SpanSummary,
    UnknownPayload,
    Window,
    cut_text,
)
from .roster import (
    FAILED,
    FINAL,
    FRACTION_MASK,
    Failure,
    Mark,
    OrderKey,
    PodEnd,
    Roster,
    insert_end,
    mark_bits,
    pod_hash,
    with_ends,
)
from .state import (
    _INT_MAX,
    DEFAULT_LIMITS,
    MESSAGE_LIMIT,
    NO_LANES,
    K,
    Limits,
    Named,
    NamedValue,
    ProgressState,
    SpanAgg,
    TaskState,
    V,
    _ident,
    _named_weight,
    _new_span_agg,
    _new_task_state,
    _span_weight,
    _us,
    _worker_weight,
    new_state,
)
from .times import epoch
from .version_vector import VersionVector

# --- per-entry merges, in place on a map the run owns ------------------------------------


def _insert_capped(
    entries: dict[K, V], key: K, value: V, cap: int, weight: Callable[[V], int]
) -> int:
    """Insert a new ``key``, keeping only the ``cap`` smallest keys.

    Returns how many events fell beyond the cap (the event itself, or those of an evicted
    key). The kept set is always the cap smallest keys ever seen, and each event is counted
    exactly once, so both results are independent of arrival order.
    """
    if len(entries) < cap:
        entries[key] = value
        return 0
    if cap <= 0:
        return 1
    largest = max(entries)  # type: ignore[type-var]
    if key > largest:  # type: ignore[operator]
        return 1
    evicted = entries.pop(largest)
    entries[key] = value
    return weight(evicted)


def _set_named(entries: dict[str, Named], name: str, value: NamedValue, at: OrderKey,
               cap: int, report: Report | None = None) -> int:
    """Write ``value`` to the register ``name`` if ``at`` is later than its own, and join
    ``report`` (a kind with a curve) into its series whatever the order."""
    cur = entries.get(name)
    if cur is None:
        series = None if report is None else merge_report(None, *report)
        return _insert_capped(entries, name, Named(value, at, 1, series), cap, _named_weight)
    series = cur.series if report is None else merge_report(cur.series, *report)
    if at > cur.at:
        entries[name] = Named(value, at, cur.events + 1, series)
    else:
        entries[name] = Named(cur.value, cur.at, cur.events + 1, series)
    return 0


def _merge_progress(
    entries: dict[str, ProgressState], pod: str, p: Progress, key: OrderKey, cap: int
) -> int:
    """Merge ``p`` into its worker's register: a final beats a non-final, then latest wins;
    the earliest Progress (by order key) is kept beside it as the start of the worker's pace."""
    cur = entries.get(pod)
    if cur is None:
        msg = cut_text(p.message, MESSAGE_LIMIT)
        new = ProgressState(p.fraction, msg, p.final, key, p.failed, p.workers, 1)
        return _insert_capped(entries, pod, new, cap, _worker_weight)
    first_at: OrderKey | None = cur.first_at
    if first_at is None:
        first_at, first_fraction = cur.at, cur.fraction
    else:
        first_fraction = cur.first_fraction
    if key < first_at:
        first_at, first_fraction = key, p.fraction
    # (first_at None: the winning Progress is the earliest too, so nothing more to keep.)
    if (p.final, key) > (cur.final, cur.at):
        if first_at == key:
            first_at, first_fraction = None, 0.0
        entries[pod] = ProgressState(p.fraction, cut_text(p.message, MESSAGE_LIMIT), p.final,
                                     key, p.failed, p.workers, cur.events + 1, first_at,
                                     first_fraction)
    else:
        if first_at == cur.at:
            first_at, first_fraction = None, 0.0
        entries[pod] = ProgressState(cur.fraction, cur.message, cur.final, cur.at, cur.failed,
                                     cur.workers, cur.events + 1, first_at, first_fraction)
    return 0


def _merge_roster(w: _Work, pod: str, p: Progress, key: OrderKey) -> None:
    """Merge ``p`` into the roster: its pod's mark (joined), the declared count, the first
    failure and the latest final. Each is a join, so the order of events cannot matter; the
    registers take every Progress, also of a pod beyond the roster's cap."""
    marks = w.marks_w
    if marks is None:
        marks = w.begin_roster()
    h = pod_hash(pod)
    bits = mark_bits(p.fraction, p.final, p.failed)
    cur = marks.get(h)
    if cur is not None:
        # join_bits and the tallies, inline: a worker's every Progress passes here.
        old = cur.bits
        fo, fn = old & FRACTION_MASK, bits & FRACTION_MASK
        new = ((old | bits) & _FLAGS) | (fo if fo >= fn else fn)
        marks[h] = _new_mark(Mark, (new, cur.events + 1))
        if new != old:
            w.permyriads += (new & FRACTION_MASK) - fo
            gained = new & ~old
            if gained & FINAL:
                w.finals += 1
            if gained & FAILED:
                w.failures += 1
    elif len(marks) < w.lim.roster:
        marks[h] = Mark(bits, 1)
        w.marked(bits, 1)
    elif h > max(marks, default=-1):
        w.bump("roster_capped")
    else:
        gone = marks.pop(max(marks))
        w.bump("roster_capped", gone.events)
        w.marked(gone.bits, -1)
        marks[h] = Mark(bits, 1)
        w.marked(bits, 1)
    if p.workers > w.declared:
        w.declared = p.workers
    if p.final:
        if w.last_final is None or key > w.last_final:
            w.last_final = key
        if p.failed and (w.first_failure is None or key < w.first_failure.at):
            w.first_failure = Failure(key, pod, cut_text(p.message, MESSAGE_LIMIT))


_FLAGS = FINAL | FAILED
_new_mark = tuple.__new__  # Mark's own __new__ is a Python call; the tuple is the same


def _count(entries: dict[K, int], key: K, cap: int) -> int:
    cur = entries.get(key)
    if cur is None:
        return _insert_capped(entries, key, 1, cap, _ident)
    entries[key] = cur + 1
    return 0


# --- span aggregates --------------------------------------------------------------------
# Buckets across a span name's whole extent (so the busy intervals stay ~WINDOW_BUCKETS / 2).
WINDOW_BUCKETS = 64


def _shift_for(first_start: float, last_end: float) -> int:
    n = -(-(_us(last_end) - _us(first_start)) // WINDOW_BUCKETS)
    return (n - 1).bit_length() if n > 1 else 0


class _SpanAcc:
    """A span name's (or a lane's) aggregate while a run folds into it: sums kept in place,
    each window kept as raw microseconds, and one ``SpanAgg`` made at the end of the run.

    Why that equals merging window by window: regridding rounds outward at a power-of-two
    grid (``lo >> d``, ``ceil(hi / 2**d)``), and two such roundings compose into one, and
    rounding commutes with merging overlapping intervals; so the windows regridded step by
    step are the windows rounded once to the final grid, then merged. The sums saturate at
    int64 and are of non-negatives, so saturating once at the end is the same too."""

    __slots__ = (
        "count",
        "errors",
        "events",
        "first_start",
        "lanes",
        "last_end",
        "max_s",
        "min_s",
        "raw",
        "shift",
        "solo",
        "total_ns",
        "unlaned",
        "windows",
    )

    def __init__(self, base: SpanAgg | None, p: SpanSummary, total_ns: int) -> None:
        """The aggregate of ``base`` (whose merge is then up to the caller), or with no base
        of ``p`` alone."""
        if base is None:
            self.count, self.total_ns, self.errors, self.events = p.count, total_ns, p.errors, 1
            self.min_s, self.max_s = p.min_s, p.max_s
            self.first_start, self.last_end = p.first_start, p.last_end
            self.shift = 0
            self.windows: tuple[tuple[int, int], ...] = ()
            self.raw: list[tuple[int, int]] = [(_us(p.first_start), _us(p.last_end))]
            self.lanes: dict[str, _SpanEntry] = {}
            self.unlaned = 0
            # The pod that sent every summary, whose lane is these totals themselves (the
            # common case, one pod, costs no second merge); None: the lanes are in ``lanes``.
            self.solo: str | None = None
        else:
            self.count, self.total_ns = base.count, base.total_ns
            self.min_s, self.max_s = base.min_s, base.max_s
            self.first_start, self.last_end = base.first_start, base.last_end
            self.errors, self.events = base.errors, base.events
            self.shift, self.windows = base.shift, base.windows
            self.raw = []
            self.unlaned = base.unlaned
            self.solo = None
            lanes = base.lanes
            if len(lanes) == 1 and not base.unlaned:
                ((pod, lane),) = lanes.items()
                if lane.events == base.events:  # every summary from it: its lane is the totals
                    self.solo, lanes = pod, NO_LANES
            self.lanes = dict(lanes)

    def split(self, pod: str) -> None:
        """A summary from ``pod``, not the solo pod: the solo lane becomes a lane of its own
        (a copy of the totals so far, before the summary is merged)."""
        solo = self.solo
        if solo is not None:
            lane = _SpanAcc.__new__(_SpanAcc)
            lane.count, lane.total_ns, lane.errors = self.count, self.total_ns, self.errors
            lane.min_s, lane.max_s = self.min_s, self.max_s
            lane.first_start, lane.last_end, lane.events = self.first_start, self.last_end, \
                self.events
            lane.shift, lane.windows, lane.raw = self.shift, self.windows, list(self.raw)
            lane.lanes, lane.unlaned, lane.solo = {}, 0, None
            self.lanes[solo] = lane
            self.solo = None

    def add(self, p: SpanSummary, total_ns: int) -> None:
        """Merge ``p`` in place: the hottest merge of the fold, with the same comparisons, in
        the same order, as merging two SpanAggs would make."""
        self.count += p.count
        self.total_ns += total_ns
        self.errors += p.errors
        v = p.min_s
        if not self.min_s <= v:
            self.min_s = v
        v = p.max_s
        if not self.max_s >= v:
            self.max_s = v
        start, end = p.first_start, p.last_end
        if not self.first_start <= start:
            self.first_start = start
        if not self.last_end >= end:
            self.last_end = end
        self.events += 1
        self.raw.append((round(start * 1e6), round(end * 1e6)))  # _us, inline

    def agg(self) -> SpanAgg:
        shift = _shift_for(self.first_start, self.last_end)
        d = shift - self.shift
        ivs = [(lo >> d, -(-hi >> d)) for lo, hi in self.windows] if d else list(self.windows)
        ivs.extend((lo >> shift, -(-hi >> shift)) for lo, hi in self.raw)
        ivs.sort()
        out: list[tuple[int, int]] = []
        for lo, hi in ivs:
            if out and lo <= out[-1][1]:
                if hi > out[-1][1]:
                    out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        m = _INT_MAX
        lanes: Mapping[str, SpanAgg] = {
            pod: lane.agg() if type(lane) is _SpanAcc else lane  # type: ignore[misc]
            for pod, lane in self.lanes.items()} if self.lanes else NO_LANES
        fields = (self.count if self.count <= m else m,
                  self.total_ns if self.total_ns <= m else m, self.min_s, self.max_s,
                  self.first_start, self.last_end, self.errors if self.errors <= m else m,
                  self.events, shift, tuple(out))
        if self.solo is not None:
            lanes = {self.solo: _new_span_agg(*fields, NO_LANES, 0)}
        return _new_span_agg(*fields, lanes, self.unlaned)


_SpanEntry = SpanAgg | _SpanAcc


def _apply_span(w: _Work, ev: ParsedEvent, p: SpanSummary, t: datetime) -> None:
    spans = w.spans_w
    if spans is None:
        spans = w.spans_w = dict(w.state.spans)
    name = p.name
    total_ns = round(p.total_s * 1e9)
    if total_ns > _INT_MAX:
        total_ns = _INT_MAX
    cur = spans.get(name)
    if type(cur) is not _SpanAcc:
        if cur is None:
            acc = _SpanAcc(None, p, total_ns)
            w.accs.append((name, acc))
            capped = _insert_capped(spans, name, acc, w.lim.spans, _span_weight)  # type: ignore[arg-type]
            if capped:
                w.bump("spans_capped", capped)
                w.lane_count = None  # (a name went, with its lanes: counted again)
            if spans.get(name) is acc:
                _add_lane(w, spans, acc, name, ev.sender.name, p, total_ns)
            return
        cur = spans[name] = _SpanAcc(cur, p, total_ns)  # type: ignore[arg-type]
        w.accs.append((name, cur))
    pod = ev.sender.name
    if cur.solo is not None:
        if cur.solo == pod:  # the name's one pod: its lane is the totals
            cur.add(p, total_ns)
            return
        cur.split(pod)
    cur.add(p, total_ns)
    _add_lane(w, spans, cur, name, pod, p, total_ns)


def _add_lane(w: _Work, spans: dict[str, _SpanEntry], acc: _SpanAcc, name: str, pod: str,
              p: SpanSummary, total_ns: int) -> None:
    """Merge ``p`` into the lane of its sender ``pod`` under span ``name``: the task keeps
    the ``span_lanes`` smallest (name, pod) pairs of its kept names (the others' summaries
    count in their name's ``unlaned``), so the kept lanes are the same for any order. A
    name's first lane is the name's totals themselves (``solo``) until another pod speaks."""
    lanes = acc.lanes
    lane = lanes.get(pod)
    if type(lane) is _SpanAcc:
        lane.add(p, total_ns)
        return
    if lane is not None:
        lanes[pod] = new = _SpanAcc(lane, p, total_ns)  # type: ignore[arg-type]
        new.add(p, total_ns)
        return
    count = w.lane_count
    if count is None:
        count = sum(len(s.lanes) + (getattr(s, "solo", None) is not None)
                    for s in spans.values())
    cap = w.lim.span_lanes
    if count >= cap:
        largest = max(((n, q) for n, s in spans.items() for q in _pods(s)), default=None)
        if largest is None or (name, pod) > largest:
            acc.unlaned += 1
            w.lane_count = count
            return
        victim = spans[largest[0]]
        if type(victim) is not _SpanAcc:
            victim = spans[largest[0]] = _SpanAcc(victim, p, 0)  # type: ignore[arg-type]
            w.accs.append((largest[0], victim))
        if victim.solo == largest[1]:
            victim.solo = None
            # Every summary of the name so far was the solo pod's (this one's not yet, when
            # the victim is this very name).
            victim.unlaned += victim.events - (victim is acc)
        else:
            gone = victim.lanes.pop(largest[1])
            victim.unlaned += gone.events
        count -= 1
    if not lanes and not acc.unlaned and acc.events == 1:
        acc.solo = pod  # the name's first summary: its lane is the totals
    else:
        lanes[pod] = _SpanAcc(None, p, total_ns)
    w.lane_count = count + 1


def _pods(s: _SpanEntry) -> list[str]:
    """The pods with a lane under a span name's entry."""
    solo = getattr(s, "solo", None)
    return [*s.lanes, solo] if solo is not None else list(s.lanes)


# --- the apply table: what each payload type does to a run's state ------------------------


class _Work:
    """One run's state under construction: the input state, and the maps the run has
    written (each a copy of the input's, made on the first write, then changed in place)."""

    __slots__ = (
        "accs",
        "counters",
        "declared",
        "failures",
        "finals",
        "first_failure",
        "lane_count",
        "last_final",
        "lim",
        "marks_w",
        "named_w",
        "permyriads",
        "spans_w",
        "state",
        "unknown_w",
        "workers_w",
    )

    def __init__(self, state: TaskState) -> None:
        self.state, self.lim = state, state.limits
        self.counters = dict(state.counters)
        self.named_w: dict[str, dict[str, Named]] | None = None
        self.spans_w: dict[str, _SpanEntry] | None = None
        self.workers_w: dict[str, ProgressState] | None = None
        self.unknown_w: dict[str, int] | None = None
        self.accs: list[tuple[str, _SpanAcc]] = []
        self.lane_count: int | None = None  # lanes of the run's spans (counted when needed)
        self.marks_w: dict[int, Mark] | None = None  # (the roster's tallies: begin_roster)

    def bump(self, name: str, n: int = 1) -> None:
        c = self.counters
        c[name] = c.get(name, 0) + n

    def marked(self, bits: int, n: int) -> None:
        """Count a mark's bits in (n=1) or out (n=-1) of the roster's sums."""
        if bits & FINAL:
            self.finals += n
        if bits & FAILED:
            self.failures += n
        self.permyriads += n * (bits & FRACTION_MASK)

    def begin_roster(self) -> dict[int, Mark]:
        """The run's copy of the roster's marks, and its tallies (on the run's first
        Progress: a run without one costs nothing here)."""
        r = self.state.roster
        self.declared, self.finals, self.failures = r.declared, r.finals, r.failures
        self.permyriads = r.permyriads
        self.first_failure, self.last_final = r.first_failure, r.last_final
        self.marks_w = dict(r.marks)
        return self.marks_w

    def roster(self) -> Roster:
        if self.marks_w is None:
            return self.state.roster
        r = self.state.roster
        out = Roster(self.marks_w, self.declared, self.finals, self.failures,
                     self.permyriads, self.first_failure, self.last_final, r.ends)
        # The pods' ends count only for pods without a final of their own: a new mark or
        # final moves those tallies (rarely: only a task with an ended pod has ends).
        return with_ends(out) if r.ends else out


Apply = Callable[[_Work, ParsedEvent, Payload, datetime], None]


def _apply_spans(w: _Work, ev: ParsedEvent, p: SpanSummaries, t: datetime) -> None:
    # A SpanSummaries note is its rows, each merged as one SpanSummary would be (each row
    # counts as one event of its name), so packing names into one note changes nothing in
    # the state: the per-name merges commute, whatever notes carry them.
    for row in p.spans:
        _apply_span(w, ev, row, t)


def _apply_window(w: _Work, ev: ParsedEvent, p: Window, t: datetime) -> None:
    # Each part as its own event would be (the same order key): packing a worker's window
    # into one note changes nothing in the state.
    if p.progress is not None:
        APPLY[Progress](w, ev, p.progress, t)
    for metric in p.metrics:
        APPLY[Metric](w, ev, metric, t)
    for span in p.spans:
        APPLY[SpanSummary](w, ev, span, t)


def _apply_progress(w: _Work, ev: ParsedEvent, p: Progress, t: datetime) -> None:
    workers = w.workers_w
    if workers is None:
        workers = w.workers_w = dict(w.state.workers)
    key = (t, ev.instance, ev.seq)
    capped = _merge_progress(workers, ev.sender.name, p, key, w.lim.workers)
    if capped:
        w.bump("workers_capped", capped)
    _merge_roster(w, ev.sender.name, p, key)


def _named_apply(kind: Kind, model: type) -> Apply:
    """The apply of a named kind's ``model`` (schemas/kinds.py): the payload's ``key`` names
    a last-writer-wins register holding its value fields (one: the value; several: a tuple).
    A batch model's rows are each merged as one event of their name would be."""
    section, cap, counter, report = kind.section, attrgetter(kind.cap), kind.capped, kind.report
    key = attrgetter(kind.key)
    value = attrgetter(*(f.attr for f in kind.values))
    rows = attrgetter(kind.batch) if kind.batch in getattr(model, "model_fields", {}) \
        else None

    def apply(w: _Work, ev: ParsedEvent, p: Payload, t: datetime) -> None:
        named = w.named_w
        if named is None:
            named = w.named_w = {}
        entries = named.get(section)
        if entries is None:
            entries = named[section] = dict(w.state.named.get(section, {}))
        at, limit = (t, ev.instance, ev.seq), cap(w.lim)
        for row in (p,) if rows is None else rows(p):
            capped = _set_named(entries, key(row), value(row), at, limit,
                                None if report is None else report(row))
            if capped:
                w.bump(counter, capped)

    return apply


def _apply_pod_spawned(w: _Work, ev: ParsedEvent, p: PodSpawned, t: datetime) -> None:
    w.bump("pods_spawned")


def _apply_unknown(w: _Work, ev: ParsedEvent, p: UnknownPayload, t: datetime) -> None:
    unknown = w.unknown_w
    if unknown is None:
        unknown = w.unknown_w = dict(w.state.unknown)
    capped = _count(unknown, p.type, w.lim.unknown_types)
    w.bump("unknown_payloads")
    if capped:
        w.bump("unknown_capped", capped)


# What the payload models of each family (schemas/kinds.py) do; named kinds are generic.
# (Each function takes its own type; the table is keyed by exactly that type.)
_FAMILY_APPLY: dict[type, Apply] = {
    SpanSummary: cast(Apply, _apply_span),
    SpanSummaries: cast(Apply, _apply_spans),
    Progress: cast(Apply, _apply_progress),
    Window: cast(Apply, _apply_window),
    PodSpawned: cast(Apply, _apply_pod_spawned),
    UnknownPayload: cast(Apply, _apply_unknown),
}
# What each payload type does, for every kind of the registry. ``t`` is the event's order
# time (eventTime bounded by the server's clock); every applied event also counts its
# sender pod, its time and warning.
APPLY: dict[type, Apply] = {
    m: _named_apply(k, m) if k.family == "named" else _FAMILY_APPLY[m]
    for k in KINDS for m in k.models}

# admit(event, late) -> fold it? Asked once per event that is not a duplicate; for a late
# event (created before the watermark) the answer is ignored: it is always counted.
Admit = Callable[[ParsedEvent, bool], bool]


# --- the engine ---------------------------------------------------------------------------


_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)
_LAST_TIME = datetime.max.replace(tzinfo=UTC)


@lru_cache(maxsize=64)  # a few Limits per process; asked once per run
def _horizon(lim: Limits) -> int:
    return int((lim.event_ttl + lim.ttl_margin).total_seconds())


def _run(state: TaskState, events: Sequence[ParsedEvent], start: int, count_dups: bool,
         admit: Admit | None, taken: list[ParsedEvent] | None, dropped: list[int]
         ) -> tuple[TaskState, int, int | None]:
    """Fold ``events[start:]`` into ``state`` until an applied event may make compaction
    forget instances (a raise of the watermark that forgets nobody, the run makes itself).
    Returns the state, the index after the last event folded, and that event's creation
    second when compaction may forget (the caller compacts), else None."""
    w = _Work(state)
    task, lim, counters = state.task, w.lim, w.counters
    skew, horizon, max_instances = lim.clock_skew, _horizon(lim), lim.max_instances
    contains = state.applied.contains
    ranges = state.applied._r.get  # contains(), its common case inline: the newest range
    added: dict[str, set[int]] = {}  # (instance, seq) applied in this run
    pods: dict[tuple[str, str], int] | None = None
    times: Mapping[str, int] = state.instance_times
    times_w: dict[str, int] | None = None
    watermark = state.watermark
    first, last, warnings = state.first_event_time, state.last_event_time, state.warnings
    # Consecutive events often share one creationTimestamp object (it has second precision
    # and the parsers intern it): its epoch and clock bound are computed once per object.
    last_created: datetime | None = None
    last_c = 0
    bound = _EPOCH0
    last_sender = None
    key = ("", "")
    n_wrong = n_dups = n_late = n_clamped = n_applied = 0
    n = len(events)
    due: int | None = None
    k = start
    while k < n:
        ev = events[k]
        k += 1
        if ev.task is not task and ev.task != task:
            n_wrong += 1
            continue
        instance, seq = ev.instance, ev.seq
        seen = added.get(instance)
        # Duplicates (relists, retries) are decided by the version vector before any work.
        rs = ranges(instance)
        if (seen is not None and seq in seen) or (rs and (
                rs[-1][0] <= seq <= rs[-1][1] if seq >= rs[-1][0] else contains(instance, seq))):
            n_dups += 1
            continue
        created = ev.created
        t = ev.event_time
        if created is not None:
            if created is not last_created:
                last_created, last_c = created, epoch(created)
                try:
                    bound = created + skew
                except OverflowError:  # created within the skew of year 9999's end
                    bound = _LAST_TIME
            c = last_c
            if c < watermark:
                if admit is not None:
                    admit(ev, True)
                if taken is not None:
                    taken.append(ev)
                n_late += 1
                continue
            if admit is not None and not admit(ev, False):
                continue
            tc = times.get(instance)
            if tc is None or tc < c:
                if times_w is None:
                    times = times_w = dict(times)
                times_w[instance] = c
            # Superset of "``_compact`` would change something": the run ends here, unless
            # all it would do is raise the watermark to ``c - horizon`` without forgetting
            # anyone (every event of a new creation second asks): then the run raises it
            # itself and goes on, the events after this one judged against the new one.
            if c - horizon > watermark or len(times) > max_instances:
                if len(times) <= max_instances and min(times.values()) >= c - horizon:
                    watermark = c - horizon
                else:
                    due = c
            if t > bound:
                t = bound
                n_clamped += 1
        elif admit is not None and not admit(ev, False):
            continue
        if taken is not None:
            taken.append(ev)
        n_applied += 1
        p = ev.payload
        apply = APPLY.get(type(p))
        if apply is not None:
            apply(w, ev, p, t)
        if pods is None:
            pods = dict(state.pod_events)
        sender = ev.sender
        if sender is not last_sender:
            last_sender, key = sender, (sender.name, sender.uid)
        cur = pods.get(key)
        if cur is not None:
            pods[key] = cur + 1
        else:
            capped = _insert_capped(pods, key, 1, lim.pods, _ident)
            if capped:
                counters["pods_capped"] = counters.get("pods_capped", 0) + capped
        if first is None or t < first:
            first = t
        if last is None or t > last:
            last = t
        if ev.warning:
            warnings += 1
        if seen is None:
            added[instance] = {seq}
        else:
            seen.add(seq)
        if due is not None:
            break
    if not count_dups:
        dropped[0] += n_dups
        n_dups = 0
    if n_applied:
        counters["events_applied"] = counters.get("events_applied", 0) + n_applied
    if n_wrong or n_dups or n_late or n_clamped:  # (rarely: one test, not a loop, per run)
        for name, m in (("wrong_task", n_wrong), ("duplicates", n_dups),
                        ("late_skipped", n_late), ("time_clamped", n_clamped)):
            if m:
                counters[name] = counters.get(name, 0) + m
    spans: Mapping[str, SpanAgg] = state.spans
    if w.spans_w is not None:
        entries = w.spans_w
        for name, acc in w.accs:
            if entries.get(name) is acc:  # (unless the cap evicted it meanwhile)
                entries[name] = acc.agg()
        spans = entries  # type: ignore[assignment]
    return _new_task_state(
        task,
        state.named if w.named_w is None else _merged(state.named, w.named_w),
        spans,
        state.workers if w.workers_w is None else w.workers_w,
        state.pod_events if pods is None else pods,
        state.applied._with_seqs(added),
        times,
        watermark,
        first,
        last,
        counters,
        state.unknown if w.unknown_w is None else w.unknown_w,
        warnings,
        w.roster(),
        state.observed,
        lim,
    ), k, due


def _merged(named: Mapping[str, Mapping[str, Named]], written: dict[str, dict[str, Named]]
            ) -> dict[str, Mapping[str, Named]]:
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
        # the cap allows, that whole second goes; but never the newest second, whose later
        # events (a final right after a burst) would then all be skipped as late.
        new = max(new, min(cut if cut > ordered[0] else cut + 1, ordered[-1]))
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
    return _new_task_state(
        state.task, state.named, state.spans, state.workers,
        state.pod_events, applied, times, watermark, state.first_event_time,
        state.last_event_time, counters, state.unknown, state.warnings, state.roster,
        state.observed, state.limits)


def _fold_events(state: TaskState, events: Sequence[ParsedEvent], count_dups: bool = True,
                 admit: Admit | None = None, taken: list[ParsedEvent] | None = None,
                 dropped: list[int] | None = None) -> TaskState:
    i, n = 0, len(events)
    out = [0] if dropped is None else dropped
    while True:
        state, i, due = _run(state, events, i, count_dups, admit, taken, out)
        if due is not None:
            state = _compacted(state, due)
        if i >= n:
            return state


def _with_counter(state: TaskState, name: str) -> TaskState:
    counters = dict(state.counters)
    counters[name] = counters.get(name, 0) + 1
    return _new_task_state(
        state.task, state.named, state.spans, state.workers,
        state.pod_events, state.applied, state.instance_times, state.watermark,
        state.first_event_time, state.last_event_time, counters, state.unknown,
        state.warnings, state.roster, state.observed, state.limits)


# --- the public folds ---------------------------------------------------------------------


def fold(state: TaskState, ev: ParsedEvent) -> TaskState:
    """Merge one event into ``state``. Pure, total and idempotent per (instance, seq).

    Events of another task are not applied (counted in ``wrong_task``).
    """
    try:
        return _fold_events(state, (ev,))
    except Exception:  # totality beats strictness here; the counter makes the bug visible
        return _with_counter(state, "fold_errors")


def fold_many(state: TaskState, events: Iterable[ParsedEvent]) -> TaskState:
    """Merge ``events`` into ``state`` in order; the same state as folding them one by one
    (``functools.reduce(fold, events, state)``), but each map is copied once per batch
    instead of once per event. Pure and total, like ``fold``."""
    evs = events if isinstance(events, list | tuple) else list(events)
    try:
        return _fold_events(state, evs)
    except Exception:
        # Never expected. Redone event by event, each failing event is counted in
        # fold_errors exactly as ``fold`` counts it, so the two stay equivalent even here.
        for ev in evs:
            state = fold(state, ev)
        return state


class Checked(NamedTuple):
    state: TaskState
    taken: list[ParsedEvent]  # the events applied or counted late, in order
    duplicates: int  # the events skipped as already applied (not counted in the state)


def fold_checked(state: TaskState, events: Sequence[ParsedEvent], admit: Admit | None = None
                 ) -> Checked:
    """The watcher's fold of a task's pending events: ``fold_many``, except that a duplicate
    is dropped uncounted (so the persisted counters never depend on delivery) and an event
    is applied only when ``admit(ev, False)`` says so (the sender check). A late event is
    always folded (counted in ``lateSkipped``) after ``admit(ev, True)`` is told of it.
    Returns the state, the events it took in and how many duplicates it dropped.

    The same as checking each event against the state folded so far and folding it alone,
    which is what a rebase re-applies. Total like ``fold_many`` (an internal error is redone
    event by event and counted in ``foldErrors``), except that an exception of ``admit``
    itself propagates."""
    said: list[bool] = []  # admit's answers, in the order asked

    def asked(ev: ParsedEvent, late: bool) -> bool:
        said.append(True if admit is None else admit(ev, late))
        return said[-1]

    taken: list[ParsedEvent] = []
    dropped = [0]
    try:
        return Checked(_fold_events(state, events, False, asked, taken, dropped), taken,
                       dropped[0])
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


# --- observations: what the objects say, beside the facts -------------------------------


def observe(state: TaskState, pods: Iterable[PodVerdict] = (), *,
            waiting: Iterable[PodVerdict] | None = None,
            platform: PlatformOutcome | None = None) -> TaskState:
    """Merge what the task's pods' objects and its platform's object say
    (schemas/observed.py) into ``state``. Pure and total like ``fold``; idempotent, and
    order-insensitive among observations and with the facts: each is a join, and what it
    decides is read from the joined state (a pod's own final, whenever it arrives, decides
    over its pod's end: ``Roster.end_of``).

    - ``pods``: pods that ended (a Waiting verdict is ignored here). Each pod's end joins the
      one known (``PodVerdict.order``: explained over merely gone, then the later): in the
      roster for every pod (the ``roster`` cap of smallest hashes, as its marks) and in
      detail for the ``observed_pods`` smallest names.
    - ``waiting``: the task's pods waiting now, one complete view (None: unchanged); it
      replaces the one kept, less pods that have ended, the ``waiting`` smallest names.
    - ``platform``: the outcome of the platform object owning the task, joined with the one
      known (terminal over running, then the later).

    Returns ``state`` itself when nothing changed."""
    try:
        return _observe(state, pods, waiting, platform)
    except Exception:  # totality, as in fold: the counter makes the bug visible
        return _with_counter(state, "fold_errors")


def _observe(state: TaskState, pods: Iterable[PodVerdict], waiting: Iterable[PodVerdict] | None,
             platform: PlatformOutcome | None) -> TaskState:
    lim, r, o = state.limits, state.roster, state.observed
    ends: dict[int, PodEnd] | None = None
    detail: dict[str, PodVerdict] | None = None
    for v in pods:
        if not v.terminal:
            continue
        h = pod_hash(v.pod)
        end = PodEnd(v.explained, epoch(v.at), v.failed)
        known = (r.ends if ends is None else ends).get(h)
        if known is None or end > known:
            if ends is None:
                ends = dict(r.ends)
            insert_end(ends, h, end, lim.roster)
        kept = (o.pods if detail is None else detail).get(v.pod)
        if kept is None or v.order() > kept.order():
            if detail is None:
                detail = dict(o.pods)
            if kept is None:
                _insert_capped(detail, v.pod, v, lim.observed_pods, _no_events)
            else:
                detail[v.pod] = v
    ended = r.ends if ends is None else ends
    now_waiting = o.waiting
    if waiting is not None:
        view: dict[str, PodVerdict] = {}
        for v in waiting:
            kept = view.get(v.pod)
            if not v.terminal and (kept is None or v.order() > kept.order()):
                view[v.pod] = v
        now_waiting = dict(sorted(view.items())[:lim.waiting])
    if ends is not None or waiting is not None:
        now_waiting = {p: v for p, v in now_waiting.items() if pod_hash(p) not in ended}
        if now_waiting == o.waiting:
            now_waiting = o.waiting
    now_platform = o.platform
    if platform is not None and (now_platform is None
                                 or platform.order() > now_platform.order()):
        now_platform = platform
    if ends is None and detail is None and now_waiting is o.waiting \
            and now_platform is o.platform:
        return state
    return _new_task_state(
        state.task, state.named, state.spans, state.workers, state.pod_events, state.applied,
        state.instance_times, state.watermark, state.first_event_time,
        state.last_event_time, state.counters, state.unknown, state.warnings,
        r if ends is None else with_ends(r, ends),
        Observed(o.pods if detail is None else detail, now_waiting, now_platform),
        state.limits)


def _no_events(v: object) -> int:
    return 0
