"""The reference fold: the per-event fold as it was before the one-engine fold (main abf9afe).

Kept verbatim (its imports and constructors adapted; the per-entry merges and the
compaction, unchanged since, are imported from the engine) as the oracle of the property
tests: every fold of schemas/engine/folding.py (``fold``, ``fold_many``, ``fold_checked``) must give
byte-identical statuses and equal states. Each event copies the maps it touches and builds
new immutable entries, which is slow and obviously per event; it is not used by the code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import TypeVar

from tidings.schemas.engine.apply import _count, _set_named
from tidings.schemas.engine.folding import _compact
from tidings.schemas.engine.roster import (
    FAILED,
    FINAL,
    FRACTION_MASK,
    Failure,
    Life,
    Mark,
    OrderKey,
    Pace,
    QuietPeriod,
    Roster,
    pod_hash,
    uid_print,
)
from tidings.schemas.engine.spans import WINDOW_BUCKETS
from tidings.schemas.engine.state import Beyond, Limits, Named, SpanAgg, TaskState
from tidings.schemas.engine.workers import merge_progress
from tidings.schemas.wire.caps import events_of, insert_capped
from tidings.schemas.wire.constants import MESSAGE_LIMIT, non_finite_text
from tidings.schemas.wire.event import ParsedEvent
from tidings.schemas.wire.payloads import (
    DeckReady,
    LogLink,
    Metric,
    Metrics,
    PodSpawned,
    Progress,
    Quiet,
    SpanSummaries,
    SpanSummary,
    UnknownPayload,
    Window,
    cut_text,
)

K = TypeVar("K")
V = TypeVar("V")
_INT_MAX = 2**63 - 1


# --- per-entry merges, in place on a map the caller owns ---------------------------------
# Both ``fold`` (which copies only the one map an event touches, sharing the rest with the
# input state) and ``fold_many`` (which copies each touched map once per batch) apply events
# through these, so the two cannot disagree on what an event does.


def _us(t: float) -> int:
    return round(t * 1e6)


def _shift_for(first_start: float, last_end: float) -> int:
    n = -(-(_us(last_end) - _us(first_start)) // WINDOW_BUCKETS)
    return (n - 1).bit_length() if n > 1 else 0


def _windows(
    old: tuple[tuple[int, int], ...], old_shift: int, shift: int, start: float, end: float
) -> tuple[tuple[int, int], ...]:
    """``old`` regridded to ``shift`` (outward), plus [start, end], merged."""
    d = shift - old_shift
    ivs = [(lo >> d, -(-hi >> d)) for lo, hi in old] if d else list(old)
    ivs.append((_us(start) >> shift, -(-_us(end) >> shift)))
    ivs.sort()
    out: list[tuple[int, int]] = []
    for lo, hi in ivs:
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


def _merged(cur: SpanAgg | None, p: SpanSummary) -> SpanAgg:
    """``cur`` (None: nothing yet) with ``p`` merged in, lanes left as they are."""
    total_ns = min(round(p.total_s * 1e9), _INT_MAX)
    if cur is None:
        shift = _shift_for(p.first_start, p.last_end)
        return SpanAgg(
            p.count, total_ns, p.min_s, p.max_s, p.first_start, p.last_end, p.errors, 1,
            shift, _windows((), shift, shift, p.first_start, p.last_end),
        )
    # Saturating sums (of non-negatives, so still associative and commutative), inline:
    # this is the hottest merge of the fold.
    count = cur.count + p.count
    total = cur.total_ns + total_ns
    errors = cur.errors + p.errors
    first = cur.first_start if cur.first_start <= p.first_start else p.first_start
    last = cur.last_end if cur.last_end >= p.last_end else p.last_end
    shift = _shift_for(first, last)
    return SpanAgg(
        count if count <= _INT_MAX else _INT_MAX,
        total if total <= _INT_MAX else _INT_MAX,
        cur.min_s if cur.min_s <= p.min_s else p.min_s,
        cur.max_s if cur.max_s >= p.max_s else p.max_s,
        first,
        last,
        errors if errors <= _INT_MAX else _INT_MAX,
        cur.events + 1,
        shift,
        _windows(cur.windows, cur.shift, shift, p.first_start, p.last_end),
        cur.lanes,
        cur.unlaned,
    )


def _with_lanes(s: SpanAgg, lanes: dict[str, SpanAgg], unlaned: int) -> SpanAgg:
    return SpanAgg(s.count, s.total_ns, s.min_s, s.max_s, s.first_start, s.last_end,
                   s.errors, s.events, s.shift, s.windows, lanes, unlaned)


def _merge_span(entries: dict[str, SpanAgg], p: SpanSummary, cap: int, pod: str,
                lane_cap: int) -> int:
    """Merge ``p`` into its name and into its pod's lane under that name; the task keeps the
    ``lane_cap`` smallest (name, pod) lanes, the summaries of the others counted in their
    name's ``unlaned``."""
    name = p.name
    cur = entries.get(name)
    capped = 0
    if cur is None:
        capped = insert_capped(entries, name, _merged(None, p), cap, events_of)
        if name not in entries:
            return capped
    else:
        entries[name] = _merged(cur, p)
    s = entries[name]
    lanes = dict(s.lanes)
    if pod in lanes:
        lanes[pod] = _merged(lanes[pod], p)
        entries[name] = _with_lanes(s, lanes, s.unlaned)
        return capped
    lanes[pod] = _merged(None, p)
    entries[name] = _with_lanes(s, lanes, s.unlaned)
    pairs = sorted((n, q) for n, e in entries.items() for q in e.lanes)
    if len(pairs) > lane_cap:
        n, q = pairs[-1]
        e = entries[n]
        rest = dict(e.lanes)
        gone = rest.pop(q)
        entries[n] = _with_lanes(e, rest, e.unlaned + gone.events)
    return capped


def _merge_spans(entries: dict[str, SpanAgg], p: SpanSummaries | Window, cap: int, pod: str,
                 lane_cap: int) -> int:
    """A SpanSummaries note is its rows, each merged as one SpanSummary would be (each row
    counts as one event of its name), so packing names into one note changes nothing in
    the state: the per-name merges commute, whatever notes carry them."""
    capped = 0
    for row in p.spans:
        capped += _merge_span(entries, row, cap, pod, lane_cap)
    return capped


def _roster(r: Roster, ev: ParsedEvent, p: Progress, key: OrderKey, cap: int,
            heard: datetime) -> tuple[Roster, int, str]:
    """The roster with ``p`` of ``pod`` merged, rebuilt whole (and how many events its cap
    gave up, and whose life the report is: "same", "new" or "earlier"): flags OR-ed and the
    largest fraction per pod life, the latest life of a name (by its first report's creation,
    then uid) the only one marked, the cap smallest pod hashes kept, the largest declared
    count, the earliest failed final, the latest final; the pace, the report ``heard`` then
    (the API server's creation time)."""
    pod = ev.sender.name
    marks, lives = dict(r.marks), dict(r.lives)
    h = pod_hash(pod)
    frac = round(p.fraction * 10_000)
    bits = frac | (FINAL if p.final else 0) | (FAILED if p.failed else 0)
    capped = 0
    me = Life(_epoch(ev.created or key[0]), uid_print(ev.sender.uid))
    life = lives.get(h)
    said = "same"
    if h in marks and life is not None and life.uid != me.uid:
        if (me.born, me.uid) < (life.born, life.uid):
            lives[h] = life._replace(replaced=True)
            first, last = r.first_failure, r.last_final
            if p.final and (last is None or key > last):
                last = key
            if p.failed and (first is None or key < first.at):
                first = Failure(key, pod, cut_text(p.message, MESSAGE_LIMIT))
            return r._replace(lives=lives, declared=max(r.declared, p.workers),
                              first_failure=first, last_final=last), 0, "earlier"
        del marks[h]
        r = r._replace(paces={k: v for k, v in r.paces.items() if k != h})
        lives[h] = me._replace(replaced=True)
        said = "new"
    elif h in marks and life is not None:
        lives[h] = life._replace(born=min(life.born, me.born))
    else:
        lives[h] = me
    cur = marks.get(h)
    if cur is None:
        marks[h] = Mark(bits, 1)
    else:
        flags = (cur.bits | bits) & (FINAL | FAILED)
        marks[h] = Mark(flags | max(cur.bits & FRACTION_MASK, frac), cur.events + 1)
    # The pod's pace (its earliest and latest report, by time then fraction, and the
    # latest time one was heard) while it has no final.
    paces = dict(r.paces)
    quiet = dict(r.quiet)
    if marks[h].bits & FINAL:
        paces.pop(h, None)
        quiet.pop(h, None)  # (a final ends a declared quiet period too)
    else:
        def ms_of(t: datetime) -> int:
            return (t - datetime(1970, 1, 1, tzinfo=_UTC)) // timedelta(milliseconds=1)

        ms, hms = ms_of(key[0]), ms_of(heard)
        old = paces.get(h)
        lo = (ms, frac) if old is None else min((old.first_ms, old.first_pm), (ms, frac))
        hi = (ms, frac) if old is None else max((old.last_ms, old.last_pm), (ms, frac))
        # The lowest report: the smallest fraction, the latest of those.
        low = (frac, -ms) if old is None else min((old.low_pm, -old.low_ms), (frac, -ms))
        paces[h] = Pace(pod, 1 if old is None else old.reports + 1, *lo, *hi,
                        hms if old is None else max(old.heard_ms, hms), -low[1], low[0])
    if len(marks) > cap:
        largest = max(marks)
        capped = marks.pop(largest).events
        paces.pop(largest, None)
        lives.pop(largest, None)
    first, last = r.first_failure, r.last_final
    if p.final and (last is None or key > last):
        last = key
    if p.failed and (first is None or key < first.at):
        first = Failure(key, pod, cut_text(p.message, MESSAGE_LIMIT))
    # The pods' ends (observations, which this reference does not fold) decide the pods
    # without a final of their own; of a name's ends (one per life), the one shown is the
    # mark's life's, else the largest.
    ends, others = {}, {}
    for k in set(r.ends) | set(r.other_ends):
        pool = {**r.other_ends.get(k, {}), **({r.ends[k].uid: r.ends[k]} if k in r.ends else {})}
        mine = lives.get(k)
        pick = pool[mine.uid] if mine is not None and mine.uid in pool else max(pool.values())
        ends[k] = pick
        rest = {u: e for u, e in pool.items() if u != pick.uid}
        if rest:
            others[k] = rest
    ended = {h: e for h, e in ends.items() if h in marks and not marks[h].bits & FINAL
             and e.uid in (0, lives[h].uid)}
    failed = [(e.at, h) for h, e in ended.items() if e.failed]
    return Roster(
        marks, max(r.declared, p.workers),
        sum(1 for m in marks.values() if m.bits & FINAL),
        sum(1 for m in marks.values() if m.bits & FAILED),
        sum(m.bits & FRACTION_MASK for m in marks.values()), first, last, ends,
        len(ended), len(failed), min(failed, default=None),
        max((e.at for e in ended.values()), default=None), paces, lives, others, quiet), \
        capped, said


def _metric(metrics: dict[str, Named], beyond: dict[str, Beyond], name: str,
            value: tuple[float, int | None], key: OrderKey, lim: Limits,
            report: tuple[object, ...]) -> tuple[int, int]:
    """A metric row merged: into its register (the engine's), and a name the cap leaves out
    (beyond it, or evicted by a smaller one) into ``beyond``, its latest report's
    finiteness, the ``lim.beyond`` smallest names kept. (capped, events beyond both)."""
    before = dict(metrics)
    capped = _set_named(metrics, name, value, key, lim.metrics, report)  # type: ignore[arg-type]
    lost = 0
    for gone in [n for n in before if n not in metrics]:
        r = before[gone]
        assert isinstance(r.value, tuple)
        lost += _beyond(beyond, gone, r.at, r.value[0], r.events, lim.beyond)
    if name not in metrics:
        lost += _beyond(beyond, name, key, value[0], 1, lim.beyond)
    return capped, lost


def _beyond(beyond: dict[str, Beyond], name: str, at: OrderKey, value: object, events: int,
            cap: int) -> int:
    text = (non_finite_text(value) or "") if isinstance(value, float) else ""
    cur = beyond.get(name)
    if cur is not None:
        newer = at > cur.at
        beyond[name] = Beyond(at if newer else cur.at, text if newer else cur.non_finite,
                              cur.events + events)
        return 0
    beyond[name] = Beyond(at, text, events)
    if len(beyond) > cap:
        return beyond.pop(max(beyond)).events
    return 0


def _order_time(ev: ParsedEvent, skew: timedelta) -> datetime:
    """The event's time for ordering: its eventTime, bounded by the server's clock."""
    created = ev.created
    if created is not None:
        bound = created + skew
        if ev.event_time > bound:
            return bound
    return ev.event_time


_UTC = timezone.utc


def _epoch(t: datetime) -> int:
    return int(t.timestamp())


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
    created = ev.created
    c = 0 if created is None else _epoch(created)
    if created is not None and c < state.watermark:
        return _with(state, counters=_bump(state.counters, "late_skipped"))

    lim = state.limits
    named, spans, beyond = state.named, state.spans, state.beyond
    workers, unknown, roster = state.workers, state.unknown, state.roster
    counters = dict(state.counters)
    counters["events_applied"] = counters.get("events_applied", 0) + 1
    t = _order_time(ev, lim.clock_skew)
    if t is not ev.event_time:
        counters["time_clamped"] = counters.get("time_clamped", 0) + 1
    capped = 0
    capped_name = ""
    p = ev.payload
    tp = type(p)
    sender = ev.sender
    # Only the map this event touches is copied; the others are shared with ``state``.
    if tp is SpanSummary:
        assert isinstance(p, SpanSummary)
        spans = dict(spans)
        capped = _merge_span(spans, p, lim.spans, sender.name, lim.span_lanes)
        capped_name = "spans_capped"
    elif tp is SpanSummaries:
        assert isinstance(p, SpanSummaries)
        spans = dict(spans)
        capped = _merge_spans(spans, p, lim.spans, sender.name, lim.span_lanes)
        capped_name = "spans_capped"
    elif tp is Progress:
        assert isinstance(p, Progress)
        workers = dict(workers)
        roster, roster_capped, said = _roster(roster, ev, p, (t, instance, seq), lim.roster,
                                              created or t)
        if said == "new":
            workers.pop(sender.name, None)
        capped = 0 if said == "earlier" else merge_progress(
            workers, sender.name, p, (t, instance, seq), lim.workers)
        capped_name = "workers_capped"
        if roster_capped:
            counters["roster_capped"] = counters.get("roster_capped", 0) + roster_capped
    elif tp is LogLink:
        assert isinstance(p, LogLink)
        links = dict(state.link_entries)
        capped = _set_named(links, p.name, p.url, (t, instance, seq), lim.links)
        capped_name = "links_capped"
        if links:
            named = {**named, "links": links}
    elif tp is DeckReady:
        assert isinstance(p, DeckReady)
        decks = dict(state.deck_entries)
        capped = _set_named(decks, p.name, p.uri, (t, instance, seq), lim.decks)
        capped_name = "decks_capped"
        if decks:
            named = {**named, "decks": decks}
    elif tp in (Metric, Metrics):  # each row of a Metrics as one Metric event of its name
        assert isinstance(p, Metric | Metrics)
        metrics = dict(state.named.get("metrics", {}))
        beyond_m = dict(beyond.get("metrics", {}))
        for row in (p,) if isinstance(p, Metric) else p.metrics:
            n, lost = _metric(metrics, beyond_m, row.name, (row.value, row.step),
                              (t, instance, seq), lim,
                              (row.value, row.step, row.min, row.max, row.points))
            capped += n
            if lost:
                counters["metrics_unjudged"] = counters.get("metrics_unjudged", 0) + lost
        capped_name = "metrics_capped"
        if metrics:
            named = {**named, "metrics": metrics}
        if beyond_m:
            beyond = {**beyond, "metrics": beyond_m}
    elif tp is Window:  # each part as its own event would be (the same order key)
        assert isinstance(p, Window)
        key = (t, instance, seq)
        extra: dict[str, int] = {}
        if p.progress is not None:
            workers = dict(workers)
            roster, extra["roster_capped"], said = _roster(roster, ev, p.progress, key,
                                                           lim.roster, created or t)
            if said == "new":
                workers.pop(sender.name, None)
            extra["workers_capped"] = 0 if said == "earlier" else merge_progress(
                workers, sender.name, p.progress, key, lim.workers)
        if p.metrics:
            metrics = dict(state.named.get("metrics", {}))
            beyond_m = dict(beyond.get("metrics", {}))
            extra["metrics_capped"] = extra["metrics_unjudged"] = 0
            for row in p.metrics:
                n, lost = _metric(metrics, beyond_m, row.name, (row.value, row.step), key, lim,
                                  (row.value, row.step, row.min, row.max, row.points))
                extra["metrics_capped"] += n
                extra["metrics_unjudged"] += lost
            if metrics:
                named = {**named, "metrics": metrics}
            if beyond_m:
                beyond = {**beyond, "metrics": beyond_m}
        if p.spans:
            spans = dict(spans)
            extra["spans_capped"] = _merge_spans(spans, p, lim.spans, sender.name,
                                                 lim.span_lanes)
        for name, n in extra.items():
            if n:
                counters[name] = counters.get(name, 0) + n
    elif tp is Quiet:
        # The latest declared quiet period per pod without a final (by received time, then
        # order time, period, reason), the roster cap smallest pods kept.
        assert isinstance(p, Quiet)
        counters["quiet_declared"] = counters.get("quiet_declared", 0) + 1
        h = pod_hash(sender.name)
        m = roster.marks.get(h)
        if m is None or not m.bits & FINAL:
            def ms_of(t: datetime) -> int:
                return (t - datetime(1970, 1, 1, tzinfo=_UTC)) // timedelta(milliseconds=1)

            q = QuietPeriod(sender.name, ms_of(created or t), ms_of(t),
                            max(1, round(p.seconds * 1000)), cut_text(p.reason, 64))
            quiet = dict(roster.quiet)
            if h not in quiet or q > quiet[h]:
                quiet[h] = q
            if len(quiet) > lim.roster:
                del quiet[max(quiet)]
                counters["quiet_capped"] = counters.get("quiet_capped", 0) + 1
            roster = roster._replace(quiet=quiet)
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

    pod_events = dict(state.pod_events)
    # (A lineage controller's pod in another namespace is no reporting pod of the task.)
    pods_capped = _count(pod_events, (sender.name, sender.uid), lim.pods) \
        if sender.namespace in ("", state.task.namespace) else 0
    if pods_capped:
        counters["pods_capped"] = counters.get("pods_capped", 0) + pods_capped
    first, last = state.first_event_time, state.last_event_time
    applied = applied.add(instance, seq)
    times, watermark = state.instance_times, state.watermark
    if created is not None:
        if times.get(instance, -1) < c:
            times = {**times, instance: c}
        applied, times, watermark, n = _compact(applied, times, watermark, c, lim)
        if n:
            counters["instances_compacted"] = counters.get("instances_compacted", 0) + n
    return TaskState(
        state.task,
        named,
        spans,
        workers,
        pod_events,
        applied,
        times,
        watermark,
        t if first is None or t < first else first,
        t if last is None or t > last else last,
        counters,
        unknown,
        state.warnings + 1 if ev.warning else state.warnings,
        roster,
        state.observed,
        lim,
        beyond,
    )


def _with(state: TaskState, *, counters: dict[str, int]) -> TaskState:
    return TaskState(
        state.task,
        state.named,
        state.spans,
        state.workers,
        state.pod_events,
        state.applied,
        state.instance_times,
        state.watermark,
        state.first_event_time,
        state.last_event_time,
        counters,
        state.unknown,
        state.warnings,
        state.roster,
        state.observed,
        state.limits,
        state.beyond,
    )


def fold(state: TaskState, ev: ParsedEvent) -> TaskState:
    """Merge one event into ``state``. Pure, total and idempotent per (instance, seq).

    Events of another task are not applied (counted in ``wrong_task``).
    """
    try:
        return _fold(state, ev)
    except Exception:  # totality beats strictness here; the counter makes the bug visible
        return _with(state, counters=_bump(state.counters, "fold_errors"))


def fold_checked(state: TaskState, events: list[ParsedEvent],
                 admit: Callable[[ParsedEvent, bool], bool]
                 ) -> tuple[TaskState, list[ParsedEvent], int]:
    """The watcher's per-event loop before the batch fold (watcher/controller.py, main
    abf9afe): skip what the state folded so far holds, fold a late event, ask the sender
    check for the rest."""
    taken: list[ParsedEvent] = []
    dups = 0
    for ev in events:
        if state.applied.contains(ev.instance, ev.seq):
            dups += 1
            continue
        if state.late(ev):
            admit(ev, True)
        elif not admit(ev, False):
            continue
        state = fold(state, ev)
        taken.append(ev)
    return state, taken, dups
