"""A task's row in the task list, from its TaskFeedback object alone: what `tidings list`
and `get` print and the page's list shows, with the one count of a task's workers and the one
age (part of the view model of schemas/view/model.py, which re-exports it). Light on purpose: a list
row needs none of the page's model, so `tidings get` loads this module only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..wire.contract import FAILED, retries
from ..wire.times import parse_time

# The conditions the phase (and status.reason) already say.
COMPLETED = "Completed"
PHASE_CONDITIONS = frozenset({COMPLETED, FAILED, "PodsReady"})


@dataclass(frozen=True, slots=True)
class Condition:
    """One metav1 condition of the status, as read (``status`` is "True", "False" or
    "Unknown")."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: datetime | None = None

    @property
    def true(self) -> bool:
        return self.status == "True"


def read_conditions(status: Mapping[str, Any] | None) -> tuple[Condition, ...]:
    """``status.conditions``, entry by entry (one without a type is skipped)."""
    raw = (status or {}).get("conditions")
    out = []
    for c in raw if isinstance(raw, list) else []:
        if not isinstance(c, dict) or not isinstance(c.get("type"), str) or not c["type"]:
            continue
        out.append(Condition(c["type"], json_str(c.get("status")) or "Unknown",
                             json_str(c.get("reason")), json_str(c.get("message")),
                             parse_time(c.get("lastTransitionTime"))))
    return tuple(out)


# --- how a task's workers stand ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    """How a task's workers stand: the one count the list's row, `tidings list -o wide`, the
    task's page and `tidings state` show. ``total``: the reporting pods, or the workers
    declared when more. ``final``: final by their own final report or by their pod's end
    (``ended`` of them by their pod's end alone: a worker OOM-killed says nothing). Of the
    final, those that failed are ``failed``, the task's news; or ``retried`` while a platform
    that decides the outcome (a Job, a JobSet) has not failed the task: it ran them again."""

    final: int
    total: int
    failed: int = 0
    retried: int = 0
    ended: int = 0

    def words(self, short: bool = False) -> tuple[tuple[str, bool], ...]:
        """The count as text, in pieces each renderer styles (True: bad news): '3 of 4
        final, 1 failed (1 by their pod's end)'; ``short`` (a row, a column): '3/4 1 failed'."""
        out: list[tuple[str, bool]] = [
            (f"{self.final}/{self.total}" if short else f"{self.final} of {self.total} final",
             False)]
        for n, word, bad in ((self.failed, "failed", True), (self.retried, "retried", False)):
            if n:
                out += [(" " if short else ", ", False), (f"{n} {word}", bad)]
        if self.ended and not short:
            out.append((f" ({self.ended} by their pod's end)", False))
        return tuple(out)

    def text(self, short: bool = False) -> str:
        return "".join(text for text, _ in self.words(short))




def count_workers(*, final: int, failed: int, ended_final: int, ended_failed: int,
                  total: int, platform_decides: bool, phase: str) -> WorkerCounts:
    """The count of ``total`` workers, ``final`` and ``failed`` of them by a final report of
    their own, ``ended_final`` and ``ended_failed`` by their pod's end without one (the
    roster's tallies: ``Roster.pod_finals``, the status's ``roster.podFinal``)."""
    failures = failed + ended_failed
    retried = failures if retries(platform_decides, phase) else 0
    return WorkerCounts(final + ended_final, total, failures - retried, retried, ended_final)


def health(conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
    """The conditions that say something the phase does not: every True one but Completed,
    Failed and PodsReady (the derived health conditions, such as Stalled or Straggling)."""
    return tuple(c for c in conditions if c.true and c.type not in PHASE_CONDITIONS)


# --- a row of the task list ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """One task as the list shows it. None: the status does not say (yet)."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    phase: str
    percent: int | None
    message: str
    eta: datetime | None
    worker_counts: WorkerCounts | None  # None: the status has no roster
    conditions: tuple[Condition, ...]
    link_count: int | None
    deck: str
    last_event: datetime | None
    created: datetime | None
    labels: Mapping[str, str]
    # status.health.summary: the health conditions that hold, or Healthy ("": not judged).
    health_summary: str = ""
    # status.reason: why the task is where it is, when that is news (ImagePullBackOff).
    reason: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def health(self) -> tuple[Condition, ...]:
        return health(self.conditions)


def summarize(obj: Mapping[str, Any]) -> TaskSummary:
    """The list row of a TaskFeedback object (as listed or watched). Never raises."""
    meta = json_map(obj.get("metadata"))
    st = json_map(obj.get("status"))
    progress = json_map(st.get("progress"))
    roster = json_map(st.get("roster"))
    reporting, declared = json_count(roster.get("reporting")), json_count(roster.get("declared"))
    phase = json_str(st.get("phase"))
    labels = json_map(meta.get("labels"))
    return TaskSummary(
        namespace=json_str(meta.get("namespace")), name=json_str(meta.get("name")),
        uid=json_str(meta.get("uid")), resource_version=json_str(meta.get("resourceVersion")),
        phase=phase,
        percent=json_count(progress.get("percent")),
        message=json_str(progress.get("message")),
        eta=parse_time(progress.get("estimatedCompletionTime")),
        worker_counts=None if reporting is None else count_workers(
            final=json_count(roster.get("final")) or 0,
            failed=json_count(roster.get("failed")) or 0,
            ended_final=json_count(roster.get("podFinal")) or 0,
            ended_failed=json_count(roster.get("podFailed")) or 0,
            total=max(reporting, declared or 0),
            platform_decides=bool(json_map(st.get("platform"))), phase=phase),
        conditions=read_conditions(st),
        link_count=json_count(st.get("linkCount")),
        deck=json_str(st.get("deck")),
        last_event=parse_time(st.get("lastEventTime")),
        created=parse_time(meta.get("creationTimestamp")),
        labels={k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
        health_summary=json_str(json_map(st.get("health")).get("summary")),
        reason=json_str(st.get("reason")),
    )


# --- ages ---------------------------------------------------------------------------------


def age(when: datetime | None, now: datetime) -> str:
    """kubectl's age (5s, 3m20s, 4h, 12d, 2y30d); '<unknown>' if none, '<invalid>' if
    in the future."""
    if when is None:
        return "<unknown>"
    secs = int((now - when).total_seconds())
    if secs < 0:
        return "<invalid>"
    m, h, d = secs // 60, secs // 3600, secs // 86400
    if secs < 120:
        return f"{secs}s"
    if m < 10:
        return f"{m}m{secs % 60}s" if secs % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 192:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 730:
        return f"{d}d"
    y = d // 365
    return f"{y}y{d % 365}d" if y < 8 and d % 365 else f"{y}y"


def ago(when: datetime | None, now: datetime) -> str:
    """How long ago ``when`` was, by ``age``: '3m20s ago'; 'never' if none."""
    return "never" if when is None else f"{age(when, now)} ago"


def eta_text(when: datetime | None, now: datetime) -> str:
    """The estimated completion as kubectl would say an age: 'in 3m20s' ('now', then
    'overdue 5s' once passed while the task runs); '<none>' when there is none."""
    if when is None:
        return "<none>"
    ahead = (when - now).total_seconds()
    if ahead >= 1:
        return "in " + age(now, when)
    if ahead > -1:
        return "now"
    # Passed while the task still runs: the estimate was wrong, not a date in the past.
    return f"overdue {age(when, now)}"


# A status read entry by entry: a value of another JSON type than expected reads as absent.


def json_map(v: Any) -> Mapping[str, Any]:
    """An object, else {} (JSON objects are dicts; a dict check is a fraction of an abc
    Mapping check)."""
    return v if isinstance(v, dict) else {}


def json_str(v: Any) -> str:
    """A string, else ''."""
    return v if isinstance(v, str) else ""


def json_count(v: Any) -> int | None:
    """A non-negative integer, else None."""
    return v if type(v) is int and v >= 0 else None
