"""The view model of a task: what a person is shown of a TaskFeedback, pure and shared by
every renderer (the CLI's tables in cli/taskrender.py and cli/list_cmd.py, the web page in ui/),
so the terminal and the page can never tell a status apart differently.

``summarize`` (its own light module, schemas/view/summary.py, re-exported here) makes a row of the
task list from a TaskFeedback object, reading its status entry by entry (an entry it cannot
read is left out, never an error); ``task_view`` makes the page of one task from its folded
state. Strings are kept as the cluster gave them: each renderer neutralises them for its
medium (a terminal: ``sanitize_text``; HTML: escaping), and a link is offered as a target
(``href``) only when it is an http(s) URL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..wire.contract import FAILED, SUCCEEDED, retries
from ..wire.times import parse_time
from .summary import (
    COMPLETED,
    PHASE_CONDITIONS,
    Condition,
    TaskSummary,
    WorkerCounts,
    age,
    ago,
    count_workers,
    eta_text,
    health,
    json_count,
    json_map,
    json_str,
    read_conditions,
    summarize,
)

if TYPE_CHECKING:  # the page's view loads them (task_view); a list row reads the object alone
    from ..engine.state import Named, TaskState
    from ..wire.kinds import Kind, Scalar
    from ..wire.refs import TaskRef

# The columns of a kind with a curve (metrics): its exact extremes and its history.
CURVE_HEADERS = ("MIN", "MAX", "HISTORY")


def read_refused(status: Mapping[str, Any] | None) -> tuple[tuple[str, int], ...]:
    """``status.refused``: the watcher's count of the task's events it refused, by reason
    (camelCase), sorted; an entry that is not a positive count is skipped."""
    raw = json_map((status or {}).get("refused"))
    return tuple(sorted((k[:64], v) for k, v in raw.items()
                        if isinstance(k, str) and type(v) is int and v > 0))


# --- the page of one task -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProgressView:
    fraction: float
    percent: int  # as the status says it: 100 only once the completion rule holds
    message: str
    eta: datetime | None


@dataclass(frozen=True, slots=True)
class RegisterRow:
    """One register of a named kind (a link, a deck, a metric): its value fields as text,
    the target of the first one when it is an http(s) URL, when it was written, and, for a
    metric, its history (``points``, oldest first) with its extremes."""

    name: str
    values: tuple[str, ...]
    href: str | None
    at: datetime | None
    points: tuple[float, ...] = ()
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True, slots=True)
class RegisterTable:
    """The registers of one named kind, as the registry (schemas/wire/kinds.py) says to show it."""

    kind: Kind
    rows: tuple[RegisterRow, ...]

    @property
    def title(self) -> str:
        return self.kind.title

    @property
    def headers(self) -> tuple[str, ...]:
        return tuple(f.header for f in self.kind.values)

    @property
    def curve(self) -> bool:
        """The kind keeps a curve (metrics): each row has its extremes and history, shown
        under ``CURVE_HEADERS``."""
        return self.kind.report is not None


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker: a reporting pod with a detailed record, or a pod whose end was observed.
    ``fraction`` None: no progress record. ``pace`` is its progress per second since its
    first report (None: not two reports apart yet). ``state`` is what its process said
    (final, failed), else what its pod says (``(pod)``: it ended without a final report), a
    failed attempt under a platform that decides (retried), or running; ``bad`` says it is
    bad news. ``ended``: how its pod ended, as the kubelet says (``Failed: OOMKilled (exit
    137)``), when it did. ``flags``: the health conditions that name it, each by its word
    (schemas/status/health.py's registry: ``stalled``, ``straggling``), and ``quiet`` for a worker
    silent on purpose within the quiet period it declared."""

    pod: str
    fraction: float | None
    state: str
    message: str
    pace: float | None
    bad: bool = False
    ended: str = ""
    ended_failed: bool = False
    flags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpanRow:
    """A span name's totals; ``pods``: how many pods have a lane of their own under it (the
    timeline draws one each)."""

    name: str
    count: int
    total_s: float
    min_s: float
    max_s: float
    errors: int
    pods: int = 0


@dataclass(frozen=True, slots=True)
class WaitingRow:
    """A pod of the task that is not running, and why (ImagePullBackOff, Unschedulable)."""

    pod: str
    reason: str
    message: str
    since: datetime


@dataclass(frozen=True, slots=True)
class PlatformView:
    """The platform object that owns the task (a Job, a JobSet, a TrainJob, a Workflow), as
    its controller reports it: it alone decides the task's outcome."""

    kind: str
    name: str
    phase: str
    reason: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    uid: str
    events: int


@dataclass(frozen=True, slots=True)
class TaskView:
    """Everything the page of one task (and `tidings state`) shows of its state."""

    task: TaskRef
    phase: str
    progress: ProgressView | None
    worker_counts: WorkerCounts
    platform: PlatformView | None
    conditions: tuple[Condition, ...]
    warnings: int
    first_event: datetime | None
    last_event: datetime | None
    tables: tuple[RegisterTable, ...]
    spans: tuple[SpanRow, ...]
    workers: tuple[WorkerRow, ...]
    waiting: tuple[WaitingRow, ...]
    pods: tuple[PodRow, ...]
    events_applied: int
    # Non-zero counters worth a look (caps, duplicates, unknown types), by name.
    counters: tuple[tuple[str, int], ...]
    # The watcher's refusals of the task's events, by reason (status.refused).
    refused: tuple[tuple[str, int], ...]
    # Health (schemas/status/health.py): the conditions that hold, or "Healthy" ("": not judged,
    # e.g. a status of a watcher before health), and when silence was judged.
    health_summary: str = ""
    judged_at: datetime | None = None
    # Pods waiting beyond the rows of ``waiting`` (the status names the first few).
    waiting_more: int = 0

    @property
    def health(self) -> tuple[Condition, ...]:
        return health(self.conditions)

    @property
    def notable(self) -> tuple[Condition, ...]:
        """The conditions worth a line of their own: a failure, and what health says (also
        what it could not judge: an Unknown health condition says what was not judged)."""
        return tuple(c for c in self.conditions if c.type != COMPLETED and (
            c.true or (c.status == "Unknown" and c.type not in PHASE_CONDITIONS)))

    @property
    def has_pod_ends(self) -> bool:
        return any(w.ended for w in self.workers)

    @property
    def finished(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def shows_workers(self) -> bool:
        """A single healthy worker is the task itself: its table would say nothing more."""
        return len(self.workers) > 1 or any(w.bad or w.ended or w.flags for w in self.workers)


def task_view(state: TaskState, status: Mapping[str, Any] | None = None,
              now: datetime | None = None, *, partial: bool = False) -> TaskView:
    """The view of a folded state; ``status`` is the TaskFeedback status it was read from
    (its conditions, health and refusals are the watcher's word); without one (a local fold)
    the conditions are what the status of this state would say, its health judged at ``now``
    with the default thresholds (the watcher's rule). ``partial``: a part of ``status``
    could not be read (``Unread.partial``), so what was read does not decide the outcome
    and the phase shown is the status's own, as written ("unknown" without one)."""
    from ..status.health import HEALTH, QUIET_LIST
    from ..wire.kinds import NAMED_KINDS  # (the payload models: not for `tidings list`'s rows)

    shown_phase = state.phase
    if partial and status is not None:
        shown_phase = json_str(status.get("phase")) or "unknown"
    if status is None:
        from ..status.encoder import to_status
        from ..status.health import judge

        status = to_status(state, health=judge(state, now))
    said = json_map(status.get("health"))
    flags: dict[str, tuple[str, ...]] = {}
    for c in HEALTH:
        if c.subject == "worker":
            for pod in _names(said.get(c.names)):
                flags[pod] = (*flags.get(pod, ()), c.flag)
    for pod in _names(said.get(QUIET_LIST)):  # (not stalled: silent on purpose, it said)
        flags[pod] = (*flags.get(pod, ()), "quiet")
    r = state.roster
    agg = state.progress
    phase = state.phase
    pct = json_count(json_map(status.get("progress")).get("percent"))
    progress = None if agg is None else ProgressView(
        agg.fraction, round(agg.fraction * 100) if pct is None else pct, agg.message, agg.eta)
    tables = tuple(RegisterTable(kind, tuple(_register_row(kind, name, entry)
                                             for name, entry in sorted(entries.items())))
                   for kind in NAMED_KINDS if (entries := state.registers(kind)))
    observed = state.observed
    platform = observed.platform
    noisy = {k: v for k, v in state.counters.items() if v and k != "events_applied"}
    noisy.update({f"unknown:{k}": v for k, v in state.unknown.items()})
    return TaskView(
        task=state.task, phase=shown_phase, progress=progress,
        worker_counts=count_workers(
            final=r.finals, failed=r.failures, ended_final=r.pod_finals,
            ended_failed=r.pod_failures, total=max(len(r.marks), r.declared),
            platform_decides=platform is not None, phase=phase),
        platform=None if platform is None else PlatformView(
            platform.kind, platform.name, platform.phase, platform.reason),
        conditions=read_conditions(status),
        warnings=state.warnings, first_event=state.first_event_time,
        last_event=state.last_event_time, tables=tables,
        spans=tuple(SpanRow(name, s.count, s.total_s, s.min_s, s.max_s, s.errors, len(s.lanes))
                    for name, s in sorted(state.spans.items())),
        workers=tuple(replace(_worker_row(state, pod), flags=flags.get(pod, ()))
                      for pod in sorted(set(state.workers) | set(observed.pods))),
        waiting=tuple(WaitingRow(pod, v.reason, v.message, v.at)
                      for pod, v in sorted(observed.waiting.items())),
        pods=tuple(PodRow(n, u, c) for (n, u), c in sorted(state.pod_events.items())),
        events_applied=state.counters.get("events_applied", 0),
        counters=tuple(sorted(noisy.items())),
        refused=read_refused(status),
        health_summary=json_str(said.get("summary")),
        judged_at=parse_time(said.get("evaluatedAt")),
        waiting_more=observed.waiting_more,
    )


def _names(v: Any) -> frozenset[str]:
    return frozenset(x for x in v if isinstance(x, str)) if isinstance(v, list) else frozenset()


def _worker_row(state: TaskState, pod: str) -> WorkerRow:
    from ..engine.roster import pod_hash, uid_print

    w = state.workers.get(pod)
    v = state.observed.pods.get(pod)
    life = state.roster.lives.get(pod_hash(pod))
    other = None
    if v is not None and life is not None and uid_print(v.uid) != life.uid:
        other, v = v, None  # (another pod of its name ended: not this worker's end)
    ended = "" if v is None else f"{v.phase}: {v.reason}" + (
        f" (exit {v.exit_code})" if v.exit_code else "")
    if life is not None and life.replaced:
        ended = "replaced" + (f" (its earlier pod {other.phase}: {other.reason})"
                              if other is not None else "") + (f"; {ended}" if ended else "")
    ended_failed = v is not None and v.failed
    if w is None:
        return WorkerRow(pod, None, "no report, " + ("failed" if ended_failed else "ended"),
                         "", None, ended_failed, ended, ended_failed)
    pace = _pace(w.fraction, w.first_fraction, w.at[0],
                 None if w.first_at is None else w.first_at[0])
    if w.final:
        failed, how = w.failed, ""
    elif v is not None:
        failed, how = v.failed, " (pod)"
    else:
        return WorkerRow(pod, w.fraction, "running", w.message, pace, False, ended,
                         ended_failed)
    if failed and retries(state.observed.platform is not None, state.phase):
        return WorkerRow(pod, w.fraction, "retried" + how, w.message, pace, False, ended,
                         ended_failed)
    return WorkerRow(pod, w.fraction, ("failed" if failed else "final") + how, w.message, pace,
                     failed, ended, ended_failed)


def _register_row(kind: Kind, name: str, entry: Named) -> RegisterRow:
    from ..wire.payloads import web_link

    raw = entry.value
    values = raw if isinstance(raw, tuple) else (raw,)
    first = values[0]
    is_url = kind.values[0].attr in ("url", "uri")
    series = entry.series if kind.report is not None else None
    return RegisterRow(name, tuple(scalar_text(v) for v in values),
                       web_link(first) if is_url and isinstance(first, str) else None,
                       entry.at[0] if kind.age else None,
                       *(() if series is None else (tuple(series.values), series.lo, series.hi)))


def _pace(fraction: float, first_fraction: float, at: datetime, first_at: datetime | None
          ) -> float | None:
    if first_at is None:
        return None
    secs = (at - first_at).total_seconds()
    return (fraction - first_fraction) / secs if secs > 0 else None


# --- text shared by the renderers ---------------------------------------------------------


def scalar_text(v: Scalar) -> str:
    """A register's value as text: floats to six significant digits (NaN, Infinity and
    -Infinity as the wire spells them)."""
    if v is None:
        return ""
    if isinstance(v, float):
        from ..wire.payloads import non_finite_text  # (loaded already by a task's view)

        return non_finite_text(v) or f"{v:.6g}"
    return str(v)


def fmt_seconds(s: float) -> str:
    """A duration, short: 250µs, 12.5ms, 3.20s, 4.5m, 2.0h."""
    if s == 0:
        return "0s"
    if s < 1e-3:
        return f"{s * 1e6:.0f}µs"
    if s < 1:
        return f"{s * 1e3:.1f}ms"
    if s < 120:
        return f"{s:.2f}s"
    if s < 7200:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


def pace_text(pace: float | None) -> str:
    """Progress per minute, as a percentage: '1.5%/min' ('' when unknown)."""
    if pace is None or not math.isfinite(pace):
        return ""
    return f"{pace * 6000:.3g}%/min"


__all__ = [
    "COMPLETED",
    "CURVE_HEADERS",
    "Condition",
    "PlatformView",
    "PodRow",
    "ProgressView",
    "RegisterRow",
    "RegisterTable",
    "SpanRow",
    "TaskSummary",
    "TaskView",
    "WaitingRow",
    "WorkerCounts",
    "WorkerRow",
    "age",
    "ago",
    "count_workers",
    "eta_text",
    "fmt_seconds",
    "health",
    "pace_text",
    "read_conditions",
    "read_refused",
    "retries",
    "scalar_text",
    "summarize",
    "task_view",
]
