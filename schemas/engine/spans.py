"""Span accumulation: how a run of the fold merges SpanSummary rows into a task's span
aggregates, per name and per (name, sender pod) lane.

Within a run the aggregates a summary touches are accumulators (``_SpanAcc``): sums kept in
place and windows kept raw, each made into one ``SpanAgg`` (schemas/engine/state.py) at the end of
the run (``SpanRun.result``). Lanes follow the cap rule: the task keeps the ``span_lanes``
smallest (name, pod) pairs of its kept names, so the kept lanes are the same for any order
(schemas/engine/folding.py's docstring).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..wire.caps import events_of, insert_capped
from ..wire.constants import INT64_MAX
from ..wire.payloads import SpanSummary
from .state import NO_LANES, Limits, SpanAgg, new_span_agg, us

# Buckets across a span name's whole extent (so the busy intervals stay ~WINDOW_BUCKETS / 2).
WINDOW_BUCKETS = 64


def _shift_for(first_start: float, last_end: float) -> int:
    n = -(-(us(last_end) - us(first_start)) // WINDOW_BUCKETS)
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
            self.raw: list[tuple[int, int]] = [(us(p.first_start), us(p.last_end))]
            self.lanes: dict[str, SpanEntry] = {}
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
        m = INT64_MAX
        lanes: Mapping[str, SpanAgg] = {
            pod: lane.agg() if type(lane) is _SpanAcc else lane  # type: ignore[misc]
            for pod, lane in self.lanes.items()} if self.lanes else NO_LANES
        fields = (self.count if self.count <= m else m,
                  self.total_ns if self.total_ns <= m else m, self.min_s, self.max_s,
                  self.first_start, self.last_end, self.errors if self.errors <= m else m,
                  self.events, shift, tuple(out))
        if self.solo is not None:
            lanes = {self.solo: new_span_agg(*fields, NO_LANES, 0)}
        return new_span_agg(*fields, lanes, self.unlaned)


SpanEntry = SpanAgg | _SpanAcc


class SpanRun:
    """A run's span aggregates under construction: the input state's map, copied once, in
    which each name the run writes is an accumulator until ``result``."""

    __slots__ = ("accs", "entries", "lane_count", "lanes_cap", "names_cap")

    def __init__(self, spans: Mapping[str, SpanAgg], lim: Limits) -> None:
        self.entries: dict[str, SpanEntry] = dict(spans)
        self.accs: list[tuple[str, _SpanAcc]] = []
        self.lane_count: int | None = None  # lanes of the run's spans (counted when needed)
        self.names_cap, self.lanes_cap = lim.spans, lim.span_lanes

    def add(self, pod: str, p: SpanSummary) -> int:
        """Merge ``p``, sent by ``pod``; returns how many events the names cap gave up."""
        spans = self.entries
        name = p.name
        total_ns = round(p.total_s * 1e9)
        if total_ns > INT64_MAX:
            total_ns = INT64_MAX
        cur = spans.get(name)
        if type(cur) is not _SpanAcc:
            if cur is None:
                acc = _SpanAcc(None, p, total_ns)
                self.accs.append((name, acc))
                capped = insert_capped(spans, name, acc, self.names_cap, events_of)
                if capped:
                    self.lane_count = None  # (a name went, with its lanes: counted again)
                if spans.get(name) is acc:
                    self._add_lane(acc, name, pod, p, total_ns)
                return capped
            cur = spans[name] = _SpanAcc(cur, p, total_ns)  # type: ignore[arg-type]
            self.accs.append((name, cur))
        if cur.solo is not None:
            if cur.solo == pod:  # the name's one pod: its lane is the totals
                cur.add(p, total_ns)
                return 0
            cur.split(pod)
        cur.add(p, total_ns)
        self._add_lane(cur, name, pod, p, total_ns)
        return 0

    def _add_lane(self, acc: _SpanAcc, name: str, pod: str, p: SpanSummary,
                  total_ns: int) -> None:
        """Merge ``p`` into the lane of its sender ``pod`` under span ``name``: the task keeps
        the ``span_lanes`` smallest (name, pod) pairs of its kept names (the others'
        summaries count in their name's ``unlaned``). A name's first lane is the name's
        totals themselves (``solo``) until another pod speaks."""
        spans = self.entries
        lanes = acc.lanes
        lane = lanes.get(pod)
        if type(lane) is _SpanAcc:
            lane.add(p, total_ns)
            return
        if lane is not None:
            lanes[pod] = new = _SpanAcc(lane, p, total_ns)  # type: ignore[arg-type]
            new.add(p, total_ns)
            return
        count = self.lane_count
        if count is None:
            count = sum(len(s.lanes) + (getattr(s, "solo", None) is not None)
                        for s in spans.values())
        if count >= self.lanes_cap:
            largest = max(((n, q) for n, s in spans.items() for q in _pods(s)), default=None)
            if largest is None or (name, pod) > largest:
                acc.unlaned += 1
                self.lane_count = count
                return
            victim = spans[largest[0]]
            if type(victim) is not _SpanAcc:
                victim = spans[largest[0]] = _SpanAcc(victim, p, 0)  # type: ignore[arg-type]
                self.accs.append((largest[0], victim))
            if victim.solo == largest[1]:
                victim.solo = None
                # Every summary of the name so far was the solo pod's (this one's not yet,
                # when the victim is this very name).
                victim.unlaned += victim.events - (victim is acc)
            else:
                gone = victim.lanes.pop(largest[1])
                victim.unlaned += gone.events
            count -= 1
        if not lanes and not acc.unlaned and acc.events == 1:
            acc.solo = pod  # the name's first summary: its lane is the totals
        else:
            lanes[pod] = _SpanAcc(None, p, total_ns)
        self.lane_count = count + 1

    def result(self) -> dict[str, SpanAgg]:
        """The run's span aggregates, each accumulator made one ``SpanAgg``."""
        entries = self.entries
        for name, acc in self.accs:
            if entries.get(name) is acc:  # (unless the cap evicted it meanwhile)
                entries[name] = acc.agg()
        return entries  # type: ignore[return-value]


def _pods(s: SpanEntry) -> list[str]:
    """The pods with a lane under a span name's entry."""
    solo = getattr(s, "solo", None)
    return [*s.lanes, solo] if solo is not None else list(s.lanes)
