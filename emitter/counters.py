"""The Emitter's counters: one typed object with one lock, updated by the workload side and
the sender thread, read as the ``stats()`` dict.

Each method is one thing that happened (a refusal, a delivery, a retry), so a caller never
has to know which numbers move together; a lock per update is ~50 ns, off the hot paths
(span records and coalesced progress never count here).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Any, Literal

# What ``Problems.note`` may count: the refusals of the Emitter's own checks.
Problem = Literal["invalid", "unaddressable", "undelivered", "internal_errors"]

log = logging.getLogger("tidings.emitter")


class Counters:
    """Totals since the Emitter was created (or forked). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted = 0
        self.delivered = 0
        self.already_existed = 0
        self.refused = 0
        self.undelivered = 0
        self.api_calls = 0
        self.retries = 0
        self.sunk = 0
        self.invalid = 0
        self.unaddressable = 0
        self.span_summaries = 0
        self.spans_sent = 0
        self.dropped_after_close = 0
        self.dropped_queue_full = 0
        self.internal_errors = 0
        self.span_notes = 0
        self.spans_unsent = 0
        # Names the sender's pending windows could not hold (the aggregator counts its own).
        self.dropped_span_names_pending = 0
        self.refused_by_status: dict[int, int] = {}
        self.delivered_by_reason: dict[str, int] = {}
        self.last_error = ""

    # ---- the workload side --------------------------------------------------------------
    def dropped_closed(self) -> None:
        with self._lock:
            self.dropped_after_close += 1

    def dropped_full(self) -> None:
        with self._lock:
            self.dropped_queue_full += 1

    # ---- the sender ---------------------------------------------------------------------
    def accept(self) -> None:
        with self._lock:
            self.accepted += 1

    def api_call(self) -> None:
        with self._lock:
            self.api_calls += 1

    def retry(self, error: str) -> None:
        with self._lock:
            self.retries += 1
            self.last_error = error

    def deliver(self, reason: str, *, sunk: bool, created: bool) -> None:
        with self._lock:
            self.delivered += 1
            if sunk:
                self.sunk += 1
            if not created:
                self.already_existed += 1
            self.delivered_by_reason[reason] = self.delivered_by_reason.get(reason, 0) + 1

    def refuse(self, status: int, error: str) -> None:
        with self._lock:
            self.refused += 1
            self.refused_by_status[status] = self.refused_by_status.get(status, 0) + 1
            self.last_error = error

    def give_up(self, error: str) -> None:
        """One event not delivered (abandoned at exit, or out of attempts)."""
        with self._lock:
            self.undelivered += 1
            self.last_error = error

    def lost(self, events: int, spans: int) -> None:
        """Left unsent at the exit deadline or at close: ``events`` events carrying ``spans``."""
        with self._lock:
            self.undelivered += events
            self.spans_unsent += spans

    def problem(self, kind: Problem) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)

    def span_note(self, names: int, spans: int, *, delivered: bool) -> None:
        """A span note settled: delivered with ``names`` summaries of ``spans`` spans, or not."""
        with self._lock:
            if delivered:
                self.span_notes += 1
                self.span_summaries += names
                self.spans_sent += spans
            else:
                self.spans_unsent += spans

    def span_names_dropped(self, n: int) -> None:
        with self._lock:
            self.dropped_span_names_pending += n

    def losses(self) -> int:
        """Everything accepted and then not delivered, in one number that only grows: facts
        refused, invalid, unaddressable, undelivered or dropped, and spans left unsent (a
        flush that sees it move did not deliver all it covered)."""
        with self._lock:
            return (self.refused + self.invalid + self.unaddressable + self.undelivered
                    + self.dropped_queue_full + self.dropped_after_close + self.internal_errors
                    + self.spans_unsent + self.dropped_span_names_pending)

    def snapshot(self) -> dict[str, Any]:
        """The counters as the ``stats()`` dict holds them (copies, consistent with each other)."""
        with self._lock:
            out: dict[str, Any] = {
                k: v for k, v in vars(self).items() if not k.startswith("_")}
            out["refused_by_status"] = dict(self.refused_by_status)
            out["delivered_by_reason"] = dict(self.delivered_by_reason)
        return out


class Problems:
    """The sender's own refusals (an invalid payload, an unaddressable event, a refused
    send): each counted, and logged once per key, so a workload that emits one bad fact a
    second does not flood its own log. Used on the sender thread only."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self._logged: set[Hashable] = set()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is seen."""
        if key in self._logged:
            return False
        self._logged.add(key)
        return True

    def note(self, counter: Problem, key: Hashable, msg: str, *args: Any) -> None:
        """Count one ``counter``; log ``msg`` the first time ``key`` is noted."""
        self.counters.problem(counter)
        if self.first(key):
            log.warning(msg, *args)
