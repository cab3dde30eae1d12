"""The roster as status text (pure): the marks, ends, lives, paces and quiet periods of
schemas/engine/roster.py written as the compact strings the status holds, each decoder the
strict inverse of its encoder (ValueError on anything the encoder could not have written),
and the packed form a roster too large for the separate fields takes (``roster.packed``).

The status layer's: the fold never reads or writes text; the encoder and the decoder do.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator, Mapping

from ..engine.roster import (
    FAILED,
    FINAL,
    FRACTION_MASK,
    FRACTION_SCALE,
    HASH_BYTES,
    Failure,
    Life,
    Mark,
    OrderKey,
    Pace,
    PodEnd,
    QuietPeriod,
    Roster,
    counts,
    mark_bits,
    pod_hash,
)
from ..wire.constants import QUIET_LIMIT_S, QUIET_REASON_LIMIT

# --- the status text of the marks ---------------------------------------------------------
# Per pod, sorted by hash: the 6-byte hash, the 2-byte bits, the event count as an unsigned
# LEB128 varint; all of it base64. About 12 characters a pod (10,000 pods: ~120 kB).


def varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_varint(data: bytes, i: int) -> tuple[int, int]:
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
        out += h.to_bytes(HASH_BYTES, "big")
        out += flags.to_bytes(flag_bytes, "big")
        varint(out, number)
    return base64.b64encode(bytes(out)).decode("ascii")


def _unpack(text: str, flag_bytes: int, truncated: str, bad: str
            ) -> Iterator[tuple[int, int, int]]:
    """The inverse of ``_pack``: ValueError(``truncated``) on a cut record, ValueError(``bad``)
    on hashes out of order; each format checks its own fields."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    i, n, last = 0, len(data), -1
    while i < n:
        if i + HASH_BYTES + flag_bytes + 1 > n:
            raise ValueError(truncated)
        h = int.from_bytes(data[i:i + HASH_BYTES], "big")
        flags = int.from_bytes(data[i + HASH_BYTES:i + HASH_BYTES + flag_bytes], "big")
        number, i = read_varint(data, i + HASH_BYTES + flag_bytes)
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
        varint(out, (life.born - base) << 1 | life.replaced)
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
        number, i = read_varint(data, i + 4)
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
            out += h.to_bytes(HASH_BYTES, "big") + uid.to_bytes(4, "big")
            out.append((_END_EXPLAINED if e.explained else 0) | (_END_FAILED if e.failed else 0))
            varint(out, e.at)
    return base64.b64encode(bytes(out)).decode("ascii")


def decode_other_ends(text: str) -> dict[int, dict[int, PodEnd]]:
    """The inverse of ``encode_other_ends``; ValueError on anything it could not have
    written."""
    data = base64.b64decode(text.encode("ascii"), validate=True)
    out: dict[int, dict[int, PodEnd]] = {}
    i, n, last = 0, len(data), (-1, -1)
    while i < n:
        if i + HASH_BYTES + 6 > n:
            raise ValueError("truncated other pod ends")
        h = int.from_bytes(data[i:i + HASH_BYTES], "big")
        uid = int.from_bytes(data[i + HASH_BYTES:i + HASH_BYTES + 4], "big")
        flags = data[i + HASH_BYTES + 4]
        at, i = read_varint(data, i + HASH_BYTES + 5)
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
