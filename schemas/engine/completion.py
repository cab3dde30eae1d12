"""The completion rule: a task's phase, its aggregate progress and estimated completion time,
and the outcome conditions (``Completed``, ``Failed``, ``PodsReady``) its status carries.

It reads a folded state through ``Folded``, the parts of ``TaskState`` (schemas/engine/state.py) it
needs, so the state can ask it for its own phase without this module importing the state;
each worker's record is schemas/engine/workers.py's.

The rule reads the roster (every reporting pod), never the capped detailed records, so no
failed or final report is lost to a cap and a task of up to WORKERS_MAX declared workers
completes. Who decides what (docs/status.md, "What the status means"):

- a platform object that owns the task (``observed.platform``: a Job, JobSet, Workflow or
  TrainJob whose controller reports on it) decides its outcome alone: its terminal condition
  is the task's phase, and a worker that failed is an attempt it may retry (until it failed
  the task: then the failed workers' progress counts, what they reached); a Job its
  controller failed while its pods terminate (``FailureTarget``) decides once none is left
  to end (``deciding_platform``);
- otherwise the workers do: a failed final fails the task, and it succeeds once every
  reporting pod is final (and at least ``declared`` of them);
- a reporting pod is final by its own final report, else by its pod's end (the kubelet's
  word: Succeeded, or Failed with its reason; deleted): what the process said is kept beside
  what the pod says, and decides when it said it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from ..wire.constants import MESSAGE_LIMIT
from ..wire.contract import FAILED, PENDING, RUNNING, SUCCEEDED, condition, retries
from ..wire.text import cut_text
from ..wire.times import from_epoch
from .observed import WAITING, Observed, PlatformOutcome
from .roster import FAILED as FAILED_BIT
from .roster import FINAL as FINAL_BIT
from .roster import (
    FRACTION_MASK,
    FRACTION_SCALE,
    Failure,
    Roster,
    ends_life,
    pod_hash,
    uid_print,
)
from .workers import ProgressState

# The farthest past a worker's latest report its pace may put the task's estimated
# completion time; beyond it the estimate is left out (see ``estimated_completion``).
ETA_HORIZON = timedelta(days=365)
_ETA_HORIZON_S = ETA_HORIZON.total_seconds()
# Waiting pods a PodsReady condition names (the status lists the first 16 and counts all).
_WAITING_NAMED = 3


class Folded(Protocol):
    """What the rule reads of a folded state (``state.TaskState``)."""

    @property
    def roster(self) -> Roster: ...
    @property
    def observed(self) -> Observed: ...
    @property
    def workers(self) -> Mapping[str, ProgressState]: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def first_event_time(self) -> datetime | None: ...


class TaskProgress(NamedTuple):
    """The task's aggregate progress (see the module docstring for the rule)."""

    fraction: float
    message: str
    final: bool  # the task is over (succeeded or failed)
    failed: bool
    # When the task should complete at the workers' recent pace; None when that cannot be
    # estimated (see ``estimated_completion``).
    eta: datetime | None = None


def deciding_platform(state: Folded) -> PlatformOutcome | None:
    """The platform object's outcome as it decides the task: as its controller reports it,
    except that a Job its controller has failed (``failing``) fails the task once none of
    its pods is left to end: none waits or runs unreported, every reporting pod is final.
    Until then its pods' last words may still come; after, nothing would end the wait on a
    lost node, whose deleted pods no kubelet confirms (the Job's Failed waits for that)."""
    platform = state.observed.platform
    if platform is None or not platform.failing:
        return platform
    o, r = state.observed, state.roster
    if o.waiting or o.running or r.finals + r.pod_finals < len(r.marks):
        return platform
    return platform._replace(phase=FAILED)


def phase_of(state: Folded) -> str:
    """Pending (nothing folded or observed), Running, Succeeded or Failed."""
    r = state.roster
    platform = deciding_platform(state)
    if platform is not None and platform.terminal:
        return platform.phase
    n = len(r.marks)
    started = bool(state.counters.get("events_applied", 0) or n or state.observed.running)
    if platform is None:
        if r.failures or r.pod_failures or _failure_beyond(r):
            return FAILED
        if n and r.finals + r.pod_finals == n and n >= r.declared:
            return SUCCEEDED
    return RUNNING if started else PENDING


def _failure_beyond(r: Roster) -> bool:
    """Whether the first failed final is of a pod beyond the roster's cap (no mark to count
    it). One of a pod the roster marks counts through its mark: a failure of an earlier life
    of its name (the pod was re-created since) does not."""
    f = r.first_failure
    return f is not None and pod_hash(f.pod) not in r.marks


def _own_failure(r: Roster) -> Failure | None:
    """The first failed final, unless it is an earlier life's (see ``_failure_beyond``)."""
    f = r.first_failure
    if f is None:
        return None
    m = r.marks.get(pod_hash(f.pod))
    return f if m is None or m.bits & FAILED_BIT else None


def _retried(r: Roster, h: int, bits: int) -> bool:
    """Whether the pod ``h`` (mark ``bits``) failed: a failed final of its own, else its
    pod's failed end. Under a platform that retries, such a worker is a retried attempt."""
    if bits & FINAL_BIT:
        return bool(bits & FAILED_BIT)
    end = r.end_of(h)
    return end is not None and end.failed


def _fraction_sum(state: Folded, retrying: bool) -> tuple[float, int]:
    """Every reporting pod's fraction summed, and how many pods that counts: a detailed
    record's own (latest) fraction, else the largest fraction the pod reported (its mark);
    a pod that ended well without a final of its own counts whole; under a platform that
    may still retry (``retrying``) the failed attempts count not at all (a retry takes
    their place). A platform that failed the task retries nothing: its failed workers
    count what they reached, as the workers' own rule counts them."""
    r = state.roster
    marks = r.marks
    permyriads, n = r.permyriads, len(marks)
    whole: set[int] = set()
    if r.pod_finals:
        for h, end in r.ends.items():
            m = marks.get(h)
            if m is None or m.bits & FINAL_BIT or not ends_life(end, r.lives.get(h)):
                continue
            if not end.failed:
                permyriads += FRACTION_SCALE - (m.bits & FRACTION_MASK)
                whole.add(h)
    if retrying and (r.failures or r.pod_failures):
        for h, m in marks.items():
            if _retried(r, h, m.bits):
                permyriads -= m.bits & FRACTION_MASK
                n -= 1
                whole.add(h)
    detailed = 0.0
    for pod, w in state.workers.items():
        h = pod_hash(pod)
        m = marks.get(h)
        if m is not None and h not in whole:
            permyriads -= m.bits & FRACTION_MASK
            detailed += w.fraction
    return permyriads / FRACTION_SCALE + detailed, n


class _Failure(NamedTuple):
    at: datetime
    reason: str  # the Failed condition's reason
    message: str


def _first_failure(state: Folded) -> _Failure | None:
    """What failed the task first: a failed final of its own (WorkerFailed), or a reporting
    pod's failed end without one (PodFailed), whichever is earlier."""
    r = state.roster
    own = _own_failure(r)
    found = None if own is None else _Failure(
        own.at[0], "WorkerFailed", own.message or "a worker reported failure")
    if found is None and r.failures and r.first_failure is not None:
        # The first failure was an earlier life's; a later one is not kept apart.
        found = _Failure(r.first_failure.at[0], "WorkerFailed", "a worker reported failure")
    if r.pod_first_failure is not None:
        at_s, h = r.pod_first_failure
        at = from_epoch(at_s)
        if found is None or at < found.at:
            v = next((v for pod, v in state.observed.pods.items() if pod_hash(pod) == h),
                     None)
            life = r.lives.get(h)
            if v is not None and life is not None and uid_print(v.uid) != life.uid:
                v = None  # (the end detailed is another pod's of that name)
            text = f"pod {v.pod} ended without a final report: {v.reason}" + (
                f": {v.message}" if v.message else "") if v is not None else \
                "a reporting pod failed without a final report"
            found = _Failure(at, "PodFailed", cut_text(text, MESSAGE_LIMIT))
    return found


def aggregate(state: Folded, phase: str | None = None) -> TaskProgress | None:
    """The task's aggregate progress (``phase``: its phase, when the caller has it); None
    when no worker reported any."""
    r = state.roster
    if not r.marks:
        return None
    phase = phase or phase_of(state)
    platform = deciding_platform(state)
    total, n = _fraction_sum(state, retries(platform is not None, phase))
    fraction = total / max(n, r.declared, 1)
    if platform is not None and phase == SUCCEEDED:
        fraction = 1.0  # its object says the work is done, whatever the workers said
    ws = state.workers
    failure = _first_failure(state) if phase == FAILED and platform is None else None
    if platform is not None and phase == FAILED:
        msg = _platform_text(platform)
    elif failure is not None:
        msg = failure.message  # the first failure explains the outcome best
    else:
        msg = max(ws.values(), key=lambda w: w.at).message if ws else ""
    eta = estimated_completion(state) if phase == RUNNING else None
    return TaskProgress(round(min(1.0, fraction), 4), msg, phase in (SUCCEEDED, FAILED),
                        phase == FAILED, eta)


def estimated_completion(state: Folded) -> datetime | None:
    """When the task should complete if each unfinished worker keeps the pace it has kept
    since its first report: the latest of ``t1 + (1 - f1) * (t1 - t0) / (f1 - f0)`` over the
    detailed workers that are not final, (t0, f0) the worker's earliest Progress and (t1,
    f1) its latest (order times: eventTime bounded by the server's clock). None when it
    cannot be estimated: a declared worker has not reported yet, a worker has no second
    report or no progress since its first, or went backwards, or a worker's pace puts its
    end more than ``ETA_HORIZON`` past its latest report (an eventTime from a skewed clock
    makes any pace; no such estimate is worth showing, and past year 9999 none could be
    written). A worker whose pod ended is final. Total: no time or fraction the contract
    accepts makes it raise."""
    r = state.roster
    if len(r.marks) < r.declared or r.finals + r.pod_finals == len(r.marks):
        return None
    latest: datetime | None = None
    for pod, w in state.workers.items():
        if w.final or (r.pod_finals and r.end_of(pod_hash(pod)) is not None):
            continue
        if w.first_at is None:
            return None
        t0, t1 = w.first_at[0], w.at[0]
        df = w.fraction - w.first_fraction
        if df <= 0 or t1 <= t0:
            return None
        ahead = (t1 - t0).total_seconds() * ((1.0 - w.fraction) / df)
        if not ahead <= _ETA_HORIZON_S:
            return None
        try:
            eta = t1 + timedelta(seconds=ahead)
        except OverflowError:  # t1 itself within the horizon of year 9999's end
            return None
        if latest is None or eta > latest:
            latest = eta
    return latest


def percent(fraction: float, phase: str) -> int:
    """The aggregate fraction in whole percent: 100 only once the rule holds, whatever the
    workers say."""
    pct = round(fraction * 100)
    return pct if phase == SUCCEEDED else min(pct, 99)


def _platform_text(p: PlatformOutcome) -> str:
    said = f"{p.kind} {p.name} {p.phase.lower()}"
    if p.reason:
        said += f": {p.reason}"
    return cut_text(said + (f": {p.message}" if p.message else ""), MESSAGE_LIMIT)


def _observed_since(state: Folded) -> datetime | None:
    """The earliest time an observation dates (a task with observations but no fact yet)."""
    o = state.observed
    times = [v.at for v in (*o.pods.values(), *o.waiting.values())]
    if o.running_since is not None:
        times.append(o.running_since)
    if o.platform is not None and o.platform.at is not None:
        times.append(o.platform.at)
    return min(times, default=None)


def outcome_conditions(state: Folded, phase: str) -> list[dict[str, Any]]:
    """``Completed`` (the task is over, either way) and ``Failed``, metav1.Condition style,
    and ``PodsReady`` (False with the reason while a pod of the task is not running for a
    reason, ``_pods_ready``); none before anything was folded or observed.

    lastTransitionTime is the time of the deciding fact or observation (the platform
    object's terminal condition; the first failure; the last final that made the rule hold),
    or of the first event while the condition is False, so it is a function of the folded
    set, like everything else in the status.
    """
    start = state.first_event_time or _observed_since(state)
    if start is None:
        return []
    r = state.roster
    platform = deciding_platform(state)
    waiting = [_pods_ready(state, phase, start)]
    n = len(r.marks)
    want = max(n, r.declared)
    finals = r.finals + r.pod_finals
    if platform is not None:
        if platform.terminal:
            at = platform.at or start
            msg = _platform_text(platform)
            if phase == FAILED:
                return [condition("Completed", True, FAILED, msg, at),
                        condition("Failed", True, platform.reason or "PlatformFailed", msg,
                                  at), *waiting]
            return [condition("Completed", True, SUCCEEDED, msg, at),
                    condition("Failed", False, "NoFailure", msg, at), *waiting]
        msg = (f"{finals} of {want} workers final; " if n else "") + \
            f"{platform.kind} {platform.name} decides the outcome"
        return [condition("Completed", False, RUNNING, msg, start),
                condition("Failed", False, "NoFailure", msg, start), *waiting]
    failure = _first_failure(state) if phase == FAILED else None
    if failure is not None:
        return [condition("Completed", True, FAILED, failure.message, failure.at),
                condition("Failed", True, failure.reason, failure.message, failure.at),
                *waiting]
    failed = condition("Failed", False, "NoFailure", "no worker reported failure", start)
    if phase == SUCCEEDED:
        times = [] if r.last_final is None else [r.last_final[0]]
        if r.pod_last_final is not None:
            times.append(from_epoch(r.pod_last_final))
        msg = f"{n} worker{'s' if n != 1 else ''} final"
        if r.pod_finals:
            msg += f" ({r.pod_finals} by their pod's end, without a final report)"
        return [condition("Completed", True, SUCCEEDED, msg, max(times, default=start)),
                failed, *waiting]
    msg = f"{finals} of {want} workers final" if n else "no progress reported yet"
    return [condition("Completed", False, RUNNING, msg, start), failed, *waiting]


def _pods_ready(state: Folded, phase: str, start: datetime) -> dict[str, Any]:
    """``PodsReady`` (after Kueue's Workload condition): False while a pod of the task waits
    for a reason (the first's reason; the message names what each of the first few waits
    for and counts the rest), or while no pod runs yet (Pending); True once pods run and
    none waits; once the task is over, True if it succeeded and False if it failed."""
    waiting = sorted(state.observed.waiting.values(), key=lambda v: (v.at, v.pod))
    if waiting:
        first = waiting[0]
        n = len(waiting) + state.observed.waiting_more
        text = ("1 pod of the task waits: " if n == 1 else f"{n} pods of the task wait: ") \
            + "; ".join(f"pod {v.pod}: {v.message or v.reason}" for v in waiting[:_WAITING_NAMED])
        # The count of the rest outlives the cut of long names and messages.
        more = f" (and {n - _WAITING_NAMED} more)" if n > _WAITING_NAMED else ""
        return condition("PodsReady", False, first.reason or WAITING,
                         cut_text(text, 4 * MESSAGE_LIMIT - len(more)) + more, first.at)
    if phase == PENDING:
        return condition("PodsReady", False, "PodsPending", "no pod of the task runs yet",
                         start)
    if phase == FAILED:
        return condition("PodsReady", False, "TaskFailed", "the task failed", start)
    return condition("PodsReady", True, "PodsRunning" if phase == RUNNING else SUCCEEDED,
                     "no pod of the task waits", start)
