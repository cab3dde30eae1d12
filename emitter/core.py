"""The Emitter: O(1) non-blocking calls in the workload, one daemon thread that sends.

Critical facts (links, decks, final progress, lineage) go through a bounded FIFO and wait for
budget; spans fold into per-window summaries; non-final progress is one latest-wins slot.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import queue
import threading
import time
import uuid
import weakref
from collections import deque
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from tidings._compat import UTC
from tidings.schemas.constants import NOTE_LIMIT, SCHEMA_VERSION, SEQ_MAX
from tidings.schemas.event import ObjectRef, PodRef, TaskRef, build_event, valid_uid
from tidings.schemas.names import task_id_error
from tidings.schemas.payloads import (
    SPAN_ROWS_MAX,
    DeckReady,
    LogLink,
    Payload,
    PodSpawned,
    Progress,
    SpanSummaries,
    SpanSummary,
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
from .bucket import TokenBucket
from .config import EmitterConfig, Identity
from .retry import SendError, make_retrying
from .transport import Transport, default_transport

log = logging.getLogger("tidings.emitter")

# Built events held by the sender beyond the queue; small, so the queue bound stays the bound.
_OUTBOX_MAX = 64
# The longest the sender sleeps without looking at the clock (window ticks, shutdown).
_MAX_IDLE_S = 1.0

_WAKE = object()  # tells the sender the progress slot was filled
_STOP = object()


class _Flush:
    __slots__ = ("gen",)

    def __init__(self, gen: int) -> None:
        self.gen = gen


# Queue items: (model class or None, fields dict or a ready payload, epoch time, warning,
# target) where target is None (the workload's own task) or (TaskRef, ObjectRef | None).
Item = tuple[Any, Any, float, bool, Any]

_COUNTERS = (
    "accepted", "delivered", "already_existed", "refused", "undelivered", "api_calls",
    "retries", "sunk", "invalid", "unaddressable", "span_summaries", "spans_sent",
    "dropped_after_close", "internal_errors", "span_notes", "spans_unsent",
    "dropped_span_names_pending",
)


class Emitter:
    """Sends typed facts about one task as Kubernetes Events. Thread-safe; never raises.

    Most code uses the module-level functions of ``tidings.emitter``, which share a default
    Emitter; create one explicitly for other settings, identities or transports.
    """

    def __init__(self, config: EmitterConfig | None = None, *, identity: Identity | None = None,
                 transport: Transport | None = None, autostart: bool = True) -> None:
        self.config = config or EmitterConfig.from_env()
        self.identity = identity or Identity.from_env()
        if self.identity.task_uid and not valid_uid(self.identity.task_uid):
            # Events still flow (the bus does not need the uid); describe will not list them.
            log.warning("tidings: TIDINGS_TASK_UID %r is not an object uid; events are sent "
                        "without it", self.identity.task_uid[:80])
        self._transport = transport
        # autostart=False keeps the sender thread off (benchmarks of the queue alone).
        self._autostart = autostart
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """Fresh state; also what a forked child gets, so it never reuses the parent's
        instance id (its seqs would collide with the parent's and read as duplicates)."""
        cfg = self.config
        self.instance = uuid.uuid4().hex
        # SimpleQueue: qsize() + put() measured ~110 ns vs ~600 ns for deque + Lock, and its
        # get(timeout) wakes the sender without a Condition. The bound is checked via qsize().
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._bound = max(1, int(cfg.max_queue))
        self._spans = SpanAggregator(int(cfg.max_span_names))
        self._lock = threading.Lock()  # progress slot and workload-side counters
        self._progress: tuple[float, str, float] | None = None
        self._progress_coalesced = 0
        self._dropped_full = 0
        self._thread: threading.Thread | None = None
        self._dead = False
        self._closed = False
        self._abandon = threading.Event()  # the exit deadline passed: stop retrying
        self._cond = threading.Condition()
        self._flush_gen = 0
        self._flushed = 0
        self._stats_lock = threading.Lock()
        self._n = dict.fromkeys(_COUNTERS, 0)
        self._by_status: dict[int, int] = {}
        self._by_reason: dict[str, int] = {}
        self._last_error = ""
        # Sender-thread state.
        self._seq = 1
        # (namespace, event, (span names, spans) the event carries: counted once delivered).
        self._outbox: deque[tuple[str, dict[str, Any], tuple[int, int]]] = deque()
        self._pending: dict[str, Agg] = {}
        self._progress_out: tuple[float, str, float] | None = None
        self._flush_seen = 0
        self._logged: set[Any] = set()

    # ---- the workload side: O(1), never blocks, never raises ----------------------------
    def log_link(self, name: str, url: str) -> None:
        """A named link (W&B run, dashboard, logs). Critical: never dropped for budget."""
        self._put((LogLink, {"name": name, "url": url}, time.time(), False, None))

    def deck_ready(self, name: str, uri: str) -> None:
        """A report deck is ready at ``uri``. Critical."""
        self._put((DeckReady, {"name": name, "uri": uri}, time.time(), False, None))

    def progress(self, fraction: float, message: str = "", final: bool = False,
                 failed: bool = False) -> None:
        """How far this worker is (0..1). Non-final updates coalesce (latest wins); ``final=True``
        is critical and supersedes any pending update; ``failed=True`` (with ``final``) says the
        work failed (the task's phase becomes Failed). Span windows still pending are sent
        before a final, so the task's last view has them."""
        t = time.time()
        try:
            with self._lock:
                prev, self._progress = self._progress, (None if final else (fraction, message, t))
                if prev is not None:
                    self._progress_coalesced += 1
            if final:
                fields: dict[str, Any] = {"fraction": fraction, "message": message, "final": True}
                if failed:
                    fields["failed"] = True
                self._put((Progress, fields, t, bool(failed), None))
            elif prev is None:
                self._q.put(_WAKE)  # only on empty -> full, so a chatty loop costs no puts
                if self._thread is None:
                    self._start()
        except Exception:  # never into user code
            pass

    def fail(self, message: str = "", fraction: float = 0.0) -> None:
        """Report that this worker failed: a final progress with ``failed=True`` (critical)."""
        self.progress(fraction, message, final=True, failed=True)

    def record_span(self, name: str, start: float, end: float, error: bool = False) -> None:
        """One finished span, ``start``/``end`` in epoch seconds. Coalesced per window."""
        try:
            self._spans.record(name, start, end - start, error)
            if self._thread is None:
                self._start()
        except Exception:
            pass

    def _record(self, name: str, start: float, duration: float, error: bool) -> None:
        # The Span objects' path: they measure the duration with perf_counter.
        try:
            self._spans.record(name, start, duration, error)
            if self._thread is None:
                self._start()
        except Exception:
            pass

    def pod_spawned(self, pod_name: str, pod_uid: str, *, app: str, role: str = "",
                    attempt: int = 0, app_kind: str = "", app_api_version: str = "",
                    app_uid: str = "", namespace: str = "") -> None:
        """Lineage, for controllers: pod ``pod_name``/``pod_uid`` was spawned for ``app``.

        The event is about the app (``regarding``: ``app_api_version``/``app_kind``, or the
        TaskFeedback named ``app`` when no kind is given), in the app's ``namespace`` (default:
        this pod's); ``related`` is this (the controller's) pod. Critical.
        """
        try:
            ns = namespace or self.identity.namespace
            regarding = (ObjectRef(app_api_version or "v1", app_kind, app, ns, app_uid)
                         if app_kind else None)
            self._put((PodSpawned, {"pod_name": pod_name, "pod_uid": pod_uid, "app": app,
                                    "role": role, "attempt": attempt},
                       time.time(), False, (TaskRef(ns, app), regarding)))
        except Exception:
            pass

    def emit(self, payload: Payload, *, warning: bool = False) -> None:
        """Send a ready-made payload about this task (critical; ``warning`` = a failure report).
        Spans and non-final progress should use record_span/progress so they coalesce."""
        self._put((None, payload, time.time(), warning, None))

    def _put(self, item: Item) -> None:
        try:
            if self._closed:
                with self._stats_lock:
                    self._n["dropped_after_close"] += 1
                return
            q = self._q
            # qsize() is O(1); racing producers may overshoot the bound by a few, never more.
            if q.qsize() >= self._bound:
                with self._lock:
                    self._dropped_full += 1
                return
            q.put(item)
            if self._thread is None:
                self._start()
        except Exception:
            pass

    def _start(self) -> None:
        if not self._autostart:
            return
        with self._lock:
            if self._thread is not None:
                return
            t = threading.Thread(target=self._run, name="tidings-emitter", daemon=True)
            self._thread = t
        _register_atexit()
        t.start()

    # ---- control -----------------------------------------------------------------------
    def flush(self, timeout: float = 5.0) -> bool:
        """Send everything emitted so far (spans and pending progress included) now.

        True when all of it was settled within ``timeout``: created on the server (or sunk),
        or permanently refused (see ``stats()['refused']``). Never raises.
        """
        try:
            if self._thread is None:
                if self._q.qsize() == 0 and not len(self._spans) and self._progress is None:
                    return True
                self._start()
            if self._dead or self._thread is None:
                return False
            with self._cond:
                self._flush_gen += 1
                gen = self._flush_gen
            self._q.put(_Flush(gen))
            with self._cond:
                return self._cond.wait_for(lambda: self._flushed >= gen or self._dead,
                                           max(0.0, timeout)) and not self._dead
        except Exception:
            return False

    def close(self, timeout: float | None = None) -> bool:
        """Flush with a deadline (default ``exit_flush_s``), stop the sender, log a summary.
        Later calls are counted and dropped. Runs at interpreter exit for every Emitter."""
        if self._closed:
            return True
        deadline = self.config.exit_flush_s if timeout is None else timeout
        ok = self.flush(deadline)
        self._closed = True
        self._abandon.set()
        self._q.put(_STOP)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(0.5)
        self._log_summary()
        return ok

    def stats(self) -> dict[str, Any]:
        """Counters: what was accepted, delivered, coalesced, dropped, refused, retried."""
        with self._stats_lock:
            out: dict[str, Any] = dict(self._n)
            out["refused_by_status"] = dict(self._by_status)
            out["delivered_by_reason"] = dict(self._by_reason)
            out["last_error"] = self._last_error
        with self._lock:
            out["dropped_queue_full"] = self._dropped_full
            out["progress_coalesced"] = self._progress_coalesced
        spans = self._spans
        out["spans_recorded"] = spans.recorded
        out["dropped_span_names"] = spans.dropped + out.pop("dropped_span_names_pending")
        out["spans_coalesced"] = out["spans_sent"] - out["span_summaries"]
        out["queued"] = self._q.qsize() + len(self._outbox)
        out["instance"] = self.instance
        out["sink"] = bool(self._transport is not None and self._transport.sink)
        return out

    def _log_summary(self) -> None:
        s = self.stats()
        lost = (s["undelivered"] + s["dropped_queue_full"] + s["dropped_span_names"]
                + s["refused"] + s["invalid"] + s["unaddressable"] + s["queued"]
                + s["spans_unsent"])
        log.log(
            logging.WARNING if lost else logging.INFO,
            "tidings emitter %s: delivered=%d (already existed %d) sunk=%d api_calls=%d "
            "retries=%d | coalesced: spans=%d progress=%d | refused=%d %s undelivered=%d "
            "spans_unsent=%d dropped: queue_full=%d span_names=%d invalid=%d unaddressable=%d",
            s["instance"][:8], s["delivered"], s["already_existed"], s["sunk"], s["api_calls"],
            s["retries"], s["spans_coalesced"], s["progress_coalesced"], s["refused"],
            s["refused_by_status"] or "", s["undelivered"] + s["queued"], s["spans_unsent"],
            s["dropped_queue_full"], s["dropped_span_names"], s["invalid"], s["unaddressable"])

    # ---- the sender thread -------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._send_loop()
        except BaseException as e:  # the workload must go on even if the sender cannot
            self._dead = True
            log.error("tidings emitter: sender stopped: %s: %s", type(e).__name__, e)
            with self._cond:
                self._cond.notify_all()

    def _send_loop(self) -> None:
        cfg = self.config
        if self._transport is None:
            self._transport = default_transport()
        if self._transport.sink:
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

    def _send_until_stopped(self, bucket: TokenBucket) -> None:
        window = max(0.01, self.config.span_window_s)
        next_window = time.monotonic() + window
        stop = False
        while not stop:
            wait = min(next_window - time.monotonic(), _MAX_IDLE_S)
            if self._outbox or self._pending or self._progress_out is not None:
                wait = min(wait, bucket.wait_time())
            try:
                item = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
            except queue.Empty:
                item = None
            flush_now = False
            while item is not None:
                if item is _STOP:
                    stop = True
                elif isinstance(item, _Flush):
                    # Everything emitted before the flush is now in the outbox: stop pulling
                    # so a busy workload cannot keep a flush waiting forever.
                    self._flush_seen = max(self._flush_seen, item.gen)
                    flush_now = True
                    break
                elif item is not _WAKE:
                    self._accept(item)
                if stop or len(self._outbox) >= _OUTBOX_MAX:
                    break
                try:
                    item = self._q.get_nowait()
                except queue.Empty:
                    item = None
            now = time.monotonic()
            if flush_now or stop or now >= next_window:
                self._merge_window()
                next_window = now + window
            with self._lock:  # latest wins, also over an update still waiting for budget
                if self._progress is not None:
                    if self._progress_out is not None:
                        self._progress_coalesced += 1
                    self._progress_out, self._progress = self._progress, None
            self._send(bucket)
            if self._flush_seen > self._flushed and not (
                    self._outbox or self._pending or self._progress_out is not None):
                with self._cond:
                    self._flushed = self._flush_seen
                    self._cond.notify_all()
        # Closing: whatever is still queued will never be sent.
        left = self._q.qsize() + len(self._outbox)
        with self._stats_lock:
            self._n["undelivered"] += left
            self._n["spans_unsent"] += sum(c[1] for _, _, c in self._outbox)

    def _retrying(self, attempts: int | None) -> Any:
        def before_sleep(state: Any) -> None:
            with self._stats_lock:
                self._n["retries"] += 1
                exc = state.outcome.exception() if state.outcome else None
                self._last_error = str(exc)

        return make_retrying(abandoned=self._abandon.is_set, sleep=self._abandon.wait,
                             max_attempts=attempts, initial=self.config.retry_initial_s,
                             maximum=self.config.retry_max_s, before_sleep=before_sleep)

    def _send(self, bucket: TokenBucket) -> None:
        """Send in priority order while the budget lasts: critical, span windows, progress."""
        if self._abandon.is_set():
            # Past the exit deadline: no more attempts; what is left is counted as lost.
            left = len(self._outbox) + len(self._pending) + (self._progress_out is not None)
            spans = (sum(c[1] for _, _, c in self._outbox)
                     + sum(int(a[COUNT]) for a in self._pending.values()))
            self._outbox.clear()
            self._pending.clear()
            self._progress_out = None
            with self._stats_lock:
                self._n["undelivered"] += left
                self._n["spans_unsent"] += spans
            return
        while self._outbox:
            if not bucket.try_take():
                return
            ns, body, carried = self._outbox[0]
            ok = self._deliver(ns, body, critical=True)
            self._outbox.popleft()
            if carried[0]:
                self._count_spans(carried, ok)
        while self._pending:
            if not bucket.try_take():
                return
            built, carried = self._take_span_note()
            ok = built is not None and self._deliver(*built, critical=False)
            self._count_spans(carried, ok)
        if self._progress_out is not None:
            if not bucket.try_take():
                return
            fraction, message, t = self._progress_out
            self._progress_out = None
            built = self._build(Progress, {"fraction": fraction, "message": message}, t, False,
                                None)
            if built is not None:
                self._deliver(*built, critical=False)

    def _accept(self, item: Item) -> None:
        with self._stats_lock:
            self._n["accepted"] += 1
        if item[0] is Progress and isinstance(item[1], dict) and item[1].get("final"):
            self._spans_before_final()
        built = self._build(*item)
        if built is not None:
            self._outbox.append((*built, (0, 0)))

    def _spans_before_final(self) -> None:
        """Queue every pending span window ahead of a final progress: a reader that stops at
        the task's end must not miss the spans recorded before it."""
        self._merge_window()
        while self._pending:
            built, carried = self._take_span_note()
            if built is not None:
                self._outbox.append((*built, carried))
            else:
                self._count_spans(carried, False)

    def _merge_window(self) -> None:
        dropped = merge(self._pending, self._spans.drain(), self._spans.max_names)
        if dropped:
            with self._stats_lock:
                self._n["dropped_span_names_pending"] += dropped

    def _count_spans(self, carried: tuple[int, int], delivered: bool) -> None:
        with self._stats_lock:
            if delivered:
                self._n["span_notes"] += 1
                self._n["span_summaries"] += carried[0]
                self._n["spans_sent"] += carried[1]
            else:
                self._n["spans_unsent"] += carried[1]

    def _take_span_note(self) -> tuple[tuple[str, dict[str, Any]] | None, tuple[int, int]]:
        """Take as many pending names as one note holds (oldest first) and build their event:
        a SpanSummaries of compact rows, or a plain SpanSummary for a lone name (which any
        watcher reads, and whose long name the note codec may shorten). Returns the event
        (None when it cannot be built: counted) and the (names, spans) it carries."""
        pending = self._pending
        base = math.floor(min(a[FIRST_START] for a in pending.values()) * 1e6)
        # The note's envelope and fixed fields, with the longest seq there can be.
        room = NOTE_LIMIT - len(orjson.dumps({
            "v": SCHEMA_VERSION, "t": SpanSummaries.TYPE, "i": self.instance, "s": SEQ_MAX,
            "base_us": base, "spans": []}))
        taken: list[tuple[str, Agg]] = []
        rows: list[list[Any]] = []
        for name, a in pending.items():
            row = span_row(name, a[COUNT], a[TOTAL], a[MIN], a[MAX], a[FIRST_START],
                           a[LAST_END], a[ERRORS], base)
            size = len(orjson.dumps(row)) + 1
            if size > room or len(rows) >= SPAN_ROWS_MAX:
                break
            room -= size
            taken.append((name, a))
            rows.append(row)
        if len(taken) < 2:
            name, a = taken[0] if taken else next(iter(pending.items()))
            del pending[name]
            return self._build_summary(name, a), (1, int(a[COUNT]))
        for name, _ in taken:
            del pending[name]
        carried = (len(taken), sum(int(a[COUNT]) for _, a in taken))
        try:
            payload = SpanSummaries(base_us=base, spans=rows)
        except ValidationError:
            # One bad name must not cost the others: keep the rows that pass on their own
            # (each refusal counted once, as for a lone summary).
            good = [(r, a) for r, (n, a) in zip(rows, taken, strict=True)
                    if self._valid_summary(n, a)]
            carried = (len(good), sum(int(a[COUNT]) for _, a in good))
            with self._stats_lock:
                self._n["spans_unsent"] += sum(int(a[COUNT]) for _, a in taken) - carried[1]
            if not good:
                return None, (0, 0)
            try:
                payload = SpanSummaries(base_us=base, spans=[r for r, _ in good])
            except ValidationError as e:
                self._count_once("invalid", ("SpanSummaries", str(e)[:80]),
                                 "tidings: invalid span summaries not sent: %s",
                                 describe_validation_error(e))
                return None, carried
        return self._build(None, payload, time.time(), False, None), carried

    def _summary_fields(self, name: str, a: Agg) -> dict[str, Any]:
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

    def _build_summary(self, name: str, a: Agg) -> tuple[str, dict[str, Any]] | None:
        return self._build(SpanSummary, self._summary_fields(name, a), time.time(), False, None)

    def _build(self, model: Any, fields: Any, t: float, warning: bool,
               target: Any) -> tuple[str, dict[str, Any]] | None:
        """Validate the payload and build the Event dict; count and log once what cannot be."""
        try:
            if model is None:
                payload = fields
            else:
                if model is Progress:
                    fields["fraction"] = float(fields["fraction"])
                    if self.config.workers:  # the task's worker count (the completion rule)
                        fields["workers"] = int(self.config.workers)
                payload = model(**fields)
            payload_type(payload)  # anything that is not a payload model fails here
        except Exception as e:
            kind = getattr(model, "TYPE", "payload")
            detail = describe_validation_error(e) if isinstance(e, ValidationError) else str(e)
            self._count_once("invalid", (kind, detail), "tidings: invalid %s not sent: %s",
                             kind, detail)
            return None
        ident = self.identity
        if target is None:
            missing = ident.missing()
            task, regarding = TaskRef(ident.namespace, ident.task), None
        else:
            missing = ident.missing(need_task=False)
            task, regarding = target
        if missing:
            self._count_once("unaddressable", "identity",
                             "tidings: events cannot be sent: %s not set (downward API)",
                             ", ".join(missing))
            return None
        if regarding is None:  # about a TaskFeedback: its name must be a valid task id
            bad = task_id_error(task.name)
            if bad is not None:
                self._count_once("unaddressable", ("task", task.name),
                                 "tidings: events cannot be sent: %s", bad)
                return None
        seq = self._seq
        self._seq += 1
        try:
            body = build_event(
                task=task, pod=PodRef(ident.pod_name, ident.pod_uid, ident.namespace),
                payload=payload, instance=self.instance, seq=seq,
                time=datetime.fromtimestamp(t, UTC), warning=warning, regarding=regarding,
                task_uid=ident.task_uid,
                sender_proof=bool(getattr(self._transport, "pod_bound", False)))
        except Exception as e:  # e.g. a payload that cannot fit: counted, never raised
            self._count_once("invalid", ("build", type(e).__name__),
                             "tidings: cannot build %s event: %s", payload_type(payload), e)
            return None
        return task.namespace, body

    def _deliver(self, ns: str, body: dict[str, Any], *, critical: bool) -> bool:
        transport = self._transport
        assert transport is not None

        def attempt() -> bool:
            if not transport.sink:
                with self._stats_lock:
                    self._n["api_calls"] += 1
            return transport.post(ns, body)

        retrying = self._retry_critical if critical else self._retry_coalescible
        try:
            created = retrying(attempt)
        except SendError as e:
            if e.retryable:  # abandoned at exit, or a coalescible send out of attempts
                with self._stats_lock:
                    self._n["undelivered"] += 1
                    self._last_error = str(e)
                return False
            with self._stats_lock:
                self._n["refused"] += 1
                self._by_status[e.status] = self._by_status.get(e.status, 0) + 1
                self._last_error = str(e)
            key = (e.status, e.reason)
            if key not in self._logged:
                self._logged.add(key)
                log.warning("tidings: event refused, not retried (%s); similar refusals are "
                            "counted silently", e)
            return False
        except Exception as e:  # a bug in a transport must not kill the sender
            self._count_once("undelivered", ("internal", type(e).__name__),
                             "tidings: send failed: %s: %s", type(e).__name__, e)
            return False
        reason = body.get("reason", "")
        with self._stats_lock:
            self._n["delivered"] += 1
            if transport.sink:
                self._n["sunk"] += 1
            if not created:
                self._n["already_existed"] += 1
            self._by_reason[reason] = self._by_reason.get(reason, 0) + 1
        return True

    def _count_once(self, counter: str, key: Any, msg: str, *args: Any) -> None:
        with self._stats_lock:
            self._n[counter] += 1
        if key not in self._logged:
            self._logged.add(key)
            log.warning(msg, *args)


# ---- process-wide hooks: exit flush and fork safety --------------------------------------
_LIVE: weakref.WeakSet[Emitter] = weakref.WeakSet()
_atexit_registered = False
_atexit_lock = threading.Lock()


def _register_atexit() -> None:
    global _atexit_registered
    with _atexit_lock:
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_close_all)


def _close_all() -> None:
    """At interpreter exit: flush every started Emitter, each within its exit_flush_s."""
    for em in list(_LIVE):
        if em._thread is not None and not em._closed:
            with contextlib.suppress(Exception):
                em.close()


def _after_fork_in_child() -> None:
    for em in list(_LIVE):
        em._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
