"""Whether a fact is admitted into its task's fold: the one rule the watcher and
`tidings state --from-events` (the CLI's local fold) both apply, so they cannot disagree.

Pure: what needs the API (may the sender pod speak for the task? is the owner its labels
claim a live object?) is asked through ``Checks``, which each caller answers from its own
reads; this module decides which facts are the task's, in which order the checks run, and
what the task's object (its uid, the uids of earlier runs, a run the TTL deleted) refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Protocol

from ..wire.constants import API_VERSION, KIND
from ..wire.event import ParsedEvent, TaskRef
from ..wire.payloads import PodSpawned
from ..wire.rejection import Rejection, RejectReason


class Retry(Enum):
    """A check could not answer right now (the API did not): ask again later."""

    LATER = "later"


# How an admitted fact's sender was verified ("cache", "get", "proof"), a refusal, or later.
Verdict = str | Rejection | Retry


def regards_a_task(ev: ParsedEvent) -> bool:
    """The event is about a TaskFeedback of ours (lineage may regard any object: only one
    regarding a TaskFeedback is a fact of that task)."""
    return ev.regarding_kind == KIND and ev.regarding_api_version == API_VERSION


def is_task_fact(result: object, task: TaskRef) -> bool:
    """``result`` (a parse result) is a fact about ``task`` itself."""
    return isinstance(result, ParsedEvent) and result.task == task and regards_a_task(result)


def about_its_pod(ev: ParsedEvent) -> bool:
    """A fact its sender sent about its own pod (an emitter that knows no task id): it belongs
    to the task the pod's labels name (``as_task_fact``). Lineage about a pod is no such
    fact: it says which app spawned that pod, not what a task did."""
    return ev.regarding_kind == "Pod" and type(ev.payload) is not PodSpawned


def as_task_fact(ev: ParsedEvent, task: str) -> ParsedEvent:
    """A fact about its sender's own pod, as a fact about ``task`` (the one the pod's labels
    name): the same event, regarding that task's TaskFeedback (no uid: the pod's is not the
    TaskFeedback's). The sender check still runs on it."""
    return replace(ev, task=TaskRef(ev.task.namespace, task), regarding_kind=KIND,
                   regarding_api_version=API_VERSION, regarding_uid="")


@dataclass(frozen=True, slots=True)
class TaskObject:
    """What is known of the task's TaskFeedback, the run a fact naming a uid must be of."""

    # The object's uid; "" when none exists; None when it could not be read (a uid an event
    # names is then not checked: nothing is known to refuse it by).
    uid: str | None
    # uids no object of the task has any more (deleted or replaced runs).
    stale: frozenset[str] = frozenset()
    # Emitter instances of a finished run whose TaskFeedback the TTL deleted.
    buried: frozenset[str] = frozenset()


class Checks(Protocol):
    """The reads the rule needs, each answered by its caller (the watcher from its caches and
    GETs, the CLI from its own reads)."""

    def sender(self, ev: ParsedEvent) -> Verdict:
        """May the event's sender pod speak for its task (for lineage: does the spawned pod
        confirm it)? How it was verified, a Rejection, or Retry.LATER."""
        ...

    def claim(self, ev: ParsedEvent) -> Rejection | Retry | None:
        """A Rejection when the sender pod claims an owner no live object is; None when it
        claims none, or the claim holds (or cannot be checked here)."""
        ...


def admission(ev: ParsedEvent, obj: TaskObject, checks: Checks) -> Verdict:
    """Whether the task fact ``ev`` is admitted into its task: the sender first, then the
    owner its pod claims (asked only of a verified sender: a refused one costs no read), then
    the object it names (a verified sender still speaks only for the object its event names:
    a re-run deletes and re-creates the TaskFeedback), then whether its run is over (the TTL
    deleted it: a late fact does not re-create it)."""
    verdict = checks.sender(ev)
    if not isinstance(verdict, str):
        return verdict
    claim = checks.claim(ev)
    if claim is not None:
        return claim
    named = ev.regarding_uid
    if named and obj.uid is not None and (named != obj.uid or named in obj.stale):
        return Rejection.of(
            RejectReason.OTHER_OBJECT,
            f"the event names TaskFeedback uid {named}, not the task's object "
            f"({obj.uid or 'none exists'}): an earlier run's")
    if ev.instance in obj.buried:
        return Rejection.of(
            RejectReason.DELETED_TASK,
            f"emitter instance {ev.instance} belongs to a finished run whose TaskFeedback "
            "the TTL deleted; a late fact does not re-create it")
    return verdict
