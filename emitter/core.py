"""The Emitter's workload side: O(1) calls that never block or raise, and the control calls
(flush, close, stats). The sending happens on one daemon thread (sender.py).

Critical facts (links, decks, final progress, lineage, declared quiet periods) go through a
bounded FIFO and wait for budget; spans fold into per-window summaries; metrics keep their
latest value per name per window; non-final progress is one latest-wins slot.

Text enters here and is made valid at once (``valid_text``: a lone surrogate, what Python
makes of invalid UTF-8 in ``argv``, becomes U+FFFD), so no text the workload hands over can
fail later on the sender thread, where the fact would be lost.

Nothing here loads the payload models (pydantic): the sender (sender.py) is built on its own
thread, which validates what the workload handed it, so ``import tidings.emitter`` and the
calls stay light.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time
import uuid
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tidings.schemas.wire.refs import ObjectRef, TaskRef, valid_uid
from tidings.schemas.wire.text import valid_text

from .aggregate import SpanAggregator
from .config import EmitterConfig, Identity
from .counters import Counters
from .items import STOP, WAKE, Flush, FlushGate, Item, LatestSlot, ProgressSlot, QueueItem
from .outcome import exit_flush_begins, install_crash_hooks, install_sigterm_flush

if TYPE_CHECKING:  # the sender, the payload models and the transport load on the sender thread
    from tidings.schemas.wire.payloads import Payload

    from .sender import Sender
    from .transport import Transport

log = logging.getLogger("tidings.emitter")


class Emitter:
    """Sends typed facts about one task as Kubernetes Events. Thread-safe; never raises.

    Most code uses the module-level functions of ``tidings.emitter``, which share a default
    Emitter; create one explicitly for other settings, identities or transports.
    """

    #: The sender thread's class (None: sender.Sender; benchmarks swap in a baseline).
    sender_type: type[Sender] | None = None

    def __init__(self, config: EmitterConfig | None = None, *, identity: Identity | None = None,
                 transport: Transport | None = None, autostart: bool = True) -> None:
        self.config = config or EmitterConfig.from_env()
        self.identity = identity or Identity.from_env()
        if self.identity.task_uid and not valid_uid(self.identity.task_uid):
            # Events still flow (the bus does not need the uid); describe will not list them.
            log.warning("tidings: TIDINGS_TASK_UID %r is not an object uid; events are sent "
                        "without it", self.identity.task_uid[:80])
        # autostart=False keeps the sender thread off (benchmarks of the queue alone).
        self._autostart = autostart
        self._reset(transport)
        _LIVE.add(self)

    def _reset(self, transport: Transport | None) -> None:
        """Fresh state; also what a forked child gets, so it never reuses the parent's
        instance id (its seqs would collide with the parent's and read as duplicates)."""
        cfg = self.config
        self.instance = uuid.uuid4().hex
        # SimpleQueue: qsize() + put() measured ~110 ns vs ~600 ns for deque + Lock, and its
        # get(timeout) wakes the sender without a Condition. The bound is checked via qsize().
        self._q: queue.SimpleQueue[QueueItem] = queue.SimpleQueue()
        self._bound = max(1, int(cfg.max_queue))
        self._spans = SpanAggregator(int(cfg.max_span_names))
        self._lock = threading.Lock()  # starting the thread
        self._progress = ProgressSlot()
        # The latest valid fraction this worker reported: what a failure keeps by default.
        self._fraction = 0.0
        self._final = False  # a final progress was emitted (an exit then reports nothing)
        self._latest = LatestSlot(int(cfg.max_span_names))
        self._counters = Counters()
        self._losses_seen = 0  # losses() as the previous flush saw it
        self._thread: threading.Thread | None = None
        self._closed = False
        self._abandon = threading.Event()  # the exit deadline passed: stop retrying
        self._gate = FlushGate()
        self._transport = transport
        self._sender: Sender | None = None  # built on its thread (_run_sender)

    # ---- the workload side: O(1), never blocks, never raises ----------------------------
    def log_link(self, name: str, url: str) -> None:
        """A named link (W&B run, dashboard, logs). Critical: never dropped for budget."""
        self._put(("LogLink", {"name": _valid(name), "url": _valid(url)}, time.time(), False,
                   None))

    def deck_ready(self, name: str, uri: str) -> None:
        """A report deck is ready at ``uri``. Critical."""
        self._put(("DeckReady", {"name": _valid(name), "uri": _valid(uri)}, time.time(), False,
                   None))

    def progress(self, fraction: float, message: str = "", final: bool = False,
                 failed: bool = False) -> None:
        """How far this worker is (0..1). Non-final updates coalesce (latest wins); ``final=True``
        is critical and supersedes any pending update; ``failed=True`` (with ``final``) says the
        work failed (the task's phase becomes Failed). Span windows still pending are sent
        before a final, so the task's last view has them."""
        t = time.time()
        try:
            if type(message) is str and not message.isascii():  # (inline: a chatty loop's path)
                message = valid_text(message)
            # An invalid fraction (refused when sent) is never what a failure keeps. A bare
            # try: contextlib.suppress costs ~0.5 us here, more than the rest of the call.
            try:
                if 0.0 <= fraction <= 1.0:
                    self._fraction = fraction
            except TypeError:
                pass
            slot = self._progress  # inline, not slot.put(): ~200 ns on a chatty loop
            with slot.lock:
                prev, slot.value = slot.value, (None if final else (fraction, message, t))
                if prev is not None:
                    slot.coalesced += 1
            if final:
                self._final = True
                fields: dict[str, Any] = {"fraction": fraction, "message": message, "final": True}
                if failed:
                    fields["failed"] = True
                self._put(("Progress", fields, t, bool(failed), None))
            elif prev is None:
                self._q.put(WAKE)  # only on empty -> full, so a chatty loop costs no puts
                if self._thread is None:
                    self._start()
        except Exception:  # never into user code
            pass

    def fail(self, message: str = "", fraction: float | None = None) -> None:
        """Report that this worker failed: a final progress with ``failed=True`` (critical).
        It keeps the progress made (the latest fraction reported) unless ``fraction`` says
        otherwise, so a crash at 75 % reads "Failed 75 %"."""
        self.progress(self._fraction if fraction is None else fraction, message, final=True,
                      failed=True)

    @property
    def final_sent(self) -> bool:
        """Whether this worker emitted its final progress (success or failure) already."""
        return self._final

    def declare_workers(self, count: int) -> None:
        """How many workers the task has (a framework's world size, in pods), sent with this
        worker's progress from now on, unless ``TIDINGS_EMIT_WORKERS`` already declared it."""
        try:
            if count >= 1 and not self.config.workers:
                with self._lock:  # (the sender thread reads it when it builds the sender)
                    self.config = replace(self.config, workers=int(count))
                    if self._sender is not None:
                        self._sender.config = self.config
        except Exception:
            pass

    def metric(self, name: str, value: float, *, step: int | None = None) -> None:
        """The latest value of the scalar metric ``name`` (loss, learning rate, ...), at
        ``step`` when given. Coalesced: the latest value per name per span window is sent,
        with the name's exact minimum and maximum and, from its steps, a sample spread over
        the run (emitter/curves.py), so the task's status has its curve. NaN and infinities
        are sent as such (a diverging loss is a health fact: the task's ``NonFiniteMetrics``
        condition) and are no part of the curve; a value that is no number is counted as
        invalid."""
        try:
            v = float(value)
            if not (isinstance(name, str) and (step is None or type(step) is int)):
                raise TypeError("metric name must be a str and step an int or None")
            if not name.isascii():
                name = valid_text(name)
            self._latest.put(("Metric", name),
                             ({"name": name, "value": v, "step": step}, time.time()), (v, step))
            if self._thread is None:
                self._start()
        except Exception:  # never into user code
            self._counters.problem("invalid")

    def record_span(self, name: str, start: float, end: float, error: bool = False) -> None:
        """One finished span, ``start``/``end`` in epoch seconds. Coalesced per window."""
        try:
            if type(name) is str and not name.isascii():
                name = valid_text(name)
            self._spans.record(name, start, end - start, error)
            if self._thread is None:
                self._start()
        except Exception:
            pass

    def _record(self, name: str, start: float, duration: float, error: bool) -> None:
        # The Span objects' path: they measure the duration with perf_counter.
        try:
            if type(name) is str and not name.isascii():
                name = valid_text(name)
            self._spans.record(name, start, duration, error)
            if self._thread is None:
                self._start()
        except Exception:
            pass

    def quiet(self, seconds: float, reason: str = "") -> QuietBlock:
        """Declare that this worker will be quiet on purpose for up to ``seconds`` from now
        (a checkpoint being written, an evaluation), because of ``reason``: the task's
        ``Stalled`` condition waits for the period (held to the watcher's ``--quiet-max``,
        1 h by default) and the worker's usual allowance after it, and shows it quiet
        meanwhile. Its next progress report ends the period. One event, sent at once after
        any progress still pending (so that report does not end it); a period that is not
        a number above 0 and at most a day is counted as invalid and not sent. Returns a
        block for ``with``, which sends nothing more at its end."""
        try:
            self._put(("Quiet", {"seconds": float(seconds), "reason": _valid(reason)},
                       time.time(), False, None))
        except Exception:  # never into user code
            self._counters.problem("invalid")
        return QUIET_BLOCK

    def pod_spawned(self, pod_name: str, pod_uid: str, *, app: str, role: str = "",
                    attempt: int = 0, app_kind: str = "", app_api_version: str = "",
                    app_uid: str = "", namespace: str = "") -> None:
        """Lineage, for controllers: pod ``pod_name``/``pod_uid`` was spawned for ``app``.

        The event is about the app (``regarding``: ``app_api_version``/``app_kind``, or the
        TaskFeedback named ``app`` when no kind is given), in the app's ``namespace`` (default:
        this pod's); ``related`` is this (the controller's) pod. Critical.
        """
        try:
            pod_name, pod_uid, app, role, app_kind, app_api_version, app_uid, namespace = map(
                _valid, (pod_name, pod_uid, app, role, app_kind, app_api_version, app_uid,
                         namespace))
            ns = namespace or self.identity.namespace
            regarding = (ObjectRef(app_api_version or "v1", app_kind, app, ns, app_uid)
                         if app_kind else None)
            self._put(("PodSpawned", {"pod_name": pod_name, "pod_uid": pod_uid, "app": app,
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
                self._counters.dropped_closed()
                return
            q = self._q
            # qsize() is O(1); racing producers may overshoot the bound by a few, never more.
            if q.qsize() >= self._bound:
                self._counters.dropped_full()
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
            t = threading.Thread(target=_run_sender, args=(weakref.ref(self),),
                                 name="tidings-emitter", daemon=True)
            self._thread = t
        _register_atexit()
        install_crash_hooks(started_emitters)
        install_sigterm_flush(started_emitters, self.config.sigterm_flush_s)
        t.start()

    # ---- control -----------------------------------------------------------------------
    def flush(self, timeout: float = 5.0) -> bool:
        """Send everything emitted so far (spans and pending progress included) now.

        True when all of it was delivered within ``timeout`` (created on the server, or sunk
        with no cluster configured) and nothing emitted since the previous flush was lost:
        refused, invalid, unaddressable or dropped (``stats()`` says which). Never raises.
        """
        try:
            if self._thread is None:
                if (self._q.qsize() == 0 and not len(self._spans) and not len(self._latest)
                        and self._progress.value is None):
                    return self._nothing_lost()
                self._start()
            gate = self._gate
            if gate.dead or self._thread is None:
                return False
            gen = gate.ask()
            self._q.put(Flush(gen))
            settled = gate.wait(gen, timeout)
            return self._nothing_lost() and settled
        except Exception:
            return False

    def _nothing_lost(self) -> bool:
        """No loss since the previous flush asked (each loss fails one flush, not all later)."""
        # Names beyond the span and metric bounds are dropped before the sender sees them.
        losses = self._counters.losses() + self._spans.dropped + self._latest.dropped
        with self._lock:
            seen, self._losses_seen = self._losses_seen, losses
        return losses == seen

    def close(self, timeout: float | None = None) -> bool:
        """Flush with a deadline (default ``exit_flush_s``), stop the sender, log a summary.
        Later calls are counted and dropped. Runs at interpreter exit for every Emitter."""
        if self._closed:
            return True
        deadline = self.config.exit_flush_s if timeout is None else timeout
        ok = self.flush(deadline)
        self._closed = True
        self._abandon.set()
        self._q.put(STOP)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(0.5)
        self._log_summary()
        return ok

    def stats(self) -> dict[str, Any]:
        """Counters: what was accepted, delivered, coalesced, dropped, refused, retried."""
        out = self._counters.snapshot()
        out["progress_coalesced"] = self._progress.coalesced
        out["metrics_coalesced"] = self._latest.coalesced
        out["dropped_metric_names"] = self._latest.dropped
        spans = self._spans
        out["spans_recorded"] = spans.recorded
        out["dropped_span_names"] = spans.dropped + out.pop("dropped_span_names_pending")
        out["spans_coalesced"] = out["spans_sent"] - out["span_summaries"]
        sender = self._sender
        out["queued"] = sender.queued() if sender is not None else self._q.qsize()
        out["instance"] = self.instance
        transport = sender.transport if sender is not None else self._transport
        out["sink"] = bool(transport is not None and transport.sink)
        return out

    def _log_summary(self) -> None:
        s = self.stats()
        lost = (s["undelivered"] + s["dropped_queue_full"] + s["dropped_span_names"]
                + s["refused"] + s["invalid"] + s["unaddressable"] + s["queued"]
                + s["dropped_metric_names"]
                + s["spans_unsent"])
        # Said first when nothing got through: a reader of the last line knows it at once.
        nothing = (f"nothing was delivered ({s['last_error'][:300]}) | "
                   if lost and not s["delivered"] and s["last_error"] else "")
        log.log(
            logging.WARNING if lost else logging.INFO,
            "tidings emitter %s: %sdelivered=%d (already existed %d) sunk=%d api_calls=%d "
            "retries=%d | coalesced: spans=%d progress=%d | refused=%d %s undelivered=%d "
            "spans_unsent=%d dropped: queue_full=%d span_names=%d invalid=%d unaddressable=%d",
            s["instance"][:8], nothing, s["delivered"], s["already_existed"], s["sunk"],
            s["api_calls"], s["retries"], s["spans_coalesced"], s["progress_coalesced"],
            s["refused"], s["refused_by_status"] or "", s["undelivered"] + s["queued"],
            s["spans_unsent"], s["dropped_queue_full"], s["dropped_span_names"], s["invalid"],
            s["unaddressable"])


class QuietBlock:
    """What ``quiet`` returns: ``with quiet(600, "checkpoint"): save()`` reads as what it
    is. The period was declared by the call; the worker's next report ends it, so the
    block's end sends nothing (an Event per block end would spend the pod's budget on
    what the next report says anyway)."""

    __slots__ = ()

    def __enter__(self) -> QuietBlock:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


QUIET_BLOCK = QuietBlock()


def _valid(v: Any) -> Any:
    """Text made valid (``valid_text``); anything else as it is, for the payload's own check
    to refuse with its reason."""
    return valid_text(v) if type(v) is str else v


def _run_sender(ref: weakref.ref[Emitter]) -> None:
    """The sender thread: builds the Emitter's sender (sender.py loads the payload models
    here, off the workload's path), then runs it. It holds the Emitter weakly, as the sender
    does: an Emitter that nobody holds any more is collected."""
    em = ref()
    if em is None:
        return
    try:
        sender_type = em.sender_type
        if sender_type is None:
            from .sender import Sender

            sender_type = Sender
        with em._lock:
            em._sender = sender = sender_type(
                em.config, em.identity, em.instance, q=em._q, spans=em._spans,
                slot=em._progress, latest=em._latest, counters=em._counters,
                abandon=em._abandon, gate=em._gate, transport=em._transport)
    except BaseException as e:  # the workload must go on even if the sender cannot
        log.error("tidings emitter: sender stopped: %s: %s", type(e).__name__, e)
        em._gate.die()
        return
    del em
    sender.run()


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


def started_emitters() -> list[Emitter]:
    """The Emitters of this process whose sender runs (what exit and a crash report through)."""
    return [em for em in list(_LIVE) if em._thread is not None and not em._closed]


def _close_all() -> None:
    """At interpreter exit: flush every started Emitter, each within its exit_flush_s."""
    exit_flush_begins()
    for em in started_emitters():
        with contextlib.suppress(Exception):
            em.close()


def _after_fork_in_child() -> None:
    for em in list(_LIVE):
        em._reset(em._sender.transport if em._sender is not None else em._transport)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
