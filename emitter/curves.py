"""What a window's latest value would lose of a metric, kept in the pod: each name's exact
extremes and its own spread sample of the run (the rule of schemas/wire/history.py), and what of
them the watcher has not been told yet.

The sender sends the latest value of a name per window; a loop that logs every step loses
the values in between. So the workload side adds every value to its name's ``Curve`` (O(1):
two comparisons and a dict lookup; a regrid, O(BUCKETS), happens once per doubling of the
run), and the sender adds to each row the extremes beyond what it told before and, in the
room left in the note, the sample's points not sent yet (the first point first). Memory is
bounded: at most BUCKETS points per name, and a bounded number of names.
"""

from __future__ import annotations

import math
from typing import Any

from tidings.schemas.wire.history import BUCKETS, curve_value

_STEP_MAX = 2**53


class Curve:
    """One name's extremes and sample, and what is still to tell. Not thread-safe: the
    latest slot's lock guards it."""

    __slots__ = ("firsts", "hi", "last", "lo", "shift", "told_hi", "told_lo")

    def __init__(self) -> None:
        self.lo = math.inf
        self.hi = -math.inf
        self.told_lo = math.inf  # the extremes this emitter has put in notes
        self.told_hi = -math.inf
        self.shift = 0
        # Bucket of 2**shift steps -> its first point: [step, value, sent].
        self.firsts: dict[int, list[Any]] = {}
        self.last: Any = None  # the name's latest update (the latest slot's)

    def add(self, value: float, step: int | None) -> None:
        """A value reported; a NaN or an infinity is no part of the extremes or the curve."""
        if not -math.inf < value < math.inf:
            return
        if value < self.lo:
            self.lo = value
        if value > self.hi:
            self.hi = value
        if step is None or not 0 <= step <= _STEP_MAX:
            return
        firsts = self.firsts
        b = step >> self.shift
        cur = firsts.get(b)
        if cur is None:
            firsts[b] = [step, value, False]
            if len(firsts) > BUCKETS:
                self._regrid()
        elif step <= cur[0] and (step < cur[0] or value < cur[1]):  # (rare: steps go up)
            firsts[b] = [step, value, False]

    def _regrid(self) -> None:
        # Points not sent yet that are no bucket's first any more are never sent.
        while len(self.firsts) > BUCKETS:
            self.shift += 1
            coarse: dict[int, list[Any]] = {}
            for b, p in self.firsts.items():
                cur = coarse.get(b >> 1)
                if cur is None or (p[0], p[1]) < (cur[0], cur[1]):
                    coarse[b >> 1] = p
            self.firsts = coarse

    # ---- the sender's side --------------------------------------------------------------

    def extremes(self, value: float) -> tuple[float | None, float | None]:
        """The min and max a row of ``value`` must carry: those beyond what the watcher
        knows once it has the row (None: nothing to add). A value that is not finite tells
        nothing of them."""
        if not -math.inf < value < math.inf:
            value = math.nan  # (no comparison with it holds)
        lo = self.lo if self.lo < self.told_lo and not self.lo >= value else None
        hi = self.hi if self.hi > self.told_hi and not self.hi <= value else None
        return lo, hi

    def told(self, value: float, lo: float | None, hi: float | None) -> None:
        if not -math.inf < value < math.inf:
            value = math.nan
        if value < self.told_lo:
            self.told_lo = value
        if value > self.told_hi:
            self.told_hi = value
        if lo is not None and lo < self.told_lo:
            self.told_lo = lo
        if hi is not None and hi > self.told_hi:
            self.told_hi = hi

    def forget_told(self) -> None:
        """A note carrying the extremes was lost: tell them again."""
        self.told_lo, self.told_hi = math.inf, -math.inf

    def unsent(self, step: int | None, value: float) -> list[list[Any]]:
        """The sample's points not sent yet, oldest first, but for the row's own (``value``
        at ``step``; a bucket's first of the same step with another value is sent, or it
        would stay to tell forever)."""
        return sorted((p for p in self.firsts.values()
                       if not p[2] and (p[0] != step or p[1] != value)), key=lambda p: p[0])

    @staticmethod
    def wire(p: list[Any]) -> tuple[int, float]:
        """A point as a note carries it: its value rounded as the history keeps it."""
        return p[0], curve_value(p[1])

    @property
    def pending(self) -> bool:
        """Something the watcher has not been told: an extreme, or an unsent point."""
        return (self.lo < self.told_lo or self.hi > self.told_hi
                or any(not p[2] for p in self.firsts.values()))
