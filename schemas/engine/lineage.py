"""Pod lineage: which pods an app or task spawned, folded from PodSpawned events.

Structured identity (pod uid), never name prefixes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..wire.event import ParsedEvent, PodRef, TaskRef
from ..wire.payloads import PodSpawned


@dataclass(frozen=True, slots=True)
class LineageEntry:
    """Pod ``pod`` was spawned for ``app`` (role, attempt), as recorded regarding ``subject``."""

    subject: TaskRef  # the regarding object's namespace/name (the app or owner)
    subject_kind: str
    pod: PodRef
    app: str
    role: str
    attempt: int
    event_time: datetime
    reported_by: PodRef  # the pod that sent the record (the controller)


def fold_lineage(events: Iterable[ParsedEvent]) -> list[LineageEntry]:
    """Lineage entries of the PodSpawned events in ``events``.

    Deduplicated by pod uid: when several records name one uid, the earliest by
    (eventTime, instance, seq) wins, so the result is independent of input order.
    Sorted by (event_time, pod name, pod uid).
    """
    best: dict[str, ParsedEvent] = {}
    for ev in events:
        p = ev.payload
        if not isinstance(p, PodSpawned):
            continue
        cur = best.get(p.pod_uid)
        if cur is None or ev.order_key < cur.order_key:
            best[p.pod_uid] = ev
    out: list[LineageEntry] = []
    for ev in best.values():
        p = ev.payload
        assert isinstance(p, PodSpawned)
        out.append(
            LineageEntry(
                subject=ev.task,
                subject_kind=ev.regarding_kind,
                pod=PodRef(p.pod_name, p.pod_uid, ev.task.namespace),
                app=p.app,
                role=p.role,
                attempt=p.attempt,
                event_time=ev.event_time,
                reported_by=ev.sender,
            )
        )
    out.sort(key=lambda e: (e.event_time, e.pod.name, e.pod.uid))
    return out
