"""The record of deleted TaskFeedbacks: which bus events are a deleted run's, and the record's
durable form (bounded, expiring), so a restarted or newly elected watcher that lists the bus
again does not fold a run a user deleted back into a new TaskFeedback.

A deletion is a decision. The bus events of the deleted run stay in the API for the event TTL
and most name no TaskFeedback uid (their task follows the name), so a list after the
deletion would make the object again with the old links and ``firstEventTime``. A task's
deletion is kept as the whole second it was seen in; an event the API server created
(``creationTimestamp``, whole seconds, the server's clock) in that second or before is the
deleted run's and is dropped. An event created later is a new run's: it makes a new
TaskFeedback holding only the new facts. Once the event TTL has passed since the deletion,
every event of the deleted run has expired, and the deletion is forgotten.

Pure: the watcher reads and writes the durable form (``watcher/deletions.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from ..wire.event import TaskRef
from ..wire.times import epoch

# The durable form's version (a record of another version is read as empty: every deletion
# in it is forgotten, the behaviour before any record existed).
VERSION = 1
# What the durable form may take: well under a ConfigMap's 1 MiB (about 14,000 deletions of
# 40-character names in 40-character namespaces). Beyond it the oldest deletions are left
# out, counted.
MAX_BYTES = 900_000


def of_deleted_run(created: datetime | None, named_uid: str, deleted: int | None) -> bool:
    """The event the API server created at ``created``, naming the TaskFeedback uid
    ``named_uid`` ("": none), is of a run whose TaskFeedback was deleted in the Unix second
    ``deleted`` (None: no deletion recorded), so it is dropped. An event created in the
    deletion's own second is taken as the deleted run's: creation times have whole seconds,
    so which came first is not known, and a new run starts later than that. An event of
    unknown creation time is kept (nothing says it is old), and so is one naming a uid: the
    object it names decides it (a deleted object's uid is refused by the admission rule)."""
    return (deleted is not None and created is not None and not named_uid
            and epoch(created) <= deleted)


def _size(text: str) -> int:
    """The bytes of ``text`` as a JSON string in the durable form."""
    return len(json.dumps(text, ensure_ascii=False).encode())


def keep_for(event_ttl: float, clock_skew: float) -> int:
    """Seconds a deletion is remembered: until every event created before it has expired
    (the API server's event TTL), with the clocks' allowance."""
    return int(event_ttl + 2 * clock_skew) + 1


class Deletions:
    """Deleted tasks, by the second each deletion was seen in (newest kept when the durable
    form is bounded). Not thread-safe: its owner locks."""

    __slots__ = ("_at",)

    def __init__(self, at: Mapping[TaskRef, int] | None = None) -> None:
        self._at: dict[TaskRef, int] = dict(at or {})

    def __len__(self) -> int:
        return len(self._at)

    def __bool__(self) -> bool:
        return bool(self._at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deletions) and other._at == self._at

    def __hash__(self) -> int:  # (mutable: never a key)
        raise TypeError("Deletions is not hashable")

    def items(self) -> list[tuple[TaskRef, int]]:
        return list(self._at.items())

    def deleted(self, task: TaskRef) -> int | None:
        """The second ``task``'s TaskFeedback was last seen deleted in (None: not recorded)."""
        return self._at.get(task)

    def record(self, task: TaskRef, at: datetime) -> bool:
        """``task``'s TaskFeedback was deleted at ``at`` (a later deletion replaces an
        earlier one: every event before it is the deleted runs'). True when that changed the
        record."""
        s = epoch(at)
        if self._at.get(task, -1) >= s:
            return False
        self._at[task] = s
        return True

    def merge(self, other: Deletions) -> bool:
        """Take in ``other``'s deletions (the later of two for one task). True when that
        changed the record."""
        changed = False
        for task, s in other._at.items():
            if self._at.get(task, -1) < s:
                self._at[task] = s
                changed = True
        return changed

    def prune(self, now: datetime, keep: int) -> int:
        """Forget the deletions older than ``keep`` seconds at ``now`` (their events have
        expired); how many."""
        cutoff = epoch(now) - keep
        old = [t for t, s in self._at.items() if s < cutoff]
        for t in old:
            del self._at[t]
        return len(old)

    def encode(self, max_bytes: int = MAX_BYTES) -> tuple[str, int]:
        """The durable form (JSON text: ``{"version": 1, "deleted": {ns: {name: second}}}``)
        holding the newest deletions that fit in ``max_bytes``, and how many were left out."""
        newest = sorted(self._at.items(), key=lambda kv: (-kv[1], kv[0].namespace, kv[0].name))
        kept: list[tuple[TaskRef, int]] = []
        size = len('{"version":1,"deleted":{}}')
        namespaces: set[str] = set()
        for task, s in newest:
            # An entry's bytes: "name":second, plus the namespace's "ns":{} the first time.
            cost = _size(task.name) + len(str(s)) + 2
            if task.namespace not in namespaces:
                cost += _size(task.namespace) + 3
            if size + cost > max_bytes:
                break
            size += cost
            namespaces.add(task.namespace)
            kept.append((task, s))
        by_ns: dict[str, dict[str, int]] = {}
        for task, s in sorted(kept, key=lambda kv: (kv[0].namespace, kv[0].name)):
            by_ns.setdefault(task.namespace, {})[task.name] = s
        text = json.dumps({"version": VERSION, "deleted": by_ns}, separators=(",", ":"),
                          ensure_ascii=False)
        return text, len(newest) - len(kept)

    @classmethod
    def decode(cls, text: object) -> Deletions:
        """The deletions a durable form holds; anything that does not read (another version,
        a damaged entry) is left out: a deletion forgotten brings back at most its run, as
        before any record existed, while a made-up one could hide a run."""
        try:
            doc = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            return cls()
        raw = doc.get("deleted")
        out: dict[TaskRef, int] = {}
        for ns, names in (raw.items() if isinstance(raw, dict) else ()):
            if not isinstance(names, dict) or not isinstance(ns, str):
                continue
            for name, s in names.items():
                if isinstance(name, str) and type(s) is int and 0 <= s < 2**40:
                    out[TaskRef(ns, name)] = s
        return cls(out)

    @classmethod
    def of(cls, entries: Iterable[tuple[TaskRef, datetime]]) -> Deletions:
        d = cls()
        for task, at in entries:
            d.record(task, at)
        return d
