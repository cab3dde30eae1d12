"""``.status`` back to a ``TaskState``: strict field checks, then the current caps.

The inverse of ``TaskState.to_status`` (schemas/taskstate.py) for every status the fold
wrote; anything else (another layout, a hand-edited or hostile status) gives a fresh state
rather than a wrong one. A status written under larger limits is cut by the same
smallest-keys rule the fold uses, and what is cut is counted in ``*_capped``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from .constants import NAME_LIMIT, TYPE_LIMIT
from .event import TaskRef
from .note import valid_instance, valid_seq
from .taskstate import (
    _INT_MAX,
    _SNAKE,
    COUNTER_NAMES,
    DEFAULT_LIMITS,
    MESSAGE_LIMIT,
    STATUS_VERSION,
    K,
    Limits,
    Named,
    OrderKey,
    ProgressState,
    SpanAgg,
    TaskState,
    V,
    _ident,
    _named_weight,
    _span_weight,
    _us,
    _worker_weight,
    new_state,
)
from .times import epoch, parse_time
from .version_vector import VersionVector


def decode_status(task: TaskRef, status: Any, limits: Limits = DEFAULT_LIMITS) -> TaskState:
    """``TaskState.from_status``: the state a ``.status`` dict holds; never raises (anything
    unreadable gives a fresh state for ``task``)."""
    if not isinstance(status, Mapping) or not status:
        return new_state(task, limits)
    try:
        return _from_status(task, status, limits)
    except Exception:
        return new_state(task, limits)



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


def _worker(w: Any) -> tuple[str, ProgressState]:
    _need(isinstance(w, Mapping), "bad worker")
    frac = _float(w.get("fraction"))
    msg = w.get("message", "")
    final, failed = w.get("final", False), w.get("failed", False)
    _need(frac <= 1.0 and isinstance(msg, str) and len(msg) <= MESSAGE_LIMIT, "bad worker")
    _need(type(final) is bool and type(failed) is bool and (final or not failed), "bad worker")
    return _name(w.get("pod"), 253), ProgressState(
        frac, msg, final, _key(w.get("at")), failed, _int(w.get("workers", 0)),
        _int(w.get("events"))
    )


def _from_status(task: TaskRef, st: Mapping[str, Any], lim: Limits) -> TaskState:
    _need(_int(st.get("schemaVersion")) == STATUS_VERSION, "another status layout")
    links = _named_map(st.get("links", {}), "url")
    decks = _named_map(st.get("decks", {}), "uri")
    spans: dict[str, SpanAgg] = {}
    raw_spans = st.get("spans", {})
    _need(isinstance(raw_spans, Mapping), "bad spans")
    for k, s in raw_spans.items():
        _need(isinstance(s, Mapping), "bad span")
        first_start = _float(s.get("firstStart"))
        shift, windows = _parse_windows(s.get("windows", "0 "), first_start)
        spans[_name(k)] = SpanAgg(
            _int(s.get("count")),
            _int(s.get("totalNs")),
            _float(s.get("minS")),
            _float(s.get("maxS")),
            first_start,
            _float(s.get("lastEnd")),
            _int(s.get("errors")),
            _int(s.get("events")),
            shift,
            windows,
        )
    raw_workers = st.get("workers", [])
    _need(isinstance(raw_workers, list), "bad workers")
    workers = dict(_worker(w) for w in raw_workers)
    pods: dict[tuple[str, str], int] = {}
    raw_pods = st.get("pods", [])
    _need(isinstance(raw_pods, list), "bad pods")
    for p in raw_pods:
        _need(isinstance(p, Mapping), "bad pod")
        pods[(_name(p.get("name"), 253), _name(p.get("uid"), 64))] = _int(p.get("events"))
    unknown: dict[str, int] = {}
    raw_unknown = st.get("unknownTypes", {})
    _need(isinstance(raw_unknown, Mapping), "bad unknownTypes")
    for k, c in raw_unknown.items():
        unknown[_name(k, TYPE_LIMIT)] = _int(c)
    raw_counters = st.get("counters", {})
    _need(isinstance(raw_counters, Mapping), "bad counters")
    counters = dict.fromkeys(COUNTER_NAMES, 0)
    for k, v in raw_counters.items():
        if k in _SNAKE:
            counters[_SNAKE[k]] = _int(v)
    warnings = _int(raw_counters.get("warnings", 0))
    applied, times = VersionVector.parse_text(st.get("applied", ""))
    wm = _time(st.get("compactedBefore"))
    watermark = 0 if wm is None else epoch(wm)

    links, c1 = _trim(links, lim.links, _named_weight)
    decks, c2 = _trim(decks, lim.decks, _named_weight)
    spans, c3 = _trim(spans, lim.spans, _span_weight)
    pods, c4 = _trim(pods, lim.pods, _ident)
    unknown, c5 = _trim(unknown, lim.unknown_types, _ident)
    workers, c6 = _trim(workers, lim.workers, _worker_weight)
    for name, extra in (
        ("links_capped", c1),
        ("decks_capped", c2),
        ("spans_capped", c3),
        ("pods_capped", c4),
        ("unknown_capped", c5),
        ("workers_capped", c6),
    ):
        counters[name] += extra
    return TaskState(
        task=task,
        link_entries=links,
        deck_entries=decks,
        spans=spans,
        workers=workers,
        pod_events=pods,
        applied=applied,
        instance_times=times,
        watermark=watermark,
        first_event_time=_time(st.get("firstEventTime")),
        last_event_time=_time(st.get("lastEventTime")),
        counters=counters,
        unknown=unknown,
        warnings=warnings,
        limits=lim,
    )


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
