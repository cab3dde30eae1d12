"""The roster of a task's workers: every reporting pod's outcome in a few bytes, so the
completion rule sees all of them while the detailed ``workers`` records stay capped; and
beside each running pod's mark its pace (``Pace``: its first and latest report), so health
judges every reporting worker, not only the detailed ones.

Pure. A pod's mark is a join (its flags OR-ed, its fraction the largest reported), and the
registers are a maximum (declared count, latest final) and a minimum (first failure) over
order keys, so folding the roster is idempotent and order-insensitive by construction. A
pace is a join too (the earliest and the latest report, a count), kept while its pod has no
final: a final mark ends it, whichever arrives first.

A pod's life is its uid: a mark belongs to one life of its pod name (``Life``), the latest
(the API server created its first report last), and a pod re-created with its name starts a
new mark; an end (``PodEnd.uid``) counts only for the life it ended.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

OrderKey = tuple[datetime, str, int]

# A mark's bits: the fraction in 1/10,000 (what Progress keeps: four decimals), then flags.
FRACTION_SCALE = 10_000
FINAL = 1 << 14
FAILED = 1 << 15
FRACTION_MASK = FINAL - 1
# A pod hash has 48 bits: 10,000 pods collide with probability 2e-7 (a collision would
# count two pods as one, so such a task waits for a final that never comes).
HASH_BYTES = 6


@lru_cache(maxsize=65_536)
def pod_hash(pod: str) -> int:
    """The pod name's roster key: a stable 48-bit hash (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(pod.encode("utf-8", "surrogatepass"),
                                          digest_size=HASH_BYTES).digest(), "big")


@lru_cache(maxsize=65_536)
def uid_print(uid: str) -> int:
    """A pod uid's 32-bit fingerprint, never 0 (0: a life not known, from an older status)."""
    return int.from_bytes(hashlib.blake2b(uid.encode("utf-8", "surrogatepass"),
                                          digest_size=4).digest(), "big") or 1


def mark_bits(fraction: float, final: bool, failed: bool) -> int:
    return (round(fraction * FRACTION_SCALE) | (FINAL if final else 0)
            | (FAILED if failed else 0))


def join_bits(a: int, b: int) -> int:
    """Both marks of one pod merged: flags OR-ed, the larger fraction."""
    fa, fb = a & FRACTION_MASK, b & FRACTION_MASK
    return ((a | b) & (FINAL | FAILED)) | (fa if fa >= fb else fb)


def mark_fraction(bits: int) -> float:
    return (bits & FRACTION_MASK) / FRACTION_SCALE


class Mark(NamedTuple):
    """One pod in the roster: its joined bits and how many Progress events it sent (what
    the roster's cap counts when it gives the pod up)."""

    bits: int
    events: int


class Failure(NamedTuple):
    """The earliest failed final of the task (by order key): the outcome's explanation."""

    at: OrderKey
    pod: str
    message: str


class PodEnd(NamedTuple):
    """How a pod ended as its object says it (schemas/engine/observed.py), compact: ``explained``
    when the object said how (False: only that it is gone), ``at`` in epoch seconds, and
    whether it failed; ``uid`` the fingerprint of the life it ended (0: not known, an older
    status's, which counts for any life). Tuple order is the join: the larger end wins."""

    explained: bool
    at: int
    failed: bool
    uid: int = 0


class Life(NamedTuple):
    """Which life of its pod name a mark is: the fingerprint of the reporting pod's uid,
    when the API server created that life's first report (``born``, epoch seconds: a pod's
    events are created while it exists, so a name's lives do not interleave), and whether an
    earlier life of the name was given up for it (``replaced``: its pod was re-created). Of
    two lives the later (born, uid) is the mark's."""

    born: int
    uid: int
    replaced: bool = False


class Pace(NamedTuple):
    """A running reporting pod's pace, what health judges it by: its name, how many Progress
    reports it joins, the first and the latest of them, each as (epoch milliseconds of its
    order time, fraction in 1/10,000), when the latest report was received (``heard_ms``:
    the largest API server ``creationTimestamp`` of its events, whole seconds; the order
    time for an event without one), and its lowest report (``low_ms``, ``low_pm``: the
    smallest fraction, the latest such). On a tie of times the smaller fraction is the
    first and the larger the latest, so the join is a function of the set of reports.

    The pace and the report interval are the sender's own durations (a clock that is off
    by a constant cancels out in them); silence is counted from ``heard_ms`` alone: a sender
    whose clock is minutes behind would otherwise look silent for minutes.

    A worker resumed from an earlier checkpoint reports less than it did: its pace from its
    first report is not forward though it moves again. Its pace is counted from its lowest
    report, where its latest run began (a minimum, so still a join); a worker that starts
    at 0 and reports it a few times is likewise judged from when it began to move."""

    pod: str
    reports: int
    first_ms: int
    first_pm: int
    last_ms: int
    last_pm: int
    heard_ms: int
    low_ms: int
    low_pm: int

    @property
    def rate(self) -> float | None:
        """Progress per second since its lowest report; when no time lies between that and
        the latest (it just went back, or never moved), from its first report: then 0 or
        negative (None: no time between them either)."""
        span = self.last_ms - self.low_ms
        if span > 0:
            return (self.last_pm - self.low_pm) / FRACTION_SCALE / (span / 1000)
        span = self.last_ms - self.first_ms
        return (self.last_pm - self.first_pm) / FRACTION_SCALE / (span / 1000) \
            if span > 0 else None


class QuietPeriod(NamedTuple):
    """A worker's declared quiet period (payloads.Quiet), the latest it declared: when the
    API server received it (``heard_ms``, whole seconds: the period counts from it), its
    order time (``at_ms``: of a report received in the same second, the later one by it
    ends the period), the period declared (``ms``) and why. The latest by (heard, order
    time, period, reason) wins: a join. It holds until the worker's next report (a
    report received after it: schemas/status/health.py)."""

    pod: str
    heard_ms: int
    at_ms: int
    ms: int
    reason: str


def epoch_ms(t: datetime) -> int:
    """An order time as whole epoch milliseconds, rounded down (what a pace keeps)."""
    return (t - _EPOCH) // _MS


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


class Roster(NamedTuple):
    """Every reporting pod's mark (by pod hash, the ``roster`` cap smallest kept), the
    declared worker count (the largest ``Progress.workers``), the first failure and the
    latest final's order key. ``finals`` and ``failures`` count the marks so flagged.

    ``ends``: how each observed pod ended (by pod hash, the same cap), what the pods say
    beside what their processes said. A reporting pod without a final of its own whose pod
    ended is final by its end: ``pod_finals`` and ``pod_failures`` count those marks, and
    ``pod_first_failure``/``pod_last_final`` date them (see ``with_ends``)."""

    marks: Mapping[int, Mark]
    declared: int = 0
    finals: int = 0
    failures: int = 0
    permyriads: int = 0  # the marks' fractions summed, in 1/10,000
    first_failure: Failure | None = None
    last_final: OrderKey | None = None
    ends: Mapping[int, PodEnd] = {}
    pod_finals: int = 0
    pod_failures: int = 0
    pod_first_failure: tuple[int, int] | None = None  # (epoch seconds, pod hash)
    pod_last_final: int | None = None  # epoch seconds
    # The pace of each marked pod without a final (by pod hash): what health judges. After a
    # status whose budget left some out is read, a running pod may have none (not judged).
    paces: Mapping[int, Pace] = {}
    # The life of each mark (by pod hash); a mark read from an older status has none (the
    # next report's life adopts it).
    lives: Mapping[int, Life] = {}
    # The ends of the other lives of a name whose end ``ends`` holds (by pod hash, then uid
    # fingerprint): ``ends`` holds the end of the mark's life when one is known, else the
    # largest (``place_end``), so no life's end is lost to another's.
    other_ends: Mapping[int, Mapping[int, PodEnd]] = {}
    # The quiet period each pod without a final declared last (by pod hash, the ``roster``
    # cap smallest kept): what Stalled reads beside its pace.
    quiet: Mapping[int, QuietPeriod] = {}

    def end_of(self, h: int) -> PodEnd | None:
        """The end that decides the pod ``h``'s outcome: its pod's, when it reported no
        final of its own and the end is of the mark's life (None: its own final decides, or
        it has not ended, or only an earlier life of its name did)."""
        end = self.ends.get(h)
        if end is None:
            return None
        m = self.marks.get(h)
        if m is None:
            return end
        return end if not m.bits & FINAL and ends_life(end, self.lives.get(h)) else None

    @property
    def replaced(self) -> int:
        """Reporting pods re-created with their name (an earlier life given up)."""
        return sum(1 for life in self.lives.values() if life.replaced)


def ends_life(end: PodEnd, life: Life | None) -> bool:
    """Whether ``end`` ended the life ``life`` (either not known: it did, as before lives)."""
    return life is None or end.uid == 0 or end.uid == life.uid


EMPTY_ROSTER = Roster({})


def with_ends(r: Roster, ends: Mapping[int, PodEnd] | None = None) -> Roster:
    """``r`` with ``ends`` (default: its own) and the tallies the ends decide recomputed:
    over the reporting pods (marks) without a final of their own whose pod's life ended (an
    earlier life's end is not theirs). A function
    of the marks and the ends alone, so as order-insensitive as they are."""
    ends = r.ends if ends is None else ends
    finals = failures = 0
    first: tuple[int, int] | None = None
    last: int | None = None
    marks, lives = r.marks, r.lives
    for h, end in ends.items():
        m = marks.get(h)
        if m is None or m.bits & FINAL or not ends_life(end, lives.get(h)):
            continue
        finals += 1
        if end.failed:
            failures += 1
            if first is None or (end.at, h) < first:
                first = (end.at, h)
        if last is None or end.at > last:
            last = end.at
    return r._replace(ends=ends, pod_finals=finals, pod_failures=failures,
                      pod_first_failure=first, pod_last_final=last)


def insert_end(ends: dict[int, PodEnd], h: int, end: PodEnd, cap: int,
               top: list[int] | None = None) -> bool:
    """Join ``end`` into the pod ``h``'s end, keeping the ``cap`` smallest hashes (as the
    marks are kept); True when something changed. ``top``: a max-heap of the hashes of
    ``ends`` (negated; empty: built on first need) that the caller keeps across calls, so
    a pod past the cap costs O(log n), not a scan."""
    cur = ends.get(h)
    if cur is not None:
        if end > cur:
            ends[h] = end
            return True
        return False
    if len(ends) >= cap:
        if cap <= 0:
            return False
        if top is None:
            largest = max(ends)
        else:
            if not top:
                top.extend(-k for k in ends)
                heapq.heapify(top)
            largest = -top[0]
        if h > largest:
            return False
        del ends[largest]
        if top is not None:
            heapq.heapreplace(top, -h)
    elif top:
        heapq.heappush(top, -h)
    ends[h] = end
    return True


def place_end(ends: dict[int, PodEnd], others: dict[int, Mapping[int, PodEnd]], h: int,
              life: Life | None) -> None:
    """Pick the name ``h``'s end in ``ends`` among its lives' ends (``ends`` and ``others``):
    the end of the mark's ``life`` if there is one, else the largest; the rest in
    ``others``. A function of the ends and the life alone, so as order-insensitive."""
    pool = dict(others.pop(h, {}))
    cur = ends.get(h)
    if cur is not None:
        pool[cur.uid] = cur
    if not pool:
        return
    pick = pool.get(life.uid) if life is not None else None
    if pick is None:
        pick = max(pool.values())
    ends[h] = pick
    del pool[pick.uid]
    if pool:
        others[h] = pool


def insert_life_end(ends: dict[int, PodEnd], others: dict[int, Mapping[int, PodEnd]], h: int,
                    end: PodEnd, cap: int, life: Life | None, top: list[int] | None = None
                    ) -> bool:
    """Join ``end`` into the end of its life (``end.uid``) of the pod name ``h``, keeping
    the ``cap`` smallest hashes in ``ends`` and the ``cap`` smallest (hash, uid) pairs in
    ``others``; True when something changed."""
    cur = ends.get(h)
    if cur is None:
        if not insert_end(ends, h, end, cap, top):
            return False
        if others:
            for gone in [k for k in others if k not in ends]:  # (the cap gave a name up)
                del others[gone]
        return True
    if cur.uid == end.uid:
        if not end > cur:
            return False
        ends[h] = end
    else:
        pool = others.get(h, {})
        old = pool.get(end.uid)
        if old is not None and not end > old:
            return False
        if old is None and sum(len(p) for p in others.values()) >= cap:
            largest = max((k, u) for k, p in others.items() for u in p) if others else None
            if largest is None or (h, end.uid) > largest:
                return False
            rest = {u: e for u, e in others[largest[0]].items() if u != largest[1]}
            if rest:
                others[largest[0]] = rest
            else:
                del others[largest[0]]
            pool = others.get(h, {})
        others[h] = {**pool, end.uid: end}
    place_end(ends, others, h, life)
    return True


def counts(marks: Mapping[int, Mark]) -> tuple[int, int, int]:
    """(finals, failures, permyriads) of ``marks``."""
    finals = failures = permyriads = 0
    for m in marks.values():
        if m.bits & FINAL:
            finals += 1
        if m.bits & FAILED:
            failures += 1
        permyriads += m.bits & FRACTION_MASK
    return finals, failures, permyriads
