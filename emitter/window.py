"""Packing the coalescible facts into one Window note: the latest progress, then the metrics
(oldest name first), then the span aggregates (oldest first), then, in the room they leave,
the metrics' unsent sample points, as much as one note (``NOTE_LIMIT`` bytes) holds. Each
metric row carries what its curve has to tell (curves.py): the extremes beyond what was told
and the sample's first point when unsent.

Pure: no I/O, no clock, no log. It takes what it packs out of the containers it is given
(and marks the curves' told extremes and sent points); the sender validates what it took
and builds the Event (``events.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tidings.schemas.wire.constants import NOTE_LIMIT, SCHEMA_VERSION, SEQ_MAX
from tidings.schemas.wire.payloads import (
    METRIC_POINTS_MAX,
    METRIC_ROWS_MAX,
    NON_FINITE,
    SPAN_ROWS_MAX,
    Metric,
    Progress,
    Window,
    metric_wire_value,
    span_row,
)

from .aggregate import COUNT, ERRORS, FIRST_START, LAST_END, MAX, MIN, TOTAL, Agg
from .curves import Curve
from .items import LatestKey, LatestUpdate, ProgressUpdate


@dataclass
class Packed:
    """What one Window note carries: its fields, and what they were taken from."""

    progress: dict[str, Any] | None = None
    metrics: list[list[Any]] = field(default_factory=list)  # rows as the wire has them
    base_us: int = 0
    spans: list[list[Any]] = field(default_factory=list)
    taken: list[tuple[str, Agg]] = field(default_factory=list)  # the spans' aggregates
    told: list[str] = field(default_factory=list)  # metric names whose extremes it tells
    times: list[float] = field(default_factory=list)  # of each part taken

    def fields(self) -> dict[str, Any]:
        return {"progress": self.progress, "metrics": self.metrics, "base_us": self.base_us,
                "spans": self.spans}

    @property
    def carried(self) -> tuple[int, int]:
        """(span names, spans) it carries."""
        return len(self.taken), sum(int(a[COUNT]) for _, a in self.taken)


@dataclass(frozen=True)
class Alone:
    """A fact that goes as its own event, not in a Window: a progress whose message alone
    fills a note (the note codec shrinks it), or a coalescible named fact other than a
    metric. ``kind`` is its payload type."""

    kind: str
    fields: dict[str, Any]
    time: float


def room(instance: str) -> int:
    """The bytes a Window note of ``instance`` leaves for its parts: its envelope with the
    longest seq there can be (each part's key and brackets are charged when it is started)."""
    return NOTE_LIMIT - len(orjson.dumps({
        "v": SCHEMA_VERSION, "t": Window.TYPE, "i": instance, "s": SEQ_MAX}))


def pack(room: int, progress: ProgressUpdate | None, workers: int,
         latest: dict[LatestKey, LatestUpdate], curves: Mapping[LatestKey, Curve],
         pending: dict[str, Agg]) -> Packed | Alone:
    """Take out of ``latest`` (the waiting named facts, oldest first) and ``pending`` (the
    span aggregates) what one note holds beside ``progress``; ``workers``: the task's
    declared worker count (0: none). The caller holds the lock of ``curves``."""
    out = Packed()
    if progress is not None:
        fraction, message, t = progress
        out.progress = {"fraction": float(fraction), "message": message}
        if workers:
            out.progress["workers"] = int(workers)
        size = len(orjson.dumps(out.progress)) + len(',"progress":')
        if size > room:
            return Alone(Progress.TYPE, out.progress, t)
        room -= size
        out.times.append(t)
    rows: list[tuple[list[Any], Curve | None]] = []
    for key, (values, t) in latest.items():
        if key[0] != Metric.TYPE:
            if out.progress is None and not rows:
                del latest[key]
                return Alone(key[0], dict(values), t)
            continue
        curve = curves.get(key)
        row = _metric_row(values, curve)
        size = len(orjson.dumps(_trimmed(row))) + (1 if rows else len(',"metrics":[]'))
        if size > room or len(rows) >= METRIC_ROWS_MAX:
            break
        room -= size
        rows.append((row, curve))
        out.times.append(t)
    for row, _ in rows:
        del latest[(Metric.TYPE, row[0])]
    if pending:
        room = _pack_spans(out, room, pending)
    for row, curve in rows:
        if curve is None:
            continue
        if room > 0:
            room -= _add_points(row, curve, room)
        _told(row, curve)
        out.told.append(row[0])
    out.metrics = [_trimmed(row) for row, _ in rows]
    return out


def _pack_spans(out: Packed, room: int, pending: dict[str, Agg]) -> int:
    """Take the span aggregates (oldest first) that fit in ``room``; the room left."""
    out.base_us = math.floor(min(a[FIRST_START] for a in pending.values()) * 1e6)
    head = len(f',"base_us":{out.base_us},"spans":[]')
    for name, a in pending.items():
        row = span_row(name, int(a[COUNT]), a[TOTAL], a[MIN], a[MAX], a[FIRST_START],
                       a[LAST_END], int(a[ERRORS]), out.base_us)
        size = len(orjson.dumps(row)) + (1 if out.spans else head)
        if size > room or len(out.spans) >= SPAN_ROWS_MAX:
            break
        room -= size
        out.taken.append((name, a))
        out.spans.append(row)
    for name, _ in out.taken:
        del pending[name]
    return room


def _metric_row(fields: dict[str, Any], curve: Curve | None) -> list[Any]:
    """A metric's row, all six fields: name, value, step, then the min and max its curve has
    to tell (or None) and its points (flat): the sample's first point when it is unsent."""
    value, step = fields["value"], fields["step"]
    wire = metric_wire_value(value)  # (NaN and the infinities as their strings)
    if curve is None:
        return [fields["name"], wire, step, None, None, []]
    lo, hi = curve.extremes(value)
    points: list[Any] = []
    unsent = curve.unsent(step, value)
    if unsent and unsent[0][0] == min(curve.firsts.values(), key=lambda p: p[0])[0]:
        points.extend(Curve.wire(unsent[0]))
    return [fields["name"], wire, step, lo, hi, points]


def _add_points(row: list[Any], curve: Curve, room: int) -> int:
    """Add the curve's unsent points to ``row`` (oldest first) while they fit in ``room``
    bytes; returns the bytes they take."""
    before = len(orjson.dumps(_trimmed(row)))
    points = row[5]
    used = 0
    value = NON_FINITE[row[1]] if isinstance(row[1], str) else row[1]
    for p in curve.unsent(row[2], value):
        step, value = Curve.wire(p)
        if len(points) >= 2 * METRIC_POINTS_MAX:
            break
        if step in points[::2]:
            continue  # (the first point, already in the row)
        points.extend((step, value))
        size = len(orjson.dumps(_trimmed(row))) - before
        if size > room:
            del points[-2:]
            break
        used = size
    return used


def _told(row: list[Any], curve: Curve) -> None:
    """The row is in a note: its extremes are told and its points (and its own, when that
    is a bucket's first) are sent."""
    _, wire, step, lo, hi, points = row
    value = NON_FINITE[wire] if isinstance(wire, str) else wire
    curve.told(value, lo, hi)
    sent = set(zip(points[::2], points[1::2], strict=True))
    for p in curve.firsts.values():
        if (p[0] == step and p[1] == value) or Curve.wire(p) in sent:
            p[2] = True


def _trimmed(row: list[Any]) -> list[Any]:
    """The row as the wire has it: trailing unset fields (None, no points) left out."""
    out = list(row)
    while len(out) > 3 and out[-1] in (None, []):
        out.pop()
    return out
