"""The apply table: what each kind of payload does to the state a run of the fold builds.

``Work`` is that state under construction: the input state, and each map the run writes,
copied on its first write and then changed in place, so a batch costs one copy per map.
``APPLY`` maps each payload model of the kind registry (schemas/wire/kinds.py) to its merge: a named
kind's is generic (a last-writer-wins register per name), the other families have their own
(progress into the workers and the roster, span summaries into schemas/engine/spans.py's
accumulators, a window into its parts, lineage and unknown types into counters). Every merge
is a join or a register with a total order, so the order of events cannot matter
(schemas/engine/folding.py's docstring).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from datetime import datetime
from operator import attrgetter
from typing import TypeVar, cast

from ..wire.caps import K, events_of, insert_capped, one_each
from ..wire.constants import MESSAGE_LIMIT, QUIET_REASON_LIMIT, non_finite_text
from ..wire.event import ParsedEvent
from ..wire.history import merge as merge_report
from ..wire.kinds import KINDS, Kind, Report
from ..wire.payloads import (
    Metric,
    Payload,
    PodSpawned,
    Progress,
    Quiet,
    SpanSummaries,
    SpanSummary,
    UnknownPayload,
    Window,
)
from ..wire.text import cut_text
from ..wire.times import epoch
from .roster import (
    FAILED,
    FINAL,
    FRACTION_MASK,
    Failure,
    Life,
    Mark,
    OrderKey,
    Pace,
    PodEnd,
    QuietPeriod,
    Roster,
    epoch_ms,
    mark_bits,
    place_end,
    pod_hash,
    uid_print,
    with_ends,
)
from .spans import SpanRun
from .state import Beyond, Named, NamedValue, TaskState
from .workers import ProgressState, merge_progress

# --- per-entry merges, in place on a map the run owns ------------------------------------


def _set_named(entries: dict[str, Named], name: str, value: NamedValue, at: OrderKey,
               cap: int, report: Report | None = None) -> int:
    """Write ``value`` to the register ``name`` if ``at`` is later than its own, and join
    ``report`` (a kind with a curve) into its series whatever the order."""
    cur = entries.get(name)
    if cur is None:
        series = None if report is None else merge_report(None, *report)
        return insert_capped(entries, name, Named(value, at, 1, series), cap, events_of)
    series = cur.series if report is None else merge_report(cur.series, *report)
    if at > cur.at:
        entries[name] = Named(value, at, cur.events + 1, series)
    else:
        entries[name] = Named(cur.value, cur.at, cur.events + 1, series)
    return 0


def _non_finite_of(value: NamedValue, index: int) -> str:
    """The wire spelling of the value field ``index`` of ``value`` when it is not finite."""
    v = value[index] if isinstance(value, tuple) else value
    return (non_finite_text(v) or "") if type(v) is float else ""


def _set_beyond(beyond: dict[str, Beyond], name: str, at: OrderKey, non_finite: str,
                events: int, cap: int) -> int:
    """Join a report of ``name``, beyond its kind's cap, into its finiteness register (the
    latest by order key wins, as a register's value does); the ``cap`` smallest names are
    kept. Returns the events of a name that fell beyond those."""
    cur = beyond.get(name)
    if cur is None:
        return insert_capped(beyond, name, Beyond(at, non_finite, events), cap, events_of)
    if at > cur.at:
        beyond[name] = Beyond(at, non_finite, cur.events + events)
    else:
        beyond[name] = Beyond(cur.at, cur.non_finite, cur.events + events)
    return 0


def _set_named_beyond(entries: dict[str, Named], beyond: dict[str, Beyond], name: str,
                      value: NamedValue, at: OrderKey, cap: int, report: Report | None,
                      index: int, beyond_cap: int) -> tuple[int, int]:
    """A new ``name`` for full ``entries``, of a kind that keeps the finiteness of its names
    beyond the cap: a name beyond it, or the register it evicts, goes on in ``beyond``.
    Returns the events beyond the cap and those beyond ``beyond`` as well (not judged)."""
    largest = max(entries) if cap > 0 else None
    if largest is None or name > largest:
        return 1, _set_beyond(beyond, name, at, _non_finite_of(value, index), 1, beyond_cap)
    gone = entries.pop(largest)
    entries[name] = Named(value, at, 1, None if report is None else merge_report(None, *report))
    return gone.events, _set_beyond(beyond, largest, gone.at,
                                    _non_finite_of(gone.value, index), gone.events, beyond_cap)


# What a report's life is to its pod's mark (``_merge_roster``).
_SAME, _NEW, _EARLIER = 0, 1, 2


def _merge_roster(w: Work, ev: ParsedEvent, p: Progress, key: OrderKey, heard: datetime
                  ) -> int:
    """Merge ``p`` into the roster: its pod's mark (joined), the declared count, the first
    failure and the latest final; its pace (roster.Pace), the report ``heard`` then. Each is
    a join, so the order of events cannot matter; the registers take every Progress, also of
    a pod beyond the roster's cap.

    A mark is one life of its pod name (``roster.Life``): a report of a later life (another
    uid, created later) starts the mark again (``_NEW``: the detailed record starts again
    too), one of an earlier life is not the mark's (``_EARLIER``: kept nowhere but in the
    registers). Of two lives the later stays, so this is a join as well."""
    marks = w.marks_w
    if marks is None:
        marks = w.begin_roster()
    paces = w.paces_w
    pod = ev.sender.name
    h = pod_hash(pod)
    bits = mark_bits(p.fraction, p.final, p.failed)
    cur = marks.get(h)
    lives = w.lives_w
    uid = uid_print(ev.sender.uid)
    born = epoch(key[0] if ev.created is None else ev.created)
    said = _SAME
    if cur is not None:
        life = lives.get(h)
        if life is None:  # (a mark of an older status: the life it was is not known)
            w.relive(h, Life(born, uid))
        elif life.uid != uid:
            if (born, uid) < (life.born, life.uid):
                if not life.replaced:
                    lives[h] = life._replace(replaced=True)
                _merge_registers(w, pod, p, key)
                return _EARLIER
            # The pod was re-created with its name: its mark starts again with this life.
            del marks[h]
            paces.pop(h, None)
            w.marked(cur.bits, -1)
            w.relive(h, Life(born, uid, True))
            cur, said = None, _NEW
        elif born < life.born:
            lives[h] = life._replace(born=born)
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
        if new & FINAL:  # (a final ends the pod's pace, whichever came first)
            paces.pop(h, None)
            w.unquiet(h)
        else:
            _join_pace(paces, h, pod, key[0], heard, fn)
    elif len(marks) < w.lim.roster:
        marks[h] = Mark(bits, 1)
        w.marked(bits, 1)
        if said == _SAME:
            w.relive(h, Life(born, uid))
        if not p.final:
            _join_pace(paces, h, pod, key[0], heard, bits & FRACTION_MASK)
        else:
            w.unquiet(h)
    elif h > w.top_mark():
        w.bump("roster_capped")
        if p.final:
            w.unquiet(h)
    else:
        largest = w.swap_top_mark(h)
        gone = marks.pop(largest)
        paces.pop(largest, None)
        w.relive(largest, None)
        w.bump("roster_capped", gone.events)
        w.marked(gone.bits, -1)
        marks[h] = Mark(bits, 1)
        w.marked(bits, 1)
        w.relive(h, Life(born, uid))
        if not p.final:
            _join_pace(paces, h, pod, key[0], heard, bits & FRACTION_MASK)
        else:
            w.unquiet(h)
    _merge_registers(w, pod, p, key)
    return said


def _merge_registers(w: Work, pod: str, p: Progress, key: OrderKey) -> None:
    """The roster's registers over every report: the declared count, the latest final and
    the first failure (whose life the completion rule asks the marks)."""
    if p.workers > w.declared:
        w.declared = p.workers
    if p.final:
        if w.last_final is None or key > w.last_final:
            w.last_final = key
        if p.failed and (w.first_failure is None or key < w.first_failure.at):
            w.first_failure = Failure(key, pod, cut_text(p.message, MESSAGE_LIMIT))


_FLAGS = FINAL | FAILED
_new_mark = tuple.__new__  # Mark's own __new__ is a Python call; the tuple is the same


def _join_pace(paces: dict[int, Pace], h: int, pod: str, t: datetime, heard: datetime,
               pm: int) -> None:
    """Join a report at ``t`` with ``pm``, received at ``heard``, into the pace of pod ``h``
    (roster.Pace says the rule: the earliest and the latest by (time, fraction), a count,
    the latest time heard, the lowest by (fraction, latest time)); inline, since every
    Progress passes here."""
    ms = epoch_ms(t)
    hms = epoch_ms(heard)
    cur = paces.get(h)
    if cur is None:
        paces[h] = _new_mark(Pace, (pod, 1, ms, pm, ms, pm, hms, ms, pm))
        return
    name, n, first_ms, first_pm, last_ms, last_pm, heard_ms, low_ms, low_pm = cur
    if ms < first_ms or (ms == first_ms and pm < first_pm):
        first_ms, first_pm = ms, pm
    if ms > last_ms or (ms == last_ms and pm > last_pm):
        last_ms, last_pm = ms, pm
    if pm < low_pm or (pm == low_pm and ms > low_ms):
        low_ms, low_pm = ms, pm
    paces[h] = _new_mark(Pace, (name, n + 1, first_ms, first_pm, last_ms, last_pm,
                                hms if hms > heard_ms else heard_ms, low_ms, low_pm))


def _count(entries: dict[K, int], key: K, cap: int) -> int:
    cur = entries.get(key)
    if cur is None:
        return insert_capped(entries, key, 1, cap, one_each)
    entries[key] = cur + 1
    return 0


# --- the run's state and the table ------------------------------------------------------

V = TypeVar("V")


def _copy_of(written: dict[str, dict[str, V]], source: Mapping[str, Mapping[str, V]],
             section: str) -> dict[str, V]:
    """The run's copy of ``source[section]`` in ``written``, made on its first write."""
    entries = written.get(section)
    if entries is None:
        entries = written[section] = dict(source.get(section, {}))
    return entries


class Carry:
    """The roster's maps one run of a fold made, handed to the next run of the same fold
    (``folding._fold_events``): that run changes them in place instead of copying them, as
    no one else holds them (the state between two runs is the fold's own). A batch past the
    instance cap ends a run at every new emitter instance; a copy of 20,000 marks each time
    made such a batch quadratic."""

    __slots__ = ("ends", "lives", "marks", "others", "paces", "top")

    def __init__(self) -> None:
        self.marks: dict[int, Mark] | None = None
        self.paces: dict[int, Pace] | None = None
        self.lives: dict[int, Life] | None = None
        self.ends: dict[int, PodEnd] | None = None
        self.others: dict[int, Mapping[int, PodEnd]] | None = None
        self.top: list[int] | None = None  # (the max-heap of ``marks``' hashes, if built)


def _own(carried: dict[K, V] | None, source: Mapping[K, V]) -> dict[K, V]:
    """``source`` itself when the fold made it (``carried``), else a copy."""
    return carried if carried is not None and carried is source else dict(source)


class Work:
    """One run's state under construction: the input state, and the maps the run has
    written (each a copy of the input's, made on the first write, then changed in place;
    the roster's, made by the fold's previous run, changed in place: ``Carry``)."""

    __slots__ = (
        "beyond_w",
        "carry",
        "counters",
        "declared",
        "ends_w",
        "failures",
        "finals",
        "first_failure",
        "last_final",
        "lim",
        "lives_w",
        "marks_top",
        "marks_w",
        "named_w",
        "others_w",
        "paces_w",
        "permyriads",
        "quiet_w",
        "spans_w",
        "state",
        "unknown_w",
        "workers_w",
    )

    def __init__(self, state: TaskState, carry: Carry | None = None) -> None:
        self.state, self.lim = state, state.limits
        self.carry = Carry() if carry is None else carry
        self.counters = dict(state.counters)
        self.named_w: dict[str, dict[str, Named]] | None = None
        self.spans_w: SpanRun | None = None
        self.workers_w: dict[str, ProgressState] | None = None
        self.unknown_w: dict[str, int] | None = None
        self.beyond_w: dict[str, dict[str, Beyond]] | None = None
        self.marks_w: dict[int, Mark] | None = None  # (the roster's tallies: begin_roster)
        self.paces_w: dict[int, Pace] = {}  # (begin_roster copies the roster's)
        self.lives_w: dict[int, Life] = {}  # (and its lives)
        self.marks_top: list[int] | None = None  # (see top_mark)
        # The pods' ends, copied when a new life of a name with an end picks its own.
        self.ends_w: dict[int, PodEnd] | None = None
        self.others_w: dict[int, Mapping[int, PodEnd]] = {}
        self.quiet_w: dict[int, QuietPeriod] | None = None  # (copied on the first change)

    def registers(self, section: str) -> dict[str, Named]:
        """The run's copy of the named kind ``section``'s registers."""
        if self.named_w is None:
            self.named_w = {}
        return _copy_of(self.named_w, self.state.named, section)

    def beyond(self, section: str) -> dict[str, Beyond]:
        """The run's copy of ``section``'s names beyond its cap."""
        if self.beyond_w is None:
            self.beyond_w = {}
        return _copy_of(self.beyond_w, self.state.beyond, section)

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
        c = self.carry
        if c.marks is not r.marks:
            c.top = None  # (the heap is of the carried marks)
        self.marks_w = c.marks = _own(c.marks, r.marks)
        self.paces_w = c.paces = _own(c.paces, r.paces)
        self.lives_w = c.lives = _own(c.lives, r.lives)
        self.marks_top = c.top
        return self.marks_w

    def top_mark(self) -> int:
        """The largest marked hash (-1: none), from a max-heap of the marks' hashes built on
        the run's first need (a full roster), so a pod past the cap costs O(log n)."""
        heap = self.marks_top
        if heap is None:
            heap = self.marks_top = self.carry.top = [-k for k in self.marks_w or ()]
            heapq.heapify(heap)
        return -heap[0] if heap else -1

    def swap_top_mark(self, h: int) -> int:
        """Take the largest marked hash out of the heap and ``h`` in; returns the largest."""
        assert self.marks_top is not None  # (top_mark came first)
        return -heapq.heapreplace(self.marks_top, -h)

    def relive(self, h: int, life: Life | None) -> None:
        """The mark ``h`` is of ``life`` now (None: the cap gave it up): its name's end is
        that life's, if it has one."""
        if life is None:
            self.lives_w.pop(h, None)
        else:
            self.lives_w[h] = life
        ends = self.ends_w
        if ends is None:
            r = self.state.roster
            if h not in r.ends:
                return
            c = self.carry
            ends = self.ends_w = c.ends = _own(c.ends, r.ends)
            self.others_w = c.others = _own(c.others, r.other_ends)
        if h in ends:
            place_end(ends, self.others_w, h, life)

    def quiet(self) -> dict[int, QuietPeriod]:
        """The run's copy of the roster's quiet periods."""
        if self.quiet_w is None:
            self.quiet_w = dict(self.state.roster.quiet)
        return self.quiet_w

    def unquiet(self, h: int) -> None:
        """The pod ``h`` has a final: a quiet period it declared is over."""
        if h in (self.state.roster.quiet if self.quiet_w is None else self.quiet_w):
            del self.quiet()[h]

    def roster(self) -> Roster:
        if self.marks_w is None:
            r = self.state.roster
            return r if self.quiet_w is None else r._replace(quiet=self.quiet_w)
        r = self.state.roster
        ends = r.ends if self.ends_w is None else self.ends_w
        out = Roster(self.marks_w, self.declared, self.finals, self.failures,
                     self.permyriads, self.first_failure, self.last_final, ends,
                     paces=self.paces_w, lives=self.lives_w,
                     other_ends=r.other_ends if self.ends_w is None else self.others_w,
                     quiet=r.quiet if self.quiet_w is None else self.quiet_w)
        # The pods' ends count only for pods without a final of their own: a new mark or
        # final moves those tallies (rarely: only a task with an ended pod has ends).
        return with_ends(out) if ends else out


Apply = Callable[[Work, ParsedEvent, Payload, datetime], None]


def _apply_span(w: Work, ev: ParsedEvent, p: SpanSummary, t: datetime) -> None:
    spans = w.spans_w
    if spans is None:
        spans = w.spans_w = SpanRun(w.state.spans, w.lim)
    capped = spans.add(ev.sender.name, p)
    if capped:
        w.bump("spans_capped", capped)


def _apply_spans(w: Work, ev: ParsedEvent, p: SpanSummaries, t: datetime) -> None:
    # A SpanSummaries note is its rows, each merged as one SpanSummary would be (each row
    # counts as one event of its name), so packing names into one note changes nothing in
    # the state: the per-name merges commute, whatever notes carry them.
    for row in p.spans:
        _apply_span(w, ev, row, t)


def _apply_window(w: Work, ev: ParsedEvent, p: Window, t: datetime) -> None:
    # Each part as its own event would be (the same order key): packing a worker's window
    # into one note changes nothing in the state.
    if p.progress is not None:
        APPLY[Progress](w, ev, p.progress, t)
    for metric in p.metrics:
        APPLY[Metric](w, ev, metric, t)
    for span in p.spans:
        APPLY[SpanSummary](w, ev, span, t)


def _apply_progress(w: Work, ev: ParsedEvent, p: Progress, t: datetime) -> None:
    workers = w.workers_w
    if workers is None:
        workers = w.workers_w = dict(w.state.workers)
    key = (t, ev.instance, ev.seq)
    # Silence is judged by when the API server received a report (its creationTimestamp),
    # never by the sender's clock: one behind by minutes would look silent for minutes.
    created = ev.created
    life = _merge_roster(w, ev, p, key, t if created is None else created)
    if life == _EARLIER:
        return
    if life == _NEW:
        workers.pop(ev.sender.name, None)
    capped = merge_progress(workers, ev.sender.name, p, key, w.lim.workers)
    if capped:
        w.bump("workers_capped", capped)


def _named_apply(kind: Kind, model: type) -> Apply:
    """The apply of a named kind's ``model`` (schemas/wire/kinds.py): the payload's ``key`` names
    a last-writer-wins register holding its value fields (one: the value; several: a tuple).
    A batch model's rows are each merged as one event of their name would be."""
    section, cap, counter, report = kind.section, attrgetter(kind.cap), kind.capped, kind.report
    key = attrgetter(kind.key)
    value = attrgetter(*(f.attr for f in kind.values))
    rows = attrgetter(kind.batch) if kind.batch in getattr(model, "model_fields", {}) \
        else None

    # A kind whose value may be non-finite keeps the finiteness of its names beyond the cap.
    index = next(i for i, f in enumerate(kind.values) if f.non_finite) if kind.beyond else -1
    unjudged = kind.unjudged

    def apply(w: Work, ev: ParsedEvent, p: Payload, t: datetime) -> None:
        entries = w.registers(section)
        at, limit = (t, ev.instance, ev.seq), cap(w.lim)
        for row in (p,) if rows is None else rows(p):
            name = key(row)
            if index < 0 or name in entries or len(entries) < limit:  # (it fits)
                capped, lost = _set_named(entries, name, value(row), at, limit,
                                          None if report is None else report(row)), 0
            else:
                capped, lost = _set_named_beyond(
                    entries, w.beyond(section), name, value(row), at, limit,
                    None if report is None else report(row), index, w.lim.beyond)
            if capped:
                w.bump(counter, capped)
            if lost:
                w.bump(unjudged, lost)

    return apply


def _apply_quiet(w: Work, ev: ParsedEvent, p: Quiet, t: datetime) -> None:
    """A worker's declared quiet period: the latest it declared (roster.Quiet, a join),
    while it has no final; the ``roster`` cap smallest pods kept, as its marks are."""
    w.bump("quiet_declared")
    pod = ev.sender.name
    h = pod_hash(pod)
    marks = w.state.roster.marks if w.marks_w is None else w.marks_w
    m = marks.get(h)
    if m is not None and m.bits & FINAL:
        return
    created = ev.created
    heard_ms = epoch_ms(t if created is None else created)
    q = QuietPeriod(pod, heard_ms, epoch_ms(t), max(1, round(p.seconds * 1000)),
                    cut_text(p.reason, QUIET_REASON_LIMIT))
    quiet = w.state.roster.quiet if w.quiet_w is None else w.quiet_w
    cur = quiet.get(h)
    if cur is not None:
        if q > cur:
            w.quiet()[h] = q
        return
    cap = w.lim.roster
    if len(quiet) >= cap:
        largest = max(quiet, default=-1)
        if h > largest or cap <= 0:
            w.bump("quiet_capped")
            return
        del w.quiet()[largest]
        w.bump("quiet_capped")
    w.quiet()[h] = q


def _apply_pod_spawned(w: Work, ev: ParsedEvent, p: PodSpawned, t: datetime) -> None:
    w.bump("pods_spawned")


def _apply_unknown(w: Work, ev: ParsedEvent, p: UnknownPayload, t: datetime) -> None:
    unknown = w.unknown_w
    if unknown is None:
        unknown = w.unknown_w = dict(w.state.unknown)
    capped = _count(unknown, p.type, w.lim.unknown_types)
    w.bump("unknown_payloads")
    if capped:
        w.bump("unknown_capped", capped)


# What the payload models of each family (schemas/wire/kinds.py) do; named kinds are generic.
# (Each function takes its own type; the table is keyed by exactly that type.)
_FAMILY_APPLY: dict[type, Apply] = {
    SpanSummary: cast(Apply, _apply_span),
    SpanSummaries: cast(Apply, _apply_spans),
    Progress: cast(Apply, _apply_progress),
    Window: cast(Apply, _apply_window),
    Quiet: cast(Apply, _apply_quiet),
    PodSpawned: cast(Apply, _apply_pod_spawned),
    UnknownPayload: cast(Apply, _apply_unknown),
}
# What each payload type does, for every kind of the registry. ``t`` is the event's order
# time (eventTime bounded by the server's clock); every applied event also counts its
# sender pod, its time and warning.
APPLY: dict[type, Apply] = {
    m: _named_apply(k, m) if k.family == "named" else _FAMILY_APPLY[m]
    for k in KINDS for m in k.models}
