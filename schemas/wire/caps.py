"""The cap rule: beyond a cap the lexicographically smallest keys are kept, so the kept set
does not depend on arrival order, and what goes is counted in events (the ``*_capped``
counters). The fold inserts under it (``insert_capped``), a status written under larger
limits is cut by it (``trim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class _Counted(Protocol):
    @property
    def events(self) -> int: ...


def events_of(entry: _Counted) -> int:
    """How many events an entry stands for: what a cap counts when it evicts the entry."""
    return entry.events


def one_each(count: int) -> int:
    """The weight of a count entry (a pod's or an unknown type's events): the count."""
    return count


def no_events(entry: object) -> int:
    """The weight of an observation (a pod's end): it stands for no event."""
    return 0


def insert_capped(entries: dict[K, V], key: K, value: V, cap: int,
                  weight: Callable[[V], int]) -> int:
    """Insert a new ``key``, keeping only the ``cap`` smallest keys.

    Returns how many events fell beyond the cap (the event itself, or those of an evicted
    key). The kept set is always the cap smallest keys ever seen, and each event is counted
    exactly once, so both results are independent of arrival order.
    """
    if len(entries) < cap:
        entries[key] = value
        return 0
    if cap <= 0:
        return 1
    largest = max(entries)  # type: ignore[type-var]
    if key > largest:  # type: ignore[operator]
        return 1
    evicted = entries.pop(largest)
    entries[key] = value
    return weight(evicted)


def trim(entries: dict[K, V], cap: int, weight: Callable[[V], int]) -> tuple[dict[K, V], int]:
    """``entries`` cut to the ``cap`` smallest keys (a status written under larger limits),
    and the events of those that went."""
    if len(entries) <= cap:
        return entries, 0
    keys = sorted(entries)  # type: ignore[type-var]
    dropped = sum(weight(entries[k]) for k in keys[cap:])
    return {k: entries[k] for k in keys[:cap]}, dropped
