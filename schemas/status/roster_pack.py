"""The packed roster (pure): for a roster too large for the status's separate fields, its
per-pod facts (marks, lives, ends, other lives' ends) in one string, ``roster.packed``,
columns compressed with zlib then base64, none left out; ``unpack_roster`` reads back
exactly what ``pack_roster`` wrote and refuses anything else."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping

from ..engine.roster import (
    FAILED,
    FINAL,
    FRACTION_MASK,
    FRACTION_SCALE,
    HASH_BYTES,
    Life,
    Mark,
    PodEnd,
)
from .roster_text import (
    read_varint,
    varint,
)

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
        varint(out, n)
    for column in (hashes, extra):
        last = 0
        for h in column:
            varint(out, h - last)
            last = h
    for h in hashes:
        out += marks[h].bits.to_bytes(2, "big")
    for h in hashes:
        varint(out, marks[h].events)
    for h in hashes:
        life = lives.get(h)
        out += (0 if life is None else life.uid).to_bytes(4, "big")
    for h in hashes:
        life = lives.get(h)
        if life is not None:
            varint(out, (life.born - born_base) << 1 | life.replaced)
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
            varint(out, _zigzag(e.at - at_base))
    out += uids
    last = 0
    for h, u, e in pairs:
        varint(out, h - last)
        last = h
        out += u.to_bytes(4, "big")
        out.append((2 if e.explained else 0) | (4 if e.failed else 0))
        varint(out, _zigzag(e.at - at_base))
    return base64.b64encode(zlib.compress(bytes(out), 6)).decode("ascii")


class _Reader:
    """Reads what ``pack_roster`` wrote, ValueError past its end."""

    def __init__(self, data: bytes) -> None:
        self.data, self.i = data, 0

    def varint(self) -> int:
        n, self.i = read_varint(self.data, self.i)
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
        if column and column[-1] >= 1 << (8 * HASH_BYTES):
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
