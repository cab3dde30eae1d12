"""Loading a task for `state`, `watch` and `timeline`: its TaskFeedback status when a watcher
wrote one, else (or with --from-events) its events folded here, each admitted by the
watcher's own rule (``schemas/engine/admission.py``, its reads answered by the watcher's checks
over this client), beside what its pods and its platform object say now.
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from tidings._compat import UTC
from tidings.cli.common import EXIT_NOT_FOUND, EXIT_UNREACHABLE, CliError, not_found, safe
from tidings.cli.kube import NO_CRD, Action, ApiError, Kube, found_elsewhere
from tidings.cli.snapshot import SOURCE_EVENTS, Refusals, Snapshot, cr_snapshot, status_of
from tidings.kube.objects import TaskFeedback
from tidings.schemas.wire.contract import (
    POD_FACTS_SELECTOR,
    TASKFEEDBACK_RESOURCE,
    task_selector,
    taskfeedback_path,
)
from tidings.schemas.wire.refs import TaskRef

if TYPE_CHECKING:
    from tidings.kube.objects import Event
    from tidings.schemas import ParsedEvent, TaskState
    from tidings.watcher.platform import PlatformTasks
    from tidings.watcher.senders import Senders

# Not a fact of this task: regarding another kind of object (lineage of an app, say).
NOT_A_TASK_FACT = "not_a_task_fact"


def _unreachable(what: str) -> CliError:
    return CliError(f"cannot verify {what}: the API server did not answer", EXIT_UNREACHABLE)


def sender_of(p: object, raw: Any = None) -> str:
    """The pod an event says it comes from, ``namespace/name`` (sanitised, bounded)."""
    from tidings.schemas import ParsedEvent

    if isinstance(p, ParsedEvent):
        return safe(f"{p.sender.namespace or p.task.namespace}/{p.sender.name}")
    related = raw.get("related") if isinstance(raw, dict) else None
    if isinstance(related, dict) and isinstance(related.get("name"), str):
        ns = related.get("namespace") if isinstance(related.get("namespace"), str) else ""
        return safe(f"{ns}/{related['name']}"[:300])
    return "(unknown sender)"


def read_cr(kube: Kube, ref: TaskRef) -> tuple[TaskFeedback | None, ApiError | None]:
    """The task's TaskFeedback, or why it could not be read (forbidden, no CRD or object:
    the events still tell)."""
    try:
        return cast(TaskFeedback, kube.get_json(
            taskfeedback_path(ref.namespace, ref.name),
            action=Action("get", TASKFEEDBACK_RESOURCE, ref.namespace, ref.name))), None
    except ApiError as err:
        if err.forbidden or err.not_found:
            return None, err
        raise


def object_uid(obj: TaskFeedback | None, cr_error: ApiError | None) -> str | None:
    """The TaskFeedback's uid for the local fold: "" when it does not exist, None when it
    could not be read (then events are not checked against it)."""
    if obj is not None:
        return str(obj.get("metadata", {}).get("uid") or "") or None
    return "" if cr_error is not None and cr_error.not_found else None


class TaskReader:
    """Reads one task over one client. It keeps what it read through the watcher's code (the
    pods, the platform objects, so that the CLI's fold and the watcher's status
    cannot disagree), so a `watch` that reads again asks only what it does not know."""

    def __init__(self, kube: Kube, ref: TaskRef) -> None:
        self.kube = kube
        self.ref = ref

    @cached_property
    def senders(self) -> Senders:
        """The watcher's sender check over this client (its pod cache)."""
        from tidings.watcher.senders import ProofPolicy, SenderLookupError, Senders

        kube = self.kube

        def get(path: str) -> Any:
            parts = path.split("/")  # /api/v1/namespaces/<ns>/pods/<name>, or the policy
            pod = len(parts) == 7 and parts[5] == "pods"
            action = Action("get", "pods", parts[4], parts[6]) if pod else None
            try:
                return kube.get_json(path, action=action)
            except ApiError as err:
                if err.not_found:
                    return None
                if pod and err.forbidden:
                    # Without reading pods no sender can be verified: say so, never guess.
                    raise ApiError(f"{err.message} (needed to verify the senders of the "
                                   "task's events)", err.code, err.status, action) from None
                raise SenderLookupError(err.message, retry=not err.denied) from None

        return Senders(get, policy=ProofPolicy(get, quiet=True))

    @cached_property
    def platform(self) -> PlatformTasks:
        """The watcher's reading of platform objects over this client, read by name here
        (the watcher has them from its watches)."""
        from tidings.watcher.platform import PlatformTasks

        return PlatformTasks(self.kube.client)

    # --- one fact -----------------------------------------------------------------------
    def refusal(self, p: object, uid: str | None) -> tuple[str, str] | None:
        """Why the watcher would not fold the parse result ``p`` into the task whose
        TaskFeedback has ``uid`` ("": none exists; None: unknown, not checked): (a
        RejectReason value, or ``not_a_task_fact``; the message); None when it would."""
        from tidings.schemas import ParsedEvent, Rejection
        from tidings.schemas.engine.admission import Retry, TaskObject, admission, is_task_fact
        if isinstance(p, Rejection):
            return p.reason.value, p.message
        if not is_task_fact(p, self.ref):
            return NOT_A_TASK_FACT, "regarding another kind of object than a TaskFeedback"
        assert isinstance(p, ParsedEvent)
        from tidings.watcher.checks import AdmissionChecks

        # (One set of checks per fact: the caller does not hold the facts it refused.)
        verdict = admission(p, TaskObject(uid),
                            AdmissionChecks(self.senders, self.platform, self.ref))
        if verdict is Retry.LATER:
            raise _unreachable(f"the sender of event {safe(p.name)} or the owner its pod claims")
        if isinstance(verdict, Rejection):
            return verdict.reason.value, verdict.message
        return None

    def pod_fact(self, p: object) -> ParsedEvent | None:
        """A pod's fact about itself as a fact of this task when the pod's labels name it
        (as the watcher retargets it); None when it is another task's, or no such fact."""
        from tidings.schemas import ParsedEvent, Rejection
        from tidings.schemas.engine.admission import Retry, about_its_pod, as_task_fact

        if not (isinstance(p, ParsedEvent) and about_its_pod(p)):
            return None
        info = self.senders.task_of(p)
        if info is Retry.LATER:
            raise _unreachable(f"the sender of event {safe(p.name)}")
        if isinstance(info, Rejection) or info.task != self.ref.name:
            return None
        return as_task_fact(p, info.task)

    # --- the snapshot -------------------------------------------------------------------
    def load(self, use_events: bool = False, must_exist: bool = True) -> Snapshot:
        """The task's state: its TaskFeedback status, else (or with ``use_events``) its
        events folded here."""
        ref = self.ref
        # The object is read with --from-events too: its uid says which events are this run's.
        obj, cr_error = read_cr(self.kube, ref)
        uid = object_uid(obj, cr_error)
        if not use_events:
            status = status_of(obj)
            if status is not None:
                rv = str((obj or {}).get("metadata", {}).get("resourceVersion") or "")
                return cr_snapshot(ref, status, rv)
            if obj is not None:
                must_exist = False  # the object exists; its watcher has not written yet
        snap = self.from_events(cr_error, uid)
        if must_exist and not snap.state.counters.get("events_applied", 0) and not snap.rejected:
            if cr_error is not None and cr_error.message == NO_CRD:
                raise CliError(f"{NO_CRD} (and task {ref.name!r} has no events in namespace "
                               f"{ref.namespace})", EXIT_NOT_FOUND)
            not_found(f"task {ref.name!r} in namespace {ref.namespace} "
                      "(no TaskFeedback and no events)"
                      + found_elsewhere(self.kube, ref.name, ref.namespace))
        return snap

    def from_events(self, cr_error: ApiError | None = None, uid: str | None = None
                    ) -> Snapshot:
        """The task's own events and the facts its pods sent about themselves, folded here
        (``uid``: its TaskFeedback's, as ``refusal`` takes it)."""
        from tidings.schemas import ParsedEvent, fold_all, parse_event

        ref = self.ref
        try:
            raw, rv = self.kube.list_events(ref.namespace, task_selector(ref.name))
        except ApiError as err:
            if err.forbidden and cr_error is not None and cr_error.forbidden:
                raise ApiError(f"{err.message} (nor get {TASKFEEDBACK_RESOURCE})", err.code,
                               403, err.action) from None
            raise
        parsed: list[ParsedEvent] = []
        refusals = Refusals()
        for event, p in [(e, parse_event(e)) for e in raw] + self._pod_facts():
            why = self.refusal(p, uid)
            if why is None:
                assert isinstance(p, ParsedEvent)
                parsed.append(p)
            else:
                refusals.add(why[0], sender_of(p, event), why[1])
        state = fold_all(ref, parsed)
        return Snapshot(self.observed(state), SOURCE_EVENTS, refusals, rv, object_uid=uid)

    def _pod_facts(self) -> list[tuple[Event | None, ParsedEvent]]:
        """The facts pods of the namespace sent about themselves whose labels name this
        task (as the watcher folds them: an emitter that knows no task id); the others are
        not this task's, so they are neither folded nor counted here."""
        from tidings.schemas import parse_event

        raw, _ = self.kube.list_events(self.ref.namespace, POD_FACTS_SELECTOR)
        return [(None, fact) for obj in raw if (fact := self.pod_fact(parse_event(obj)))]

    def observed(self, state: TaskState) -> TaskState:
        """What the task's pods and its platform object say now (their objects, as the
        watcher reads them), folded beside its facts. What only a watcher that watched can
        know is missing here: how a pod that is gone ended (it shows as deleted), and a wait
        that is over."""
        from tidings.cli.lineage import list_labelled, task_keys
        from tidings.schemas.engine.admission import Retry
        from tidings.schemas.engine.observed import PodVerdict, gone, pod_verdict
        from tidings.schemas.engine.observing import observe
        from tidings.schemas.wire.platform import pod_task

        ref, platform = self.ref, self.platform
        now = datetime.now(UTC)
        verdicts: list[PodVerdict] = []
        listed: set[tuple[str, str]] = set()
        for key in task_keys():
            try:
                pods, _ = list_labelled(self.kube, ref.namespace, ref.name, key)
            except ApiError as err:
                if not err.forbidden:
                    raise
                # Without the right to list pods, the facts still say what they say (get on
                # pods verifies their senders).
                return observe(state, platform=platform.outcome(ref))
            for pod in pods:
                meta = pod.get("metadata") or {}
                name = str(meta.get("name") or "")
                listed.add((name, str(meta.get("uid") or "")))
                v = pod_verdict(pod, seen=now)
                if v is not None:
                    verdicts.append(v)
                if platform.check_claim(ref, pod_task(meta, task_keys()), name) \
                        is Retry.LATER:
                    raise _unreachable(f"the owner pod {safe(name)} claims")
        if state.counters.get("events_applied", 0) and not state.finished:
            verdicts += [gone(name, uid, now) for name, uid in state.pods
                         if (name, uid) not in listed]
        return observe(state, [v for v in verdicts if v.terminal],
                       waiting=[v for v in verdicts if not v.terminal],
                       platform=platform.outcome(ref))
