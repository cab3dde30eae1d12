"""A task's health, derived from the fold's own record, never claimed by a sender: ``Stalled``
(a running worker silent far longer than its own pace), ``NonFiniteMetrics`` (a metric's
latest value is NaN or infinite) and ``Straggling`` (a running worker far behind the median
pace of its task), as metav1 conditions and as lists a reader can use.

The conditions are a registry, ``HEALTH``, as kinds of fact are (schemas/wire/kinds.py): an entry
says the condition's type, the ``status.health`` list of what it names (pods or metrics), the
flag a named worker gets in the view, its thresholds (``Threshold``: the watcher's flags and
environment variables, the chart's ``watcher.health`` values) and how it judges a state. The
watcher's settings and metrics, the view (the terminal and the page render it) and the alert
read the registry; ARCHITECTURE.md ("Adding a health condition") lists the steps.

Health sits beside the status, not inside it: ``judge`` makes its part of a status (the
conditions and ``status.health``), which the watcher's writer and the view hand to the status
encoder (schemas/status/encoder.py). Compacting an idle task encodes it without a judgment.

Pure, and only the standard library underneath (the watcher's settings read the registry to
build `tidings watcher run --help`). Silence depends on *when* it is judged, so the time of
evaluation is an input (``now``) and the status says when it was (``health.evaluatedAt``);
everything else is a function of the folded state. ``tidings state --from-events`` judges
with the defaults.

Every reporting worker is judged, not only the detailed records (the 64 smallest pod
names): the roster keeps each running pod's pace (schemas/engine/roster.py's ``Pace``). A condition
names the first few (``NAMES_SHOWN``) and counts the rest, and ``status.health`` lists the
``NAMES_LISTED`` smallest names with ``counts`` of all. Where something could not be judged
(a running worker whose pace a budget-cut status did not keep, pods beyond the roster's cap)
a condition that does not hold is Unknown, says what, and the summary is not Healthy: no
condition claims more than was judged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from tidings._compat import UTC

from ..engine.roster import Pace, QuietPeriod, pod_hash
from ..wire.constants import non_finite_text
from ..wire.contract import RUNNING, condition
from ..wire.times import format_seconds

if TYPE_CHECKING:  # (the model loads pydantic: only its types are needed here)
    from ..engine.state import TaskState

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
    detail (what its message says of it), in name order; the next time it would change by
    itself (the health clock's: silence grows), if any; what it judged (``context``, for its
    message) and how many it could not judge (``unjudged``: the condition is then Unknown
    unless it holds, and the summary is not Healthy)."""

    named: Mapping[str, Any]
    next_change: datetime | None = None
    context: Any = None
    unjudged: int = 0


class Said(NamedTuple):
    """What a condition says: its reason and message, and the time of the report that
    decided it (None: the task's first event, the time of a condition that does not hold)."""

    reason: str
    message: str
    at: datetime | None = None


# judge(state, now, settings) -> what holds, or None when it was not judged (silence without
# a time to judge it at).
Judge = Callable[["TaskState", datetime | None, HealthSettings], Found | None]
# says(state, found, now) -> what the condition says: why it holds, from what it names (not
# empty), else why not, and what it could not judge; ``now``: when it was judged.
Says = Callable[["TaskState", Found, datetime | None], Said]


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


# --- the workers judged ---------------------------------------------------------------------


class Running(NamedTuple):
    """The running workers of a task as the roster knows them (schemas/engine/roster.py: every
    reporting pod, not only the detailed ones): the pace of each that has one, how many have
    none (a status cut by its byte budget was read: their pace was not kept), and whether
    pods beyond the roster's cap reported (never seen, so never judged)."""

    paces: list[Pace]
    unpaced: int
    beyond_roster: bool

    @property
    def workers(self) -> int:
        return len(self.paces) + self.unpaced

    @property
    def unjudged(self) -> int:
        """Running workers not judged (pods beyond the roster: at least one)."""
        return self.unpaced + (1 if self.beyond_roster else 0)

    def not_judged(self) -> str:
        """What was not judged, as a clause ("" when everything was)."""
        parts = []
        if self.unpaced:
            parts.append(f"{_workers(self.unpaced, 'running worker')} not judged: "
                         "no pace kept for them (a status cut by its byte budget was read)")
        if self.beyond_roster:
            parts.append("pods beyond the roster's cap are not seen")
        return "; ".join(parts)


def _running(state: TaskState) -> Running:
    """The running workers: a mark without a final whose pod has not ended (an ended pod's
    worker is final by its end). A pace exists only for a mark without a final, so the
    running paces are the paces of pods that have not ended; O(paces), no call per pod."""
    r = state.roster
    paces = r.paces
    if r.pod_finals:
        out = [p for h, p in paces.items() if r.end_of(h) is None]
    else:
        out = list(paces.values())
    running = len(r.marks) - r.finals - r.pod_finals
    return Running(out, max(0, running - len(out)), state.counters.get("roster_capped", 0) > 0)


def _workers(n: int, what: str = "worker") -> str:
    return f"1 {what}" if n == 1 else f"{n} {what}s"


# --- the conditions -------------------------------------------------------------------------


class Silence(NamedTuple):
    """A stalled worker: silent since ``since`` (when its latest progress was received, the
    API server's clock: roster.Pace), ``limit`` seconds allowed by its ``interval`` between
    reports (its own clock's; None: it reported once)."""

    since: datetime
    limit: float
    interval: float | None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# Onsets past year 9999 never come (a datetime cannot hold them).
_LAST_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _US


def _allowed(reports: int, span_ms: int, factor: float, least: float, unpaced: float
             ) -> tuple[float, float | None]:
    """(seconds of silence allowed, the report interval or None: fewer than two reports, or
    all at one time), the settings passed as numbers (called once per running worker)."""
    if reports > 1 and span_ms > 0:
        interval = span_ms / 1000 / (reports - 1)
        limit = factor * interval
        return (limit if limit > least else least), interval
    return unpaced, None


def _onset_us(heard_ms: int, limit: float) -> int:
    """When a silence since ``heard_ms`` (the latest report received) passes ``limit``, in
    epoch microseconds (whole: the judgment at a time and the health clock's next time agree
    exactly)."""
    return heard_ms * 1000 + math.ceil(limit * 1e6)


def _us(t: datetime) -> int:
    return (t - _EPOCH) // _US


def _at_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


class Held(NamedTuple):
    """A running worker quiet on purpose (payloads.Quiet): why, until when its declared
    period runs (as held to the watcher's ``quiet_max``), and whether that cap cut it."""

    reason: str
    until: datetime
    clipped: bool


class Silent(NamedTuple):
    """What Stalled judged: the running workers, and those it did not call stalled only
    because they declared a quiet period still running (by pod)."""

    run: Running
    held: Mapping[str, Held]


def _quiet_end(quiet: Mapping[int, QuietPeriod], pod: str, heard_ms: int, last_ms: int,
               cap_ms: float) -> tuple[QuietPeriod, int] | None:
    """The quiet period ``pod`` declared after its latest report (heard at ``heard_ms``, of
    order time ``last_ms``), and when it ends, in epoch ms: from when it was received, held
    to ``cap_ms`` (a sender cannot keep health quiet for ever); None: none holds. Its next
    report ends it."""
    q = quiet.get(pod_hash(pod))
    if q is None or (q.heard_ms, q.at_ms) < (heard_ms, last_ms):
        return None
    return q, q.heard_ms + int(min(q.ms, cap_ms))


def _stalled(state: TaskState, now: datetime | None, s: HealthSettings) -> Found | None:
    if now is None:
        return None  # silence is judged at a time, or not at all
    if state.phase != RUNNING:
        return Found({})
    run = _running(state)
    now_us = _us(now)
    stalled: dict[str, Silence] = {}
    held: dict[str, Held] = {}
    soonest: int | None = None
    factor, least, unpaced = s["stall_factor"], s["stall_min"], s["stall_unpaced"]
    quiet, cap_ms = state.roster.quiet, s["quiet_max"] * 1000
    quiet = quiet if cap_ms > 0 else {}
    for pod, reports, first_ms, _, last_ms, _, heard_ms, _, _ in run.paces:
        limit, interval = _allowed(reports, last_ms - first_ms, factor, least, unpaced)
        onset = usual = _onset_us(heard_ms, limit)
        # A quiet period declared after the latest report counts like a report at its end:
        # the usual allowance runs from there.
        ends = _quiet_end(quiet, pod, heard_ms, last_ms, cap_ms) if quiet else None
        if ends is not None:
            onset = max(onset, _onset_us(ends[1], limit))
        if onset > _LAST_US:
            continue
        if now_us >= onset:
            stalled[pod] = Silence(_at_us(heard_ms * 1000), limit, interval)
            continue
        if ends is not None and onset > usual:
            if now_us >= usual:
                q, end_ms = ends
                held[pod] = Held(q.reason, _at_us(end_ms * 1000), q.ms > cap_ms)
            elif soonest is None or usual < soonest:
                soonest = usual  # (then it is shown quiet: a change)
        if soonest is None or onset < soonest:
            soonest = onset
    return Found(dict(sorted(stalled.items())), None if soonest is None else _at_us(soonest),
                 Silent(run, dict(sorted(held.items()))), run.unjudged)


def _held_says(held: Mapping[str, Held]) -> str:
    """The workers quiet on purpose, as a clause ("" when none is)."""
    if not held:
        return ""
    details = (f"{pod} ({x.reason or 'no reason given'}) until {format_seconds(x.until)}"
               + (" (a longer period declared, held to the watcher's cap)" if x.clipped else "")
               for pod, x in held.items())
    return f"{_workers(len(held))} quiet on purpose: " + _names(details, len(held))


def _stalled_says(state: TaskState, found: Found, now: datetime | None) -> Said:
    stalled: Mapping[str, Silence] = found.named
    ctx: Silent | None = found.context
    if state.phase != RUNNING or ctx is None:
        return Said("NotRunning", "the task is not running")
    run = ctx.run
    rest = "; ".join(x for x in (_held_says(ctx.held), run.not_judged()) if x)
    if stalled and now is not None:
        first = min(stalled.values(), key=lambda x: x.since + timedelta(seconds=x.limit))
        details = (f"{pod} silent for {_duration((now - x.since).total_seconds())}"
                   + (f" (reports every {_duration(x.interval)})"
                      if x.interval is not None else " (one report)")
                   for pod, x in stalled.items())
        said = _names(details, len(stalled)) + f" ({len(stalled)} of {run.workers} running)"
        return Said("NoProgressReports", said + (f"; {rest}" if rest else ""),
                    first.since + timedelta(seconds=first.limit))
    judged = len(run.paces)
    if run.not_judged():
        return Said("NotJudged", f"{_workers(judged, 'running worker')} reported within "
                    f"{'its' if judged == 1 else 'their'} pace; {rest}")
    tail = f"; {rest}" if rest else ""
    if ctx.held:
        return Said("QuietOnPurpose", f"no running worker is silent beyond its pace or the "
                    f"quiet period it declared{tail}")
    if judged == 1:
        return Said("Reporting", "the running worker reported within its pace")
    if judged == 0:
        return Said("Reporting", "no worker is running")
    return Said("Reporting", f"all {judged} running workers reported within their pace")


def _non_finite(state: TaskState, now: datetime | None, s: HealthSettings) -> Found:
    """A metric's latest value that is NaN or infinite counts whatever the phase, whether or
    not its name fits the cap: a name beyond it keeps its latest value's finiteness
    (``state.beyond``); reports of names beyond those too are not judged (counted)."""
    kept = state.named.get("metrics", {})
    found: dict[str, tuple[str, datetime]] = {}
    for name, reg in kept.items():
        value = reg.value[0] if isinstance(reg.value, tuple) else reg.value
        text = non_finite_text(value) if type(value) is float else None
        if text is not None:
            found[name] = (text, reg.at[0])
    for name, b in state.beyond.get("metrics", {}).items():
        if b.non_finite and name not in kept:
            found[name] = (b.non_finite, b.at[0])
    unjudged = state.counters.get("metrics_unjudged", 0)
    return Found(dict(sorted(found.items())), None,
                 len(kept) + len(state.beyond.get("metrics", {})), unjudged)


def _non_finite_says(state: TaskState, found: Found, now: datetime | None) -> Said:
    named: Mapping[str, tuple[str, datetime]] = found.named
    rest = (f"{found.unjudged} reports of metric names beyond the {found.context} judged "
            "were not judged") if found.unjudged else ""
    if named:
        text = _names((f"{name}={text}" for name, (text, _) in named.items()), len(named))
        return Said("NonFiniteValue", text + (f"; {rest}" if rest else ""),
                    min(at for _, at in named.values()))
    if rest:
        return Said("NotJudged", f"every judged metric's latest value is finite; {rest}")
    return Said("AllFinite", "every metric's latest value is finite")


class Paces(NamedTuple):
    """What Straggling judged: the running workers, how many of them have a pace (progress
    per second: two reports at different times), the median of the forward ones (None: too
    few to judge, or none forward), and the newest report they rest on."""

    run: Running
    paced: int
    need: int  # paces the median needs (the straggle_min_workers threshold, at least 2)
    median: float | None
    newest: datetime | None


def _straggling(state: TaskState, now: datetime | None, s: HealthSettings) -> Found:
    if state.phase != RUNNING:
        return Found({})
    run = _running(state)
    # A pace is counted since the worker's lowest report (roster.Pace: a worker resumed
    # from an earlier checkpoint is judged by its latest run); one that is not forward (it
    # just went back, or is stuck) may be behind, but is no part of the median: two
    # restarted workers would otherwise make the median not forward and hide a stuck one.
    rates = {p.pod: rate for p in run.paces if (rate := p.rate) is not None}
    newest = max((p.heard_ms for p in run.paces), default=None)
    need = max(2, int(s["straggle_min_workers"]))
    forward = [rate for rate in rates.values() if rate > 0]
    median = statistics.median(forward) if len(rates) >= need and forward else None
    straggling: dict[str, float] = {}  # pod -> its pace over the median pace
    if median is not None and median > 0:
        straggling = {pod: rate / median for pod, rate in sorted(rates.items())
                      if rate < s["straggle_ratio"] * median}
    return Found(straggling, None, Paces(run, len(rates), need, median,
                                         None if newest is None else _at_us(newest * 1000)),
                 run.unjudged)


def _straggling_says(state: TaskState, found: Found, now: datetime | None) -> Said:
    named: Mapping[str, float] = found.named
    ctx: Paces | None = found.context
    if state.phase != RUNNING or ctx is None:
        return Said("NoStraggler", "the task is not running")
    rest = ctx.run.not_judged()
    if named:
        paces = (f"{pod} at {ratio:.2f} of the median pace" for pod, ratio in named.items())
        said = _names(paces, len(named)) + f" ({len(named)} of {ctx.paced} with a pace)"
        return Said("BehindMedianPace", said + (f"; {rest}" if rest else ""), ctx.newest)
    tail = f"; {rest}" if rest else ""
    if ctx.median is None and ctx.paced < ctx.need:
        return Said("TooFewPaced", f"{_workers(ctx.paced, 'running worker')} with a pace, "
                    f"fewer than the {ctx.need} Straggling is judged among" + tail)
    if ctx.median is None:
        return Said("NoStraggler", f"no pace of {_workers(ctx.paced, 'running worker')} is "
                    "forward: none is behind another" + tail)
    if ctx.paced == ctx.run.workers and not rest:
        return Said("NoStraggler", f"none of the {ctx.paced} running workers far behind the "
                    "median pace")
    return Said("NoStraggler", f"none of {_workers(ctx.paced, 'running worker')} with a pace "
                "far behind the median pace" + tail)


HEALTH: tuple[HealthCondition, ...] = (
    # lastTransitionTime: the moment the first stalled worker's silence passed its limit.
    HealthCondition("Stalled", "stalled", "worker", "stalled", _stalled, _stalled_says, (
        Threshold("stall_factor", 10.0, "A running worker is Stalled once silent for this "
                  "many of its own report intervals (its first to its latest progress, over "
                  "the reports between)...", minimum=1),
        Threshold("stall_min", 60.0, "... and at least this many seconds (a worker reporting "
                  "every second: Stalled after a minute).", minimum=1, unit=" s"),
        Threshold("stall_unpaced", 600.0, "Seconds of silence after which a worker that has "
                  "reported only once (no pace yet) is Stalled.", minimum=1, unit=" s"),
        Threshold("quiet_max", 3600.0, "The longest quiet period a worker may declare "
                  "(tidings.emitter.quiet: a checkpoint, an evaluation) before it is judged "
                  "again: a longer one is held to this (0: declarations are ignored).",
                  minimum=0, maximum=86400, unit=" s"))),
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
    """What ``evaluate`` found: per condition type, what it found (a type absent: not
    judged), when it was evaluated (None: silence was not judged) and the next time a
    running worker would become stalled."""

    found: Mapping[str, Found]
    evaluated_at: datetime | None
    next_change: datetime | None

    def named(self, ctype: str) -> Mapping[str, Any]:
        f = self.found.get(ctype)
        return {} if f is None else f.named

    @property
    def stalled(self) -> Mapping[str, Silence]:
        return self.named(_STALLED.type)

    @property
    def summary(self) -> str:
        """The conditions that hold, comma-separated (registry order); else ``Unknown`` when
        one could not judge everything it judges, else ``Healthy``."""
        held = ",".join(c.type for c in HEALTH if self.named(c.type))
        if held:
            return held
        return "Unknown" if any(f.unjudged for f in self.found.values()) else "Healthy"


def evaluate(state: TaskState, now: datetime | None,
             settings: HealthSettings = DEFAULT_HEALTH) -> Health:
    """The task's health at ``now`` (None: silence is not judged). Only a running task has
    stalled or straggling workers; a non-finite metric counts whatever the phase."""
    found: dict[str, Found] = {}
    next_change: datetime | None = None
    for c in HEALTH:
        f = c.judge(state, now, settings)
        if f is None:
            continue
        found[c.type] = f
        if f.next_change is not None and (next_change is None or f.next_change < next_change):
            next_change = f.next_change
    return Health(found, now, next_change)


def conditions(state: TaskState, health: Health) -> list[dict[str, Any]]:
    """Each condition judged, metav1.Condition style, in registry order: True when it holds,
    else Unknown when it could not judge all it judges (its message says what), else False.
    lastTransitionTime is that of the deciding report (each entry says which), else the
    task's first event, as for ``Completed``; none before a first event."""
    start = state.first_event_time
    if start is None:
        return []
    out = []
    for c in HEALTH:
        f = health.found.get(c.type)
        if f is not None:
            said = c.says(state, f, health.evaluated_at)
            out.append(condition(c.type, True if f.named else None if f.unjudged else False,
                                 said.reason, said.message,
                                 start if said.at is None else said.at))
    return out


# The ``status.health`` list of the running workers quiet on purpose (the view flags each).
QUIET_LIST = "quiet"

# Names a ``status.health`` list holds at most (the smallest; ``counts`` says how many in
# all), so a task of 10,000 stalled workers has a small status.
NAMES_LISTED = 64


def _listed(named: Mapping[str, Any]) -> list[str]:
    return sorted(named)[:NAMES_LISTED]


def health_json(health: Health) -> dict[str, Any]:
    """``status.health``: the summary (a printer column), when it was evaluated, and what
    each condition names (the ``NAMES_LISTED`` smallest, sorted; ``counts``: how many in
    all): the lists of pods first, then those of metrics; then the running workers not
    called stalled only because a quiet period they declared still runs (``quiet``)."""
    out: dict[str, Any] = {"summary": health.summary}
    if health.evaluated_at is not None:
        out["evaluatedAt"] = format_seconds(health.evaluated_at)
    counts: dict[str, int] = {}
    for c in sorted(HEALTH, key=lambda c: c.subject != "worker"):
        named = health.named(c.type)
        if named:
            out[c.names] = _listed(named)
            counts[c.names] = len(named)
    f = health.found.get(_STALLED.type)
    held = f.context.held if f is not None and isinstance(f.context, Silent) else {}
    if held:
        out[QUIET_LIST] = _listed(held)
        counts[QUIET_LIST] = len(held)
    if counts:
        out["counts"] = counts
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
    watcher asks after every fold that moved a pace."""
    if state.phase != RUNNING:
        return None
    return _soonest(_running(state).paces, now, settings, state.roster.quiet)


def _soonest(paces: Iterable[Pace], now: datetime, settings: HealthSettings,
             quiet: Mapping[int, QuietPeriod]) -> datetime | None:
    """The earliest time after ``now`` the silence of one of ``paces`` passes its limit."""
    now_us = _us(now)
    soonest: int | None = None
    factor, least, unpaced = (settings["stall_factor"], settings["stall_min"],
                              settings["stall_unpaced"])
    cap_ms = settings["quiet_max"] * 1000
    quiet = quiet if cap_ms > 0 else {}
    for pod, reports, first_ms, _, last_ms, _, heard_ms, _, _ in paces:
        onset = _onset_us(heard_ms, _allowed(reports, last_ms - first_ms, factor, least,
                                             unpaced)[0])
        if quiet and (ends := _quiet_end(quiet, pod, heard_ms, last_ms, cap_ms)) is not None:
            # (A worker quiet on purpose changes twice: shown quiet when its usual limit
            # passes, stalled when the period and the allowance after it are over.)
            later = _onset_us(ends[1], _allowed(reports, last_ms - first_ms, factor, least,
                                                unpaced)[0])
            if later > onset:
                if now_us < onset and (soonest is None or onset < soonest):
                    soonest = onset
                onset = later
        if now_us < onset <= _LAST_US and (soonest is None or onset < soonest):
            soonest = onset
    return None if soonest is None else _at_us(soonest)


def next_stall_of(state: TaskState, pods: Iterable[str], now: datetime,
                  settings: HealthSettings = DEFAULT_HEALTH) -> datetime | None:
    """``next_stall`` over the running workers ``pods`` only (those a fold just moved):
    O(pods). The earlier of it and a time computed before is never later than the next
    stall (another worker's limit did not move), only sometimes earlier (the worker of that
    time reported since): the health clock checks again when it comes."""
    if state.phase != RUNNING:
        return None
    r = state.roster
    paces = [p for h in {pod_hash(pod) for pod in pods}
             if (p := r.paces.get(h)) is not None and not (r.pod_finals and r.end_of(h))]
    return _soonest(paces, now, settings, r.quiet)


def stalled_since_written(state: TaskState, status: Any, settings: HealthSettings,
                          now: datetime | None = None) -> bool:
    """Whether the workers stalled at ``now`` (default: the clock now) differ from those the
    written ``status`` names (its list, and its count when the list is cut): a watcher that
    was down judges its tasks again at start."""
    if state.phase != RUNNING:
        return False
    said = status.get("health") if isinstance(status, Mapping) else None
    said = said if isinstance(said, Mapping) else {}
    named = _strings(said.get(_STALLED.names))
    counts = said.get("counts")
    count = counts.get(_STALLED.names) if isinstance(counts, Mapping) else None
    found = _stalled(state, now or datetime.now(UTC), settings)
    stalled = found.named if found is not None else {}
    return (_listed(stalled) != sorted(named)
            or len(stalled) != (count if type(count) is int else len(named)))


# --- text -----------------------------------------------------------------------------------


def _names(items: Iterable[str], count: int | None = None) -> str:
    """The first ``NAMES_SHOWN`` of ``items`` (``count`` of them: only those are made)."""
    shown = list(islice(items, NAMES_SHOWN))
    n = len(shown) if count is None else count
    return ", ".join(shown) + (f" and {n - NAMES_SHOWN} more" if n > NAMES_SHOWN else "")


def _duration(seconds: float) -> str:
    """A duration as a person reads it: 0.2s, 1.5s, 42s, 5m, 2h05m (a sub-second pace is
    never "0s")."""
    if seconds < 10:
        text = f"{seconds:.2g}" if seconds < 1 else f"{seconds:.1f}".rstrip("0").rstrip(".")
        return f"{text}s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _strings(v: Any) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()
