"""The Emitter's sender thread: takes what the workload queued and creates the Events within
the pod's budget: critical facts at once, the coalescible ones (the latest progress, the
metrics' latest values, the span aggregates) packed into one Window event per window
(``span_window_s``), the first as soon as there is something to send. Packing is
``window.py``, building ``events.py``, posting ``delivery.py``; this is the loop.

It alone touches the outbox, the pending span windows and the latest values taken, so they
need no lock; what it shares with the workload side is in items.py (the queue, the progress
slot, the flush gate) and counters.py. The Emitter builds it on its own thread: this module
loads the payload models (pydantic), which ``import tidings.emitter`` and the workload's
calls never do.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from tidings.kube.flowcontrol import TokenBucket
from tidings.schemas.wire.kinds import KNOWN_PAYLOADS
from tidings.schemas.wire.payloads import Metric, Progress, Quiet

from . import window
from .aggregate import COUNT, Agg, SpanAggregator, merge
from .config import EmitterConfig, Identity
from .counters import Counters, Problems
from .delivery import Delivery
from .events import Built, Carried, EventBuilder
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

if TYPE_CHECKING:  # the Kubernetes client loads on the sender thread (_send_loop)
    from .transport import Transport

log = logging.getLogger("tidings.emitter")

# Built events held by the sender beyond the queue; small, so the queue bound stays the bound.
_OUTBOX_MAX = 64
# The longest the sender sleeps without looking at the clock (window ticks, shutdown).
_MAX_IDLE_S = 1.0
# How often a sender with nothing coalescible looks again: the first fact after a quiet
# window goes out within this, the next ones one window later.
_QUIET_CHECK_S = 0.5


class Sender:
    """The sender's state and loop; ``run`` is the thread's target. Never raises into it."""

    def __init__(self, config: EmitterConfig, identity: Identity, instance: str, *,
                 q: queue.SimpleQueue[QueueItem], spans: SpanAggregator, slot: ProgressSlot,
                 latest: LatestSlot, counters: Counters, abandon: threading.Event,
                 gate: FlushGate, transport: Transport | None) -> None:
        self.config = config
        self.instance = instance
        self.transport = transport  # None: resolved on the thread (it may read files)
        self._q = q
        self._spans = spans
        self._slot = slot
        self._latest = latest
        self._n = counters
        self._abandon = abandon  # the exit deadline passed: stop retrying
        self._gate = gate  # flushes: the workload numbers them, the sender settles them
        self._problems = Problems(counters)
        self.events = EventBuilder(identity, instance, self._problems,
                                   workers=lambda: self.config.workers)
        self._delivery: Delivery | None = None  # (with the transport, on the thread)
        self._room = window.room(instance)
        self.outbox: deque[tuple[str, dict[str, Any], Carried]] = deque()
        self.pending: dict[str, Agg] = {}
        # The latest value per name (metrics) of the windows taken so far, oldest name first.
        self.latest_out: dict[LatestKey, LatestUpdate] = {}
        self._progress_out: ProgressUpdate | None = None
        # A window closed with coalescible facts: send them (as budget allows) before the next.
        self._due = False
        self._flush_seen = 0

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
        self.events.learn(self.transport)
        if self.transport.sink:
            log.info("tidings: no cluster configured; events are counted and logged at DEBUG "
                     "on logger 'tidings.emitter'")
        bucket = TokenBucket(cfg.rate, cfg.burst)
        self._delivery = Delivery(self.transport, self._problems, self._abandon,
                                  coalescible_attempts=cfg.coalescible_attempts,
                                  retry_initial_s=cfg.retry_initial_s,
                                  retry_max_s=cfg.retry_max_s)
        while True:
            try:
                self._send_until_stopped(bucket)
                return
            except Exception as e:  # a bug on one item must not end delivery of the rest
                self._problems.note("internal_errors", ("loop", type(e).__name__),
                                    "tidings emitter: internal error: %s: %s",
                                    type(e).__name__, e)
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
        elif kind == Quiet.TYPE:
            self._progress_before_quiet()
        built = self.events.build(KNOWN_PAYLOADS[kind] if kind else None, fields, t, warning,
                                  target)
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

    def _progress_before_quiet(self) -> None:
        """Queue a progress report still pending ahead of a declared quiet period: sent
        after it, that report (made before) would end the period at once."""
        self._progress_out = self._slot.take(self._progress_out)
        if self._progress_out is None:
            return
        self._merge_window()
        built, carried, _ = self.take_window()
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

    def take_window(self, with_progress: bool = True
                    ) -> tuple[Built | None, Carried, list[str]]:
        """Take as much of the waiting coalescible facts as one note holds (``window.pack``)
        and build their event. Returns it (None when nothing valid was left: counted), the
        (span names, spans) it carries and the metric names whose extremes it tells."""
        progress: ProgressUpdate | None = None
        if with_progress and self._progress_out is not None:
            progress, self._progress_out = self._progress_out, None
        with self._latest.lock:
            packed = window.pack(self._room, progress, self.config.workers, self.latest_out,
                                 self._latest.curves, self.pending)
        if isinstance(packed, window.Alone):
            return self.events.alone(packed), (0, 0), []
        built, carried = self.events.window(packed)
        return built, carried, packed.told

    def build_summary(self, name: str, a: Agg) -> Built | None:
        return self.events.summary(name, a)

    def _deliver(self, ns: str, body: dict[str, Any], *, critical: bool) -> bool:
        assert self._delivery is not None
        return self._delivery.deliver(ns, body, critical=critical)
