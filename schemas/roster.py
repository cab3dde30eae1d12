"""The roster of a task's workers: every reporting pod's outcome in a few bytes, so the
completion rule sees all of them while the detailed ``workers`` records stay capped.

Pure. A pod's mark is a join (its flags OR-ed, its fraction the largest reported), and the
registers are a maximum (declared count, latest final) and a minimum (first failure) over
order keys, so folding the roster is idempotent and order-insensitive by construction.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
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
_HASH_BYTES = 6


@lru_cache(maxsize=65_536)
def pod_hash(pod: str) -> int:
    """The pod name's roster key: a stable 48-bit hash (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(pod.encode("utf-8", "surrogatepass"),
                                          digest_size=_HASH_BYTES).digest(), "big")


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


class Roster(NamedTuple):
    """Every reporting pod's mark (by pod hash, the ``roster`` cap smallest kept), the
    declared worker count (the largest ``Progress.workers``), the first failure and the
    latest final's order key. ``finals`` and ``failures`` count the marks so flagged."""

    marks: Mapping[int, Mark]
    declared: int = 0
    finals: int = 0
    failures: int = 0
    permyriads: int = 0  # the marks' fractions summed, in 1/10,000
    first_failure: Failure | None = None
    last_final: OrderKey | None = None


EMPTY_ROSTER = Roster({})


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


def encode_marks(marks: Mapping[int, Mark]) -> str:
    out = bytearray()
    for h in sorted(marks):
        m = marks[h]
        out += h.to_bytes(_HASH_BYTES, "big")
        out += m.bits.to_bytes(2, "big")
        n = m.events
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return base64.b64encode(bytes(out)).decode("ascii")


def decode_marks(text: str) -> dict[int, Mark]:
    """The inverse of ``encode_marks``; ValueError on anything it could not have written."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    out: dict[int, Mark] = {}
    i, n, last = 0, len(data), -1
    while i < n:
        if i + _HASH_BYTES + 3 > n:
            raise ValueError("truncated roster")
        h = int.from_bytes(data[i:i + _HASH_BYTES], "big")
        bits = int.from_bytes(data[i + _HASH_BYTES:i + _HASH_BYTES + 2], "big")
        i += _HASH_BYTES + 2
        events = shift = 0
        while True:
            if i >= n or shift > 62:
                raise ValueError("bad roster event count")
            b = data[i]
            i += 1
            events |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if h <= last or (bits & FRACTION_MASK) > FRACTION_SCALE or events < 1:
            raise ValueError("bad roster entry")
        if bits & FAILED and not bits & FINAL:
            raise ValueError("bad roster entry")
        last = h
        out[h] = Mark(bits, events)
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
        marks[pod_hash(pod)] = Mark(mark_bits(fraction, final, failed), events)
        declared = max(declared, workers)
        if failed and (first is None or at < first.at):
            first = Failure(at, pod, message)
        if final and (last is None or at > last):
            last = at
    return Roster(marks, declared, *counts(marks), first, last)
