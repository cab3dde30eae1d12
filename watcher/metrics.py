"""Prometheus metrics of one watcher, on a registry of its own (served by http.py)."""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from tidings.schemas.status.health import HEALTH_CONDITIONS
from tidings.schemas.wire.event import ParsedEvent
from tidings.schemas.wire.rejection import RejectReason

from .auth import REASONS
from .coalesce import COALESCIBLE, CRITICAL, fact_kind

disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series only add noise to every scrape


# Emit-to-status latency: from a fraction of the write interval up to a minute behind (the
# freshness goal is 2 s for critical facts, 30 s for coalescible ones).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60)


def version() -> str:
    """The installed ``tidings`` distribution's version ("unknown" when run from a bare tree)."""
    try:
        return metadata.version("tidings")
    except metadata.PackageNotFoundError:
        return "unknown"


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # What the default registry carries (process_*, python_info, python_gc_*), on ours.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        p = "tidings_watcher_"
        self.build_info = Gauge(p + "build_info", "Always 1: the version running.",
                                ["version", "python"], registry=r)
        self.build_info.labels(version(), platform.python_version()).set(1)
        self.events_seen = Counter(p + "events_seen", "Bus events read from list or watch.",
                                   registry=r)
        self.events_applied = Counter(p + "events_applied", "Events folded into a task state.",
                                      registry=r)
        self.events_rejected = Counter(p + "events_rejected", "Events refused, by reason.",
                                       ["reason"], registry=r)
        self.events_skipped = Counter(
            p + "events_skipped",
            "Events not folded: lineage events, deletions, already-applied duplicates, "
            "events created before the compaction watermark (late: from the watch, a fact "
            "lost; late_relisted: listed again, of an instance compaction forgot), events of "
            "a run whose TaskFeedback was deleted (deleted_run: created up to the deletion, "
            "listed again).",
            ["cause"], registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "Task keys waiting to be folded.",
                                 registry=r)
        self.write_queue_depth = Gauge(p + "write_queue_depth",
                                       "Task keys waiting for a status write.", registry=r)
        self.write_seconds = Histogram(
            p + "status_write_seconds", "Latency of one status write (create + patch).",
            buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r)
        self.status_writes = Counter(p + "status_writes", "Status writes, by result.",
                                     ["result"], registry=r)
        self.relists = Counter(p + "relists", "Relists of the event stream, by cause.",
                               ["cause"], registry=r)
        self.watch_restarts = Counter(p + "watch_restarts",
                                      "Watches re-opened from the last resourceVersion.",
                                      ["resource"], registry=r)
        self.tasks = Gauge(p + "tasks", "Tasks with state in memory.", registry=r)
        self.writes_in_flight = Gauge(p + "status_writes_in_flight",
                                      "Status writes being made right now.", registry=r)
        self.tasks_compact = Gauge(
            p + "tasks_compact", "Idle tasks held in their compact form (compressed status).",
            registry=r)
        self.tasks_evicted = Counter(p + "tasks_evicted",
                                     "Idle, fully written tasks dropped from memory.", registry=r)
        self.ttl_deleted = Counter(
            p + "ttl_deleted",
            "Finished, unowned TaskFeedbacks deleted after --ttl-after-finished.", registry=r)
        self.deletions_remembered = Gauge(
            p + "deletions_remembered",
            "Deleted TaskFeedbacks remembered (for the event TTL), whose runs' events are "
            "not folded again.", registry=r)
        self.deletion_record_writes = Counter(
            p + "deletion_record_writes",
            "Writes of the record of deleted TaskFeedbacks (its ConfigMap), by result.",
            ["result"], registry=r)
        self.leader = Gauge(p + "leader", "1 while this replica is the active one.", registry=r)
        self.ready = Gauge(p + "ready", "1 once the initial list has been folded.", registry=r)
        self.sender_lookups = Counter(
            p + "sender_lookups", "Accepted senders, by how they were verified (cache, get, "
            "proof: a gone pod's sender-uid proof).", ["source"], registry=r)
        self.http_denied = Counter(
            p + "http_denied", "Requests to /tasks refused, by reason (no_token, bad_token, "
            "forbidden, review_error).", ["reason"], registry=r)
        self.emit_to_status = Histogram(
            p + "emit_to_status_seconds",
            "From an applied event's eventTime (the sender's clock) to the successful status "
            "write that first contains it, by kind (critical, coalescible).", ["kind"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.status_write_cost = Counter(
            p + "status_write_cost_seconds",
            "Estimated API-server CPU spent on status writes (the --write-budget's unit).",
            registry=r)
        self.tasks_unhealthy = Gauge(
            p + "tasks_unhealthy",
            "Running tasks whose status, as last written, holds the health condition "
            f"({', '.join(HEALTH_CONDITIONS)}); the task's status names them.",
            ["condition"], registry=r)
        self.status_lag = Gauge(
            p + "status_lag_seconds",
            "How long the oldest change not yet in its task's status has waited.", registry=r)
        for condition in HEALTH_CONDITIONS:
            self.tasks_unhealthy.labels(condition)
        for kind in (CRITICAL, COALESCIBLE):
            self.emit_to_status.labels(kind)
        for reason in REASONS:
            self.http_denied.labels(reason)
        for reason in RejectReason:
            self.events_rejected.labels(reason.value)
        for cause in ("gone", "short_watch", "decode_error", "error", "start"):
            self.relists.labels(cause)
        for cause in ("not_task", "deleted", "duplicate", "late", "late_relisted",
                      "deleted_run"):
            self.events_skipped.labels(cause)
        # conflict: refused by the resourceVersion precondition (then re-read and rebased);
        # fenced: not sent, the lease is not held; unreadable: not sent, the status holds a
        # part that could not be read (never written over).
        for result in ("ok", "error", "conflict", "fenced", "unreadable"):
            self.status_writes.labels(result)
        for result in ("ok", "error"):
            self.deletion_record_writes.labels(result)

    def saved(self, events: Iterable[ParsedEvent], now: float | None = None) -> None:
        """``events`` are in the status now: observe how long each took from its sender."""
        t = time.time() if now is None else now
        for ev in events:
            # A sender whose clock runs ahead would give negative latencies: count them as 0.
            lag = max(0.0, t - ev.event_time.timestamp())
            self.emit_to_status.labels(fact_kind(ev)).observe(lag)
