"""One reading of a task, what `state`, `watch` and `timeline` show: its state, where it
came from (the TaskFeedback status a watcher wrote, or its events folded here), what the
status held that could not be read, and the events refused (by the local fold) or counted
as refused (by the watcher); and the reading of a TaskFeedback status into one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidings._compat import UTC
from tidings.cli.common import safe
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.decoder import NOTHING_UNREAD, Unread, expanded, read_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.status.health import judge
from tidings.schemas.view.model import read_refused
from tidings.schemas.wire.event import TaskRef

SOURCE_CR = "TaskFeedback"
SOURCE_EVENTS = "events"

# Groups of (reason, sender) kept and shown: a flood from many senders stays a few lines
# (the rest is counted, under "other senders").
MAX_REFUSAL_GROUPS = 20
OTHER_SENDERS = "(other senders)"


@dataclass
class Refusals:
    """The events a local fold refused, grouped by (reason, sender), bounded; each group
    keeps the message of its first refusal (what tells a missing grant from a spoof)."""

    groups: dict[tuple[str, str], int] = field(default_factory=dict)
    details: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, reason: str, sender: str, detail: str) -> None:
        key = (reason, sender)
        if key not in self.groups and len(self.groups) >= MAX_REFUSAL_GROUPS:
            key = (reason, OTHER_SENDERS)
        self.groups[key] = self.groups.get(key, 0) + 1
        self.details.setdefault(key, detail)

    @property
    def total(self) -> int:
        return sum(self.groups.values())

    def rows(self) -> list[tuple[str, str, int, str]]:
        """(reason, sender, events, detail), the largest groups first."""
        return sorted(((r, p, n, self.details.get((r, p), ""))
                       for (r, p), n in self.groups.items()),
                      key=lambda x: (-x[2], x[0], x[1]))

    def copy(self) -> Refusals:
        return Refusals(dict(self.groups), dict(self.details))


@dataclass
class Snapshot:
    state: TaskState
    source: str  # SOURCE_CR or SOURCE_EVENTS
    # Events the local fold refused (SOURCE_EVENTS), by reason and sender.
    refusals: Refusals = field(default_factory=Refusals)
    resource_version: str = ""
    # The watcher's count of events it refused for the task, by reason (status.refused).
    refused: dict[str, int] = field(default_factory=dict)
    # uid of the task's TaskFeedback for a local fold ("": none exists; None: unreadable).
    object_uid: str | None = None
    # The TaskFeedback status the state was read from (None: a local fold), and what it held
    # that could not be read (kept, shown: never hidden behind an empty state).
    status: Mapping[str, Any] | None = None
    unread: Unread = NOTHING_UNREAD

    @property
    def rejected(self) -> int:
        return self.refusals.total

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "task": {"namespace": self.state.task.namespace, "name": self.state.task.name},
            "source": self.source, "rejected_events": self.rejected}
        if self.refusals.groups:
            data["rejections"] = [{"reason": r, "sender": p, "events": n, "detail": d}
                                  for r, p, n, d in self.refusals.rows()]
        if self.status is not None:  # what the status says, as the watcher wrote it
            status = dict(self.status)
        else:
            status = to_status(self.state, health=judge(self.state, datetime.now(UTC)))
            if self.refused:
                status["refused"] = dict(self.refused)
        data["status"] = expanded(status)  # each record as its fields
        if self.unread:
            data["unreadable"] = {"entries": list(self.unread.problems),
                                  "partial": self.unread.partial}
        return data


def refused_counts(status: dict[str, Any]) -> dict[str, int]:
    """The watcher's count of the task's refused events, by reason (``status.refused``)."""
    return {safe(k): v for k, v in read_refused(status)}


def cr_snapshot(ref: TaskRef, status: dict[str, Any], rv: str) -> Snapshot:
    """The snapshot of a TaskFeedback status: read entry by entry (what cannot be read is
    shown, never hidden behind an empty state)."""
    state, unread = read_status(ref, status)
    return Snapshot(state, SOURCE_CR, Refusals(), rv, refused_counts(status), status=status,
                    unread=unread)


def status_of(obj: Mapping[str, object] | None) -> dict[str, Any] | None:
    """A TaskFeedback's status, when a watcher wrote one."""
    status = (obj or {}).get("status")
    return status if isinstance(status, dict) and status.get("schemaVersion") else None
