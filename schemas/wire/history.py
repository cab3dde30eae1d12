"""A metric's run in a few dozen numbers: its exact extremes and a bounded history spread over
the whole run, the same for any order in which its reports arrive (pure; the emitter and the
fold share the rule).

The history is a sample of the (step, value) points reported for a name: on a grid of
``2**shift`` steps, the first point of each bucket (the smallest step; the smaller value on a
tie), with ``shift`` the finest grid on which the points fall into at most ``BUCKETS``
buckets, plus the last point (the largest step). So the first and last points are always
kept and the rest spread over the run; a million steps keep at most ``HISTORY_POINTS``.

Why any order gives the same sample: the sample of a set is a function of the set, and the
sample of ``sample(A)`` with the points ``B`` is the sample of ``A`` with ``B`` as long as
the grid never gets finer than ``sample(A)``'s (so ``shift`` is part of the state): on a
grid as coarse or coarser, each bucket's first point and the number of buckets are the same
whether computed from ``A`` or from the first points of ``A``'s finer buckets, and a finer
grid than ``A``'s own already held too many buckets for ``A`` with ``B``. ``join`` is
therefore associative, commutative and idempotent, and so is the fold of every report into
it. The extremes are plain minimum and maximum, exact (the values are not rounded), over
every value and point reported: a sender's ``min``/``max`` only widen them, so no point
kept lies outside them. The history's values are rounded to ``VALUE_DIGITS`` significant
digits, enough for any curve, so that the status stays small (rounding is monotone: a
point rounded from a value within the extremes lies within the extremes rounded).

Any finite double draws: ``heights`` places each value of a curve between its lowest and
highest without computing a range that overflows (1e308 to -1e308) or underflows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from . import record

# Points a history keeps at most: the first point of at most BUCKETS buckets, and the last.
HISTORY_POINTS: Final = 32
BUCKETS: Final = HISTORY_POINTS - 1
# Significant digits of a history value (the curve); min, max and the latest value are exact.
VALUE_DIGITS: Final = 6
# The coarsest grid there can be: steps are below 2**53.
SHIFT_MAX: Final = 53

Point = tuple[int, float]  # (step, value)


def curve_value(v: float) -> float:
    """``v`` as a history keeps it: ``VALUE_DIGITS`` significant digits, and -0.0 as 0.0
    (they compare equal, so which one a bucket kept would depend on the order)."""
    return float(f"{v:.{VALUE_DIGITS}g}") + 0.0


@dataclass(frozen=True, slots=True)
class Series:
    """One metric's extremes and history. ``points`` ascend by (step, value): the first
    point of each bucket of ``2**shift`` steps, then the last point unless it is one of
    them. ``lo``/``hi`` are None only for a name that never had a finite value."""

    lo: float | None = None
    hi: float | None = None
    shift: int = 0
    points: tuple[Point, ...] = ()

    @property
    def steps(self) -> list[int]:
        return [s for s, _ in self.points]

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]


EMPTY: Final = Series()


def _lo(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


def _hi(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None or a >= b else b


def _finite(v: float | None) -> float | None:
    # -0.0 becomes 0.0: min(-0.0, 0.0) would be whichever came first.
    return v + 0.0 if v is not None and math.isfinite(v) else None


def sample(points: Iterable[Point], shift: int = 0) -> tuple[int, tuple[Point, ...]]:
    """The history of ``points`` on a grid no finer than ``2**shift``: (its shift, its points)."""
    firsts: dict[int, Point] = {}
    last: Point | None = None
    for p in points:
        b = p[0] >> shift
        cur = firsts.get(b)
        if cur is None or p < cur:
            firsts[b] = p
        if last is None or p > last:
            last = p
    while len(firsts) > BUCKETS and shift < SHIFT_MAX:
        shift += 1
        coarse: dict[int, Point] = {}
        for b, p in firsts.items():
            cur = coarse.get(b >> 1)
            if cur is None or p < cur:
                coarse[b >> 1] = p
        firsts = coarse
    out = sorted(firsts.values())
    if last is not None and out[-1] != last:
        out.append(last)
    return shift, tuple(out)


def merge(series: Series | None, value: float | None, step: int | None,
          lo: float | None = None, hi: float | None = None,
          points: Sequence[Point] = ()) -> Series:
    """``series`` with one report joined: its ``value`` at ``step`` (a point when it has a
    step), the extremes ``lo``/``hi`` its sender saw, and earlier ``points`` it sampled.
    Non-finite numbers are no part of a curve or of the extremes."""
    s = EMPTY if series is None else series
    v = _finite(value)
    new_lo = _lo(_lo(s.lo, v), _finite(lo))
    new_hi = _hi(_hi(s.hi, v), _finite(hi))
    fresh = []
    for st, x in points:
        if math.isfinite(x):  # (a point outside the sender's extremes widens them)
            fresh.append((st, curve_value(x)))
            new_lo, new_hi = _lo(new_lo, x + 0.0), _hi(new_hi, x + 0.0)
    if step is not None and v is not None:
        fresh.append((step, curve_value(v)))
    if not fresh:
        if new_lo == s.lo and new_hi == s.hi:
            return s
        return Series(new_lo, new_hi, s.shift, s.points)
    old = s.points
    if len(fresh) == 1 and old:
        # The common report: one point after the last, in the last point's bucket. The
        # buckets stay as they are; the point becomes the last, replacing the previous last
        # unless that one is its bucket's first.
        p, last, shift = fresh[0], old[-1], s.shift
        if p > last and p[0] >> shift == last[0] >> shift:
            keep = len(old) == 1 or old[-2][0] >> shift != last[0] >> shift
            return Series(new_lo, new_hi, shift, (*old, p) if keep else (*old[:-1], p))
    shift, out = sample((*old, *fresh), s.shift)
    return Series(new_lo, new_hi, shift, out)


def join(a: Series, b: Series) -> Series:
    """The series of both sets of reports (associative, commutative, idempotent)."""
    shift, out = sample((*a.points, *b.points), max(a.shift, b.shift))
    return Series(_lo(a.lo, b.lo), _hi(a.hi, b.hi), shift, out)


# --- the status entry's fields --------------------------------------------------------------


def curve_text(s: Series) -> str:
    """The history as one string: ``"<shift> <step>:<value>,<step>:<value>,..."``, oldest
    first (``"4 5:2.31,20:1.87"``: a grid of 2^4 steps, 2.31 at step 5, 1.87 at step 20)."""
    return f"{s.shift} " + ",".join(f"{st}:{v!r}" for st, v in s.points)


def to_status(s: Series) -> dict[str, Any]:
    """``min``, ``max`` and ``history`` (``curve_text``) of a metric's entry."""
    out: dict[str, Any] = {}
    if s.lo is not None:
        out["min"] = s.lo
    if s.hi is not None:
        out["max"] = s.hi
    if s.points:
        out["history"] = curve_text(s)
    return out


def _number(v: Any) -> float:
    if type(v) not in (int, float) or not math.isfinite(v):
        raise ValueError("bad number")
    return float(v) + 0.0


def _curve(text: str) -> tuple[int, list[tuple[Any, Any]]]:
    """(shift, [(step, value)]) of ``curve_text``'s string, checked as layout 2's arrays."""
    head, _, body = text.partition(" ")
    if not (head.isascii() and head.isdigit() and len(head) <= 2) or len(text) > 8192:
        raise ValueError("bad history")
    pairs: list[tuple[Any, Any]] = []
    for part in body.split(",") if body else []:
        step, colon, value = part.partition(":")
        if not colon:
            raise ValueError("bad history point")
        pairs.append((record.integer(step), record.number(value)))
    return int(head), pairs


def from_status(entry: Mapping[str, Any]) -> Series:
    """The series a metric's status entry holds (its history ``curve_text``'s string, or
    layout 2's ``{shift, steps, values}``); raises ValueError when it is unreadable. A
    history that is not a sample (hand-edited) is sampled again, so it obeys the bounds."""
    lo = None if entry.get("min") is None else _number(entry["min"])
    hi = None if entry.get("max") is None else _number(entry["max"])
    if lo is not None and hi is not None and lo > hi:
        raise ValueError("min above max")
    raw = entry.get("history")
    if raw is None:
        return Series(lo, hi)
    if isinstance(raw, str):
        shift, pairs = _curve(raw)
    elif isinstance(raw, Mapping):  # layout 2
        shift, steps, values = raw.get("shift", 0), raw.get("steps"), raw.get("values")
        if not (isinstance(steps, list) and isinstance(values, list)
                and len(steps) == len(values)):
            raise ValueError("bad history")
        pairs = list(zip(steps, values, strict=True))
    else:
        raise ValueError("bad history")
    if not (type(shift) is int and 0 <= shift <= SHIFT_MAX and len(pairs) <= 4 * HISTORY_POINTS):
        raise ValueError("bad history")
    points: list[Point] = []
    for s, v in pairs:
        if type(s) is not int or not 0 <= s <= 2**53:
            raise ValueError("bad history step")
        points.append((s, curve_value(_number(v))))
    if not points:
        return Series(lo, hi)
    # A point beyond what the extremes round to was not sampled from within them (a hand
    # edit): the extremes widen over it, as the fold's do over every point.
    for _, v in points:
        if lo is None or (v < lo and v < curve_value(lo)):
            lo = v
        if hi is None or (v > hi and v > curve_value(hi)):
            hi = v
    shift, out = sample(points, shift)
    return Series(lo, hi, shift, out)


def heights(values: Sequence[float]) -> list[float]:
    """Each value of a curve placed between its lowest (0.0) and highest (1.0); all 0.5 when
    flat. For any finite doubles the result is finite: ``hi - lo`` overflows for a curve
    from -1e308 to 1e308 (then the halves are subtracted: each below 9e307), and subnormals
    subtract exactly. Non-finite values are not part of a curve (the caller leaves them out)."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if not hi > lo:
        return [0.5] * len(values)
    span = hi - lo
    if math.isinf(span):
        half = hi / 2 - lo / 2
        return [min(1.0, max(0.0, (v / 2 - lo / 2) / half)) for v in values]
    return [min(1.0, max(0.0, (v - lo) / span)) for v in values]
