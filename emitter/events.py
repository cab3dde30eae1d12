"""Building the Events of one emitter instance: each payload validated (a refusal counted
and logged once), addressed (to the task, or, knowing no task id, to the pod itself, from
the identity learned from the token: config.py), numbered (seq) and stamped (a time never
before the last one) as ``schemas.wire.event.build_event`` wants; a packed window's parts kept
valid one by one when the whole is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from tidings._compat import UTC
from tidings.schemas.wire.event import ObjectRef, PodRef, TaskRef, build_event
from tidings.schemas.wire.kinds import KNOWN_PAYLOADS
from tidings.schemas.wire.names import task_id_error
from tidings.schemas.wire.payloads import (
    Metrics,
    Payload,
    Progress,
    SpanSummary,
    Window,
    payload_type,
)
from tidings.schemas.wire.rejection import describe_validation_error

from .aggregate import COUNT, ERRORS, FIRST_START, LAST_END, MAX, MIN, TOTAL, Agg
from .config import Identity, learned_identity, token_says
from .counters import Problems
from .items import Target
from .window import Alone, Packed

# A built event: (namespace, the Event dict).
Built = tuple[str, dict[str, Any]]
# (span names, spans) an event carries: counted once it is delivered.
Carried = tuple[int, int]


class EventBuilder:
    """Used on the sender thread only: it alone numbers the events."""

    def __init__(self, identity: Identity, instance: str, problems: Problems,
                 workers: Callable[[], int]) -> None:
        self.identity = identity
        self.instance = instance
        self.problems = problems
        self.workers = workers  # the task's declared worker count now (0: none)
        self.proof = False  # events carry the sender proof (``learn``)
        self._seq = 1
        # The eventTime of the last event built: each later one carries at least it, so this
        # instance's times never go back with its seq (a clock stepped back by NTP, or
        # progress built after a critical fact emitted later) and, bounded by the same
        # server clock, the watcher orders its facts by their seq.
        self._last_time = 0.0
        self._transport: object = None

    def learn(self, transport: object) -> None:
        """Complete the identity from the transport's token; decide the sender proof."""
        self._transport = transport
        self.identity, self.proof = learned_identity(self.identity, transport)

    def build(self, model: type[BaseModel] | None, fields: Any, t: float, warning: bool,
              target: Target | None) -> Built | None:
        """Validate the payload and build the Event dict; count and log once what cannot be.
        ``fields`` is the model's fields dict, or (model None) a ready payload."""
        try:
            payload: Payload
            if model is None:
                payload = fields
            else:
                if model is Progress:
                    fields["fraction"] = float(fields["fraction"])
                    workers = self.workers()
                    if workers:  # the task's worker count (the completion rule)
                        fields["workers"] = int(workers)
                payload = model(**fields)  # type: ignore[assignment]  # a payload model
            payload_type(payload)  # anything that is not a payload model fails here
        except Exception as e:
            kind = getattr(model, "TYPE", "payload")
            detail = describe_validation_error(e) if isinstance(e, ValidationError) else str(e)
            self.problems.note("invalid", (kind, detail), "tidings: invalid %s not sent: %s",
                               kind, detail)
            return None
        ident = self.identity
        missing = ident.missing(need_task=False)
        if missing:
            self.problems.note(
                "unaddressable", "identity",
                "tidings: events cannot be sent: this process does not know its pod (%s not "
                "set, and %s); run it in a pod with its service-account token mounted, or set "
                "them from the downward API", ", ".join(missing), token_says(self._transport))
            return None
        if target is None and ident.task:
            task, regarding = TaskRef(ident.namespace, ident.task), None
        elif target is None:
            # No task id: a fact about this pod (`kubectl describe pod` lists it); the watcher
            # folds it into the task the pod's platform labels name.
            task = TaskRef(ident.namespace, ident.pod_name)
            regarding = ObjectRef("v1", "Pod", ident.pod_name, ident.namespace, ident.pod_uid)
        else:
            task, regarding = target
            if not task.namespace:
                task = TaskRef(ident.namespace, task.name)
        if regarding is None:  # about a TaskFeedback: its name must be a valid task id
            bad = task_id_error(task.name)
            if bad is not None:
                self.problems.note("unaddressable", ("task", task.name),
                                   "tidings: events cannot be sent: %s", bad)
                return None
        seq = self._seq
        self._seq += 1
        if t < self._last_time:
            t = self._last_time
        self._last_time = t
        try:
            body = build_event(
                task=task, pod=PodRef(ident.pod_name, ident.pod_uid, ident.namespace),
                payload=payload, instance=self.instance, seq=seq,
                time=datetime.fromtimestamp(t, UTC), warning=warning, regarding=regarding,
                task_uid=ident.task_uid, sender_proof=self.proof)
        except Exception as e:  # e.g. a payload that cannot fit: counted, never raised
            self.problems.note("invalid", ("build", type(e).__name__),
                               "tidings: cannot build %s event: %s", payload_type(payload), e)
            return None
        return task.namespace, body

    def alone(self, fact: Alone) -> Built | None:
        """The event of a fact that goes on its own (``window.Alone``)."""
        return self.build(KNOWN_PAYLOADS[fact.kind], fact.fields, fact.time, False, None)

    def summary(self, name: str, a: Agg) -> Built | None:
        """One span name's aggregate as its own SpanSummary event."""
        return self.build(SpanSummary, _summary_fields(name, a), time.time(), False, None)

    def window(self, packed: Packed) -> tuple[Built | None, Carried]:
        """The Window event of what was packed, and the (span names, spans) it carries. One
        bad part must not cost the others: when the whole is invalid, the parts valid on
        their own are kept (each refusal counted once, the spans dropped counted lost)."""
        fields = packed.fields()
        carried = packed.carried
        try:
            payload = Window.model_validate(fields)
        except ValidationError:
            if packed.progress is not None and not self._valid(Progress, packed.progress):
                fields["progress"] = None
            fields["metrics"] = [r for r in packed.metrics if self._valid_metric(r)]
            good = [(r, a) for r, (n, a) in zip(packed.spans, packed.taken, strict=True)
                    if self._valid(SpanSummary, _summary_fields(n, a))]
            fields["spans"] = [r for r, _ in good]
            kept = (len(good), sum(int(a[COUNT]) for _, a in good))
            self.problems.counters.lost(0, carried[1] - kept[1])
            carried = kept
            try:
                payload = Window.model_validate(fields)
            except ValidationError as e:
                if fields["progress"] or fields["metrics"] or fields["spans"]:
                    self.problems.note("invalid", ("Window", str(e)[:80]),
                                       "tidings: invalid window not sent: %s",
                                       describe_validation_error(e))
                return None, carried
        return self.build(None, payload, max(packed.times, default=time.time()), False,
                          None), carried

    def _valid(self, model: type[BaseModel], fields: dict[str, Any]) -> bool:
        try:
            model(**fields)
            return True
        except ValidationError as e:
            detail = describe_validation_error(e)
            self.problems.note("invalid", (model.__name__, detail),
                               "tidings: invalid %s not sent: %s", model.__name__, detail)
            return False

    def _valid_metric(self, row: list[Any]) -> bool:
        try:
            Metrics.model_validate({"metrics": [row]})
            return True
        except ValidationError as e:
            detail = describe_validation_error(e)
            self.problems.note("invalid", ("Metric", detail),
                               "tidings: invalid Metric not sent: %s", detail)
            return False


def _summary_fields(name: str, a: Agg) -> dict[str, Any]:
    return {"name": name, "count": a[COUNT], "total_s": a[TOTAL], "min_s": a[MIN],
            "max_s": a[MAX], "first_start": a[FIRST_START], "last_end": a[LAST_END],
            "errors": a[ERRORS]}
