"""A task's health, derived from the fold's own record, never claimed by a sender: ``Stalled``
(a running worker silent far longer than its own pace), ``NonFiniteMetrics`` (a metric's
latest value is NaN or infinite) and ``Straggling`` (a running worker far behind the median
pace of its task), as metav1 conditions and as lists a reader can use.

The conditions are a registry, ``HEALTH``, as kinds of fact are (schemas/kinds.py): an entry
says the condition's type, the ``status.health`` list of what it names (pods or metrics), the
flag a named worker gets in the view, its thresholds (``Threshold``: the watcher's flags and
environment variables, the chart's ``watcher.health`` values) and how it judges a state. The
watcher's settings and metrics, the view (the terminal and the page render it) and the alert
read the registry; ARCHITECTURE.md ("Adding a health condition") lists the steps.

Health sits beside the status, not inside it: ``judge`` makes its part of a status (the
conditions and ``status.health``), which the watcher's writer and the view hand to the status
encoder (schemas/status_encoder.py). Compacting an idle task encodes it without a judgment.

Pure, and only the standard library underneath (the watcher's settings read the registry to
build `tidings watcher run --help`). Silence depends on *when* it is judged, so the time of
evaluation is an input (``now``) and the status says when it was (``health.evaluatedAt``);
everything else is a function of the folded state. ``tidings state --from-events`` judges
with the defaults. Only the detailed worker records (the 64 smallest pod names) carry a pace,
so only they are judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from tidings._compat import UTC

from .constants import non_finite_text
from .contract import RUNNING, condition
from .roster import pod_hash
from .times import format_seconds

if TYPE_CHECKING:  # (the model loads pydantic: only its types are needed here)
    from .state import TaskState
    from .workers import ProgressState

# Names a condition's message lists (the rest are counted; ``health`` lists them all).
NAMES_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Threshold:
    """A setting of a condition. ``name`` is its key in ``HealthSettings`` and names it
    everywhere else: the flag ``--name-with-dashes`` of `tidings watcher run`, the variable
    ``TIDINGS_NAME``, the chart value ``watcher.health.nameInCamelCase``."""

    name: str
    default: float
    help: str
    minimum: float
    maximum: float | None = None
    unit: str = ""
    integer: bool = False  # a count (the flag takes an int)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "TIDINGS_" + self.name.upper()


class HealthSettings:
    """The conditions' thresholds, by ``Threshold.name``; one not given keeps its default.

    ``HealthSettings(stall_factor=3)``; ``settings["stall_factor"]`` reads one."""

    __slots__ = ("values",)

    def __init__(self, **values: float) -> None:
        unknown = sorted(set(values) - set(THRESHOLDS))
        if unknown:
            raise TypeError(f"no health threshold is named {', '.join(unknown)}")
        self.values: Mapping[str, float] = MappingProxyType(
            {name: float(values.get(name, t.default)) for name, t in THRESHOLDS.items()})

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HealthSettings) and dict(self.values) == dict(other.values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.values.items())))

    def __repr__(self) -> str:
        return f"HealthSettings({', '.join(f'{k}={v:g}' for k, v in self.values.items())})"


class Found(NamedTuple):
    """What one condition found in a state: the pods or metrics it holds for, each with its
    detail (what its message says of it), and the next time it would change by itself (the
    health clock's: silence grows), if any."""

    named: Mapping[str, Any]
    next_change: datetime | None = None


class Said(NamedTuple):
    """What a condition says: its reason and message, and the time of the report that
    decided it (None: the task's first event, the time of a condition that does not hold)."""

    reason: str
    message: str
    at: datetime | None = None


# judge(state, now, settings) -> what holds, or None when it was not judged (silence without
# a time to judge it at).
Judge = Callable[["TaskState", datetime | None, HealthSettings], Found | None]
# says(state, named, now) -> what the condition says: why it holds, from what it names (not
# empty), else why not; ``now``: when it was judged.
Says = Callable[["TaskState", Mapping[str, Any], datetime | None], Said]


@dataclass(frozen=True, slots=True)
class HealthCondition:
    """One health condition. ``names`` is its list in ``status.health`` (sorted names of the
    ``subject``s it holds for: pods, or metrics); a worker it names shows ``flag`` in the
    view (the terminal's HEALTH column, the page's row; "" for a condition of metrics)."""

    type: str  # the condition type: `kubectl wait --for=condition=<type>`
    names: str
    subject: Literal["worker", "metric"]
    flag: str
    judge: Judge
    says: Says
    thresholds: tuple[Threshold, ...] = ()


# --- the conditions -------------------------------------------------------------------------


class Silence(NamedTuple):
    """A stalled worker: silent since ``since`` (its latest progress), ``limit`` seconds
    allowed by its ``interval`` between reports (None: it reported once)."""

    since: datetime
    limit: float
    interval: float | None


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
        return s["stall_unpaced"], None
    return max(s["stall_min"], s["stall_factor"] * interval), interval


def _running(state: TaskState) -> Iterable[tuple[str, ProgressState]]:
    """The detailed workers still running: no final of their own, and their pod has not
    ended (an ended pod's worker is final by its end), sorted by pod."""
    r = state.roster
    return ((pod, w) for pod, w in sorted(state.workers.items())
            if not w.final and not (r.pod_finals and r.end_of(pod_hash(pod)) is not None))


def _stalled(state: TaskState, now: datetime | None, s: HealthSettings) -> Found | None:
    if now is None:
        return None  # silence is judged at a time, or not at all
    stalled: dict[str, Silence] = {}
    next_change: datetime | None = None
    if state.phase == RUNNING:
        for pod, w in _running(state):
            limit, interval = stall_limit(w, s)
            since = w.at[0]
            try:
                onset = since + timedelta(seconds=limit)
            except OverflowError:  # (a report within the limit of year 9999's end)
                continue
            if now >= onset:
                stalled[pod] = Silence(since, limit, interval)
            elif next_change is None or onset < next_change:
                next_change = onset
    return Found(stalled, next_change)


def _stalled_says(state: TaskState, stalled: Mapping[str, Silence], now: datetime | None
                  ) -> Said:
    if stalled and now is not None:
        first = min(stalled.values(), key=lambda x: x.since + timedelta(seconds=x.limit))
        details = (f"{pod} silent for {_duration((now - x.since).total_seconds())}"
                   + (f" (reports every {_duration(x.interval)})"
                      if x.interval is not None else " (one report)")
                   for pod, x in stalled.items())
        return Said("NoProgressReports", _names(details, len(stalled)),
                    first.since + timedelta(seconds=first.limit))
    if state.phase == RUNNING:
        return Said("Reporting", "every running worker reported within its pace")
    return Said("NotRunning", "the task is not running")


def _non_finite(state: TaskState, now: datetime | None, s: HealthSettings) -> Found:
    """A metric's latest value that is NaN or infinite counts whatever the phase."""
    found = {}
    for name, reg in sorted(state.named.get("metrics", {}).items()):
        value = reg.value[0] if isinstance(reg.value, tuple) else reg.value
        text = non_finite_text(value) if type(value) is float else None
        if text is not None:
            found[name] = text
    return Found(found)


def _non_finite_says(state: TaskState, found: Mapping[str, str], now: datetime | None
                     ) -> Said:
    if not found:
        return Said("AllFinite", "every metric's latest value is finite")
    text = _names((f"{name}={text}" for name, text in found.items()), len(found))
    return Said("NonFiniteValue", text, min(state.named["metrics"][n].at[0] for n in found))


def _straggling(state: TaskState, now: datetime | None, s: HealthSettings) -> Found:
    straggling: dict[str, float] = {}  # pod -> its pace over the median pace
    if state.phase == RUNNING:
        paces = {pod: p for pod, w in _running(state) if (p := _pace(w)) is not None}
        if len(paces) >= max(2, s["straggle_min_workers"]):
            median = statistics.median(paces.values())
            if median > 0:
                straggling = {pod: p / median for pod, p in paces.items()
                              if p < s["straggle_ratio"] * median}
    return Found(straggling)


def _straggling_says(state: TaskState, found: Mapping[str, float], now: datetime | None
                     ) -> Said:
    if not found:
        return Said("NoStraggler", "no running worker far behind the median pace")
    paces = (f"{pod} at {ratio:.2f} of the median pace" for pod, ratio in sorted(found.items()))
    return Said("BehindMedianPace", _names(paces, len(found)),
                max(w.at[0] for _, w in _running(state)))


HEALTH: tuple[HealthCondition, ...] = (
    # lastTransitionTime: the moment the first stalled worker's silence passed its limit.
    HealthCondition("Stalled", "stalled", "worker", "stalled", _stalled, _stalled_says, (
        Threshold("stall_factor", 10.0, "A running worker is Stalled once silent for this "
                  "many of its own report intervals (its first to its latest progress, over "
                  "the reports between)...", minimum=1),
        Threshold("stall_min", 60.0, "... and at least this many seconds (a worker reporting "
                  "every second: Stalled after a minute).", minimum=1, unit=" s"),
        Threshold("stall_unpaced", 600.0, "Seconds of silence after which a worker that has "
                  "reported only once (no pace yet) is Stalled.", minimum=1, unit=" s"))),
    # lastTransitionTime: the earliest non-finite value.
    HealthCondition("NonFiniteMetrics", "nonFinite", "metric", "", _non_finite,
                    _non_finite_says),
    # lastTransitionTime: the newest report the paces rest on.
    HealthCondition("Straggling", "straggling", "worker", "straggling", _straggling,
                    _straggling_says, (
        Threshold("straggle_ratio", 0.5, "A running worker is Straggling when its pace "
                  "(progress per second since its first report) is below this fraction of "
                  "the median pace of its task's running workers (0: never).", minimum=0,
                  maximum=1),
        Threshold("straggle_min_workers", 3, "Running workers with a pace a task needs before "
                  "any is judged Straggling.", minimum=2, integer=True))),
)
HEALTH_CONDITIONS: tuple[str, ...] = tuple(c.type for c in HEALTH)
THRESHOLDS: Mapping[str, Threshold] = {t.name: t for c in HEALTH for t in c.thresholds}
DEFAULT_HEALTH = HealthSettings()
_STALLED = HEALTH[0]


# --- judging a state ------------------------------------------------------------------------


class Health(NamedTuple):
    """What ``evaluate`` found: per condition type, the names it holds for with their detail
    (a type absent: not judged), when it was evaluated (None: silence was not judged) and the
    next time a running worker would become stalled."""

    found: Mapping[str, Mapping[str, Any]]
    evaluated_at: datetime | None
    next_change: datetime | None

    def named(self, ctype: str) -> Mapping[str, Any]:
        return self.found.get(ctype, {})

    @property
    def stalled(self) -> Mapping[str, Silence]:
        return self.named(_STALLED.type)

    @property
    def summary(self) -> str:
        """The conditions that hold, comma-separated (registry order), or ``Healthy``."""
        return ",".join(c.type for c in HEALTH if self.found.get(c.type)) or "Healthy"


def evaluate(state: TaskState, now: datetime | None,
             settings: HealthSettings = DEFAULT_HEALTH) -> Health:
    """The task's health at ``now`` (None: silence is not judged). Only a running task has
    stalled or straggling workers; a non-finite metric counts whatever the phase."""
    found: dict[str, Mapping[str, Any]] = {}
    next_change: datetime | None = None
    for c in HEALTH:
        f = c.judge(state, now, settings)
        if f is None:
            continue
        found[c.type] = f.named
        if f.next_change is not None and (next_change is None or f.next_change < next_change):
            next_change = f.next_change
    return Health(found, now, next_change)


def conditions(state: TaskState, health: Health) -> list[dict[str, Any]]:
    """Each condition judged, metav1.Condition style, in registry order. lastTransitionTime
    is that of the deciding report (each entry says which), else the task's first event, as
    for ``Completed``; none before a first event."""
    start = state.first_event_time
    if start is None:
        return []
    out = []
    for c in HEALTH:
        named = health.found.get(c.type)
        if named is not None:
            said = c.says(state, named, health.evaluated_at)
            out.append(condition(c.type, bool(named), said.reason, said.message,
                                 start if said.at is None else said.at))
    return out


def health_json(health: Health) -> dict[str, Any]:
    """``status.health``: the summary (a printer column), when it was evaluated, and what
    each condition names, sorted: the lists of pods first, then those of metrics."""
    out: dict[str, Any] = {"summary": health.summary}
    if health.evaluated_at is not None:
        out["evaluatedAt"] = format_seconds(health.evaluated_at)
    for c in sorted(HEALTH, key=lambda c: c.subject != "worker"):
        named = health.found.get(c.type)
        if named:
            out[c.names] = sorted(named)
    return out


class Judgment(NamedTuple):
    """A state's health as its status says it: the conditions (after the outcome's) and
    ``status.health``. The status encoder places them (``to_status(state, health=...)``)."""

    conditions: list[dict[str, Any]]
    health: dict[str, Any]


def judge(state: TaskState, now: datetime | None,
          settings: HealthSettings = DEFAULT_HEALTH) -> Judgment:
    """The health of ``state`` judged at ``now`` (None: silence is not judged), as its status
    carries it."""
    found = evaluate(state, now, settings)
    return Judgment(conditions(state, found), health_json(found))


# --- the health clock (Stalled: silence grows without an event) ----------------------------


def next_stall(state: TaskState, now: datetime,
               settings: HealthSettings = DEFAULT_HEALTH) -> datetime | None:
    """The next time after ``now`` a running worker's silence passes its limit (None: none
    will, unless a fact comes): when the watcher must judge the task again. O(workers): the
    watcher asks after every fold."""
    if state.phase != RUNNING:
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
    if state.phase != RUNNING:
        return False
    said = status.get("health") if isinstance(status, Mapping) else None
    named = _strings(said.get(_STALLED.names)) if isinstance(said, Mapping) else ()
    found = _stalled(state, now or datetime.now(UTC), settings)
    return set(found.named if found is not None else ()) != set(named)


# --- text -----------------------------------------------------------------------------------


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


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()
