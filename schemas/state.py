"""Task state and the fold: merge parsed events into one bounded, order-insensitive record.

``fold`` is pure and total; the state round-trips through the TaskFeedback ``.status`` dict.

Order-insensitivity, precisely: for a set of events with distinct (instance, seq), folding any
permutation, with any duplicates mixed in, yields an identical ``to_status()`` except for
``counters.duplicates``, which counts re-deliveries (applications minus distinct events) and
so depends on the delivery by definition. Every other counter counts distinct events, and
caps keep the lexicographically smallest names, so nothing else depends on arrival order.
Event names bind (instance, seq) to one object per task (see ``parse_event``), so two
different payloads can never share a dedup key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from ._fast import slot_constructor
from .constants import NAME_LIMIT, SCHEMA_VERSION, TYPE_LIMIT
from .event import ParsedEvent, TaskRef, format_time, parse_time
from .note import valid_instance, valid_seq
from .payloads import (
    DeckReady,
    LogLink,
    PodSpawned,
    Progress,
    SpanSummary,
    UnknownPayload,
)
from .version_vector import VersionVector

OrderKey = tuple[datetime, str, int]
_INT_MAX = 2**63 - 1  # status numbers are int64 in the API server; sums saturate there

COUNTER_NAMES: tuple[str, ...] = (
    "events_applied",  # distinct events folded in (order-independent)
    "duplicates",  # re-deliveries skipped by the version vector (depends on delivery)
    "links_capped",  # LogLink events whose name is beyond the links cap
    "decks_capped",
    "spans_capped",
    "pods_capped",
    "unknown_payloads",  # events with an unknown type or newer schema version
    "unknown_capped",  # unknown events whose type is beyond the unknown-types cap
    "pods_spawned",  # PodSpawned (lineage) events regarding this subject
    "wrong_task",  # events handed to the fold of another task (a caller bug); not applied
    "fold_errors",  # internal errors swallowed to keep the fold total (should stay 0)
)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-task caps. Beyond a cap the lexicographically smallest names are kept, so the kept
    set does not depend on arrival order; everything else is counted in ``*_capped``."""

    links: int = 64
    decks: int = 32
    spans: int = 128
    pods: int = 128
    unknown_types: int = 32


DEFAULT_LIMITS = Limits()


class Named(NamedTuple):
    """A last-writer-wins register: ``value`` written by the event with order key ``at``;
    ``events`` counts the events that targeted this name (needed to count them when capped)."""

    value: str
    at: OrderKey
    events: int


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

    @property
    def total_s(self) -> float:
        return self.total_ns / 1e9


class ProgressState(NamedTuple):
    """The winning Progress: terminal progress beats any non-terminal one, then latest wins."""

    fraction: float
    message: str
    final: bool
    at: OrderKey


@dataclass(frozen=True, slots=True)
class TaskState:
    """Folded state of one task. Treat as immutable; build with ``new_state`` and ``fold``."""

    task: TaskRef
    link_entries: Mapping[str, Named]
    deck_entries: Mapping[str, Named]
    spans: Mapping[str, SpanAgg]
    progress: ProgressState | None
    pod_events: Mapping[tuple[str, str], int]  # (pod name, uid) -> events sent
    applied: VersionVector
    last_event_time: datetime | None
    counters: Mapping[str, int]
    unknown: Mapping[str, int]  # unknown payload type -> events
    warnings: int
    limits: Limits = field(default=DEFAULT_LIMITS, compare=False)

    @property
    def links(self) -> dict[str, str]:
        """Link name -> URL."""
        return {k: v.value for k, v in sorted(self.link_entries.items())}

    @property
    def decks(self) -> dict[str, str]:
        """Deck name -> URI."""
        return {k: v.value for k, v in sorted(self.deck_entries.items())}

    @property
    def pods(self) -> list[tuple[str, str]]:
        """Sender pods seen, as sorted (name, uid) pairs."""
        return sorted(self.pod_events)

    @property
    def completed(self) -> bool:
        """True once terminal progress (``final=True``) has been folded in."""
        return self.progress is not None and self.progress.final

    def to_status(self) -> dict[str, Any]:
        """The JSON-safe ``.status`` dict (snake_case keys; layout documented in the package)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "task": {"namespace": self.task.namespace, "name": self.task.name},
            "completed": self.completed,
            "progress": None
            if self.progress is None
            else {
                "fraction": self.progress.fraction,
                "message": self.progress.message,
                "final": self.progress.final,
                "at": _key_json(self.progress.at),
            },
            "links": {
                k: {"url": v.value, "at": _key_json(v.at), "events": v.events}
                for k, v in sorted(self.link_entries.items())
            },
            "decks": {
                k: {"uri": v.value, "at": _key_json(v.at), "events": v.events}
                for k, v in sorted(self.deck_entries.items())
            },
            "spans": {
                k: {
                    "count": s.count,
                    "total_s": s.total_s,
                    "total_ns": s.total_ns,
                    "min_s": s.min_s,
                    "max_s": s.max_s,
                    "first_start": s.first_start,
                    "last_end": s.last_end,
                    "errors": s.errors,
                    "events": s.events,
                }
                for k, s in sorted(self.spans.items())
            },
            "pods": [
                {"name": n, "uid": u, "events": c} for (n, u), c in sorted(self.pod_events.items())
            ],
            "applied": self.applied.to_json(),
            "last_event_time": None
            if self.last_event_time is None
            else format_time(self.last_event_time),
            "warnings": self.warnings,
            "unknown": dict(sorted(self.unknown.items())),
            "counters": {k: self.counters.get(k, 0) for k in COUNTER_NAMES},
            "summary": self.summary(),
        }

    def summary(self) -> dict[str, Any]:
        """The typed digest the CRD's printer columns read (``.status.summary``)."""
        out: dict[str, Any] = {"links": len(self.link_entries), "completed": self.completed}
        if self.progress is not None:
            out["progress"] = self.progress.fraction
        if self.deck_entries:
            out["deck"] = max(self.deck_entries.items(), key=lambda kv: kv[1].at)[0]
        return out

    @classmethod
    def from_status(cls, task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> TaskState:
        """Rebuild a state from a ``.status`` dict. Tolerant: anything unreadable gives a
        fresh state for ``task`` (never raises)."""
        if not isinstance(status, Mapping) or not status:
            return new_state(task, limits)
        try:
            return _from_status(task, status, limits)
        except Exception:
            return new_state(task, limits)


def new_state(task: TaskRef, limits: Limits = DEFAULT_LIMITS) -> TaskState:
    """The empty state of ``task``."""
    return TaskState(
        task=task,
        link_entries={},
        deck_entries={},
        spans={},
        progress=None,
        pod_events={},
        applied=VersionVector(),
        last_event_time=None,
        counters=dict.fromkeys(COUNTER_NAMES, 0),
        unknown={},
        warnings=0,
        limits=limits,
    )


def _key_json(k: OrderKey) -> list[Any]:
    return [format_time(k[0]), k[1], k[2]]


K = TypeVar("K")
V = TypeVar("V")

# Frozen dataclass __init__ pays object.__setattr__ per field; these build the same objects.
_new_task_state = slot_constructor(TaskState)
_new_span_agg = slot_constructor(SpanAgg)


# --- per-entry merges, in place on a map the caller owns ---------------------------------
# Both ``fold`` (which copies only the one map an event touches, sharing the rest with the
# input state) and ``fold_many`` (which copies each touched map once per batch) apply events
# through these, so the two cannot disagree on what an event does.


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


def _named_weight(v: Named) -> int:
    return v.events


def _span_weight(v: SpanAgg) -> int:
    return v.events


def _ident(v: int) -> int:
    return v


def _set_named(entries: dict[str, Named], name: str, value: str, at: OrderKey, cap: int) -> int:
    cur = entries.get(name)
    if cur is None:
        return _insert_capped(entries, name, Named(value, at, 1), cap, _named_weight)
    if at > cur.at:
        entries[name] = Named(value, at, cur.events + 1)
    else:
        entries[name] = Named(cur.value, cur.at, cur.events + 1)
    return 0


def _merge_span(entries: dict[str, SpanAgg], p: SpanSummary, cap: int) -> int:
    total_ns = min(round(p.total_s * 1e9), _INT_MAX)
    name = p.name
    cur = entries.get(name)
    if cur is None:
        new = _new_span_agg(
            p.count, total_ns, p.min_s, p.max_s, p.first_start, p.last_end, p.errors, 1
        )
        return _insert_capped(entries, name, new, cap, _span_weight)
    # Saturating sums (of non-negatives, so still associative and commutative), inline:
    # this is the hottest merge of the fold.
    count = cur.count + p.count
    total = cur.total_ns + total_ns
    errors = cur.errors + p.errors
    entries[name] = _new_span_agg(
        count if count <= _INT_MAX else _INT_MAX,
        total if total <= _INT_MAX else _INT_MAX,
        cur.min_s if cur.min_s <= p.min_s else p.min_s,
        cur.max_s if cur.max_s >= p.max_s else p.max_s,
        cur.first_start if cur.first_start <= p.first_start else p.first_start,
        cur.last_end if cur.last_end >= p.last_end else p.last_end,
        errors if errors <= _INT_MAX else _INT_MAX,
        cur.events + 1,
    )
    return 0


def _count(entries: dict[K, int], key: K, cap: int) -> int:
    cur = entries.get(key)
    if cur is None:
        return _insert_capped(entries, key, 1, cap, _ident)
    entries[key] = cur + 1
    return 0


def _newer_progress(p: Progress, key: OrderKey, cur: ProgressState | None) -> ProgressState | None:
    """The ProgressState that ``p`` (at ``key``) replaces ``cur`` with, or None if it loses."""
    if cur is None or (p.final, key) > (cur.final, cur.at):
        return ProgressState(p.fraction, p.message, p.final, key)
    return None


def _bump(counters: Mapping[str, int], name: str) -> dict[str, int]:
    out = dict(counters)
    out[name] = out.get(name, 0) + 1
    return out


def _fold(state: TaskState, ev: ParsedEvent) -> TaskState:
    if ev.task is not state.task and ev.task != state.task:
        return _with(state, counters=_bump(state.counters, "wrong_task"))
    instance, seq = ev.instance, ev.seq
    applied = state.applied
    # Duplicates (relists, retries) are decided by the version vector before any other work.
    if applied.contains(instance, seq):
        return _with(state, counters=_bump(state.counters, "duplicates"))

    lim = state.limits
    links, decks, spans = state.link_entries, state.deck_entries, state.spans
    progress, unknown = state.progress, state.unknown
    counters = dict(state.counters)
    counters["events_applied"] = counters.get("events_applied", 0) + 1
    capped = 0
    capped_name = ""
    p = ev.payload
    tp = type(p)
    # Only the map this event touches is copied; the others are shared with ``state``.
    if tp is SpanSummary:
        assert isinstance(p, SpanSummary)
        spans = dict(spans)
        capped = _merge_span(spans, p, lim.spans)
        capped_name = "spans_capped"
    elif tp is Progress:
        assert isinstance(p, Progress)
        progress = _newer_progress(p, (ev.event_time, instance, seq), progress) or progress
    elif tp is LogLink:
        assert isinstance(p, LogLink)
        links = dict(links)
        capped = _set_named(links, p.name, p.url, (ev.event_time, instance, seq), lim.links)
        capped_name = "links_capped"
    elif tp is DeckReady:
        assert isinstance(p, DeckReady)
        decks = dict(decks)
        capped = _set_named(decks, p.name, p.uri, (ev.event_time, instance, seq), lim.decks)
        capped_name = "decks_capped"
    elif tp is PodSpawned:
        counters["pods_spawned"] = counters.get("pods_spawned", 0) + 1
    elif tp is UnknownPayload:
        assert isinstance(p, UnknownPayload)
        unknown = dict(unknown)
        capped = _count(unknown, p.type, lim.unknown_types)
        capped_name = "unknown_capped"
        counters["unknown_payloads"] = counters.get("unknown_payloads", 0) + 1
    if capped:
        counters[capped_name] = counters.get(capped_name, 0) + capped

    sender = ev.sender
    pod_events = dict(state.pod_events)
    pods_capped = _count(pod_events, (sender.name, sender.uid), lim.pods)
    if pods_capped:
        counters["pods_capped"] = counters.get("pods_capped", 0) + pods_capped
    last = state.last_event_time
    t = ev.event_time
    return _new_task_state(
        state.task,
        links,
        decks,
        spans,
        progress,
        pod_events,
        applied.add(instance, seq),
        t if last is None or t > last else last,
        counters,
        unknown,
        state.warnings + 1 if ev.warning else state.warnings,
        lim,
    )


def _with(state: TaskState, *, counters: dict[str, int]) -> TaskState:
    return _new_task_state(
        state.task,
        state.link_entries,
        state.deck_entries,
        state.spans,
        state.progress,
        state.pod_events,
        state.applied,
        state.last_event_time,
        counters,
        state.unknown,
        state.warnings,
        state.limits,
    )


def fold(state: TaskState, ev: ParsedEvent) -> TaskState:
    """Merge one event into ``state``. Pure, total and idempotent per (instance, seq).

    Events of another task are not applied (counted in ``wrong_task``).
    """
    try:
        return _fold(state, ev)
    except Exception:  # totality beats strictness here; the counter makes the bug visible
        return _with(state, counters=_bump(state.counters, "fold_errors"))


def _fold_many(state: TaskState, events: Sequence[ParsedEvent]) -> TaskState:
    task, lim = state.task, state.limits
    counters = dict(state.counters)
    applied = state.applied
    contains = applied.contains
    added: dict[str, set[int]] = {}  # (instance, seq) applied in this batch
    # Each map is copied on its first write in the batch, then updated in place.
    links: Mapping[str, Named] = state.link_entries
    decks: Mapping[str, Named] = state.deck_entries
    spans: Mapping[str, SpanAgg] = state.spans
    unknown: Mapping[str, int] = state.unknown
    links_w: dict[str, Named] | None = None
    decks_w: dict[str, Named] | None = None
    spans_w: dict[str, SpanAgg] | None = None
    unknown_w: dict[str, int] | None = None
    pods_w: dict[tuple[str, str], int] | None = None
    progress = state.progress
    last = state.last_event_time
    warnings = state.warnings
    for ev in events:
        if ev.task is not task and ev.task != task:
            counters["wrong_task"] = counters.get("wrong_task", 0) + 1
            continue
        instance, seq = ev.instance, ev.seq
        seen = added.get(instance)
        if (seen is not None and seq in seen) or contains(instance, seq):
            counters["duplicates"] = counters.get("duplicates", 0) + 1
            continue
        counters["events_applied"] = counters.get("events_applied", 0) + 1
        p = ev.payload
        tp = type(p)
        if tp is SpanSummary:
            assert isinstance(p, SpanSummary)
            if spans_w is None:
                spans = spans_w = dict(spans)
            capped = _merge_span(spans_w, p, lim.spans)
            if capped:
                counters["spans_capped"] = counters.get("spans_capped", 0) + capped
        elif tp is Progress:
            assert isinstance(p, Progress)
            progress = _newer_progress(p, (ev.event_time, instance, seq), progress) or progress
        elif tp is LogLink:
            assert isinstance(p, LogLink)
            if links_w is None:
                links = links_w = dict(links)
            capped = _set_named(links_w, p.name, p.url, (ev.event_time, instance, seq), lim.links)
            if capped:
                counters["links_capped"] = counters.get("links_capped", 0) + capped
        elif tp is DeckReady:
            assert isinstance(p, DeckReady)
            if decks_w is None:
                decks = decks_w = dict(decks)
            capped = _set_named(decks_w, p.name, p.uri, (ev.event_time, instance, seq), lim.decks)
            if capped:
                counters["decks_capped"] = counters.get("decks_capped", 0) + capped
        elif tp is PodSpawned:
            counters["pods_spawned"] = counters.get("pods_spawned", 0) + 1
        elif tp is UnknownPayload:
            assert isinstance(p, UnknownPayload)
            if unknown_w is None:
                unknown = unknown_w = dict(unknown)
            capped = _count(unknown_w, p.type, lim.unknown_types)
            counters["unknown_payloads"] = counters.get("unknown_payloads", 0) + 1
            if capped:
                counters["unknown_capped"] = counters.get("unknown_capped", 0) + capped
        if pods_w is None:
            pods_w = dict(state.pod_events)
        sender = ev.sender
        capped = _count(pods_w, (sender.name, sender.uid), lim.pods)
        if capped:
            counters["pods_capped"] = counters.get("pods_capped", 0) + capped
        t = ev.event_time
        if last is None or t > last:
            last = t
        if ev.warning:
            warnings += 1
        if seen is None:
            added[instance] = {seq}
        else:
            seen.add(seq)
    return _new_task_state(
        task,
        links,
        decks,
        spans,
        progress,
        state.pod_events if pods_w is None else pods_w,
        applied._with_seqs(added),
        last,
        counters,
        unknown,
        warnings,
        lim,
    )


def fold_many(state: TaskState, events: Iterable[ParsedEvent]) -> TaskState:
    """Merge ``events`` into ``state`` in order; the same state as folding them one by one
    (``functools.reduce(fold, events, state)``), but each map is copied once per batch
    instead of once per event. Pure and total, like ``fold``."""
    evs = events if isinstance(events, list | tuple) else list(events)
    try:
        return _fold_many(state, evs)
    except Exception:
        # Never expected. Redone event by event, each failing event is counted in
        # fold_errors exactly as ``fold`` counts it, so the two stay equivalent even here.
        for ev in evs:
            state = fold(state, ev)
        return state


def fold_all(
    task: TaskRef, events: Iterable[ParsedEvent], limits: Limits = DEFAULT_LIMITS
) -> TaskState:
    """Fold ``events`` into a fresh state of ``task``."""
    return fold_many(new_state(task, limits), events)


# --- status decoding -------------------------------------------------------------------


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
    _need(isinstance(v, list) and len(v) == 3, "bad order key")
    t = parse_time(v[0])
    _need(t is not None and valid_instance(v[1]) and valid_seq(v[2]), "bad order key")
    assert t is not None
    return (t, v[1], v[2])


def _named_map(data: Any, value_key: str) -> dict[str, Named]:
    _need(isinstance(data, Mapping), "bad map")
    out: dict[str, Named] = {}
    for k, v in data.items():
        _need(isinstance(v, Mapping) and isinstance(v.get(value_key), str), "bad entry")
        out[_name(k)] = Named(v[value_key], _key(v.get("at")), _int(v.get("events")))
    return out


def _trim(entries: dict[K, V], cap: int, weight: Callable[[V], int]) -> tuple[dict[K, V], int]:
    # A status written under larger limits is cut by the same smallest-keys rule.
    if len(entries) <= cap:
        return entries, 0
    keys = sorted(entries)  # type: ignore[type-var]
    dropped = sum(weight(entries[k]) for k in keys[cap:])
    return {k: entries[k] for k in keys[:cap]}, dropped


def _from_status(task: TaskRef, st: Mapping[str, Any], lim: Limits) -> TaskState:
    _need(_int(st.get("schema_version")) <= SCHEMA_VERSION, "newer status schema")
    links = _named_map(st.get("links", {}), "url")
    decks = _named_map(st.get("decks", {}), "uri")
    spans: dict[str, SpanAgg] = {}
    raw_spans = st.get("spans", {})
    _need(isinstance(raw_spans, Mapping), "bad spans")
    for k, s in raw_spans.items():
        _need(isinstance(s, Mapping), "bad span")
        spans[_name(k)] = SpanAgg(
            _int(s.get("count")),
            _int(s.get("total_ns")),
            _float(s.get("min_s")),
            _float(s.get("max_s")),
            _float(s.get("first_start")),
            _float(s.get("last_end")),
            _int(s.get("errors")),
            _int(s.get("events")),
        )
    progress = None
    pr = st.get("progress")
    if pr is not None:
        _need(isinstance(pr, Mapping), "bad progress")
        frac = _float(pr.get("fraction"))
        _need(frac <= 1.0 and isinstance(pr.get("message"), str), "bad progress")
        _need(type(pr.get("final")) is bool, "bad progress")
        progress = ProgressState(frac, pr["message"], pr["final"], _key(pr.get("at")))
    pods: dict[tuple[str, str], int] = {}
    raw_pods = st.get("pods", [])
    _need(isinstance(raw_pods, list), "bad pods")
    for p in raw_pods:
        _need(isinstance(p, Mapping), "bad pod")
        pods[(_name(p.get("name"), 253), _name(p.get("uid"), 64))] = _int(p.get("events"))
    unknown: dict[str, int] = {}
    raw_unknown = st.get("unknown", {})
    _need(isinstance(raw_unknown, Mapping), "bad unknown")
    for k, c in raw_unknown.items():
        unknown[_name(k, TYPE_LIMIT)] = _int(c)
    raw_counters = st.get("counters", {})
    _need(isinstance(raw_counters, Mapping), "bad counters")
    counters = {k: _int(raw_counters.get(k, 0)) for k in COUNTER_NAMES}
    last = st.get("last_event_time")
    last_t = None if last is None else parse_time(last)
    _need(last is None or last_t is not None, "bad last_event_time")

    links, c1 = _trim(links, lim.links, _named_weight)
    decks, c2 = _trim(decks, lim.decks, _named_weight)
    spans, c3 = _trim(spans, lim.spans, _span_weight)
    pods, c4 = _trim(pods, lim.pods, _ident)
    unknown, c5 = _trim(unknown, lim.unknown_types, _ident)
    for name, extra in (
        ("links_capped", c1),
        ("decks_capped", c2),
        ("spans_capped", c3),
        ("pods_capped", c4),
        ("unknown_capped", c5),
    ):
        counters[name] += extra
    return TaskState(
        task=task,
        link_entries=links,
        deck_entries=decks,
        spans=spans,
        progress=progress,
        pod_events=pods,
        applied=VersionVector.from_json(st.get("applied", {})),
        last_event_time=last_t,
        counters=counters,
        unknown=unknown,
        warnings=_int(st.get("warnings", 0)),
        limits=lim,
    )
