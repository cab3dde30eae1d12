"""One worker's progress register: ``ProgressState``, the Progress that wins for a reporting
pod, and how a Progress merges into it (``merge_progress``): a final beats any non-final,
then the latest wins, and the earliest is kept beside it as the start of the worker's pace.
The fold keeps one per pod for the ``workers`` smallest pod names (every pod is in the
roster, schemas/engine/roster.py); the completion rule's aggregate and ETA and the health
conditions read it.
"""

from __future__ import annotations

from typing import NamedTuple

from ..wire.caps import events_of, insert_capped
from ..wire.constants import MESSAGE_LIMIT
from ..wire.payloads import Progress
from ..wire.text import cut_text
from .roster import OrderKey


class ProgressState(NamedTuple):
    """One worker's winning Progress: a final beats any non-final, then the latest wins.
    ``events`` counts that worker's Progress events (to count them when capped);
    ``first_at``/``first_fraction`` are its earliest Progress (by order key), the start of
    the rate the estimated completion time extrapolates (None: the winning one itself)."""

    fraction: float
    message: str
    final: bool
    at: OrderKey
    failed: bool = False
    workers: int = 0
    events: int = 1
    first_at: OrderKey | None = None
    first_fraction: float = 0.0


def merge_progress(
    entries: dict[str, ProgressState], pod: str, p: Progress, key: OrderKey, cap: int
) -> int:
    """Merge ``p`` into its worker's register: a final beats a non-final, then latest wins;
    the earliest Progress (by order key) is kept beside it as the start of the worker's pace."""
    cur = entries.get(pod)
    if cur is None:
        msg = cut_text(p.message, MESSAGE_LIMIT)
        new = ProgressState(p.fraction, msg, p.final, key, p.failed, p.workers, 1)
        return insert_capped(entries, pod, new, cap, events_of)
    first_at: OrderKey | None = cur.first_at
    if first_at is None:
        first_at, first_fraction = cur.at, cur.fraction
    else:
        first_fraction = cur.first_fraction
    if key < first_at:
        first_at, first_fraction = key, p.fraction
    # (first_at None: the winning Progress is the earliest too, so nothing more to keep.)
    if (p.final, key) > (cur.final, cur.at):
        if first_at == key:
            first_at, first_fraction = None, 0.0
        entries[pod] = ProgressState(p.fraction, cut_text(p.message, MESSAGE_LIMIT), p.final,
                                     key, p.failed, p.workers, cur.events + 1, first_at,
                                     first_fraction)
    else:
        if first_at == cur.at:
            first_at, first_fraction = None, 0.0
        entries[pod] = ProgressState(cur.fraction, cur.message, cur.final, cur.at, cur.failed,
                                     cur.workers, cur.events + 1, first_at, first_fraction)
    return 0
