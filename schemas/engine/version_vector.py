"""Compact record of applied (instance, seq) pairs: sorted disjoint inclusive ranges per instance.

Immutable: ``add`` returns a new vector, so a fold that uses it stays pure. Persisted as one
compact text field (``to_text``): ``inst=lo-hi,seq inst2=lo-hi``, instances sorted, ranges
sorted; instance ids never contain ``=``, ``,`` or spaces, so the encoding is unambiguous.
One string is one field for the API server, however many instances it holds. An entry may end
in ``@<epoch seconds>``: the newest creationTimestamp of that instance's events, which dedup
compaction needs (see schemas/engine/folding.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any

from ..wire.note import valid_instance, valid_seq

Range = tuple[int, int]
_SEQ_TOP = 2**64  # above every valid seq: (seq, _SEQ_TOP) sorts after every range starting at seq


class VersionVector:
    """Per emitter instance, the sorted disjoint inclusive ranges of applied seqs.

    Size is O(instances + gaps): a contiguous sequence costs one range however long it is.
    """

    __slots__ = ("_r",)

    def __init__(self, ranges: Mapping[str, tuple[Range, ...]] | None = None) -> None:
        self._r: dict[str, tuple[Range, ...]] = dict(ranges) if ranges else {}

    def contains(self, instance: str, seq: int) -> bool:
        """Whether ``seq`` of ``instance`` has been applied."""
        rs = self._r.get(instance)
        if not rs:
            return False
        # Emitters count up, so the last range decides most lookups without a bisection.
        lo, hi = rs[-1]
        if seq >= lo:
            return seq <= hi
        # The range starting at or before seq is the only candidate.
        i = bisect_right(rs, (seq, _SEQ_TOP)) - 1
        return i >= 0 and rs[i][1] >= seq

    def add(self, instance: str, seq: int) -> VersionVector:
        """A vector that also contains (instance, seq); ``self`` when it already did."""
        rs = self._r.get(instance, ())
        if rs:
            # Hot path: the next seq of a contiguous run just extends the last range.
            lo, hi = rs[-1]
            if seq == hi + 1:
                out = VersionVector.__new__(VersionVector)
                out._r = {**self._r, instance: (*rs[:-1], (lo, seq))}
                return out
            if lo <= seq <= hi:
                return self
        i = bisect_right(rs, (seq, _SEQ_TOP))  # ranges [0, i) start at or before seq
        prev = rs[i - 1] if i > 0 else None
        if prev is not None and prev[1] >= seq:
            return self
        nxt = rs[i] if i < len(rs) else None
        join_prev = prev is not None and prev[1] == seq - 1
        join_next = nxt is not None and nxt[0] == seq + 1
        if join_prev and join_next:
            assert prev is not None and nxt is not None
            new = (*rs[: i - 1], (prev[0], nxt[1]), *rs[i + 1 :])
        elif join_prev:
            assert prev is not None
            new = (*rs[: i - 1], (prev[0], seq), *rs[i:])
        elif join_next:
            assert nxt is not None
            new = (*rs[:i], (seq, nxt[1]), *rs[i + 1 :])
        else:
            new = (*rs[:i], (seq, seq), *rs[i:])
        out = VersionVector.__new__(VersionVector)
        out._r = {**self._r, instance: new}
        return out

    def with_seqs(self, added: Mapping[str, set[int]]) -> VersionVector:
        """A vector that also contains every ``(instance, seq)`` in ``added`` (batch ``add``).

        The result is the same canonical vector that adding the pairs one by one gives.
        """
        if not added:
            return self
        r = dict(self._r)
        for inst, seqs in added.items():
            if len(seqs) == 1:
                # One seq (a fold of one event, or one per instance): ``add``'s common cases.
                seq = next(iter(seqs))
                old = r.get(inst)
                if not old:
                    r[inst] = ((seq, seq),)
                    continue
                lo, hi = old[-1]
                if seq == hi + 1:
                    r[inst] = (*old[:-1], (lo, seq))
                    continue
                if seq > hi + 1:
                    r[inst] = (*old, (seq, seq))
                    continue
            new = sorted(seqs)
            if not new:
                continue
            if new[-1] - new[0] == len(new) - 1:
                runs: tuple[Range, ...] = ((new[0], new[-1]),)  # one contiguous run (common)
            else:
                out: list[Range] = []
                lo = hi = new[0]
                for s in new:
                    if s > hi + 1:
                        out.append((lo, hi))
                        lo = s
                    if s > hi:
                        hi = s
                out.append((lo, hi))
                runs = tuple(out)
            old = r.get(inst, ())
            if not old or old[-1][1] + 1 < runs[0][0]:
                r[inst] = old + runs  # all after the old ranges: a plain append
            elif old[-1][1] + 1 == runs[0][0]:
                # The next seqs of the newest range (the commonest case): it grows.
                r[inst] = (*old[:-1], (old[-1][0], runs[0][1]), *runs[1:])
            else:
                r[inst] = _merge_ranges(old + runs)
        vv = VersionVector.__new__(VersionVector)
        vv._r = r
        return vv

    def ranges(self, instance: str) -> tuple[Range, ...]:
        """The applied ranges of ``instance`` (empty when unknown)."""
        return self._r.get(instance, ())

    @property
    def by_instance(self) -> Mapping[str, tuple[Range, ...]]:
        """Every instance's ranges, read-only: the fold's loop asks ``.get`` of it per event
        (a bound dict method, no Python call: ``ranges`` would cost one per event)."""
        return self._r

    @property
    def instances(self) -> list[str]:
        """Known emitter instances, sorted."""
        return sorted(self._r)

    def count(self) -> int:
        """How many (instance, seq) pairs are recorded."""
        return sum(hi - lo + 1 for rs in self._r.values() for lo, hi in rs)

    def __len__(self) -> int:
        """Total number of stored ranges (the memory cost)."""
        return sum(len(rs) for rs in self._r.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VersionVector) and self._r == other._r

    def __hash__(self) -> int:
        return hash(frozenset(self._r.items()))

    def __repr__(self) -> str:
        return f"VersionVector({self.to_json()!r})"

    def to_json(self) -> dict[str, list[list[int]]]:
        """``{instance: [[lo, hi], ...]}`` with instances sorted."""
        return {k: [[lo, hi] for lo, hi in self._r[k]] for k in sorted(self._r)}

    def without(self, instances: Iterable[str]) -> VersionVector:
        """A vector that forgets ``instances`` (dedup compaction)."""
        gone = set(instances)
        out = VersionVector.__new__(VersionVector)
        out._r = {k: v for k, v in self._r.items() if k not in gone}
        return out

    def to_text(self, times: Mapping[str, int] | None = None) -> str:
        """The compact text form (see the module docstring); ``""`` when empty. With
        ``times``, an instance's entry ends in ``@<epoch seconds>`` when it has one."""
        t = times or {}
        return " ".join(
            f"{k}=" + ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self._r[k])
            + (f"@{t[k]}" if k in t else "")
            for k in sorted(self._r)
        )

    @classmethod
    def from_text(cls, text: Any) -> VersionVector:
        """Inverse of ``to_text`` (times ignored); raises ValueError on malformed input."""
        return cls.parse_text(text)[0]

    @classmethod
    def parse_text(cls, text: Any) -> tuple[VersionVector, dict[str, int]]:
        """The vector and the per-instance times of a ``to_text`` string; raises ValueError
        on malformed input."""
        if not isinstance(text, str):
            raise ValueError("version vector must be a string")
        data: dict[str, list[list[int]]] = {}
        times: dict[str, int] = {}
        for part in text.split():
            inst, sep, ranges = part.partition("=")
            if not sep or inst in data:
                raise ValueError("bad version vector entry")
            ranges, at, when = ranges.partition("@")
            if at:
                if not _digits(when):
                    raise ValueError("bad version vector time")
                times[inst] = int(when)
            out: list[list[int]] = []
            for r in ranges.split(","):
                lo, dash, hi = r.partition("-")
                if not _digits(lo) or (dash and not _digits(hi)):
                    raise ValueError("bad range")
                out.append([int(lo), int(hi) if dash else int(lo)])
            data[inst] = out
        return cls.from_json(data), times

    @classmethod
    def from_json(cls, data: Any) -> VersionVector:
        """Inverse of ``to_json``; overlapping or unsorted ranges are normalised.

        Raises ValueError on malformed input (callers that must be total catch it).
        """
        if not isinstance(data, Mapping):
            raise ValueError("version vector must be an object")
        out: dict[str, tuple[Range, ...]] = {}
        for inst, rs in data.items():
            if not valid_instance(inst) or not isinstance(rs, list):
                raise ValueError("bad version vector entry")
            pairs: list[Range] = []
            for r in rs:
                if not (isinstance(r, list | tuple) and len(r) == 2):
                    raise ValueError("bad range")
                lo, hi = r
                if not (valid_seq(lo) and valid_seq(hi) and lo <= hi):
                    raise ValueError("bad range bounds")
                pairs.append((lo, hi))
            pairs.sort()
            merged: list[Range] = []
            for lo, hi in pairs:
                if merged and lo <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
                else:
                    merged.append((lo, hi))
            if merged:
                out[inst] = tuple(merged)
        return cls(out)


def _digits(s: str) -> bool:
    return 0 < len(s) <= 19 and s.isascii() and s.isdigit()


def _merge_ranges(ranges: Iterable[Range]) -> tuple[Range, ...]:
    """Sorted, disjoint, non-adjacent ranges covering the same seqs as ``ranges``."""
    merged: list[Range] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)
