"""One shared copy of each equal value the pod caches keep, so that what a tracked pod costs
is its own name and uid, not copies of what it shares with its Job's other pods: the
namespace, the node, its task's labels' claim (``PodTask``), its task, its start time. Each
watch event decodes a pod afresh; without this, every update would replace the shared
values with new copies of the same.

Bounded without weak references (strings and slotted records take none): when the table has
doubled since it was last pruned, the values that only the table still holds are dropped.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TypeVar

T = TypeVar("T")

_MIN_PRUNE = 4096


def _alone() -> int:
    """The reference count ``_prune`` reads for a value nothing but the table holds."""
    probe = object()
    table = {probe: probe}
    del probe
    return next(sys.getrefcount(v) for v in table)


_ALONE = _alone()


class Interner:
    """Thread-safe. ``intern(value)``: the table's copy of an equal value (hashable), else
    ``value``, kept from now on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[Any, Any] = {}
        self._prune_at = _MIN_PRUNE

    def __len__(self) -> int:
        return len(self._table)

    def __call__(self, value: T) -> T:
        got = self._table.get(value)
        if got is not None:
            return got  # type: ignore[no-any-return]
        with self._lock:
            got = self._table.setdefault(value, value)
            if len(self._table) >= self._prune_at:
                self._prune()
        return got  # type: ignore[no-any-return]

    def _prune(self) -> None:
        keep = {v: v for v in self._table if sys.getrefcount(v) > _ALONE}
        self._table = keep
        self._prune_at = max(_MIN_PRUNE, 2 * len(keep))
