"""The folded state of a task and its ``.status`` codec: limits, registers, the completion rule.

``TaskState`` is what the fold (schemas/folding.py) builds; ``to_status`` writes it, camelCase
and structural (deploy/crd.yaml documents every field), and ``decode_status`` reads it back.
The rules that give each field its meaning (order keys, caps, the completion rule, dedup
compaction) are in schemas/folding.py's docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

import orjson

from . import history
from ._fast import slot_constructor
from .constants import NAME_LIMIT, TYPE_LIMIT, WORKERS_MAX
from .contract import FAILED, PENDING, RUNNING, SUCCEEDED
from .event import ParsedEvent, TaskRef
from .health import DEFAULT_HEALTH, HealthSettings, evaluate, health_json
from .health import conditions as health_conditions
from .history import Series
from .kinds import BUDGET_STEPS, KINDS, NAMED_KINDS, Kind, Scalar, ValueField
from .note import valid_instance, valid_seq
from .observed import (
    EMPTY_OBSERVED,
    WAITING,
    Observed,
    PlatformOutcome,
    PodVerdict,
    clean_message,
    clean_reason,
    exit_code_of,
)
from .payloads import NON_FINITE, cut_text, non_finite_text
from .roster import (
    EMPTY_ROSTER,
    FRACTION_MASK,
    FRACTION_SCALE,
    Failure,
    OrderKey,
    Roster,
    counts,
    decode_ends,
    decode_marks,
    encode_ends,
    encode_marks,
    pod_hash,
    roster_of,
    with_ends,
)
from .roster import FAILED as FAILED_BIT
from .roster import FINAL as FINAL_BIT
from .text import sanitize_text
from .times import epoch, format_seconds, format_time, from_epoch, parse_time
from .version_vector import VersionVector

_INT_MAX = 2**63 - 1  # status numbers are int64 in the API server; sums saturate there
# The layout version of ``.status`` (1 was the snake_case layout, which is no longer read).
STATUS_VERSION = 2
# Characters of a worker's progress message kept in the status (the note allows ~1000 bytes;
# a status line needs far less, and 64 workers' messages must stay small).
MESSAGE_LIMIT = 256
# The hard byte budget of a written status (JSON, UTF-8), far below etcd's 1.5 MB request limit.
# 64 KiB: the API server's CPU per status write grows with its bytes (about 0.2 ms/KB in
# bench/bench_status_write.py), so this also bounds the cost of a write at every cap.
STATUS_BUDGET = 64 * 1024
# What ``to_status(budget=...)`` gives up, in this order, while the status is over budget:
# the sender pods and the pods' outcomes first, then each kind's section by its
# ``drop_rank``, or the detail of its entries by its ``detail_rank`` (schemas/kinds.py,
# ``BUDGET_STEPS``). Dedup data, phase, conditions, progress, workers, the roster and counters
# are never dropped. Entries go from the end of a section (the largest names first), a
# section at a time; ``workerMessages`` empties the workers' messages (their progress stays),
# ``metricHistory`` the metrics' histories (their values and extremes stay).
BUDGET_DROP_ORDER: tuple[str, ...] = ("pods", "podOutcomes",
                                      *(drop for drop, _, _ in BUDGET_STEPS))
# How far past the API server's creationTimestamp a sender's eventTime may order its event
# (watcher --clock-skew). Node clocks are NTP-synced (milliseconds apart) and
# creationTimestamp has whole seconds, so an honest eventTime is less than 1 s past it; 2 s
# allows that plus a second of clock error, and bounds what a false future time can win.
CLOCK_SKEW = timedelta(seconds=2)
# The farthest past a worker's latest report its pace may put the task's estimated
# completion time; beyond it the estimate is left out (see ``estimated_completion``).
ETA_HORIZON = timedelta(days=365)
_ETA_HORIZON_S = ETA_HORIZON.total_seconds()

COUNTER_NAMES: tuple[str, ...] = (
    "events_applied",  # distinct events folded in (order-independent)
    "duplicates",  # re-deliveries skipped by the version vector (depends on delivery)
    # Each kind's: ``*_capped`` counts its events beyond its cap (e.g. links whose name is
    # beyond the links cap, Progress of pods beyond the worker cap); ``unknown_payloads``
    # the events of an unknown type or newer schema version; ``pods_spawned`` lineage.
    *dict.fromkeys(c for k in KINDS for c in (k.capped, *k.counters) if c),
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
    extremes and history (schemas/history.py)."""

    value: NamedValue
    at: OrderKey
    events: int
    series: Series | None = None


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
        return _new_span_agg(self.count, self.total_ns, self.min_s, self.max_s,
                             self.first_start, self.last_end, self.errors, self.events,
                             self.shift, self.windows, NO_LANES, 0)

    @property
    def total_s(self) -> float:
        return self.total_ns / 1e9

    def busy(self) -> list[tuple[float, float]]:
        """The busy intervals as (start, end) Unix seconds."""
        q = 1 << self.shift
        return [(lo * q / 1e6, hi * q / 1e6) for lo, hi in self.windows]


class ProgressState(NamedTuple):
    """One worker's winning Progress: a final beats any non-final, then the latest wins.
    ``events`` counts that worker's Progress events (to count them when capped);
    ``first_at``/``first_fraction`` are its earliest Progress (by order key), the start of
    the rate the estimated completion time extrapolates (None: the winning one itself)."""

    fraction: float
    message: str
    final: bool
    at: OrderKey
    failed: bool = False
    workers: int = 0
    events: int = 1
    first_at: OrderKey | None = None
    first_fraction: float = 0.0


class TaskProgress(NamedTuple):
    """The task's aggregate progress (see the module docstring for the rule)."""

    fraction: float
    message: str
    final: bool  # the task is over (succeeded or failed)
    failed: bool
    # When the task should complete at the workers' recent pace; None when that cannot be
    # estimated (see ``estimated_completion``).
    eta: datetime | None = None


@dataclass(frozen=True, slots=True)
class TaskState:
    """Folded state of one task. Treat as immutable; build with ``new_state`` and ``fold``."""

    task: TaskRef
    named: Mapping[str, Mapping[str, Named]]  # a named kind's section -> its registers
    spans: Mapping[str, SpanAgg]
    workers: Mapping[str, ProgressState]  # reporting pod name -> its winning progress
    pod_events: Mapping[tuple[str, str], int]  # (pod name, uid) -> events sent
    applied: VersionVector
    instance_times: Mapping[str, int]  # instance -> newest creationTimestamp (epoch s)
    watermark: int  # epoch s; events created before it are skipped (0: none)
    first_event_time: datetime | None
    last_event_time: datetime | None
    counters: Mapping[str, int]
    unknown: Mapping[str, int]  # unknown payload type -> events
    warnings: int
    roster: Roster  # every reporting pod's outcome: what the completion rule reads
    # What the pods' objects and the platform's object say (schemas/observed.py).
    observed: Observed
    limits: Limits = field(default=DEFAULT_LIMITS, compare=False)

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
        return _phase(self)

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
        return _aggregate(self)

    def to_status(self, budget: int | None = None, *, now: datetime | None = None,
                  health: HealthSettings = DEFAULT_HEALTH) -> dict[str, Any]:
        """The JSON-safe ``.status`` dict: camelCase, structural (deploy/crd.yaml documents
        every field); empty maps, zero counters and absent values are left out. Its health
        (``schemas/health.py``: conditions and ``health``) is judged with ``health``'s
        thresholds, and silence (``Stalled``) only when ``now`` says when it is judged.

        With ``budget`` (bytes), entries are dropped in ``BUDGET_DROP_ORDER`` (from the end of
        each section, the largest names first) while the encoded status is larger, and
        ``budgetDropped`` counts what went per section (the in-memory state keeps it all; only
        the written copy is cut). Phase, conditions, progress, the workers' progress, counters,
        the roster and the version vector are never dropped."""
        st = self._status(now, health)
        if budget is None:
            return st
        size = len(orjson.dumps(st)) + _DROPPED_RESERVE
        dropped: dict[str, int] = {}
        for drop, section, detail in (("pods", "pods", ""), ("podOutcomes", "podOutcomes", ""),
                                      *BUDGET_STEPS):
            if size <= budget:
                break
            entries = st.get(section)
            if not entries:
                continue
            n = 0
            keys = list(range(len(entries))) if isinstance(entries, list) else list(entries)
            for key in reversed(keys):
                if size <= budget:
                    break
                if detail:  # a field of each entry, the entries stay
                    entry = entries[key]
                    if detail in entry:
                        size -= len(orjson.dumps(entry.pop(detail))) + len(detail) + 4
                        n += 1
                    continue
                value = entries.pop(key)
                size -= len(orjson.dumps(value)) + (
                    1 if isinstance(entries, list) else len(orjson.dumps(key)) + 2)
                n += 1
            if not entries:
                del st[section]
            if n:
                dropped[drop] = n
        if dropped:
            st["budgetDropped"] = dropped
        return st

    def _status(self, now: datetime | None, settings: HealthSettings) -> dict[str, Any]:
        phase = self.phase
        st: dict[str, Any] = {"schemaVersion": STATUS_VERSION, "phase": phase}
        conditions = _conditions(self, phase)
        if conditions:
            health = evaluate(self, now, settings)
            st["conditions"] = conditions + health_conditions(self, health)
            st["health"] = health_json(health)
        agg = _aggregate(self, phase)
        if agg is not None:
            st["progress"] = _progress_json(agg, phase)
        st["linkCount"] = len(self.link_entries)
        deck = self.latest_deck
        if deck is not None:
            st["deck"] = deck
        named = self.named
        for kind in NAMED_KINDS:
            entries = named.get(kind.section)
            if entries:
                st[kind.section] = {k: _named_json(kind, v) for k, v in sorted(entries.items())}
        if self.spans:
            st["spans"] = {k: _span_json(s) for k, s in sorted(self.spans.items())}
        if self.workers:
            st["workers"] = [_worker_json(k, w) for k, w in sorted(self.workers.items())]
        if self.roster.marks or self.roster.ends:
            st["roster"] = _roster_json(self.roster)
        _observed_json(self.observed, st)
        if self.pod_events:
            st["pods"] = [
                {"name": n, "uid": u, "events": c} for (n, u), c in sorted(self.pod_events.items())
            ]
        if self.unknown:
            st["unknownTypes"] = dict(sorted(self.unknown.items()))
        counters = {_CAMEL[k]: v for k in COUNTER_NAMES if (v := self.counters.get(k, 0))}
        if self.warnings:
            counters["warnings"] = self.warnings
        if counters:
            st["counters"] = counters
        if self.first_event_time is not None:
            st["firstEventTime"] = format_time(self.first_event_time)
        if self.last_event_time is not None:
            st["lastEventTime"] = format_time(self.last_event_time)
        applied = self.applied.to_text(self.instance_times)
        if applied:
            st["applied"] = applied
        if self.watermark:
            st["compactedBefore"] = format_seconds(from_epoch(self.watermark))
        return st

    @classmethod
    def from_status(cls, task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> TaskState:
        """Rebuild a state from a ``.status`` dict. Tolerant: anything unreadable gives a
        fresh state for ``task`` (never raises)."""
        return decode_status(task, status, limits)


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



_NO_REGISTERS: Mapping[str, Named] = {}

# Room for the budgetDropped field itself.
_DROPPED_RESERVE = 160


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


_CAMEL: dict[str, str] = {k: _camel(k) for k in COUNTER_NAMES}
_SNAKE: dict[str, str] = {v: k for k, v in _CAMEL.items()}


def _windows_text(s: SpanAgg) -> str:
    """``"<shift> lo-hi,lo-hi"`` with bucket numbers relative to the first start's bucket."""
    base = _us(s.first_start) >> s.shift
    return f"{s.shift} " + ",".join(f"{lo - base}-{hi - base}" for lo, hi in s.windows)


def _span_json(s: SpanAgg) -> dict[str, Any]:
    """A span name's entry: its aggregate, then its lanes: ``pods`` by pod name, or, when
    one pod sent every summary of the name, ``pod`` alone (its lane is the entry itself)."""
    out = _agg_json(s)
    if s.unlaned:
        out["unlaned"] = s.unlaned
    if len(s.lanes) == 1 and not s.unlaned:
        ((pod, lane),) = s.lanes.items()
        if lane == s.totals:
            out["pod"] = pod
            return out
    if s.lanes:
        out["pods"] = {pod: _agg_json(lane) for pod, lane in sorted(s.lanes.items())}
    return out


def _agg_json(s: SpanAgg) -> dict[str, Any]:
    return {"count": s.count, "totalNs": s.total_ns, "minS": s.min_s, "maxS": s.max_s,
            "firstStart": s.first_start, "lastEnd": s.last_end, "errors": s.errors,
            "events": s.events, "windows": _windows_text(s)}


def _named_json(kind: Kind, v: Named) -> dict[str, Any]:
    """A register's status entry: its value fields (an absent optional one left out), then
    ``at`` and ``events``."""
    fields = kind.values
    out: dict[str, Any] = {}
    values = v.value if isinstance(v.value, tuple) else (v.value,)
    for f, x in zip(fields, values, strict=True):
        if x is None:
            continue
        text = non_finite_text(x) if f.non_finite and type(x) is float else None
        if text is None:
            out[f.attr] = x
        else:
            out[f.non_finite] = text
    out["at"] = _key_text(v.at)
    out["events"] = v.events
    if v.series is not None:
        out.update(history.to_status(v.series))
    return out


def _key_text(k: OrderKey) -> str:
    """The order key as one string: ``<eventTime> <instance> <seq>``."""
    return f"{format_time(k[0])} {k[1]} {k[2]}"


def _worker_json(pod: str, w: ProgressState) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": pod, "fraction": w.fraction}
    if w.message:
        out["message"] = w.message
    if w.final:
        out["final"] = True
    if w.failed:
        out["failed"] = True
    if w.workers:
        out["workers"] = w.workers
    out["at"] = _key_text(w.at)
    out["events"] = w.events
    if w.first_at is not None:
        out["firstAt"] = _key_text(w.first_at)
        out["firstFraction"] = w.first_fraction
    return out


def _roster_json(r: Roster) -> dict[str, Any]:
    out: dict[str, Any] = {"reporting": len(r.marks), "final": r.finals}
    if r.failures:
        out["failed"] = r.failures
    if r.declared:
        out["declared"] = r.declared
    if r.first_failure is not None:
        f = r.first_failure
        out["firstFailure"] = {"pod": f.pod, "at": _key_text(f.at), "message": f.message}
    if r.last_final is not None:
        out["lastFinal"] = _key_text(r.last_final)
    out["marks"] = encode_marks(r.marks)
    if r.ends:
        out["outcomes"] = encode_ends(r.ends)
    return out


def _observed_json(o: Observed, st: dict[str, Any]) -> None:
    """``podOutcomes``, ``waitingPods`` and ``platform``: what the objects said, in ``st``."""
    if o.pods:
        st["podOutcomes"] = [_verdict_json(v, "at") for _, v in sorted(o.pods.items())]
    if o.waiting:
        st["waitingPods"] = [_verdict_json(v, "since") for _, v in sorted(o.waiting.items())]
    p = o.platform
    if p is not None:
        out: dict[str, Any] = {"apiVersion": p.api_version, "kind": p.kind, "name": p.name,
                               "uid": p.uid, "phase": p.phase}
        if p.reason:
            out["reason"] = p.reason
        if p.message:
            out["message"] = p.message
        if p.at is not None:
            out["at"] = format_seconds(p.at)
        st["platform"] = out


def _verdict_json(v: PodVerdict, time_key: str) -> dict[str, Any]:
    out: dict[str, Any] = {"pod": v.pod, "uid": v.uid}
    if v.terminal:
        out["phase"] = v.phase
    out["reason"] = v.reason
    if v.message:
        out["message"] = v.message
    if v.exit_code is not None:
        out["exitCode"] = v.exit_code
    out[time_key] = format_seconds(v.at)
    if not v.explained:
        out["explained"] = False
    return out


def _progress_json(agg: TaskProgress, phase: str) -> dict[str, Any]:
    percent = _percent(agg.fraction, phase)
    # percentText is what the Progress printer column shows ("35%"; kubectl cannot format).
    out: dict[str, Any] = {"percent": percent, "percentText": f"{percent}%",
                           "message": agg.message}
    if agg.eta is not None:
        out["estimatedCompletionTime"] = format_seconds(agg.eta)
    return out


# --- the completion rule and the task aggregate -------------------------------------------


# The rule reads the roster (every reporting pod), never the capped detailed records, so no
# failed or final report is lost to a cap and a task of up to WORKERS_MAX declared workers
# completes. Who decides what (the README's "What the status means"):
# - a platform object that owns the task (``observed.platform``: a Job, JobSet, Workflow or
#   TrainJob whose controller reports on it) decides its outcome alone: its terminal
#   condition is the task's phase, and a worker that failed is an attempt it may retry;
# - otherwise the workers do: a failed final fails the task, and it succeeds once every
#   reporting pod is final (and at least ``declared`` of them);
# - a reporting pod is final by its own final report, else by its pod's end (the kubelet's
#   word: Succeeded, or Failed with its reason; deleted): what the process said is kept
#   beside what the pod says, and decides when it said it.


def _phase(state: TaskState) -> str:
    r = state.roster
    platform = state.observed.platform
    if platform is not None and platform.terminal:
        return platform.phase
    n = len(r.marks)
    started = bool(state.counters.get("events_applied", 0) or n)
    if platform is None:
        if r.first_failure is not None or r.pod_failures:  # (also beyond the roster's cap)
            return FAILED
        if n and r.finals + r.pod_finals == n and n >= r.declared:
            return SUCCEEDED
    return RUNNING if started else PENDING


def _retried(r: Roster, h: int, bits: int) -> bool:
    """Whether the pod ``h`` (mark ``bits``) failed: a failed final of its own, else its
    pod's failed end. Under a platform that retries, such a worker is a retried attempt."""
    if bits & FINAL_BIT:
        return bool(bits & FAILED_BIT)
    end = r.ends.get(h)
    return end is not None and end.failed


def _fraction_sum(state: TaskState, platform: bool) -> tuple[float, int]:
    """Every reporting pod's fraction summed, and how many pods that counts: a detailed
    record's own (latest) fraction, else the largest fraction the pod reported (its mark);
    a pod that ended well without a final of its own counts whole; under a platform
    (``platform``) the failed attempts count not at all."""
    r = state.roster
    marks = r.marks
    permyriads, n = r.permyriads, len(marks)
    whole: set[int] = set()
    if r.pod_finals:
        for h, end in r.ends.items():
            m = marks.get(h)
            if m is None or m.bits & FINAL_BIT:
                continue
            if not end.failed:
                permyriads += FRACTION_SCALE - (m.bits & FRACTION_MASK)
                whole.add(h)
    if platform and (r.failures or r.pod_failures):
        for h, m in marks.items():
            if _retried(r, h, m.bits):
                permyriads -= m.bits & FRACTION_MASK
                n -= 1
                whole.add(h)
    detailed = 0.0
    for pod, w in state.workers.items():
        h = pod_hash(pod)
        m = marks.get(h)
        if m is not None and h not in whole:
            permyriads -= m.bits & FRACTION_MASK
            detailed += w.fraction
    return permyriads / FRACTION_SCALE + detailed, n


class _Failure(NamedTuple):
    at: datetime
    reason: str  # the Failed condition's reason
    message: str


def _first_failure(state: TaskState) -> _Failure | None:
    """What failed the task first: a failed final of its own (WorkerFailed), or a reporting
    pod's failed end without one (PodFailed), whichever is earlier."""
    r = state.roster
    own = r.first_failure
    found = None if own is None else _Failure(
        own.at[0], "WorkerFailed", own.message or "a worker reported failure")
    if r.pod_first_failure is not None:
        at_s, h = r.pod_first_failure
        at = from_epoch(at_s)
        if found is None or at < found.at:
            v = next((v for pod, v in state.observed.pods.items() if pod_hash(pod) == h),
                     None)
            text = f"pod {v.pod} ended without a final report: {v.reason}" + (
                f": {v.message}" if v.message else "") if v is not None else \
                "a reporting pod failed without a final report"
            found = _Failure(at, "PodFailed", cut_text(text, MESSAGE_LIMIT))
    return found


def _aggregate(state: TaskState, phase: str | None = None) -> TaskProgress | None:
    r = state.roster
    if not r.marks:
        return None
    phase = phase or _phase(state)
    platform = state.observed.platform
    total, n = _fraction_sum(state, platform is not None)
    fraction = total / max(n, r.declared, 1)
    if platform is not None and phase == SUCCEEDED:
        fraction = 1.0  # its object says the work is done, whatever the workers said
    ws = state.workers
    failure = _first_failure(state) if phase == FAILED and platform is None else None
    if platform is not None and phase == FAILED:
        msg = _platform_text(platform)
    elif failure is not None:
        msg = failure.message  # the first failure explains the outcome best
    else:
        msg = max(ws.values(), key=lambda w: w.at).message if ws else ""
    eta = estimated_completion(state) if phase == RUNNING else None
    return TaskProgress(round(min(1.0, fraction), 4), msg, phase in (SUCCEEDED, FAILED),
                        phase == FAILED, eta)


def estimated_completion(state: TaskState) -> datetime | None:
    """When the task should complete if each unfinished worker keeps the pace it has kept
    since its first report: the latest of ``t1 + (1 - f1) * (t1 - t0) / (f1 - f0)`` over the
    detailed workers that are not final, (t0, f0) the worker's earliest Progress and (t1,
    f1) its latest (order times: eventTime bounded by the server's clock). None when it
    cannot be estimated: a declared worker has not reported yet, a worker has no second
    report or no progress since its first, or went backwards, or a worker's pace puts its
    end more than ``ETA_HORIZON`` past its latest report (an eventTime from a skewed clock
    makes any pace; no such estimate is worth showing, and past year 9999 none could be
    written). A worker whose pod ended is final. Total: no time or fraction the contract
    accepts makes it raise."""
    r = state.roster
    if len(r.marks) < r.declared or r.finals + r.pod_finals == len(r.marks):
        return None
    latest: datetime | None = None
    for pod, w in state.workers.items():
        if w.final or (r.pod_finals and r.end_of(pod_hash(pod)) is not None):
            continue
        if w.first_at is None:
            return None
        t0, t1 = w.first_at[0], w.at[0]
        df = w.fraction - w.first_fraction
        if df <= 0 or t1 <= t0:
            return None
        ahead = (t1 - t0).total_seconds() * ((1.0 - w.fraction) / df)
        if not ahead <= _ETA_HORIZON_S:
            return None
        try:
            eta = t1 + timedelta(seconds=ahead)
        except OverflowError:  # t1 itself within the horizon of year 9999's end
            return None
        if latest is None or eta > latest:
            latest = eta
    return latest


def _percent(fraction: float, phase: str) -> int:
    pct = round(fraction * 100)
    # 100 % only once the completion rule holds, whatever the workers say.
    return pct if phase == SUCCEEDED else min(pct, 99)


def _condition(ctype: str, true: bool, reason: str, message: str, at: datetime) -> dict[str, Any]:
    return {"type": ctype, "status": "True" if true else "False", "reason": reason,
            "message": message, "lastTransitionTime": format_seconds(at)}


def _platform_text(p: PlatformOutcome) -> str:
    said = f"{p.kind} {p.name} {p.phase.lower()}"
    if p.reason:
        said += f": {p.reason}"
    return cut_text(said + (f": {p.message}" if p.message else ""), MESSAGE_LIMIT)


def _observed_since(state: TaskState) -> datetime | None:
    """The earliest time an observation dates (a task with observations but no fact yet)."""
    o = state.observed
    times = [v.at for v in (*o.pods.values(), *o.waiting.values())]
    if o.platform is not None and o.platform.at is not None:
        times.append(o.platform.at)
    return min(times, default=None)


def _conditions(state: TaskState, phase: str) -> list[dict[str, Any]]:
    """``Completed`` (the task is over, either way) and ``Failed``, metav1.Condition style,
    and ``PodsWaiting`` while a pod of the task is not running for a reason (its reason).

    lastTransitionTime is the time of the deciding fact or observation (the platform
    object's terminal condition; the first failure; the last final that made the rule hold),
    or of the first event while the condition is False, so it is a function of the folded
    set, like everything else in the status.
    """
    start = state.first_event_time or _observed_since(state)
    if start is None:
        return []
    r = state.roster
    platform = state.observed.platform
    waiting = _waiting_condition(state)
    n = len(r.marks)
    want = max(n, r.declared)
    finals = r.finals + r.pod_finals
    if platform is not None:
        if platform.terminal:
            at = platform.at or start
            msg = _platform_text(platform)
            if phase == FAILED:
                return [_condition("Completed", True, FAILED, msg, at),
                        _condition("Failed", True, platform.reason or "PlatformFailed", msg,
                                   at), *waiting]
            return [_condition("Completed", True, SUCCEEDED, msg, at),
                    _condition("Failed", False, "NoFailure", msg, at), *waiting]
        msg = (f"{finals} of {want} workers final; " if n else "") + \
            f"{platform.kind} {platform.name} decides the outcome"
        return [_condition("Completed", False, RUNNING, msg, start),
                _condition("Failed", False, "NoFailure", msg, start), *waiting]
    failure = _first_failure(state) if phase == FAILED else None
    if failure is not None:
        return [_condition("Completed", True, FAILED, failure.message, failure.at),
                _condition("Failed", True, failure.reason, failure.message, failure.at),
                *waiting]
    failed = _condition("Failed", False, "NoFailure", "no worker reported failure", start)
    if phase == SUCCEEDED:
        times = [] if r.last_final is None else [r.last_final[0]]
        if r.pod_last_final is not None:
            times.append(from_epoch(r.pod_last_final))
        msg = f"{n} worker{'s' if n != 1 else ''} final"
        if r.pod_finals:
            msg += f" ({r.pod_finals} by their pod's end, without a final report)"
        return [_condition("Completed", True, SUCCEEDED, msg, max(times, default=start)),
                failed, *waiting]
    msg = f"{finals} of {want} workers final" if n else "no progress reported yet"
    return [_condition("Completed", False, RUNNING, msg, start), failed, *waiting]


# Waiting pods a PodsWaiting condition names (the status lists them all).
_WAITING_NAMED = 3


def _waiting_condition(state: TaskState) -> list[dict[str, Any]]:
    waiting = sorted(state.observed.waiting.values(), key=lambda v: (v.at, v.pod))
    if not waiting:
        return []
    first = waiting[0]
    text = "; ".join(f"pod {v.pod}: {v.message or v.reason}" for v in waiting[:_WAITING_NAMED])
    if len(waiting) > _WAITING_NAMED:
        text += f" (and {len(waiting) - _WAITING_NAMED} more)"
    return [_condition("PodsWaiting", True, first.reason or WAITING,
                       cut_text(text, 4 * MESSAGE_LIMIT), first.at)]


K = TypeVar("K")
V = TypeVar("V")

# Frozen dataclass __init__ pays object.__setattr__ per field; these build the same objects.
_new_task_state = slot_constructor(TaskState)
_new_span_agg = slot_constructor(SpanAgg)


# How many events an entry stands for: what a cap counts when it evicts the entry.
def _named_weight(v: Named) -> int:
    return v.events


def _span_weight(v: SpanAgg) -> int:
    return v.events


def _worker_weight(v: ProgressState) -> int:
    return v.events


def _ident(v: int) -> int:
    return v


def _mark_weight(v: Any) -> int:
    return int(v.events)


def _us(t: float) -> int:
    return round(t * 1e6)


# --- the decoder: ``.status`` back to a ``TaskState`` ----------------------------------
# The inverse of ``to_status`` for every status the fold wrote. Anything else (a hand-edited
# or hostile status) is read entry by entry: every entry of a map or list section (a link,
# deck, metric, span, worker, pod, pod outcome or unknown type) that reads is kept, one that
# does not is kept verbatim beside the state (``Unread``) and written back as it was, unless
# a readable entry of the same key replaces it. A part that is not an entry (the layout
# version, the roster, the version vector, counters, times, the platform) and does not read
# makes the read *partial*: its readers show what they can, and the watcher never writes
# over such a status (it would write less than it holds). A status written under larger
# limits is cut by the same smallest-keys rule the fold uses, and what is cut is counted in
# ``*_capped``.

# Problems an ``Unread`` describes one by one (the rest are counted).
PROBLEMS_SHOWN = 20
# The list sections' keys: a verbatim item is written back unless the state holds its key.
def _worker_key(w: Any) -> str | None:
    pod = w.get("pod") if isinstance(w, Mapping) else None
    return pod if isinstance(pod, str) else None


def _pod_key(p: Any) -> tuple[str, str] | None:
    name, uid = (p.get("name"), p.get("uid")) if isinstance(p, Mapping) else (None, None)
    return (name, uid) if isinstance(name, str) and isinstance(uid, str) else None


def _verdict_key(v: Any) -> str | None:
    pod = v.get("pod") if isinstance(v, Mapping) else None
    return pod if isinstance(pod, str) else None


_ITEM_KEYS: dict[str, Callable[[Any], Any]] = {
    "workers": _worker_key, "pods": _pod_key, "podOutcomes": _verdict_key,
    "waitingPods": _verdict_key}


@dataclass(frozen=True, slots=True)
class Unread:
    """What a ``.status`` held that could not be read: the unreadable entries of its map
    sections (section -> key -> the entry as written) and items of its list sections
    (``workers``, ``pods``, ``podOutcomes``, ``waitingPods``), each kept verbatim; why, in a
    few lines; and whether a part that is not an entry could not be read (``partial``: never
    written over)."""

    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    items: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    partial: bool = False

    def __bool__(self) -> bool:
        return bool(self.entries or self.items or self.problems or self.partial)

    def merge_into(self, status: dict[str, Any], state: TaskState) -> dict[str, Any]:
        """``status`` (``state.to_status()``) with the unreadable entries written back as
        they were, except where ``state`` holds an entry of the same key (a fact since
        replaced it, or the byte budget left it out). Returns ``status``."""
        held: dict[str, Any] = {k.section: state.registers(k) for k in NAMED_KINDS}
        held.update(spans=state.spans, unknownTypes=state.unknown, workers=state.workers,
                    pods=state.pod_events, podOutcomes=state.observed.pods,
                    waitingPods=state.observed.waiting)
        for section, raw in self.entries.items():
            kept = {k: v for k, v in raw.items() if k not in held.get(section, ())}
            if kept:
                status[section] = {**status.get(section, {}), **kept}
        for section, items in self.items.items():
            key = _ITEM_KEYS[section]
            kept_items = [v for v in items if key(v) not in held.get(section, ())]
            if kept_items:
                status[section] = [*status.get(section, []), *kept_items]
        if "links" in self.entries and "links" in status:
            status["linkCount"] = len(status["links"])
        return status


NOTHING_UNREAD = Unread()


class StatusRead(NamedTuple):
    """A ``.status`` read entry by entry: the state of what could be read, and the rest."""

    state: TaskState
    unread: Unread


class _Reading:
    """Collects what a read could not use (see ``Unread``)."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Any]] = {}
        self.items: dict[str, list[Any]] = {}
        self.problems: list[str] = []
        self.count = 0
        self.partial = False

    def problem(self, where: str, error: Exception) -> None:
        self.count += 1
        if len(self.problems) < PROBLEMS_SHOWN:
            why = str(error) if isinstance(error, ValueError) else type(error).__name__
            self.problems.append(f"{cut_text(sanitize_text(where), 120)}: {why}")

    def entry(self, section: str, key: Any, raw: Any, error: Exception) -> None:
        self.entries.setdefault(section, {})[str(key)] = raw
        self.problem(f"{section}/{key}", error)

    def item(self, section: str, raw: Any, error: Exception) -> None:
        self.items.setdefault(section, []).append(raw)
        key = _ITEM_KEYS[section](raw)
        self.problem(f"{section}/{key if isinstance(key, str) else key[0] if key else '?'}",
                     error)

    def whole(self, part: str, error: Exception) -> None:
        self.partial = True
        self.problem(part, error)

    def result(self) -> Unread:
        if not (self.entries or self.items or self.count or self.partial):
            return NOTHING_UNREAD
        problems = self.problems
        if self.count > len(problems):
            problems = [*problems, f"and {self.count - len(problems)} more"]
        return Unread({k: dict(v) for k, v in self.entries.items()},
                      {k: tuple(v) for k, v in self.items.items()}, tuple(problems),
                      self.partial)


def read_status(task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> StatusRead:
    """The state a ``.status`` dict holds, read entry by entry, and what could not be read
    (see ``Unread``). Never raises. An empty status, or one of an older layout (version 1:
    no longer read, replaced by the next write), reads as a fresh state with nothing unread;
    another layout (a newer watcher's) as a fresh state that is ``partial``."""
    if not isinstance(status, Mapping) or not status:
        return StatusRead(new_state(task, limits), NOTHING_UNREAD)
    r = _Reading()
    try:
        state = _from_status(task, status, limits, r)
    except Exception as e:  # (a reader bug: nothing of it is trusted, nothing written over)
        r.whole("status", e)
        state = new_state(task, limits)
    return StatusRead(state, r.result())


def decode_status(task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> TaskState:
    """``TaskState.from_status``: the state of what a ``.status`` dict holds that can be read
    (``read_status`` says what could not); never raises."""
    return read_status(task, status, limits).state


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


def _int(v: Any) -> int:
    _need(type(v) is int and 0 <= v <= _INT_MAX, "bad int")
    return int(v)


def _float(v: Any) -> float:
    _need(type(v) in (int, float) and math.isfinite(v) and v >= 0, "bad float")
    return float(v)


def _name(v: Any, limit: int = NAME_LIMIT) -> str:
    _need(isinstance(v, str) and 0 < len(v) <= limit, "bad name")
    return str(v)


def _key(v: Any) -> OrderKey:
    _need(isinstance(v, str), "bad order key")
    parts = v.split(" ")
    _need(len(parts) == 3 and parts[2].isascii() and parts[2].isdigit(), "bad order key")
    t = parse_time(parts[0])
    seq = int(parts[2])
    _need(t is not None and valid_instance(parts[1]) and valid_seq(seq), "bad order key")
    assert t is not None
    return (t, parts[1], seq)


def _time(v: Any) -> datetime | None:
    t = None if v is None else parse_time(v)
    _need(v is None or t is not None, "bad time")
    return t


def _scalar(v: Any, kind: str, optional: bool) -> Scalar:
    if v is None:
        _need(optional, "missing value")
        return None
    if kind == "str":
        _need(isinstance(v, str), "bad value")
        return str(v)
    if kind == "int":
        return _int(v)
    _need(type(v) in (int, float) and math.isfinite(v), "bad value")
    return float(v)


def _field_value(entry: Mapping[str, Any], f: ValueField) -> Scalar:
    if f.non_finite and f.non_finite in entry:
        token = entry[f.non_finite]
        _need(f.attr not in entry and isinstance(token, str) and token in NON_FINITE,
              "bad nonFinite value")
        return NON_FINITE[token]
    return _scalar(entry.get(f.attr), f.type, f.optional)


def _named(kind: Kind) -> Callable[[Any, Any], tuple[str, Named]]:
    fields = kind.values

    def read(k: Any, v: Any) -> tuple[str, Named]:
        _need(isinstance(v, Mapping), "not an object")
        values = tuple(_field_value(v, f) for f in fields)
        return _name(k), Named(values[0] if len(values) == 1 else values, _key(v.get("at")),
                               _int(v.get("events")),
                               None if kind.report is None else history.from_status(v))
    return read


def _entries(st: Mapping[str, Any], section: str, r: _Reading,
             read: Callable[[Any, Any], tuple[K, V]]) -> dict[K, V]:
    """The readable entries of the map section ``section``; the others go to ``r``."""
    data = st.get(section, {})
    out: dict[K, V] = {}
    if not isinstance(data, Mapping):
        r.whole(section, ValueError("not a map"))
        return out
    for k, v in data.items():
        try:
            key, value = read(k, v)
        except Exception as e:
            r.entry(section, k, v, e)
            continue
        out[key] = value
    return out


def _items(st: Mapping[str, Any], section: str, r: _Reading,
           read: Callable[[Any], tuple[K, V]]) -> dict[K, V]:
    """The readable items of the list section ``section``, by key; the others go to ``r``."""
    data = st.get(section, [])
    out: dict[K, V] = {}
    if not isinstance(data, list):
        r.whole(section, ValueError("not a list"))
        return out
    for item in data:
        try:
            key, value = read(item)
        except Exception as e:
            r.item(section, item, e)
            continue
        out[key] = value
    return out


def _part(r: _Reading, part: str, read: Callable[[], V], fallback: V) -> V:
    """``read()``, or ``fallback`` when the part does not read (the read is then partial)."""
    try:
        return read()
    except Exception as e:
        r.whole(part, e)
        return fallback


def _trim(entries: dict[K, V], cap: int, weight: Callable[[V], int]) -> tuple[dict[K, V], int]:
    # A status written under larger limits is cut by the same smallest-keys rule.
    if len(entries) <= cap:
        return entries, 0
    keys = sorted(entries)  # type: ignore[type-var]
    dropped = sum(weight(entries[k]) for k in keys[cap:])
    return {k: entries[k] for k in keys[:cap]}, dropped


def _trim_lanes(spans: dict[str, SpanAgg], cap: int) -> dict[str, SpanAgg]:
    """Lanes beyond ``cap`` (a status written under a larger one) cut by the fold's rule:
    the smallest (name, pod) pairs stay; the others' summaries count in ``unlaned``."""
    pairs = sorted((name, pod) for name, s in spans.items() for pod in s.lanes)
    if len(pairs) <= cap:
        return spans
    out = dict(spans)
    for name, pod in pairs[max(cap, 0):]:
        s = out[name]
        lanes = dict(s.lanes)
        gone = lanes.pop(pod)
        out[name] = _new_span_agg(s.count, s.total_ns, s.min_s, s.max_s, s.first_start,
                                  s.last_end, s.errors, s.events, s.shift, s.windows, lanes,
                                  s.unlaned + gone.events)
    return out


def _worker(w: Any) -> tuple[str, ProgressState]:
    _need(isinstance(w, Mapping), "bad worker")
    frac = _float(w.get("fraction"))
    msg = w.get("message", "")
    final, failed = w.get("final", False), w.get("failed", False)
    _need(frac <= 1.0 and isinstance(msg, str) and len(msg) <= MESSAGE_LIMIT, "bad worker")
    _need(type(final) is bool and type(failed) is bool and (final or not failed), "bad worker")
    first_at = w.get("firstAt")
    first_fraction = 0.0
    if first_at is not None:
        first_fraction = _float(w.get("firstFraction"))
        _need(first_fraction <= 1.0, "bad worker")
    return _name(w.get("pod"), 253), ProgressState(
        frac, msg, final, _key(w.get("at")), failed, _int(w.get("workers", 0)),
        _int(w.get("events")), None if first_at is None else _key(first_at), first_fraction
    )


def _roster(data: Any, workers: Mapping[str, ProgressState], lim: Limits
            ) -> tuple[Roster, int]:
    """The roster a status holds (or, in a status from before it, the one its detailed
    workers imply), cut to the roster cap; and how many events the cut gave up."""
    if data is None:
        return roster_of((pod, w.fraction, w.final, w.failed, w.workers, w.at, w.message,
                          w.events) for pod, w in workers.items()), 0
    _need(isinstance(data, Mapping), "bad roster")
    raw = data.get("marks")
    _need(isinstance(raw, str), "bad roster")
    marks, cut = _trim(decode_marks(raw), lim.roster, _mark_weight)
    declared = _int(data.get("declared", 0))
    _need(declared <= WORKERS_MAX, "bad roster")
    first: Failure | None = None
    raw_first = data.get("firstFailure")
    if raw_first is not None:
        _need(isinstance(raw_first, Mapping), "bad roster")
        message = raw_first.get("message", "")
        _need(isinstance(message, str) and len(message) <= MESSAGE_LIMIT, "bad roster")
        first = Failure(_key(raw_first.get("at")), _name(raw_first.get("pod"), 253), message)
    last = data.get("lastFinal")
    finals, failures, permyriads = counts(marks)
    _need((first is not None or not failures) and (last is not None or not finals),
          "bad roster")
    raw_ends = data.get("outcomes", "")
    _need(isinstance(raw_ends, str), "bad roster")
    ends, _ = _trim(decode_ends(raw_ends), lim.roster, _no_weight)
    return with_ends(Roster(marks, declared, finals, failures, permyriads, first,
                            None if last is None else _key(last)), ends), cut


def _no_weight(v: object) -> int:
    return 0


def _observed(st: Mapping[str, Any], lim: Limits, r: _Reading) -> Observed:
    """``podOutcomes``, ``waitingPods`` and ``platform`` as ``_observed_json`` wrote them,
    entry by entry (an unreadable verdict goes to ``r``; an unreadable platform makes the
    read partial)."""
    pods = _items(st, "podOutcomes", r, lambda v: _pod_verdict(v, "at", True))
    waiting = _items(st, "waitingPods", r, lambda v: _pod_verdict(v, "since", False))
    pods, _ = _trim(pods, lim.observed_pods, _no_weight)
    waiting, _ = _trim(waiting, lim.waiting, _no_weight)
    platform = _part(r, "platform", lambda: _platform(st.get("platform")), None)
    return Observed(pods, waiting, platform)


def _platform(raw_p: Any) -> PlatformOutcome | None:
    if raw_p is None:
        return None
    _need(isinstance(raw_p, Mapping), "bad platform")
    f = {k: raw_p.get(k, "") for k in ("apiVersion", "kind", "name", "uid", "phase",
                                      "reason", "message")}
    _need(all(isinstance(x, str) and len(x) <= 320 for x in f.values())
          and f["phase"] in (RUNNING, SUCCEEDED, FAILED) and bool(f["name"]),
          "bad platform")
    return PlatformOutcome(f["apiVersion"], f["kind"], f["name"], f["uid"],
                           f["phase"], clean_reason(f["reason"]),
                           clean_message(f["message"]), _time(raw_p.get("at")))


def _pod_verdict(v: Any, time_key: str, terminal: bool) -> tuple[str, PodVerdict]:
    verdict = _verdict(v, time_key, terminal)
    return verdict.pod, verdict


def _verdict(v: Any, time_key: str, terminal: bool) -> PodVerdict:
    _need(isinstance(v, Mapping), "bad pod outcome")
    phase = v.get("phase", WAITING) if terminal else WAITING
    _need(phase in ((SUCCEEDED, FAILED) if terminal else (WAITING,)), "bad pod outcome")
    uid, reason, message = v.get("uid", ""), v.get("reason", ""), v.get("message", "")
    explained = v.get("explained", True)
    _need(isinstance(uid, str) and len(uid) <= 64 and type(explained) is bool
          and isinstance(reason, str) and isinstance(message, str), "bad pod outcome")
    code = v.get("exitCode")
    _need(code is None or exit_code_of(code) is not None, "bad pod outcome")
    at = _time(v.get(time_key))
    _need(at is not None, "bad pod outcome")
    assert at is not None
    return PodVerdict(_name(v.get("pod"), 253), uid, phase, clean_reason(reason),
                      clean_message(message), code, at, explained)


def _span(k: Any, s: Any) -> tuple[str, SpanAgg]:
    _need(isinstance(s, Mapping), "not an object")
    return _name(k), _span_entry(s)


def _pod(p: Any) -> tuple[tuple[str, str], int]:
    _need(isinstance(p, Mapping), "not an object")
    return (_name(p.get("name"), 253), _name(p.get("uid"), 64)), _int(p.get("events"))


def _unknown_type(k: Any, c: Any) -> tuple[str, int]:
    return _name(k, TYPE_LIMIT), _int(c)


def _counters(raw: Any, r: _Reading) -> tuple[dict[str, int], int]:
    counters = dict.fromkeys(COUNTER_NAMES, 0)
    warnings = 0
    if not isinstance(raw, Mapping):
        r.whole("counters", ValueError("not a map"))
        return counters, warnings
    for k, v in raw.items():
        if k in _SNAKE or k == "warnings":
            try:
                n = _int(v)
            except ValueError as e:
                r.whole(f"counters.{k}", e)
                continue
            if k == "warnings":
                warnings = n
            else:
                counters[_SNAKE[k]] = n
    return counters, warnings


def _from_status(task: TaskRef, st: Mapping[str, Any], lim: Limits, r: _Reading) -> TaskState:
    version = st.get("schemaVersion")
    if type(version) is not int or version != STATUS_VERSION:
        if not (type(version) is int and 1 <= version < STATUS_VERSION):
            r.whole("schemaVersion", ValueError(
                f"layout {str(version)[:20]!r}, not {STATUS_VERSION}"))
        return new_state(task, lim)  # (an older layout is no longer read: replaced)
    named = {k.section: _entries(st, k.section, r, _named(k)) for k in NAMED_KINDS}
    spans = _entries(st, "spans", r, _span)
    workers = _items(st, "workers", r, _worker)
    pods = _items(st, "pods", r, _pod)
    unknown = _entries(st, "unknownTypes", r, _unknown_type)
    counters, warnings = _counters(st.get("counters", {}), r)
    no_times: dict[str, int] = {}
    applied, times = _part(r, "applied", lambda: VersionVector.parse_text(st.get("applied", "")),
                           (VersionVector(), no_times))
    wm = _part(r, "compactedBefore", lambda: _time(st.get("compactedBefore")), None)
    watermark = 0 if wm is None else epoch(wm)

    for kind in NAMED_KINDS:
        entries, extra = _trim(named.pop(kind.section), getattr(lim, kind.cap), _named_weight)
        if entries:
            named[kind.section] = entries
        counters[kind.capped] += extra
    spans, c3 = _trim(spans, lim.spans, _span_weight)
    spans = _trim_lanes(spans, lim.span_lanes)
    pods, c4 = _trim(pods, lim.pods, _ident)
    unknown, c5 = _trim(unknown, lim.unknown_types, _ident)
    workers, c6 = _trim(workers, lim.workers, _worker_weight)
    raw_roster = st.get("roster")
    if raw_roster is None and "workers" in r.items:
        # The roster these workers imply would miss the unreadable ones.
        r.whole("roster", ValueError("absent, and a worker is unreadable"))
    try:
        roster, c7 = _roster(raw_roster, workers, lim)
    except Exception as e:
        r.whole("roster", e)
        roster, c7 = _roster(None, workers, lim)  # (shown, never written: the read is partial)
    for name, extra in (
        ("spans_capped", c3),
        ("pods_capped", c4),
        ("unknown_capped", c5),
        ("workers_capped", c6),
        ("roster_capped", c7),
    ):
        counters[name] += extra
    return TaskState(
        task=task,
        named=named,
        spans=spans,
        workers=workers,
        pod_events=pods,
        applied=applied,
        instance_times=times,
        watermark=watermark,
        first_event_time=_part(r, "firstEventTime", lambda: _time(st.get("firstEventTime")),
                               None),
        last_event_time=_part(r, "lastEventTime", lambda: _time(st.get("lastEventTime")),
                              None),
        counters=counters,
        unknown=unknown,
        warnings=warnings,
        roster=roster,
        observed=_observed(st, lim, r),
        limits=lim,
    )


def _agg(s: Any) -> SpanAgg:
    _need(isinstance(s, Mapping), "bad span")
    first_start = _float(s.get("firstStart"))
    shift, windows = _parse_windows(s.get("windows", "0 "), first_start)
    return SpanAgg(_int(s.get("count")), _int(s.get("totalNs")), _float(s.get("minS")),
                   _float(s.get("maxS")), first_start, _float(s.get("lastEnd")),
                   _int(s.get("errors")), _int(s.get("events")), shift, windows)


def _span_entry(s: Any) -> SpanAgg:
    """A span name's entry with its lanes (see ``_span_json``)."""
    total = _agg(s)
    unlaned = _int(s.get("unlaned", 0))
    pod = s.get("pod")
    if pod is not None:
        _need(not unlaned and "pods" not in s, "bad span lanes")
        lanes: dict[str, SpanAgg] = {_name(pod, 253): total}
    else:
        raw = s.get("pods", {})
        _need(isinstance(raw, Mapping), "bad span lanes")
        lanes = {_name(p, 253): _agg(lane) for p, lane in raw.items()}
    if not lanes and not unlaned:
        return total
    return _new_span_agg(total.count, total.total_ns, total.min_s, total.max_s,
                         total.first_start, total.last_end, total.errors, total.events,
                         total.shift, total.windows, lanes, unlaned)


def _parse_windows(text: Any, first_start: float) -> tuple[int, tuple[tuple[int, int], ...]]:
    _need(isinstance(text, str), "bad windows")
    head, _, body = text.partition(" ")
    _need(head.isascii() and head.isdigit() and len(head) <= 2, "bad windows")
    shift = int(head)
    base = _us(first_start) >> shift
    out: list[tuple[int, int]] = []
    for part in body.split(",") if body else []:
        lo, _, hi = part.partition("-")
        _need(lo.isdigit() and hi.isdigit() and len(lo) <= 6 and len(hi) <= 6, "bad windows")
        out.append((base + int(lo), base + int(hi)))
    return shift, tuple(out)
