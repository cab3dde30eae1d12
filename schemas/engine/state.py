"""The folded state of a task: its caps (``Limits``), its registers and ``TaskState`` itself.

``new_state`` makes the empty state; the fold fills it (schemas/engine/folding.py with the events,
schemas/engine/observing.py with what the pods' and the platform's objects say); the status encoder
writes it (schemas/status/encoder.py) and the decoder reads it back
(schemas/status/decoder.py). Its phase and aggregate progress are the completion rule's
(schemas/engine/completion.py). The rules that give each field its meaning (order keys, caps, the
roster, dedup compaction) are in schemas/engine/folding.py's docstring; the cap rule itself is
schemas/wire/caps.py, a worker's register schemas/engine/workers.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import NamedTuple

from ..wire._fast import slot_constructor
from ..wire.constants import WORKERS_MAX
from ..wire.contract import FAILED, SUCCEEDED
from ..wire.event import ParsedEvent
from ..wire.history import Series
from ..wire.kinds import KINDS, Kind, Scalar
from ..wire.refs import TaskRef
from ..wire.times import epoch
from .completion import TaskProgress, aggregate, phase_of
from .observed import EMPTY_OBSERVED, Observed
from .roster import EMPTY_ROSTER, OrderKey, Roster
from .version_vector import VersionVector
from .workers import ProgressState

# How far past the API server's creationTimestamp a sender's eventTime may order its event
# (watcher --clock-skew). Node clocks are NTP-synced (milliseconds apart) and
# creationTimestamp has whole seconds, so an honest eventTime is less than 1 s past it; 2 s
# allows that plus a second of clock error, and bounds what a false future time can win.
CLOCK_SKEW = timedelta(seconds=2)

COUNTER_NAMES: tuple[str, ...] = (
    "events_applied",  # distinct events folded in (order-independent)
    "duplicates",  # re-deliveries skipped by the version vector (depends on delivery)
    # Each kind's: ``*_capped`` counts its events beyond its cap (e.g. links whose name is
    # beyond the links cap, Progress of pods beyond the worker cap); ``unknown_payloads``
    # the events of an unknown type or newer schema version; ``pods_spawned`` lineage.
    # ``metrics_unjudged``: metric events of names beyond the cap and the names beyond it
    # whose finiteness is kept (``Limits.beyond``): not judged by NonFiniteMetrics.
    *dict.fromkeys(c for k in KINDS for c in (k.capped, k.unjudged, *k.counters) if c),
    "pods_capped",  # events of sender pods beyond the pods cap
    "roster_capped",  # Progress events of pods beyond the roster (uncounted by the rule)
    "wrong_task",  # events handed to the fold of another task (a caller bug); not applied
    "fold_errors",  # internal errors swallowed to keep the fold total (should stay 0)
    "time_clamped",  # events whose eventTime was later than creationTimestamp + CLOCK_SKEW
    "late_skipped",  # events created before the compaction watermark: skipped, never re-applied
    "instances_compacted",  # emitter instances forgotten by dedup compaction
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-task caps. Beyond a cap the lexicographically smallest names are kept, so the kept
    set does not depend on arrival order; everything else is counted in ``*_capped``."""

    links: int = 64
    decks: int = 32
    metrics: int = 64
    spans: int = 128
    # (span name, pod) lanes of the task, the smallest pairs of the kept names (timelines).
    span_lanes: int = 256
    pods: int = 128
    unknown_types: int = 32
    workers: int = 64  # pods whose detailed progress record is kept (display, ETA)
    # Names beyond a kind's cap whose latest value's finiteness is kept (metrics: what
    # NonFiniteMetrics judges), the smallest of them; the reports of names beyond these
    # are counted (``metrics_unjudged``) and make the condition Unknown.
    beyond: int = 64
    # Pods the roster keeps (the completion rule sees every one of them): twice the largest
    # worker count a task can declare, so retried pods of the largest task still fit.
    roster: int = 2 * WORKERS_MAX
    # Pods whose end (as their object said it) is kept in detail (every pod's is in the
    # roster, compact), and pods shown waiting (ImagePullBackOff, Unschedulable, ...).
    observed_pods: int = 64
    waiting: int = 16
    # How far past creationTimestamp an eventTime may order its event (watcher --clock-skew).
    clock_skew: timedelta = CLOCK_SKEW
    # Dedup compaction: the transport's event TTL plus a margin, and the instances kept.
    event_ttl: timedelta = timedelta(hours=1)
    ttl_margin: timedelta = timedelta(minutes=10)
    max_instances: int = 512


DEFAULT_LIMITS = Limits()


# A named register's value: the payload's one value field, or a tuple of its several
# (in the order of its kind's ``values``).
NamedValue = Scalar | tuple[Scalar, ...]


class Named(NamedTuple):
    """A last-writer-wins register: ``value`` written by the event with order key ``at``;
    ``events`` counts the events that targeted this name (needed to count them when capped).
    A kind with a curve (metrics) also joins every report into ``series``: the name's
    extremes and history (schemas/wire/history.py)."""

    value: NamedValue
    at: OrderKey
    events: int
    series: Series | None = None


class Beyond(NamedTuple):
    """A name beyond its kind's cap (no register kept), for a kind whose value may be
    non-finite (metrics): its latest report's order key and that value's wire spelling when
    it was not finite ("" when finite), and the events that named it. So NonFiniteMetrics
    sees a NaN whether or not its name fits."""

    at: OrderKey
    non_finite: str
    events: int


NO_LANES: Mapping[str, SpanAgg] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class SpanAgg:
    """Aggregate of all SpanSummary windows of one name. Total time is exact integer ns so
    that sums are associative and any arrival order gives bit-identical results."""

    count: int
    total_ns: int
    min_s: float
    max_s: float
    first_start: float
    last_end: float
    errors: int
    events: int
    # Where the spans ran: merged busy intervals of the windows, in buckets of 2**shift µs
    # (the smallest bucket that cuts [first_start, last_end] into at most WINDOW_BUCKETS),
    # as (lo, hi) bucket numbers. Integer rounding outward at a power-of-two grid makes the
    # result the same for any arrival order, and it never holds more than ~33 intervals.
    shift: int = 0
    windows: tuple[tuple[int, int], ...] = ()
    # One lane per sender pod: the same aggregate of the summaries that pod sent (a lane's
    # own lanes are empty), for the ``span_lanes`` smallest (name, pod) pairs of the task;
    # ``unlaned`` counts this name's summaries whose pod has no lane (beyond that cap).
    lanes: Mapping[str, SpanAgg] = field(default_factory=lambda: NO_LANES)
    unlaned: int = 0

    @property
    def totals(self) -> SpanAgg:
        """This aggregate without its lanes (what each lane is made of, for one pod)."""
        if not self.lanes and not self.unlaned:
            return self
        return self.with_lanes(NO_LANES, 0)

    def with_lanes(self, lanes: Mapping[str, SpanAgg], unlaned: int) -> SpanAgg:
        """These totals with ``lanes`` and ``unlaned`` instead of its own."""
        return new_span_agg(count=self.count, total_ns=self.total_ns, min_s=self.min_s,
                            max_s=self.max_s, first_start=self.first_start,
                            last_end=self.last_end, errors=self.errors, events=self.events,
                            shift=self.shift, windows=self.windows, lanes=lanes,
                            unlaned=unlaned)

    @property
    def total_s(self) -> float:
        return self.total_ns / 1e9

    def busy(self) -> list[tuple[float, float]]:
        """The busy intervals as (start, end) Unix seconds."""
        q = 1 << self.shift
        return [(lo * q / 1e6, hi * q / 1e6) for lo, hi in self.windows]


def us(t: float) -> int:
    """Unix seconds as whole microseconds: the unit of a span aggregate's window buckets."""
    return round(t * 1e6)


@dataclass(frozen=True, slots=True)
class TaskState:
    """Folded state of one task. Treat as immutable; build with ``new_state`` and ``fold``."""

    task: TaskRef
    named: Mapping[str, Mapping[str, Named]]  # a named kind's section -> its registers
    spans: Mapping[str, SpanAgg]
    workers: Mapping[str, ProgressState]  # reporting pod name -> its winning progress
    # (pod name, uid) -> events sent, by the pods of the task's own namespace
    pod_events: Mapping[tuple[str, str], int]
    applied: VersionVector
    instance_times: Mapping[str, int]  # instance -> newest creationTimestamp (epoch s)
    watermark: int  # epoch s; events created before it are skipped (0: none)
    first_event_time: datetime | None
    last_event_time: datetime | None
    counters: Mapping[str, int]
    unknown: Mapping[str, int]  # unknown payload type -> events
    warnings: int
    roster: Roster  # every reporting pod's outcome: what the completion rule reads
    # What the pods' objects and the platform's object say (schemas/engine/observed.py).
    observed: Observed
    limits: Limits = field(default=DEFAULT_LIMITS, compare=False)
    # A kind's section -> its names beyond the cap (``Beyond``), for kinds that keep them.
    beyond: Mapping[str, Mapping[str, Beyond]] = field(default_factory=dict)

    def registers(self, kind: Kind) -> Mapping[str, Named]:
        """The registers of the named ``kind`` (empty when none was written)."""
        return self.named.get(kind.section, _NO_REGISTERS)

    @property
    def link_entries(self) -> Mapping[str, Named]:
        return self.named.get("links", _NO_REGISTERS)

    @property
    def deck_entries(self) -> Mapping[str, Named]:
        return self.named.get("decks", _NO_REGISTERS)

    @property
    def links(self) -> dict[str, str]:
        """Link name -> URL."""
        return {k: str(v.value) for k, v in sorted(self.link_entries.items())}

    @property
    def decks(self) -> dict[str, str]:
        """Deck name -> URI."""
        return {k: str(v.value) for k, v in sorted(self.deck_entries.items())}

    @property
    def latest_deck(self) -> str | None:
        """The name of the deck written last (by order key), or None."""
        if not self.deck_entries:
            return None
        return max(self.deck_entries.items(), key=lambda kv: (kv[1].at, kv[0]))[0]

    @property
    def pods(self) -> list[tuple[str, str]]:
        """Sender pods seen, as sorted (name, uid) pairs."""
        return sorted(self.pod_events)

    @property
    def phase(self) -> str:
        """Pending (nothing folded), Running, Succeeded or Failed (the completion rule)."""
        return phase_of(self)

    @property
    def finished(self) -> bool:
        """True once the task is over: phase Succeeded or Failed."""
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def completed(self) -> bool:
        """Alias of ``finished`` (the task is over, whatever its outcome)."""
        return self.finished

    @property
    def failed(self) -> bool:
        return self.phase == FAILED

    @property
    def settled(self) -> bool:
        """Finished, and every event a final worker's emitter sent before its final is
        folded (emitters count seqs from 0 and send pending span windows before a final, so
        a gap below the final's seq is a window still on its way)."""
        if not self.finished:
            return False
        for w in self.workers.values():
            if not w.final:
                continue
            _, instance, seq = w.at
            rs = self.applied.ranges(instance)
            if rs and not (rs[0][0] == 0 and rs[0][1] >= seq):
                return False  # (an instance compacted away has no ranges: nothing to wait for)
        return True

    def late(self, ev: ParsedEvent) -> bool:
        """Whether ``ev`` was created before the compaction watermark (it is skipped)."""
        return ev.created is not None and epoch(ev.created) < self.watermark

    @property
    def progress(self) -> TaskProgress | None:
        """The task's aggregate progress; None when no worker reported any."""
        return aggregate(self)


def new_state(task: TaskRef, limits: Limits = DEFAULT_LIMITS) -> TaskState:
    """The empty state of ``task``."""
    return TaskState(
        task=task,
        named={},
        spans={},
        workers={},
        pod_events={},
        applied=VersionVector(),
        instance_times={},
        watermark=0,
        first_event_time=None,
        last_event_time=None,
        counters=dict.fromkeys(COUNTER_NAMES, 0),
        unknown={},
        warnings=0,
        roster=EMPTY_ROSTER,
        observed=EMPTY_OBSERVED,
        limits=limits,
    )


def with_counter(state: TaskState, name: str) -> TaskState:
    """``state`` with the counter ``name`` one higher (``fold_errors``: a fold stays total)."""
    counters = dict(state.counters)
    counters[name] = counters.get(name, 0) + 1
    return replace(state, counters=counters)


_NO_REGISTERS: Mapping[str, Named] = {}

# Frozen dataclass __init__ pays object.__setattr__ per field; these build the same objects
# with the same (type-checked) parameters, for the fold's hot path.
new_task_state = slot_constructor(TaskState)
new_span_agg = slot_constructor(SpanAgg)
