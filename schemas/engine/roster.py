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

import base64
import hashlib
import heapq
import zlib
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

from ..wire.constants import QUIET_LIMIT_S, QUIET_REASON_LIMIT

OrderKey = tuple[datetime, str, int]

# A mark's bits: the fraction in 1/10,000 (what Progress keeps: four decimals), then flags.
FRACTION_SCALE = 10_000
FINAL = 1 << 14
FAILED = 1 << 15
FRACTION_MASK = FINAL - 1
# A pod hash has 48 bits: 10,000 pods collide with probability 2e-7 (a collision would
# count two pods as one, so such a task waits for a final that never comes).
_HASH_BYTES = 6


@lru_cache(maxsize=65_536)
def pod_hash(pod: str) -> int:
    """The pod name's roster key: a stable 48-bit hash (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(pod.encode("utf-8", "surrogatepass"),
                                          digest_size=_HASH_BYTES).digest(), "big")


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


# --- the status text of the marks ---------------------------------------------------------
# Per pod, sorted by hash: the 6-byte hash, the 2-byte bits, the event count as an unsigned
# LEB128 varint; all of it base64. About 12 characters a pod (10,000 pods: ~120 kB).


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data) or shift > 62:
            raise ValueError("bad varint")
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _pack(records: Iterable[tuple[int, int, int]], flag_bytes: int) -> str:
    """(hash, flags, number) records, sorted by hash: each the hash, the flags in
    ``flag_bytes`` and the number as a varint; all of it base64."""
    out = bytearray()
    for h, flags, number in sorted(records):
        out += h.to_bytes(_HASH_BYTES, "big")
        out += flags.to_bytes(flag_bytes, "big")
        _varint(out, number)
    return base64.b64encode(bytes(out)).decode("ascii")


def _unpack(text: str, flag_bytes: int, truncated: str, bad: str
            ) -> Iterator[tuple[int, int, int]]:
    """The inverse of ``_pack``: ValueError(``truncated``) on a cut record, ValueError(``bad``)
    on hashes out of order; each format checks its own fields."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    i, n, last = 0, len(data), -1
    while i < n:
        if i + _HASH_BYTES + flag_bytes + 1 > n:
            raise ValueError(truncated)
        h = int.from_bytes(data[i:i + _HASH_BYTES], "big")
        flags = int.from_bytes(data[i + _HASH_BYTES:i + _HASH_BYTES + flag_bytes], "big")
        number, i = _read_varint(data, i + _HASH_BYTES + flag_bytes)
        if h <= last:
            raise ValueError(bad)
        last = h
        yield h, flags, number


def encode_marks(marks: Mapping[int, Mark]) -> str:
    return _pack(((h, m.bits, m.events) for h, m in marks.items()), 2)


def decode_marks(text: str) -> dict[int, Mark]:
    """The inverse of ``encode_marks``; ValueError on anything it could not have written."""
    out: dict[int, Mark] = {}
    for h, bits, events in _unpack(text, 2, "truncated roster", "bad roster entry"):
        if (bits & FRACTION_MASK) > FRACTION_SCALE or events < 1 \
                or (bits & FAILED and not bits & FINAL):
            raise ValueError("bad roster entry")
        out[h] = Mark(bits, events)
    return out


# The ends: per pod, sorted by hash, the 6-byte hash, one byte of flags (1: explained, 2:
# failed) and the epoch seconds as an unsigned LEB128 varint; all of it base64. About 16
# characters a pod.
_END_EXPLAINED, _END_FAILED = 1, 2


def encode_ends(ends: Mapping[int, PodEnd]) -> str:
    return _pack(((h, (_END_EXPLAINED if e.explained else 0) | (_END_FAILED if e.failed else 0),
                   e.at) for h, e in ends.items()), 1)


def decode_ends(text: str) -> dict[int, PodEnd]:
    """The inverse of ``encode_ends``; ValueError on anything it could not have written."""
    out: dict[int, PodEnd] = {}
    for h, flags, at in _unpack(text, 1, "truncated pod ends", "bad pod end"):
        if flags > 3 or at > 2**40:
            raise ValueError("bad pod end")
        out[h] = PodEnd(bool(flags & _END_EXPLAINED), at, bool(flags & _END_FAILED))
    return out


# The lives: per marked pod, in the marks' order (by hash, which they do not repeat), the
# 4-byte uid fingerprint (0: not known) and, as a varint, its born second after the earliest
# one's (``livesFrom``) times two, plus one when it replaced an earlier life; all of it
# base64. About 9 characters a pod. The uid of each pod end likewise, in the order of
# ``outcomes`` (``outcomeUids``; ``outcomes`` keeps the layout older readers read).


def encode_lives(marks: Mapping[int, Mark], lives: Mapping[int, Life]) -> tuple[int, str]:
    """(``livesFrom``, ``lives``)."""
    base = min((life.born for life in lives.values()), default=0)
    out = bytearray()
    for h in sorted(marks):
        life = lives.get(h)
        if life is None:
            out += bytes(5)
            continue
        out += life.uid.to_bytes(4, "big")
        _varint(out, (life.born - base) << 1 | life.replaced)
    return base, base64.b64encode(bytes(out)).decode("ascii")


def decode_lives(text: str, base: object, marks: Iterable[int]) -> dict[int, Life]:
    """The inverse of ``encode_lives`` for the marks' hashes ``marks`` (sorted); ValueError
    on anything it could not have written."""
    if type(base) is not int or abs(base) >= 2**40:
        raise ValueError("bad lives")
    data = base64.b64decode(text.encode("ascii"), validate=True)
    out: dict[int, Life] = {}
    i, n = 0, len(data)
    for h in marks:
        if i + 5 > n:
            raise ValueError("truncated lives")
        uid = int.from_bytes(data[i:i + 4], "big")
        number, i = _read_varint(data, i + 4)
        if uid == 0:
            if number:
                raise ValueError("bad life")
            continue
        if number >= 2**41:
            raise ValueError("bad life")
        out[h] = Life(base + (number >> 1), uid, bool(number & 1))
    if i != n:
        raise ValueError("bad lives")
    return out


def encode_other_ends(others: Mapping[int, Mapping[int, PodEnd]]) -> str:
    """``otherOutcomes``: per (hash, uid) in order, the 6-byte hash, the 4-byte uid, one
    byte of flags (as ``outcomes``) and the epoch seconds as a varint; base64."""
    out = bytearray()
    for h in sorted(others):
        for uid, e in sorted(others[h].items()):
            out += h.to_bytes(_HASH_BYTES, "big") + uid.to_bytes(4, "big")
            out.append((_END_EXPLAINED if e.explained else 0) | (_END_FAILED if e.failed else 0))
            _varint(out, e.at)
    return base64.b64encode(bytes(out)).decode("ascii")


def decode_other_ends(text: str) -> dict[int, dict[int, PodEnd]]:
    """The inverse of ``encode_other_ends``; ValueError on anything it could not have
    written."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    out: dict[int, dict[int, PodEnd]] = {}
    i, n, last = 0, len(data), (-1, -1)
    while i < n:
        if i + _HASH_BYTES + 6 > n:
            raise ValueError("truncated other pod ends")
        h = int.from_bytes(data[i:i + _HASH_BYTES], "big")
        uid = int.from_bytes(data[i + _HASH_BYTES:i + _HASH_BYTES + 4], "big")
        flags = data[i + _HASH_BYTES + 4]
        at, i = _read_varint(data, i + _HASH_BYTES + 5)
        if (h, uid) <= last or flags > 3 or at > 2**40:
            raise ValueError("bad other pod end")
        last = (h, uid)
        out.setdefault(h, {})[uid] = PodEnd(bool(flags & _END_EXPLAINED), at,
                                            bool(flags & _END_FAILED), uid)
    return out


def encode_end_uids(ends: Mapping[int, PodEnd]) -> str:
    """``outcomeUids``: per end in the order of ``outcomes`` (by hash, which it does not
    repeat), its 4-byte uid fingerprint (0: not known); base64. "" when none is known."""
    if not any(e.uid for e in ends.values()):
        return ""
    return base64.b64encode(b"".join(ends[h].uid.to_bytes(4, "big")
                                     for h in sorted(ends))).decode("ascii")


def with_end_uids(ends: Mapping[int, PodEnd], text: str) -> dict[int, PodEnd]:
    """``ends`` (as ``decode_ends`` read them: all of ``outcomes``) with the uids
    ``encode_end_uids`` wrote; ValueError on anything it could not have written."""
    out = dict(ends)
    if not text:
        return out
    data = base64.b64decode(text.encode("ascii"), validate=True)
    if len(data) != 4 * len(out):
        raise ValueError("bad pod end uids")
    for i, h in enumerate(sorted(out)):
        out[h] = out[h]._replace(uid=int.from_bytes(data[4 * i:4 * i + 4], "big"))
    return out


def roster_of(records: Iterable[tuple[str, float, bool, bool, int, OrderKey, str, int]]
              ) -> Roster:
    """The roster that detailed worker records alone imply (a status written before the
    roster existed): (pod, fraction, final, failed, workers, at, message, events) each."""
    marks: dict[int, Mark] = {}
    declared = 0
    first: Failure | None = None
    last: OrderKey | None = None
    for pod, fraction, final, failed, workers, at, message, events in records:
        h = pod_hash(pod)
        marks[h] = Mark(mark_bits(fraction, final, failed), events)
        declared = max(declared, workers)
        if failed and (first is None or at < first.at):
            first = Failure(at, pod, message)
        if final and (last is None or at > last):
            last = at
    return Roster(marks, declared, *counts(marks), first, last)


# --- the status text of the paces ---------------------------------------------------------
# Per pod, sorted by name, ``<pod> <reports> <first ms> <first 1/10,000> <latest - first ms>
# <latest 1/10,000>[ <heard - latest ms>[ <lowest - first ms> <lowest 1/10,000>]]`` (the
# heard time only when it is not 0 or a lowest report follows: a status written before it
# was kept reads as heard at the latest report's time; the lowest report only when it is not
# the first, which a status written before it was kept reads it as); ``PACES_PER_ITEM`` of them,
# comma-separated, in one string (one JSON value for many pods: a status write's cost grows
# with its values). About 40 characters a pod; the status budget gives items up from the
# last (the largest names).
PACES_PER_ITEM = 64
_POD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-")


def _pace_text(p: Pace) -> str:
    low = (p.low_ms, p.low_pm) != (p.first_ms, p.first_pm)
    return (f"{p.pod} {p.reports} {p.first_ms} {p.first_pm} {p.last_ms - p.first_ms} "
            f"{p.last_pm}" + (f" {p.heard_ms - p.last_ms}" if low or p.heard_ms != p.last_ms
                              else "")
            + (f" {p.low_ms - p.first_ms} {p.low_pm}" if low else ""))


def encode_paces(paces: Mapping[int, Pace]) -> list[str]:
    ordered = sorted(paces.values())
    return [",".join(_pace_text(p) for p in ordered[i:i + PACES_PER_ITEM])
            for i in range(0, len(ordered), PACES_PER_ITEM)]


def decode_paces(item: str) -> dict[int, Pace]:
    """The paces of one item of ``encode_paces``; ValueError on anything it could not have
    written."""
    out: dict[int, Pace] = {}
    for record in item.split(","):
        parts = record.split(" ")
        # (Only the first time may be negative, an order time before 1970, and when it was
        # heard, to within the clock skew allowed before the latest order time.)
        if len(parts) not in (6, 7, 9) or not all(
                p.isascii() and p.isdigit() and len(p) <= 15
                for p in (parts[2].removeprefix("-"), *parts[3:6],
                          *(x.removeprefix("-") for x in parts[6:7]), *parts[7:])) \
                or not (parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 18):
            raise ValueError("bad pace")
        pod = parts[0]
        reports, first_ms, first_pm, span, last_pm = map(int, parts[1:6])
        last_ms = first_ms + span
        heard_ms = last_ms + int(parts[6]) if len(parts) >= 7 else last_ms
        low_ms, low_pm = (first_ms + int(parts[7]), int(parts[8])) if len(parts) == 9 \
            else (first_ms, first_pm)
        if not (0 < len(pod) <= 253 and set(pod) <= _POD_CHARS and reports >= 1
                and first_pm <= FRACTION_SCALE and last_pm <= FRACTION_SCALE
                and abs(first_ms) < 2**48 and last_ms < 2**48 and abs(heard_ms) < 2**48
                and low_ms <= last_ms and low_pm <= first_pm and low_pm <= last_pm):
            raise ValueError("bad pace")
        out[pod_hash(pod)] = Pace(pod, reports, first_ms, first_pm, last_ms, last_pm,
                                  heard_ms, low_ms, low_pm)
    return out


# --- the status text of the quiet periods -------------------------------------------------
# One item per pod, sorted by name: ``<pod> <heard ms> <order time - heard ms> <period ms>
# <reason>`` (the reason last: it may hold spaces).


def encode_quiet(quiet: Mapping[int, QuietPeriod]) -> list[str]:
    return [f"{q.pod} {q.heard_ms} {q.at_ms - q.heard_ms} {q.ms} {q.reason}"
            for q in sorted(quiet.values())]


def decode_quiet(item: str) -> tuple[int, QuietPeriod]:
    """One item of ``encode_quiet``; ValueError on anything it could not have written."""
    parts = item.split(" ", 4)
    if len(parts) != 5 or not all(p.removeprefix("-").isascii() and p.removeprefix("-").isdigit()
                                  and len(p) <= 16 for p in parts[1:4]):
        raise ValueError("bad quiet period")
    pod, reason = parts[0], parts[4]
    heard_ms, delta, ms = map(int, parts[1:4])
    if not (0 < len(pod) <= 253 and set(pod) <= _POD_CHARS and abs(heard_ms) < 2**48
            and abs(delta) < 2**48 and 0 < ms <= QUIET_LIMIT_S * 1000
            and len(reason) <= QUIET_REASON_LIMIT):
        raise ValueError("bad quiet period")
    return pod_hash(pod), QuietPeriod(pod, heard_ms, heard_ms + delta, ms, reason)


# --- the packed roster ----------------------------------------------------------------------
# What ``marks``, ``lives``, ``outcomes``, ``outcomeUids`` and ``otherOutcomes`` hold, in one
# string, for a roster too large for them (the status budget): the same facts, none left
# out, in columns (the hashes as gaps, then the bits, the event counts, the lives, the ends)
# so that what repeats from pod to pod compresses; zlib, then base64. About 15 characters a
# pod, running or ended, against 19 a running and 41 an ended pod in the separate fields: a
# pod's identity (its hash and its life's uid, what a late report of it is known by) is most
# of it, and is kept exactly, never as a count.
_PACK_LAYOUT = 1
# The largest a packed roster may unpack to: far above what 2 x WORKERS_MAX pods write.
_PACK_LIMIT = 16 << 20


def _zigzag(n: int) -> int:
    return n << 1 if n >= 0 else (-n << 1) - 1


def _unzigzag(n: int) -> int:
    return n >> 1 if not n & 1 else -((n + 1) >> 1)


def _end_flags(e: PodEnd, life: Life | None) -> tuple[int, bool]:
    """An end's flag byte (1: present, 2: explained, 4: failed, 8: its uid is its mark's
    life's, 16: its uid follows) and whether its uid is written."""
    flags = 1 | (2 if e.explained else 0) | (4 if e.failed else 0)
    if e.uid == 0:
        return flags, False
    if life is not None and life.uid == e.uid:
        return flags | 8, False
    return flags | 16, True


def pack_roster(marks: Mapping[int, Mark], lives: Mapping[int, Life],
                ends: Mapping[int, PodEnd], others: Mapping[int, Mapping[int, PodEnd]]
                ) -> str:
    """The roster's per-pod facts as one string (``roster.packed``); ``unpack_roster`` reads
    them back as they were."""
    hashes = sorted(marks)
    extra = sorted(h for h in ends if h not in marks)
    pairs = sorted((h, u, e) for h, p in others.items() for u, e in p.items())
    born_base = min((life.born for life in lives.values()), default=0)
    at_base = min((e.at for e in ends.values()), default=0)
    out = bytearray()
    for n in (_PACK_LAYOUT, len(hashes), len(extra), len(pairs), _zigzag(born_base),
              _zigzag(at_base)):
        _varint(out, n)
    for column in (hashes, extra):
        last = 0
        for h in column:
            _varint(out, h - last)
            last = h
    for h in hashes:
        out += marks[h].bits.to_bytes(2, "big")
    for h in hashes:
        _varint(out, marks[h].events)
    for h in hashes:
        life = lives.get(h)
        out += (0 if life is None else life.uid).to_bytes(4, "big")
    for h in hashes:
        life = lives.get(h)
        if life is not None:
            _varint(out, (life.born - born_base) << 1 | life.replaced)
    order = [*hashes, *extra]
    uids = bytearray()
    for h in order:
        e = ends.get(h)
        if e is None:
            out.append(0)
            continue
        flags, own_uid = _end_flags(e, lives.get(h))
        out.append(flags)
        if own_uid:
            uids += e.uid.to_bytes(4, "big")
    for h in order:
        e = ends.get(h)
        if e is not None:
            _varint(out, _zigzag(e.at - at_base))
    out += uids
    last = 0
    for h, u, e in pairs:
        _varint(out, h - last)
        last = h
        out += u.to_bytes(4, "big")
        out.append((2 if e.explained else 0) | (4 if e.failed else 0))
        _varint(out, _zigzag(e.at - at_base))
    return base64.b64encode(zlib.compress(bytes(out), 6)).decode("ascii")


class _Reader:
    """Reads what ``pack_roster`` wrote, ValueError past its end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.i = data, 0

    def varint(self) -> int:
        n, self.i = _read_varint(self.data, self.i)
        return n

    def take(self, n: int) -> bytes:
        if self.i + n > len(self.data):
            raise ValueError("truncated packed roster")
        out = self.data[self.i:self.i + n]
        self.i += n
        return out

    def byte(self) -> int:
        return self.take(1)[0]


def unpack_roster(text: str) -> tuple[dict[int, Mark], dict[int, Life], dict[int, PodEnd],
                                      dict[int, dict[int, PodEnd]]]:
    """The inverse of ``pack_roster``: (marks, lives, ends, other ends); ValueError on
    anything it could not have written."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    try:
        z = zlib.decompressobj()
        data = z.decompress(raw, _PACK_LIMIT)
    except zlib.error as e:
        raise ValueError("bad packed roster") from e
    if z.unconsumed_tail or not z.eof or z.unused_data:
        raise ValueError("bad packed roster")
    r = _Reader(data)
    layout, n_marks, n_extra, n_pairs, born_z, at_z = (r.varint() for _ in range(6))
    if layout != _PACK_LAYOUT or max(n_marks, n_extra, n_pairs) > len(data):
        raise ValueError("bad packed roster")
    born_base, at_base = _unzigzag(born_z), _unzigzag(at_z)
    if abs(born_base) >= 2**40 or not 0 <= at_base <= 2**40:
        raise ValueError("bad packed roster")
    columns: list[list[int]] = []
    for count in (n_marks, n_extra):
        column, h = [], -1
        for k in range(count):
            gap = r.varint()
            if k and not gap:
                raise ValueError("bad packed roster")
            h = gap if k == 0 else h + gap
            column.append(h)
        if column and column[-1] >= 1 << (8 * _HASH_BYTES):
            raise ValueError("bad packed roster")
        columns.append(column)
    hashes, extra = columns
    if set(hashes) & set(extra):
        raise ValueError("bad packed roster")
    bits = [int.from_bytes(r.take(2), "big") for _ in hashes]
    marks: dict[int, Mark] = {}
    for h, b in zip(hashes, bits, strict=True):
        events = r.varint()
        if (b & FRACTION_MASK) > FRACTION_SCALE or events < 1 or (b & FAILED and not b & FINAL) \
                or b >= 1 << 16:
            raise ValueError("bad packed roster")
        marks[h] = Mark(b, events)
    uids = [int.from_bytes(r.take(4), "big") for _ in hashes]
    lives: dict[int, Life] = {}
    for h, uid in zip(hashes, uids, strict=True):
        if uid:
            number = r.varint()
            born = born_base + (number >> 1)
            if abs(born) >= 2**40:
                raise ValueError("bad packed roster")
            lives[h] = Life(born, uid, bool(number & 1))
    order = [*hashes, *extra]
    flags = [r.byte() for _ in order]
    ends: dict[int, PodEnd] = {}
    for h, f in zip(order, flags, strict=True):
        if not f:
            if h in marks:
                continue
            raise ValueError("bad packed roster")
        at = at_base + _unzigzag(r.varint())
        life = lives.get(h)
        if f >= 32 or not f & 1 or (f & 8 and f & 16) or (f & 8 and life is None) \
                or not 0 <= at <= 2**40:
            raise ValueError("bad packed roster")
        ends[h] = PodEnd(bool(f & 2), at, bool(f & 4), life.uid if f & 8 and life else 0)
    for h, f in zip(order, flags, strict=True):
        if f & 16:
            uid = int.from_bytes(r.take(4), "big")
            if uid == 0 or (lives.get(h) is not None and lives[h].uid == uid):
                raise ValueError("bad packed roster")
            ends[h] = ends[h]._replace(uid=uid)
    others: dict[int, dict[int, PodEnd]] = {}
    h, last = 0, (-1, -1)
    for _ in range(n_pairs):
        h += r.varint()
        uid = int.from_bytes(r.take(4), "big")
        f = r.byte()
        at = at_base + _unzigzag(r.varint())
        if (h, uid) <= last or h not in ends or f & ~6 or not 0 <= at <= 2**40 \
                or ends[h].uid == uid:
            raise ValueError("bad packed roster")
        last = (h, uid)
        others.setdefault(h, {})[uid] = PodEnd(bool(f & 2), at, bool(f & 4), uid)
    if r.i != len(data):
        raise ValueError("bad packed roster")
    return marks, lives, ends, others
