"""The watcher process: HTTP endpoints always; the controller only while holding the lease.

A replica that loses its lease (API server stall, partition) fences itself (writes nothing
more), drops its in-memory state and campaigns again as a standby, in-process; a new term
reloads the state from the statuses. Exit codes: 0 after a graceful stop (SIGTERM/SIGINT),
2 for configuration errors.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tidings.kube.flowcontrol import Backoff
from tidings.schemas.event import TaskRef
from tidings.schemas.platform import DEFAULT_TASK_KEYS, parse_task_keys

from .auth import Authorizer
from .controller import Controller, Settings
from .http import Endpoints
from .kube import Kube, KubeError, load_client
from .leader import LeaderElector
from .metrics import Metrics
from .writer import status_body

log = logging.getLogger("tidings.watcher")


class ConfigError(Exception):
    """A problem the user must fix (bad kubeconfig, unknown context, bad flag values)."""


@dataclass
class Options:
    kubeconfig: str | None = None
    context: str | None = None
    namespaces: list[str] = field(default_factory=list)
    concurrency: int = 8
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    leader_elect: bool = True
    lease_namespace: str = "default"
    lease_name: str = "tidings-watcher"
    lease_duration: float = 15.0
    renew_deadline: float | None = None  # default: 2/3 of the lease duration
    retry_period: float | None = None  # default: 2/15 of the lease duration
    write_interval: float = 0.5
    coalesce_interval: float = 5.0
    write_budget: float = 0.5
    max_write_rate: float = 0.0
    write_policy: str = "priority"
    watch_timeout: int = 60
    evict_after: float = 7200.0
    compact_after: float = 60.0
    clock_skew: float = 60.0  # seconds eventTime may lead creationTimestamp (for ordering)
    event_ttl: float = 3600.0  # the API server's --event-ttl, for dedup compaction
    max_instances: int = 512
    identity: str | None = None
    flush_timeout: float = 10.0
    ttl_after_finished: float = 0.0
    # Comma-separated pod label keys naming a sender's task, most specific first.
    task_label_keys: str = ",".join(DEFAULT_TASK_KEYS)


def _clients(o: Options, pool: int) -> tuple[Kube, Kube]:
    try:
        return Kube(load_client(o.kubeconfig, o.context, pool)), \
            Kube(load_client(o.kubeconfig, o.context, max(4, len(o.namespaces) * 2 + 4)))
    except Exception as e:  # kubeconfig missing/invalid, unknown context, no in-cluster env
        raise ConfigError(f"cannot load Kubernetes configuration: {e}") from e


def _validate(o: Options) -> None:
    if o.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    if o.write_interval < 0:
        raise ConfigError("--write-interval must not be negative")
    if o.coalesce_interval < 0:
        raise ConfigError("--coalesce-interval must not be negative")
    if o.write_budget < 0:
        raise ConfigError("--write-budget must not be negative")
    if o.max_write_rate < 0:
        raise ConfigError("--max-write-rate must not be negative")
    if o.write_policy not in ("priority", "fifo"):
        raise ConfigError("--write-policy must be priority or fifo")
    if o.evict_after < 0:
        raise ConfigError("--evict-after must not be negative")
    if o.compact_after < 0:
        raise ConfigError("--compact-after must not be negative")
    if not 0 <= o.clock_skew <= 86400:
        raise ConfigError("--clock-skew must be 0..86400 s")
    if o.event_ttl < 60:
        raise ConfigError("--event-ttl must be at least 60 s")
    if o.max_instances < 16:
        raise ConfigError("--max-instances must be at least 16")
    if not 0 <= o.metrics_port <= 65535:
        raise ConfigError("--metrics-port must be 0..65535")
    if o.lease_duration < 1:
        raise ConfigError("--lease-duration must be at least 1 s")
    try:
        parse_task_keys(o.task_label_keys)
    except ValueError as e:
        raise ConfigError(f"--task-label-keys: {e}") from None
    if o.ttl_after_finished < 0:
        raise ConfigError("--ttl-after-finished must not be negative")


def _start_controller(c: Controller, stop: threading.Event) -> bool:
    """Start, retrying while the API server is unreachable. False if stopped meanwhile."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            c.start()
            return True
        except KubeError as e:
            if e.status in (401, 403):
                raise ConfigError(f"not allowed to read TaskFeedbacks: {e}") from e
            log.warning("start failed (%s); retrying", e)
            stop.wait(backoff.next())
    return False


def run(o: Options, *, announce: Any = print) -> int:
    _validate(o)
    kube, watch_kube = _clients(o, pool=o.concurrency * 2 + 8)
    metrics = Metrics()
    holder: dict[str, Any] = {}
    elector: LeaderElector | None = None

    def ready() -> bool:
        c = holder.get("controller")
        if c is None:  # standby (or still acquiring): ready to take over
            return elector is not None
        return bool(c.ready.is_set())

    def task_status(ns: str, name: str) -> Any:
        c = holder.get("controller")
        state = None if c is None else c.store.get(TaskRef(ns, name))
        return None if state is None else status_body(state)

    try:
        http = Endpoints(metrics, ready=ready, task_status=task_status,
                         authorizer=Authorizer(kube), host=o.metrics_host, port=o.metrics_port)
    except OSError as e:
        raise ConfigError(f"cannot listen on {o.metrics_host}:{o.metrics_port}: {e}") from e
    http.start()
    announce(f"tidings watcher: http on {o.metrics_host}:{http.port}", flush=True)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    settings = Settings(namespaces=o.namespaces, concurrency=o.concurrency,
                        write_interval=o.write_interval, coalesce_interval=o.coalesce_interval,
                        write_budget=o.write_budget, max_write_rate=o.max_write_rate,
                        write_policy=o.write_policy,
                        watch_timeout=o.watch_timeout, evict_after=o.evict_after,
                        compact_after=o.compact_after,
                        clock_skew=o.clock_skew, event_ttl=o.event_ttl,
                        max_instances=o.max_instances,
                        ttl_after_finished=o.ttl_after_finished,
                        task_keys=parse_task_keys(o.task_label_keys))
    if o.leader_elect:
        d = o.lease_duration
        elector = LeaderElector(kube, o.lease_namespace, o.lease_name, identity=o.identity,
                                lease_duration=d, renew_deadline=o.renew_deadline or d * 2 / 3,
                                retry_period=o.retry_period or d * 2 / 15)
    try:
        while not stop.is_set():
            if elector is not None:
                log.info("standby: waiting for lease %s/%s as %s", o.lease_namespace,
                         o.lease_name, elector.identity)
                if not elector.acquire(stop):
                    break
                metrics.leader.set(1)
                announce(f"tidings watcher: leading as {elector.identity}", flush=True)
            if _lead(kube, watch_kube, settings, metrics, elector, holder, stop, o):
                break  # stopped gracefully
            # The lease was lost: fenced and dropped; campaign again as a standby.
            announce("tidings watcher: lease lost; standby", flush=True)
    finally:
        http.stop()
    return 0


def _lead(kube: Kube, watch_kube: Kube, settings: Settings, metrics: Metrics,
          elector: LeaderElector | None, holder: dict[str, Any], stop: threading.Event,
          o: Options) -> bool:
    """Run one term as the active replica. True after a graceful stop (state flushed, lease
    released); False when the lease was lost (nothing more written, in-memory state dropped).
    """
    lost = threading.Event()
    over = stop  # set when this term ends: stopped, or (with an elector) the lease lost
    may_write: Any = None
    if elector is not None:
        term, over = elector.term, threading.Event()

        def may_write() -> bool:
            # Fencing: only this term's controller, only while the lease is provably held.
            return not lost.is_set() and elector.is_leader(term)

        def hold() -> None:
            elector.hold(stop)
            if not stop.is_set():
                lost.set()
            over.set()

        threading.Thread(target=hold, name="lease", daemon=True).start()
    controller = Controller(kube, settings, metrics, watch_kube=watch_kube, may_write=may_write)
    holder["controller"] = controller
    try:
        started = _start_controller(controller, over)
        while not over.wait(0.5):  # a timed wait keeps the main thread responsive to signals
            pass
    except BaseException:
        holder.pop("controller", None)
        controller.abort()
        raise
    if lost.is_set():
        # Someone else may lead now: whatever we hold may be older than what they write, so
        # stop every worker at once, write nothing more, and forget the state (a new term
        # reloads it from the statuses).
        holder.pop("controller", None)
        metrics.leader.set(0)
        log.error("lease lost: fenced, in-memory state dropped; back to standby")
        controller.abort()
        return False
    if started:
        t0 = time.monotonic()
        flushed = controller.stop(o.flush_timeout)
        log.info("stopped (flushed=%s in %.2fs)", flushed, time.monotonic() - t0)
    holder.pop("controller", None)
    if elector is not None:
        elector.release()
    metrics.leader.set(0)
    return True
