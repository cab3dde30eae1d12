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
from typing import Any

from tidings.kube import Client, KubeError, connect
from tidings.kube.flowcontrol import Backoff
from tidings.schemas.wire.event import TaskRef

from .auth import Authorizer
from .controller import Controller
from .http import Endpoints
from .leader import LeaderElector
from .metrics import Metrics
from .settings import Options, problems, task_keys
from .writer import status_body

log = logging.getLogger("tidings.watcher")
USER_AGENT = "tidings-watcher"


class ConfigError(Exception):
    """A problem the user must fix (bad kubeconfig, unknown context, bad flag values)."""


def _clients(o: Options, pool: int) -> tuple[Client, Client]:
    """Two clients for what kubectl would use (a kubeconfig, else the pod's service
    account): one for requests, one for the long watches (two per namespace), so neither
    pool starves the other."""
    try:
        return (connect(o.kubeconfig, o.context, maxsize=pool, user_agent=USER_AGENT),
                connect(o.kubeconfig, o.context, maxsize=max(4, len(o.namespaces) * 2 + 4),
                        user_agent=USER_AGENT))
    except Exception as e:  # kubeconfig missing/invalid, unknown context, no in-cluster env
        raise ConfigError(f"cannot load Kubernetes configuration: {e}") from e


def _validate(o: Options) -> None:
    for problem in problems(o):
        raise ConfigError(problem)
    try:
        task_keys(o)
    except ValueError as e:
        raise ConfigError(f"--task-label-keys: {e}") from None


def _start_controller(c: Controller, stop: threading.Event) -> bool:
    """Start, retrying while the API server is unreachable. False if stopped meanwhile."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            c.start()
            return True
        except KubeError as e:
            if e.denied:
                raise ConfigError(f"not allowed to read TaskFeedbacks: {e}") from e
            log.warning("start failed (%s); retrying", e)
            stop.wait(backoff.next())
    return False


def run(o: Options, *, announce: Any = print) -> int:
    _validate(o)
    kube, watch_kube = _clients(o, pool=o.concurrency + o.write_concurrency + 8)
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
        if c is None:
            return None
        task = TaskRef(ns, name)
        state = c.store.get(task)
        return None if state is None else status_body(
            state, c.store.refused(task), c.store.unread(task), health=c.writer.health)

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
            if _lead(kube, watch_kube, metrics, elector, holder, stop, o):
                break  # stopped gracefully
            # The lease was lost: fenced and dropped; campaign again as a standby.
            announce("tidings watcher: lease lost; standby", flush=True)
    finally:
        http.stop()
    return 0


def _lead(kube: Client, watch_kube: Client, metrics: Metrics,
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
    # The record of deleted TaskFeedbacks lives beside the Lease (the watcher's namespace).
    controller = Controller(kube, o, metrics, watch_kube=watch_kube, may_write=may_write,
                            deletions_at=(o.lease_namespace, f"{o.lease_name}-deletions"))
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
