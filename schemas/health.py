"""A task's health, derived from the fold's own record, never claimed by a sender: ``Stalled``
(a running worker silent far longer than its own pace), ``NonFiniteMetrics`` (a metric's
latest value is NaN or infinite) and ``Straggling`` (a running worker far behind the median
pace of its task), as metav1 conditions and as lists a reader can use.

Pure. Silence depends on *when* it is judged, so the time of evaluation is an input (``now``)
and the status says when it was (``health.evaluatedAt``); everything else is a function of
the folded state. The thresholds are ``HealthSettings`` (the watcher's ``--stall-*`` and
``--straggle-*`` flags; ``tidings state --from-events`` uses the defaults). Only the detailed
worker records (the 64 smallest pod names) carry a pace, so only they are judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any, NamedTuple

from tidings._compat import UTC

from .constants import non_finite_text
from .contract import condition
from .roster import pod_hash
from .times import format_seconds, parse_time

if TYPE_CHECKING:
    from .state import ProgressState, TaskState

STALLED = "Stalled"
NON_FINITE_METRICS = "NonFiniteMetrics"
STRAGGLING = "Straggling"
HEALTH_CONDITIONS = (STALLED, NON_FINITE_METRICS, STRAGGLING)
# Names a condition's message lists (the rest are counted; ``health`` lists them all).
NAMES_SHOWN = 5


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """When a worker counts as stalled or straggling (the watcher's flags of the same names).

    A worker is *stalled* once silent for ``stall_factor`` times its own report interval (its
    first to its latest progress, over the reports between), and at least ``stall_min_s``;
    one that has reported once (no pace yet) after ``stall_unpaced_s``. A worker is
    *straggling* when its pace (progress per second since its first report) is below
    ``straggle_ratio`` of the median pace of its task's running workers, judged once at
    least ``straggle_min_workers`` of them have a pace."""

    stall_factor: float = 10.0
    stall_min_s: float = 60.0
    stall_unpaced_s: float = 600.0
    straggle_ratio: float = 0.5
    straggle_min_workers: int = 3


DEFAULT_HEALTH = HealthSettings()


class Silence(NamedTuple):
    """A stalled worker: silent since ``since`` (its latest progress), ``limit`` seconds
    allowed by its ``interval`` between reports (None: it reported once)."""

    since: datetime
    limit: float
    interval: float | None


class Health(NamedTuple):
    """What ``evaluate`` found: the stalled and straggling workers (pod -> detail), the
    non-finite metrics (name -> "NaN", "Infinity" or "-Infinity"), when silence was judged
    (None: it was not) and the next time a running worker would become stalled."""

    stalled: Mapping[str, Silence]
    straggling: Mapping[str, float]  # pod -> its pace over the median pace
    non_finite: Mapping[str, str]
    evaluated_at: datetime | None
    next_change: datetime | None

    @property
    def summary(self) -> str:
        """The conditions that hold, comma-separated, or ``Healthy``."""
        held = [c for c, on in ((STALLED, self.stalled), (NON_FINITE_METRICS, self.non_finite),
                                (STRAGGLING, self.straggling)) if on]
        return ",".join(held) or "Healthy"


def _interval(w: ProgressState) -> float | None:
    """Seconds between the worker's progress reports (None: fewer than two)."""
    if w.first_at is None or w.events < 2:
        return None
    span = (w.at[0] - w.first_at[0]).total_seconds()
    return span / (w.events - 1) if span > 0 else None


def _pace(w: ProgressState) -> float | None:
    """The worker's progress per second since its first report (None: unknown)."""
    if w.first_at is None:
        return None
    span = (w.at[0] - w.first_at[0]).total_seconds()
    done = w.fraction - w.first_fraction
    return done / span if span > 0 and done >= 0 else None


def stall_limit(w: ProgressState, s: HealthSettings) -> tuple[float, float | None]:
    """(seconds of silence allowed, the worker's report interval or None)."""
    interval = _interval(w)
    if interval is None:
        return s.stall_unpaced_s, None
    return max(s.stall_min_s, s.stall_factor * interval), interval


def _running(state: TaskState) -> Iterable[tuple[str, ProgressState]]:
    """The detailed workers still running: no final of their own, and their pod has not
    ended (an ended pod's worker is final by its end), sorted by pod."""
    r = state.roster
    return ((pod, w) for pod, w in sorted(state.workers.items())
            if not w.final and not (r.pod_finals and r.end_of(pod_hash(pod)) is not None))


def evaluate(state: TaskState, now: datetime | None,
             settings: HealthSettings = DEFAULT_HEALTH) -> Health:
    """The task's health at ``now`` (None: silence is not judged). Only a running task has
    stalled or straggling workers; a non-finite metric counts whatever the phase."""
    non_finite = {}
    for name, reg in sorted(state.named.get("metrics", {}).items()):
        value = reg.value[0] if isinstance(reg.value, tuple) else reg.value
        text = non_finite_text(value) if type(value) is float else None
        if text is not None:
            non_finite[name] = text
    stalled: dict[str, Silence] = {}
    straggling: dict[str, float] = {}
    next_change: datetime | None = None
    if state.phase == "Running":
        if now is not None:
            for pod, w in _running(state):
                limit, interval = stall_limit(w, settings)
                since = w.at[0]
                try:
                    onset = since + timedelta(seconds=limit)
                except OverflowError:  # (a report within the limit of year 9999's end)
                    continue
                if now >= onset:
                    stalled[pod] = Silence(since, limit, interval)
                elif next_change is None or onset < next_change:
                    next_change = onset
        paces = {pod: p for pod, w in _running(state) if (p := _pace(w)) is not None}
        if len(paces) >= max(2, settings.straggle_min_workers):
            median = statistics.median(paces.values())
            if median > 0:
                straggling = {pod: p / median for pod, p in paces.items()
                              if p < settings.straggle_ratio * median}
    return Health(stalled, straggling, non_finite, now, next_change)


def next_stall(state: TaskState, now: datetime,
               settings: HealthSettings = DEFAULT_HEALTH) -> datetime | None:
    """The next time after ``now`` a running worker's silence passes its limit (None: none
    will, unless a fact comes): when the watcher must judge the task again. O(workers): the
    watcher asks after every fold."""
    if state.phase != "Running":
        return None
    soonest: datetime | None = None
    for _, w in _running(state):
        try:
            onset = w.at[0] + timedelta(seconds=stall_limit(w, settings)[0])
        except OverflowError:  # (past year 9999: never)
            continue
        if onset > now and (soonest is None or onset < soonest):
            soonest = onset
    return soonest


def stalled_since_written(state: TaskState, status: Any, settings: HealthSettings,
                          now: datetime | None = None) -> bool:
    """Whether the workers stalled at ``now`` (default: the clock now) differ from those the
    written ``status`` names: a watcher that was down judges its tasks again at start."""
    if state.phase != "Running":
        return False
    said = status.get("health") if isinstance(status, Mapping) else None
    named = _strings(said.get("stalled")) if isinstance(said, Mapping) else ()
    found = evaluate(state, now or datetime.now(UTC), settings).stalled
    return set(found) != set(named)


def _names(items: Iterable[str], count: int | None = None) -> str:
    """The first ``NAMES_SHOWN`` of ``items`` (``count`` of them: only those are made)."""
    shown = list(islice(items, NAMES_SHOWN))
    n = len(shown) if count is None else count
    return ", ".join(shown) + (f" and {n - NAMES_SHOWN} more" if n > NAMES_SHOWN else "")


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def conditions(state: TaskState, health: Health) -> list[dict[str, Any]]:
    """``Stalled`` (only when silence was judged), ``NonFiniteMetrics`` and ``Straggling``,
    metav1.Condition style. lastTransitionTime is that of the deciding report (the moment
    the first stalled worker's silence passed its limit; the earliest non-finite value; the
    newest report the paces rest on), else the task's first event, as for ``Completed``."""
    start = state.first_event_time
    if start is None:
        return []
    out = []
    now = health.evaluated_at
    if now is not None:
        if health.stalled:
            first = min(health.stalled.values(), key=lambda x: x.since + timedelta(
                seconds=x.limit))
            details = (f"{pod} silent for {_duration((now - x.since).total_seconds())}"
                       + (f" (reports every {_duration(x.interval)})"
                          if x.interval is not None else " (one report)")
                       for pod, x in health.stalled.items())
            out.append(condition(STALLED, True, "NoProgressReports",
                                  _names(details, len(health.stalled)),
                                  first.since + timedelta(seconds=first.limit)))
        elif state.phase == "Running":
            out.append(condition(STALLED, False, "Reporting",
                                  "every running worker reported within its pace", start))
        else:
            out.append(condition(STALLED, False, "NotRunning", "the task is not running",
                                  start))
    if health.non_finite:
        metrics = state.named["metrics"]
        at = min(metrics[name].at[0] for name in health.non_finite)
        out.append(condition(NON_FINITE_METRICS, True, "NonFiniteValue", _names(
            (f"{name}={text}" for name, text in health.non_finite.items()),
            len(health.non_finite)), at))
    else:
        out.append(condition(NON_FINITE_METRICS, False, "AllFinite",
                              "every metric's latest value is finite", start))
    if health.straggling:
        at = max(w.at[0] for _, w in _running(state))
        out.append(condition(STRAGGLING, True, "BehindMedianPace", _names(
            (f"{pod} at {ratio:.2f} of the median pace"
             for pod, ratio in sorted(health.straggling.items())), len(health.straggling)),
            at))
    else:
        out.append(condition(STRAGGLING, False, "NoStraggler",
                              "no running worker far behind the median pace", start))
    return out


def health_json(health: Health) -> dict[str, Any]:
    """``status.health``: the summary (a printer column), when it was evaluated, and the
    workers and metrics each condition names (sorted)."""
    out: dict[str, Any] = {"summary": health.summary}
    if health.evaluated_at is not None:
        out["evaluatedAt"] = format_seconds(health.evaluated_at)
    if health.stalled:
        out["stalled"] = sorted(health.stalled)
    if health.straggling:
        out["straggling"] = sorted(health.straggling)
    if health.non_finite:
        out["nonFinite"] = sorted(health.non_finite)
    return out


class Written(NamedTuple):
    """The health a status says (as the watcher wrote it): for readers of a TaskFeedback."""

    summary: str
    evaluated_at: datetime | None
    stalled: tuple[str, ...]
    straggling: tuple[str, ...]
    non_finite: tuple[str, ...]
    conditions: tuple[dict[str, Any], ...]


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def written(status: Mapping[str, Any]) -> Written | None:
    """The health ``status`` holds (None: it holds none, e.g. a watcher before health).
    Tolerant: what does not read is left out."""
    raw = status.get("health")
    if not isinstance(raw, Mapping):
        return None
    conds = tuple(c for c in status.get("conditions") or ()
                  if isinstance(c, Mapping) and c.get("type") in HEALTH_CONDITIONS)
    summary = raw.get("summary")
    return Written(summary if isinstance(summary, str) else "", parse_time(
        raw.get("evaluatedAt")), _strings(raw.get("stalled")), _strings(raw.get("straggling")),
        _strings(raw.get("nonFinite")), tuple(dict(c) for c in conds))
