"""What the watcher observes of a task besides its facts: how each pod ended as its object
says it (the kubelet's and the API server's word: a terminal phase, a container's exit, an
eviction, a preemption, a deletion), the pods stuck waiting and why, and the platform object
that owns the task (a Job, JobSet, Workflow or TrainJob) as its controller reports it.

Pure: reads API objects (dicts as the API returns them) into small typed values, sanitised
and bounded, and never raises. The fold merges them into a task state
(``observing.observe``); what they decide is the completion rule's (``completion.py``).

The readings follow the objects' upstream definitions: the Pod's phase, reason, conditions
(``DisruptionTarget``, ``PodScheduled``) and container states (k8s.io/api v0.37.2
core/v1/types.go), the batch/v1 Job's ``Complete`` and ``Failed`` conditions (batch/v1
types.go), the JobSet's ``Completed`` and ``Failed`` conditions (kubernetes-sigs/jobset
api/jobset/v1alpha2/jobset_types.go), the TrainJob's ``Complete`` and ``Failed`` conditions
(kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go, at 0015772c) and the Argo
Workflow's ``status.phase``, terminal when Succeeded, Failed or Error (argoproj/argo-workflows
pkg/apis/workflow/v1alpha1/workflow_phase.go, ``WorkflowPhase.Completed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, NamedTuple

from ..wire.contract import FAILED, RUNNING, SUCCEEDED
from ..wire.payloads import cut_text
from ..wire.text import sanitize_text
from ..wire.times import epoch, parse_time

WAITING: Final = "Waiting"
# Characters of a reason (a CamelCase word upstream) and of a message kept.
REASON_LIMIT: Final = 64
MESSAGE_LIMIT: Final = 256
# A container's exit code is an int32 upstream; anything else is not one.
_INT32 = (-(2**31), 2**31 - 1)
# Linux signal numbers (the pods' kernel, whatever the reader's platform numbers them).
_SIGNALS: Final = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP",
                   6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1",
                   11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}
# Waiting reasons that are a normal start, not a reason to look.
_STARTING: Final = frozenset({"ContainerCreating", "PodInitializing"})
_NOT_REASON = re.compile(r"[^A-Za-z0-9_,:]")


class PodVerdict(NamedTuple):
    """How a pod ended (``phase`` Succeeded or Failed), or why it is not running
    (``phase`` Waiting), as its object says it.

    ``explained``: the object said how it ended (a terminal phase, a container's exit, a
    disruption condition); False when it only showed the pod gone (deleted, or not found
    after the watcher was away). ``at``: when, from the object (a container's finishedAt, the
    condition's time, the deletionTimestamp), else when it was seen."""

    pod: str
    uid: str
    phase: str
    reason: str
    message: str
    exit_code: int | None
    at: datetime
    explained: bool = True

    @property
    def terminal(self) -> bool:
        return self.phase != WAITING

    @property
    def failed(self) -> bool:
        return self.phase == FAILED

    def order(self) -> tuple[bool, int, bool, str, str, int, str]:
        """The join order of two ends of one pod: explained over merely gone, then the
        later, then failed; the rest only makes the order total."""
        return (self.explained, epoch(self.at), self.failed, self.reason, self.message,
                -(2**40) if self.exit_code is None else self.exit_code, self.uid)


class PlatformOutcome(NamedTuple):
    """The platform object owning a task, as its controller reports it: ``phase`` Running
    until its terminal condition (or a Workflow's terminal phase) says Succeeded or Failed,
    with that condition's reason and message; ``at`` its time. A Job its controller has
    failed while its pods still terminate (Kubernetes 1.31+: ``FailureTarget``, ``Failed``
    only once every pod ended) is Running with the failure's reason, message and time:
    ``failing``."""

    api_version: str
    kind: str
    name: str
    uid: str
    phase: str
    reason: str
    message: str
    at: datetime | None

    @property
    def terminal(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def failing(self) -> bool:
        """A Job failed by its controller, its pods not all ended (FailureTarget: the one
        running Job that carries a reason; a running Workflow carries its phase as one)."""
        return self.kind == "Job" and self.phase == RUNNING and bool(self.reason)

    def order(self) -> tuple[bool, int, str, str, str, str]:
        """The join order: terminal over running, then the later; total by the rest."""
        return (self.terminal, 0 if self.at is None else epoch(self.at), self.uid,
                self.phase, self.reason, self.message)


# --- text ---------------------------------------------------------------------------------


def clean_reason(value: object, default: str = "") -> str:
    """A reason as conditions carry it: a CamelCase word, anything else removed, bounded."""
    if not isinstance(value, str):
        return default
    return _NOT_REASON.sub("", sanitize_text(value))[:REASON_LIMIT] or default


def clean_message(value: object) -> str:
    """Free text from an object: neutralised (no escapes, no controls) and bounded."""
    if not isinstance(value, str):
        return ""
    return cut_text(" ".join(sanitize_text(value[:4 * MESSAGE_LIMIT]).split()), MESSAGE_LIMIT)


def _whole(t: datetime) -> datetime:
    """Whole seconds, as the status keeps times (and the API gives them)."""
    return t.replace(microsecond=0)


def exit_code_of(value: object) -> int | None:
    """An exit code as the API gives it (an int32), else None."""
    if type(value) is not int or not _INT32[0] <= value <= _INT32[1]:
        return None
    return value


def describe_exit(code: int) -> str:
    """``exit code 137 (SIGKILL)``: a code above 128 is the signal that ended the process."""
    name = _SIGNALS.get(code - 128) if 128 < code < 160 else None
    return f"exit code {code}" + (f" ({name})" if name else "")


# --- pods ---------------------------------------------------------------------------------


def _dict(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: object, key: str) -> list[Mapping[str, Any]]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in _list(status, "conditions"):
        if c.get("type") == ctype:
            return c
    return None


def _containers(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers first (one that failed stopped the rest), then the others."""
    return [*_list(status, "initContainerStatuses"), *_list(status, "containerStatuses")]


def _failed_container(status: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(container name, its terminated state) of the container that explains a failure: an
    OOM-killed one first, else the first with a non-zero exit."""
    ended = [(str(c.get("name") or ""), _dict(_dict(c, "state"), "terminated"))
             for c in _containers(status)]
    ended = [(n, t) for n, t in ended if t]
    for n, t in ended:
        if t.get("reason") == "OOMKilled":
            return n, t
    for n, t in ended:
        if exit_code_of(t.get("exitCode")) not in (None, 0):
            return n, t
    return None


def _finished_at(status: Mapping[str, Any]) -> datetime | None:
    times = [parse_time(_dict(_dict(c, "state"), "terminated").get("finishedAt"))
             for c in _containers(status)]
    found = [t for t in times if t is not None]
    return max(found) if found else None


def _container_text(name: str, terminated: Mapping[str, Any]) -> tuple[str, int | None, str]:
    """(reason, exit code, ``container main: OOMKilled (exit code 137 (SIGKILL))...``)."""
    code = exit_code_of(terminated.get("exitCode"))
    reason = clean_reason(terminated.get("reason"), "Error")
    text = f"container {clean_message(name) or '?'}: {reason}"
    if code is not None:
        text += f", {describe_exit(code)}"
    detail = clean_message(terminated.get("message"))
    return reason, code, text + (f": {detail}" if detail else "")


def pod_verdict(obj: object, *, deleted: bool = False, seen: datetime) -> PodVerdict | None:
    """How the pod ``obj`` ended, or why it waits; None while it runs (or starts) normally.

    ``deleted``: the object is the last one of a deleted pod (a watch's DELETED): it has
    ended then, however its status reads. ``seen``: when the watcher saw it (the time of an
    end the object does not date)."""
    meta, status = _dict(obj, "metadata"), _dict(obj, "status")
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not name or not isinstance(uid, str):
        return None
    name, uid = name[:253], uid[:64]
    phase = status.get("phase")
    deleted_at = parse_time(meta.get("deletionTimestamp"))
    disrupted = _condition(status, "DisruptionTarget")
    # Being deleted for a disruption (an eviction, a preemption, its node's taint) is its
    # end: on a lost node no kubelet ever confirms it, and the pod stays Terminating.
    if phase in (SUCCEEDED, FAILED) or deleted or (
            deleted_at is not None and disrupted is not None
            and disrupted.get("status") == "True"):
        return _ended(name, uid, phase, status, deleted_at, seen)
    return _waiting(name, uid, status, meta, seen)


def _ended(name: str, uid: str, phase: object, status: Mapping[str, Any],
           deleted_at: datetime | None, seen: datetime) -> PodVerdict:
    disruption = _condition(status, "DisruptionTarget")
    if disruption is not None and disruption.get("status") != "True":
        disruption = None
    at = _whole(_finished_at(status) or (parse_time(disruption.get("lastTransitionTime"))
                                         if disruption else None) or deleted_at or seen)
    if phase == SUCCEEDED:
        return PodVerdict(name, uid, SUCCEEDED, "Completed", "the pod succeeded", 0, at)
    failing = _failed_container(status)
    code: int | None = None
    container = ""
    reason = ""
    if failing is not None:
        reason, code, container = _container_text(*failing)
    pod_reason = clean_reason(status.get("reason"))
    pod_message = clean_message(status.get("message"))
    parts: list[str] = []
    if pod_reason == "Evicted" or (pod_reason and disruption is None):
        # The kubelet's own verdict on the pod (Evicted, NodeLost, UnexpectedAdmissionError,
        # OutOfmemory, ...) explains more than the exit it caused.
        reason = pod_reason
        parts.append(pod_message)
    elif disruption is not None:
        reason = clean_reason(disruption.get("reason"), "DisruptionTarget")
        parts.append(clean_message(disruption.get("message")))
    explained = bool(reason) or phase == FAILED
    if not reason:
        reason = "Failed" if phase == FAILED else "Deleted"
        parts.append("the pod failed" if phase == FAILED else "the pod was deleted")
    parts.append(container)
    message = clean_message("; ".join(p for p in parts if p))
    return PodVerdict(name, uid, FAILED, reason, message, code, at, explained)


def _waiting(name: str, uid: str, status: Mapping[str, Any], meta: Mapping[str, Any],
             seen: datetime) -> PodVerdict | None:
    since = _whole(parse_time(status.get("startTime"))
                   or parse_time(meta.get("creationTimestamp")) or seen)
    scheduled = _condition(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        reason = clean_reason(scheduled.get("reason"), "Unschedulable")
        at = _whole(parse_time(scheduled.get("lastTransitionTime")) or since)
        return PodVerdict(name, uid, WAITING, reason, clean_message(scheduled.get("message")),
                          None, at)
    for c in _containers(status):
        waiting = _dict(_dict(c, "state"), "waiting")
        reason = clean_reason(waiting.get("reason"))
        if not waiting or not reason or reason in _STARTING:
            continue
        text = f"container {clean_message(c.get('name')) or '?'}: {reason}"
        detail = clean_message(waiting.get("message"))
        last = _dict(_dict(c, "lastState"), "terminated")
        code = exit_code_of(last.get("exitCode")) if last else None
        if last:
            text += f" (last: {clean_reason(last.get('reason'), 'Error')}"
            text += f", {describe_exit(code)})" if code is not None else ")"
        ended = parse_time(last.get("finishedAt")) if last else None
        return PodVerdict(name, uid, WAITING, reason,
                          clean_message(text + (f": {detail}" if detail else "")), code,
                          _whole(ended or since))
    return None


def gone(pod: str, uid: str, seen: datetime) -> PodVerdict:
    """A pod that is not there any more, whose last object nobody saw (deleted while no
    watcher watched): it ended, how is unknown."""
    return PodVerdict(pod[:253], uid[:64], FAILED, "Deleted",
                      "the pod is gone (deleted while no watcher was watching)", None,
                      _whole(seen), False)


# --- nodes --------------------------------------------------------------------------------


class NodeLoss(NamedTuple):
    """Why a node is not Ready: its Ready condition's status (False, or Unknown once its
    kubelet stopped reporting), reason and message, and since when."""

    status: str
    reason: str
    message: str
    since: datetime | None


def node_loss(obj: object) -> NodeLoss | None:
    """Why the Node ``obj`` is not Ready; None while it is, or before its kubelet first
    reported (no Ready condition: nothing ran there yet)."""
    ready = _condition(_dict(obj, "status"), "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    status = "False" if ready.get("status") == "False" else "Unknown"
    since = parse_time(ready.get("lastTransitionTime"))
    return NodeLoss(status, clean_reason(ready.get("reason"), "NodeNotReady"),
                    clean_message(ready.get("message")), None if since is None else _whole(since))


def lost_on_node(pod: str, uid: str, node: str, loss: NodeLoss, seen: datetime) -> PodVerdict:
    """The verdict of a pod still Running on a node that is not Ready: it waits, NodeLost,
    with what the node's Ready condition says."""
    text = f"node {clean_message(node) or '?'} not ready ({loss.status}: {loss.reason})"
    if loss.message:
        text += f": {loss.message}"
    return PodVerdict(pod[:253], uid[:64], WAITING, "NodeLost", clean_message(text), None,
                      loss.since or _whole(seen))


# --- platform objects ---------------------------------------------------------------------

# Per kind: the condition types that end it (success, failure).
_TERMINAL_CONDITIONS: Final[dict[str, tuple[str, str]]] = {
    "Job": ("Complete", "Failed"),
    "JobSet": ("Completed", "Failed"),
    "TrainJob": ("Complete", "Failed"),
}
_WORKFLOW_PHASES: Final = {"Pending": RUNNING, "Running": RUNNING, "Succeeded": SUCCEEDED,
                           "Failed": FAILED, "Error": FAILED}


def platform_outcome(api_version: str, kind: str, obj: object) -> PlatformOutcome | None:
    """The outcome of a platform object (``kind``: Job, JobSet, TrainJob or Workflow, as
    its controller reports it); None when its controller has not reported on it yet (no
    status: then it cannot decide anything) or it is no such object."""
    meta, status = _dict(obj, "metadata"), _dict(obj, "status")
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str) or not status:
        return None

    def outcome(phase: str, reason: str, message: str, at: datetime | None
                ) -> PlatformOutcome:
        return PlatformOutcome(api_version, kind, name[:253], uid[:64], phase, reason,
                               message, None if at is None else _whole(at))

    if kind == "Workflow":
        phase = _WORKFLOW_PHASES.get(str(status.get("phase") or ""))
        if phase is None:
            return None
        at = parse_time(status.get("finishedAt")) or parse_time(status.get("startedAt"))
        return outcome(phase, clean_reason(status.get("phase")), clean_message(
            status.get("message")), at if phase != RUNNING else None)
    ends = _TERMINAL_CONDITIONS.get(kind)
    if ends is None:
        return None
    for ctype, phase in zip(ends, (SUCCEEDED, FAILED), strict=True):
        c = _condition(status, ctype)
        if c is not None and c.get("status") == "True":
            return outcome(phase, clean_reason(c.get("reason"), ctype),
                           clean_message(c.get("message")),
                           parse_time(c.get("lastTransitionTime")))
    target = _condition(status, "FailureTarget") if kind == "Job" else None
    if target is not None and target.get("status") == "True":
        return outcome(RUNNING, clean_reason(target.get("reason"), "FailureTarget"),
                       clean_message(target.get("message")),
                       parse_time(target.get("lastTransitionTime")))
    return outcome(RUNNING, "", "", None)


# --- what a task state keeps of them ------------------------------------------------------


class Observed(NamedTuple):
    """What a task's state keeps of the observations beside its facts: the detailed end of
    the ``observed_pods`` smallest pod names (every pod's end is in the roster, compact),
    the pods waiting now (the ``waiting`` smallest names: the watcher's current view), the
    platform object's outcome, and how many of its pods run now (the current view: a task
    whose pods run is Running before any of them reports). ``waiting_more``: how many pods
    wait beyond those ``waiting`` keeps (a thousand stuck pods are named by the first few and
    counted, never listed)."""

    pods: Mapping[str, PodVerdict]
    waiting: Mapping[str, PodVerdict]
    platform: PlatformOutcome | None = None
    running: int = 0
    running_since: datetime | None = None  # the earliest start of the pods running now
    waiting_more: int = 0


EMPTY_OBSERVED = Observed({}, {})
