"""The Emitter's sender thread: takes what the workload queued, builds the Events and
creates them within the pod's budget: critical facts at once, the coalescible ones (the
latest progress, the metrics' latest values, the span aggregates) packed into one Window
event per window (``span_window_s``), the first as soon as there is something to send.

It alone touches the outbox, the pending span windows and the sequence numbers, so they need
no lock; what it shares with the workload side is in items.py (the queue, the progress slot,
the flush gate) and counters.py. The Emitter builds it on its own thread: this module loads
the payload models (pydantic), which ``import tidings.emitter`` and the workload's calls
never do.
"""

from __future__ import annotations

import logging
import math
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Hashable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
import tenacity
from pydantic import BaseModel, ValidationError

from tidings._compat import UTC
from tidings.kube.flowcontrol import TokenBucket
from tidings.schemas.constants import NOTE_LIMIT, SCHEMA_VERSION, SEQ_MAX
from tidings.schemas.event import ObjectRef, PodRef, TaskRef, build_event
from tidings.schemas.kinds import KNOWN_PAYLOADS
from tidings.schemas.names import task_id_error
from tidings.schemas.payloads import (
    METRIC_POINTS_MAX,
    METRIC_ROWS_MAX,
    NON_FINITE,
    SPAN_ROWS_MAX,
    Metric,
    Metrics,
    Payload,
    Progress,
    SpanSummary,
    Window,
    metric_wire_value,
    payload_type,
    span_row,
)
from tidings.schemas.rejection import describe_validation_error

from .aggregate import (
    COUNT,
    ERRORS,
    FIRST_START,
    LAST_END,
    MAX,
    MIN,
    TOTAL,
    Agg,
    SpanAggregator,
    merge,
)
from .config import EmitterConfig, Identity
from .counters import Counters, Problem
from .curves import Curve
from .items import (
    STOP,
    WAKE,
    Flush,
    FlushGate,
    LatestKey,
    LatestSlot,
    LatestUpdate,
    ProgressSlot,
    ProgressUpdate,
    QueueItem,
    Target,
)
from .retry import FirstTryFast, SendError, make_retrying

if TYPE_CHECKING:  # the Kubernetes client loads on the sender thread (_send_loop)
    from .transport import Transport

log = logging.getLogger("tidings.emitter")

# Who the API server says the sender is, in a 403's message.
_SERVICE_ACCOUNT = re.compile(r'"system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)"')


def refusal_fix(e: SendError) -> str:
    """What fixes a refusal, when we know: a workload's ServiceAccount without its RoleBinding
    (403 on events) gets the exact command that binds it."""
    if e.status != 403:
        return ""
    found = _SERVICE_ACCOUNT.search(str(e))
    if found is None:
        return ("; the sender needs the ClusterRole tidings-workload bound in its namespace "
                "(kubectl create rolebinding ... --clusterrole=tidings-workload)")
    ns, sa = found.groups()
    return (f"; bind its ServiceAccount to tidings-workload: kubectl -n {ns} create rolebinding "
            f"{sa}-tidings-workload --clusterrole=tidings-workload --serviceaccount={ns}:{sa}")

# Built events held by the sender beyond the queue; small, so the queue bound stays the bound.
_OUTBOX_MAX = 64
# The longest the sender sleeps without looking at the clock (window ticks, shutdown).
_MAX_IDLE_S = 1.0
# How often a sender with nothing coalescible looks again: the first fact after a quiet
# window goes out within this, the next ones one window later.
_QUIET_CHECK_S = 0.5

# A built event: (namespace, the Event dict).
Built = tuple[str, dict[str, Any]]
# (span names, spans) an event carries: counted once it is delivered.
Carried = tuple[int, int]


def _metric_row(fields: dict[str, Any], curve: Curve | None) -> list[Any]:
    """A metric's row, all six fields: name, value, step, then the min and max its curve has
    to tell (or None) and its points (flat): the sample's first point when it is unsent."""
    value, step = fields["value"], fields["step"]
    wire = metric_wire_value(value)  # (NaN and the infinities as their strings)
    if curve is None:
        return [fields["name"], wire, step, None, None, []]
    lo, hi = curve.extremes(value)
    points: list[Any] = []
    unsent = curve.unsent(step, value)
    if unsent and unsent[0][0] == min(curve.firsts.values(), key=lambda p: p[0])[0]:
        points.extend(Curve.wire(unsent[0]))
    return [fields["name"], wire, step, lo, hi, points]


def _add_points(row: list[Any], curve: Curve, room: int) -> int:
    """Add the curve's unsent points to ``row`` (oldest first) while they fit in ``room``
    bytes; returns the bytes they take."""
    before = len(orjson.dumps(_trimmed(row)))
    points = row[5]
    used = 0
    value = NON_FINITE[row[1]] if isinstance(row[1], str) else row[1]
    for p in curve.unsent(row[2], value):
        step, value = Curve.wire(p)
        if len(points) >= 2 * METRIC_POINTS_MAX:
            break
        if step in points[::2]:
            continue  # (the first point, already in the row)
        points.extend((step, value))
        size = len(orjson.dumps(_trimmed(row))) - before
        if size > room:
            del points[-2:]
            break
        used = size
    return used


def _told(row: list[Any], curve: Curve) -> None:
    """The row is in a note: its extremes are told and its points (and its own, when that
    is a bucket's first) are sent."""
    _, wire, step, lo, hi, points = row
    value = NON_FINITE[wire] if isinstance(wire, str) else wire
    curve.told(value, lo, hi)
    sent = set(zip(points[::2], points[1::2], strict=True))
    for p in curve.firsts.values():
        if (p[0] == step and p[1] == value) or Curve.wire(p) in sent:
            p[2] = True


def _trimmed(row: list[Any]) -> list[Any]:
    """The row as the wire has it: trailing unset fields (None, no points) left out."""
    out = list(row)
    while len(out) > 3 and out[-1] in (None, []):
        out.pop()
    return out


class Sender:
    """The sender's state and loop; ``run`` is the thread's target. Never raises into it."""

    def __init__(self, config: EmitterConfig, identity: Identity, instance: str, *,
                 q: queue.SimpleQueue[QueueItem], spans: SpanAggregator, slot: ProgressSlot,
                 latest: LatestSlot, counters: Counters, abandon: threading.Event,
                 gate: FlushGate, transport: Transport | None) -> None:
        self.config = config
        self.identity = identity
        self.instance = instance
        self.transport = transport  # None: resolved on the thread (it may read files)
        self._q = q
        self._spans = spans
        self._slot = slot
        self._latest = latest
        self._n = counters
        self._abandon = abandon  # the exit deadline passed: stop retrying
        self._gate = gate  # flushes: the workload numbers them, the sender settles them
        self._seq = 1
        # The eventTime of the last event built: each later one carries at least it, so this
        # instance's times never go back with its seq (a clock stepped back by NTP, or
        # progress built after a critical fact emitted later) and, bounded by the same
        # server clock, the watcher orders its facts by their seq.
        self._last_time = 0.0
        self.outbox: deque[tuple[str, dict[str, Any], Carried]] = deque()
        self.pending: dict[str, Agg] = {}
        # The latest value per name (metrics) of the windows taken so far, oldest name first.
        self.latest_out: dict[LatestKey, LatestUpdate] = {}
        self._progress_out: ProgressUpdate | None = None
        # A window closed with coalescible facts: send them (as budget allows) before the next.
        self._due = False
        self._flush_seen = 0
        self._logged: set[Hashable] = set()
        self._proof = False  # events carry the sender proof (set with the transport)

    # ---- what the workload side asks ----------------------------------------------------
    def queued(self) -> int:
        return self._q.qsize() + len(self.outbox)

    # ---- the thread ---------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._send_loop()
        except BaseException as e:  # the workload must go on even if the sender cannot
            log.error("tidings emitter: sender stopped: %s: %s", type(e).__name__, e)
            self._gate.die()

    def _send_loop(self) -> None:
        cfg = self.config
        if self.transport is None:
            from .transport import default_transport

            self.transport = default_transport()
        self._learn_identity()
        if self.transport.sink:
            log.info("tidings: no cluster configured; events are counted and logged at DEBUG "
                     "on logger 'tidings.emitter'")
        bucket = TokenBucket(cfg.rate, cfg.burst)
        self._retry_critical = self._retrying(None)
        self._retry_coalescible = self._retrying(max(1, int(cfg.coalescible_attempts)))
        while True:
            try:
                self._send_until_stopped(bucket)
                return
            except Exception as e:  # a bug on one item must not end delivery of the rest
                self._count_once("internal_errors", ("loop", type(e).__name__),
                                 "tidings emitter: internal error: %s: %s", type(e).__name__, e)
                self._abandon.wait(0.1)

    def _coalescible_waiting(self) -> bool:
        return bool(self.pending or self.latest_out or self._progress_out is not None)

    def _send_until_stopped(self, bucket: TokenBucket) -> None:
        window = max(0.01, self.config.span_window_s)
        next_window = time.monotonic()
        stop = False
        while not stop:
            wait = min(next_window - time.monotonic(), _MAX_IDLE_S)
            if self.outbox or (self._due and self._coalescible_waiting()):
                wait = min(wait, bucket.wait_time())
            item: QueueItem | None
            try:
                item = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
            except queue.Empty:
                item = None
            flush_now = False
            while item is not None:
                if item is STOP:
                    stop = True
                elif isinstance(item, Flush):
                    # Everything emitted before the flush is now in the outbox: stop pulling
                    # so a busy workload cannot keep a flush waiting forever.
                    self._flush_seen = max(self._flush_seen, item.gen)
                    flush_now = True
                    break
                elif item is not WAKE and isinstance(item, tuple):
                    self._accept(*item)
                if stop or len(self.outbox) >= _OUTBOX_MAX:
                    break
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    item = None
            now = time.monotonic()
            # Latest wins, also over an update still waiting for budget.
            self._progress_out = self._slot.take(self._progress_out)
            if flush_now or stop or now >= next_window:
                # (Stopping: only what was emitted is left to send, no curve's leftovers.)
                self._merge_window(retell=not stop)
                if self._coalescible_waiting():
                    # One Window event (more only if they overflow a note) per window.
                    self._due = True
                    next_window = now + window
                else:
                    next_window = now + min(window, _QUIET_CHECK_S)
            self._send(bucket)
            if self._flush_seen > self._gate.settled and not (
                    self.outbox or self._coalescible_waiting()):
                self._gate.settle(self._flush_seen)
        # Closing: whatever is still queued will never be sent.
        self._n.lost(self.queued() + len(self.latest_out), sum(c[1] for _, _, c in self.outbox))

    def _learn_identity(self) -> None:
        """What the environment did not say about this pod, from the pod its token is bound
        to; and whether events carry the sender proof: as the transport says, else when the
        token is bound to the very pod the events speak for."""
        bound = getattr(self.transport, "bound_pod", None)
        self.identity = self.identity.completed_by(bound)
        forced = getattr(self.transport, "pod_bound", None)
        self._proof = bool(forced) if forced is not None else self.identity.bound_to(bound)

    def _retrying(self, attempts: int | None) -> FirstTryFast:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self._n.retry(str(exc))
            if isinstance(exc, SendError) and exc.status == 0 and "unreachable" not in \
                    self._logged:
                self._logged.add("unreachable")
                log.warning("tidings: the API server %s does not answer (%s); retrying in the "
                            "background", getattr(self.transport, "server", "?"), exc)

        return make_retrying(abandoned=self._abandon.is_set, sleep=self._abandon.wait,
                             max_attempts=attempts, initial=self.config.retry_initial_s,
                             maximum=self.config.retry_max_s, before_sleep=before_sleep)

    def _send(self, bucket: TokenBucket) -> None:
        """Send while the budget lasts: critical facts first, then (once the window closed)
        the coalescible ones, as few Window events as hold them."""
        if self._abandon.is_set():
            # Past the exit deadline: no more attempts; what is left is counted as lost.
            left = (len(self.outbox) + len(self.pending) + len(self.latest_out)
                    + (self._progress_out is not None))
            spans = (sum(c[1] for _, _, c in self.outbox)
                     + sum(int(a[COUNT]) for a in self.pending.values()))
            self.outbox.clear()
            self.pending.clear()
            self.latest_out.clear()
            self._progress_out = None
            self._n.lost(left, spans)
            return
        while self.outbox:
            if not bucket.try_take():
                return
            ns, body, carried = self.outbox[0]
            ok = self._deliver(ns, body, critical=True)
            self.outbox.popleft()
            if carried[0]:
                self._n.span_note(*carried, delivered=ok)
        if not self._due:
            return
        while self._coalescible_waiting():
            if not bucket.try_take():
                return
            built, carried, told = self.take_window()
            ok = built is not None and self._deliver(*built, critical=False)
            if carried[0]:
                self._n.span_note(*carried, delivered=ok)
            if not ok and told:
                self._untold(told)
        self._due = False

    def _accept(self, kind: str | None, fields: Any, t: float, warning: bool,
                target: Target | None) -> None:
        self._n.accept()
        if kind == Progress.TYPE and fields.get("final"):
            if self._progress_out is not None:
                # A non-final progress the sender still holds is older than the final, which
                # supersedes it in the fold: sending it would cost an Event for nothing.
                self._progress_out = None
                with self._slot.lock:
                    self._slot.coalesced += 1
            self._spans_before_final()
        built = self._build(KNOWN_PAYLOADS[kind] if kind else None, fields, t, warning, target)
        if built is not None:
            self.outbox.append((*built, (0, 0)))

    def _spans_before_final(self) -> None:
        """Queue every pending span aggregate and metric ahead of a final progress: a reader
        that stops at the task's end must not miss what was recorded before it. (A pending
        non-final progress is not: the final supersedes it, ``_accept``.)"""
        self._merge_window()
        while self.pending or self.latest_out:
            built, carried, _ = self.take_window(with_progress=False)
            if built is not None:
                self.outbox.append((*built, carried))
            elif carried[0]:
                self._n.span_note(*carried, delivered=False)

    def _merge_window(self, retell: bool = True) -> None:
        dropped = merge(self.pending, self._spans.drain(), self._spans.max_names)
        if dropped:
            self._n.span_names_dropped(dropped)
        # A name still waiting from an earlier window takes the newer value (coalesced).
        latest, out = self._latest.drain(), self.latest_out
        replaced = sum(1 for key in latest if key in out)
        out.update(latest)
        # A name with no new value whose curve has points or extremes still to tell.
        for key, update in self._latest.untold().items() if retell else ():
            out.setdefault(key, update)
        if replaced:
            with self._latest.lock:
                self._latest.coalesced += replaced

    def _untold(self, names: list[str]) -> None:
        """A metrics note was lost: the extremes it told are told again."""
        with self._latest.lock:
            for name in names:
                curve = self._latest.curves.get((Metric.TYPE, name))
                if curve is not None:
                    curve.forget_told()

    def _valid_metric(self, row: list[Any]) -> Metric | None:
        try:
            return Metrics.model_validate({"metrics": [row]}).metrics[0]
        except ValidationError as e:
            detail = describe_validation_error(e)
            self._count_once("invalid", ("Metric", detail), "tidings: invalid Metric not sent: %s",
                             detail)
            return None

    def take_window(self, with_progress: bool = True
                    ) -> tuple[Built | None, Carried, list[str]]:
        """Take as much of the waiting coalescible facts as one note holds: the progress,
        then the metrics (oldest name first), then the span aggregates (oldest first), then,
        in the room they leave, the metrics' unsent sample points; build their Window event.
        Each metric row carries what its curve has to tell (curves.py): the extremes beyond
        what was told and the sample's first point when unsent. Returns the event (None when
        nothing valid was left: counted), the (span names, spans) it carries and the metric
        names whose extremes it tells. A progress whose message alone fills a note goes as
        its own (shrunk) Progress event; a coalescible named fact other than a metric, as
        its own event."""
        # The note's envelope with the longest seq there can be; each part's key and
        # brackets are charged when the part is started.
        room = NOTE_LIMIT - len(orjson.dumps({
            "v": SCHEMA_VERSION, "t": Window.TYPE, "i": self.instance, "s": SEQ_MAX}))
        times: list[float] = []
        progress: dict[str, Any] | None = None
        if with_progress and self._progress_out is not None:
            fraction, message, t = self._progress_out
            self._progress_out = None
            progress = {"fraction": float(fraction), "message": message}
            if self.config.workers:
                progress["workers"] = int(self.config.workers)
            size = len(orjson.dumps(progress)) + len(',"progress":')
            if size > room:  # a long message: its own note, shrunk by the note codec
                return self._build(Progress, progress, t, False, None), (0, 0), []
            room -= size
            times.append(t)
        out = self.latest_out
        slot = self._latest
        metrics: list[list[Any]] = []
        curves: list[tuple[list[Any], Curve]] = []
        with slot.lock:
            for key, (values, t) in out.items():
                if key[0] != Metric.TYPE:
                    if progress is None and not metrics:
                        del out[key]
                        return self._build(KNOWN_PAYLOADS[key[0]], dict(values), t, False,
                                           None), (0, 0), []
                    continue
                curve = slot.curves.get(key)
                row = _metric_row(values, curve)
                size = (len(orjson.dumps(_trimmed(row)))
                        + (1 if metrics else len(',"metrics":[]')))
                if size > room or len(metrics) >= METRIC_ROWS_MAX:
                    break
                room -= size
                metrics.append(row)
                times.append(t)
                if curve is not None:
                    curves.append((row, curve))
        for row in metrics:
            del out[(Metric.TYPE, row[0])]
        pending = self.pending
        base = 0
        taken: list[tuple[str, Agg]] = []
        rows: list[list[Any]] = []
        if pending:
            base = math.floor(min(a[FIRST_START] for a in pending.values()) * 1e6)
            head = len(f',"base_us":{base},"spans":[]')
            for name, a in pending.items():
                row = span_row(name, int(a[COUNT]), a[TOTAL], a[MIN], a[MAX], a[FIRST_START],
                               a[LAST_END], int(a[ERRORS]), base)
                size = len(orjson.dumps(row)) + (1 if rows else head)
                if size > room or len(rows) >= SPAN_ROWS_MAX:
                    break
                room -= size
                taken.append((name, a))
                rows.append(row)
            for name, _ in taken:
                del pending[name]
        with slot.lock:
            for row, curve in curves:
                if room > 0:
                    room -= _add_points(row, curve, room)
                _told(row, curve)
        told = [row[0] for row, _ in curves]
        metrics = [_trimmed(row) for row in metrics]
        carried = (len(taken), sum(int(a[COUNT]) for _, a in taken))
        fields: dict[str, Any] = {"progress": progress, "metrics": metrics, "base_us": base,
                                  "spans": rows}
        try:
            payload = Window.model_validate(fields)
        except ValidationError:
            # One bad part must not cost the others: keep those valid on their own (each
            # refusal counted once).
            if progress is not None and not self._valid(Progress, progress):
                fields["progress"] = None
            fields["metrics"] = [r for r in metrics if self._valid_metric(r) is not None]
            good = [(r, a) for r, (n, a) in zip(rows, taken, strict=True)
                    if self._valid_summary(n, a)]
            fields["spans"] = [r for r, _ in good]
            kept = (len(good), sum(int(a[COUNT]) for _, a in good))
            self._n.lost(0, carried[1] - kept[1])
            carried = kept
            try:
                payload = Window.model_validate(fields)
            except ValidationError as e:
                if fields["progress"] or fields["metrics"] or fields["spans"]:
                    self._count_once("invalid", ("Window", str(e)[:80]),
                                     "tidings: invalid window not sent: %s",
                                     describe_validation_error(e))
                return None, carried, told
        return (self._build(None, payload, max(times, default=time.time()), False, None),
                carried, told)

    def _valid(self, model: type[BaseModel], fields: dict[str, Any]) -> bool:
        try:
            model(**fields)
            return True
        except ValidationError as e:
            detail = describe_validation_error(e)
            self._count_once("invalid", (model.__name__, detail), "tidings: invalid %s not "
                             "sent: %s", model.__name__, detail)
            return False

    @staticmethod
    def _summary_fields(name: str, a: Agg) -> dict[str, Any]:
        return {"name": name, "count": a[COUNT], "total_s": a[TOTAL], "min_s": a[MIN],
                "max_s": a[MAX], "first_start": a[FIRST_START], "last_end": a[LAST_END],
                "errors": a[ERRORS]}

    def _valid_summary(self, name: str, a: Agg) -> bool:
        try:
            SpanSummary(**self._summary_fields(name, a))
            return True
        except ValidationError as e:
            detail = describe_validation_error(e)
            self._count_once("invalid", ("SpanSummary", detail),
                             "tidings: invalid SpanSummary not sent: %s", detail)
            return False

    def build_summary(self, name: str, a: Agg) -> Built | None:
        return self._build(SpanSummary, self._summary_fields(name, a), time.time(), False, None)

    def _build(self, model: type[BaseModel] | None, fields: Any, t: float, warning: bool,
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
                    if self.config.workers:  # the task's worker count (the completion rule)
                        fields["workers"] = int(self.config.workers)
                payload = model(**fields)  # type: ignore[assignment]  # a payload model
            payload_type(payload)  # anything that is not a payload model fails here
        except Exception as e:
            kind = getattr(model, "TYPE", "payload")
            detail = describe_validation_error(e) if isinstance(e, ValidationError) else str(e)
            self._count_once("invalid", (kind, detail), "tidings: invalid %s not sent: %s",
                             kind, detail)
            return None
        ident = self.identity
        missing = ident.missing(need_task=False)
        if missing:
            self._count_once(
                "unaddressable", "identity",
                "tidings: events cannot be sent: this process does not know its pod (%s not "
                "set, and %s); run it in a pod with its service-account token mounted, or set "
                "them from the downward API", ", ".join(missing), self._token_says())
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
                self._count_once("unaddressable", ("task", task.name),
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
                task_uid=ident.task_uid, sender_proof=self._proof)
        except Exception as e:  # e.g. a payload that cannot fit: counted, never raised
            self._count_once("invalid", ("build", type(e).__name__),
                             "tidings: cannot build %s event: %s", payload_type(payload), e)
            return None
        return task.namespace, body

    def _token_says(self) -> str:
        if self.transport is None or self.transport.sink:
            return "no cluster is configured"
        if not hasattr(self.transport, "bound_pod"):
            return "the transport names no token"
        bound = self.transport.bound_pod
        if bound is None:
            return "the service-account token is bound to no pod"
        return f"the service-account token is bound to another pod ({bound.name})"

    def _deliver(self, ns: str, body: dict[str, Any], *, critical: bool) -> bool:
        transport = self.transport
        assert transport is not None
        counters = self._n

        def attempt() -> bool:
            if not transport.sink:
                counters.api_call()
            return transport.post(ns, body)

        retrying = self._retry_critical if critical else self._retry_coalescible
        try:
            created = retrying(attempt)
        except SendError as e:
            if e.retryable:  # abandoned at exit, or a coalescible send out of attempts
                counters.give_up(str(e))
                return False
            counters.refuse(e.status, str(e))
            key = (e.status, e.reason)
            if key not in self._logged:
                self._logged.add(key)
                log.warning("tidings: event refused, not retried (%s)%s; similar refusals are "
                            "counted silently", e, refusal_fix(e))
            return False
        except Exception as e:  # a bug in a transport must not kill the sender
            self._count_once("undelivered", ("internal", type(e).__name__),
                             "tidings: send failed: %s: %s", type(e).__name__, e)
            return False
        counters.deliver(body.get("reason", ""), sunk=transport.sink, created=created)
        return True

    def _count_once(self, counter: Problem, key: Hashable, msg: str, *args: Any) -> None:
        self._n.problem(counter)
        if key not in self._logged:
            self._logged.add(key)
            log.warning(msg, *args)
