"""Emitter settings and workload identity, read from the environment (downward API) or given.

Nothing here talks to the cluster; see transport.py for client configuration.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tidings.schemas.wire.constants import WORKERS_MAX

if TYPE_CHECKING:
    from tidings.kube.auth import BoundPod

log = logging.getLogger("tidings.emitter")

# A downward-API volume with the pod's labels; the fallback when TIDINGS_TASK is unset.
DEFAULT_LABELS_FILE = "/etc/podinfo/labels"
_LABEL_LINE = re.compile(r'^tidings\.dev/task="(.*)"$')


@dataclass(frozen=True, slots=True)
class EmitterConfig:
    """Budget, batching and delivery knobs. ``from_env`` reads ``TIDINGS_EMIT_<FIELD>``."""

    # Token bucket: a pod may make `burst` creates at once, then `rate` per second.
    burst: float = 20.0
    rate: float = 2.0
    # The window of coalescible facts: spans are summed per name, and the latest progress and
    # metric values kept, then all sent in one Window event per window (the first at once).
    # 6 s: ten events a minute, at about the pace the watcher writes them (its coalescing
    # interval is 5 s), so a training pod costs the cluster <= 12 Events a minute.
    span_window_s: float = 6.0
    # Distinct span names per window; more are dropped and counted (bounds memory).
    max_span_names: int = 256
    # Queue bound for critical items (links, decks, final progress, lineage).
    max_queue: int = 10_000
    # Deadline of the flush that runs at interpreter exit.
    exit_flush_s: float = 5.0
    # On SIGTERM (eviction, preemption, deletion: Kubernetes then waits the pod's
    # terminationGracePeriodSeconds, 30 s by default, before SIGKILL), flush within this many
    # seconds before the previous handler runs; 0: install no SIGTERM handler.
    sigterm_flush_s: float = 5.0
    # Backoff between retries: full jitter, exponential from retry_initial_s up to retry_max_s.
    retry_initial_s: float = 0.25
    retry_max_s: float = 30.0
    # Coalescible data (spans, progress) is given up after this many attempts; critical never.
    coalescible_attempts: int = 8
    # (connect, read) timeout of one create call.
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 10.0
    # How many workers the task has (e.g. the Job's completions), sent with every progress:
    # the task succeeds only once that many workers reported a final. 0: not declared.
    workers: int = 0

    def __post_init__(self) -> None:
        if self.workers > WORKERS_MAX:  # a config made in code; from_env clamps (and says so)
            log.warning("tidings: workers=%d is above the largest count the bus accepts (%d); "
                        "using %d", self.workers, WORKERS_MAX, WORKERS_MAX)
            object.__setattr__(self, "workers", WORKERS_MAX)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> EmitterConfig:
        """Defaults overridden by ``TIDINGS_EMIT_BURST``, ``TIDINGS_EMIT_RATE``, ... A value
        that is not a number, or negative, is ignored and one above its bound (``WORKERS``:
        the 10,000 a Progress may declare) is clamped, each with one WARNING line:
        configuration must never crash a workload, nor silently make its events invalid."""
        env = os.environ if env is None else env
        overrides: dict[str, float | int] = {}
        for f in fields(cls):
            var = f"TIDINGS_EMIT_{f.name.upper()}"
            raw = env.get(var)
            if raw is None:
                continue
            try:
                value = int(raw) if f.type == "int" else float(raw)
            except ValueError:
                value = -1
            if not value >= 0:  # also NaN
                log.warning("tidings: %s=%r is not a non-negative number; ignored (default %s)",
                            var, raw[:40], getattr(cls(), f.name))
                continue
            bound = _UPPER_BOUNDS.get(f.name)
            if bound is not None and value > bound:
                log.warning("tidings: %s=%s is above the largest value the bus accepts (%s); "
                            "using %s", var, raw[:40], bound, bound)
                value = bound
            overrides[f.name] = value
        return replace(cls(), **overrides)  # type: ignore[arg-type]


# Fields whose values the wire contract bounds: a larger one would make every event carrying
# it invalid (a Progress declaring more than WORKERS_MAX workers, even a fail()).
_UPPER_BOUNDS: dict[str, int] = {"workers": WORKERS_MAX}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who emits: the pod (name, uid, namespace) and the task its facts are about.

    ``task_uid`` is the TaskFeedback's uid when a controller created it before the pods
    (``TIDINGS_TASK_UID``, from a pod annotation through the downward API); optional.
    """

    namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    task: str = ""
    task_uid: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 labels_file: str | None = None) -> Identity:
        """``POD_NAMESPACE``, ``POD_NAME``, ``POD_UID`` and ``TIDINGS_TASK`` (else the pod's
        ``tidings.dev/task`` label from a downward-API labels file). What is unset here the
        sender learns from its service-account token (``completed_by``)."""
        env = os.environ if env is None else env
        task = env.get("TIDINGS_TASK", "") or task_from_labels(
            labels_file or env.get("TIDINGS_PODINFO_LABELS", DEFAULT_LABELS_FILE))
        return cls(env.get("POD_NAMESPACE", ""), env.get("POD_NAME", ""),
                   env.get("POD_UID", ""), task, env.get("TIDINGS_TASK_UID", "").strip())

    def completed_by(self, bound: BoundPod | None) -> Identity:
        """This identity, with what the environment left unset taken from the pod the
        service-account token is bound to (its claims). The environment overrides: the
        token's pod fills in only where the pod the environment names is that same pod (a
        name from the environment is never paired with the token's uid, or vice versa)."""
        if bound is None:
            return self
        same_pod = self.pod_name in ("", bound.name) and self.pod_uid in ("", bound.uid)
        return replace(
            self, namespace=self.namespace or bound.namespace,
            pod_name=self.pod_name or (bound.name if same_pod else ""),
            pod_uid=self.pod_uid or (bound.uid if same_pod else ""))

    def bound_to(self, bound: BoundPod | None) -> bool:
        """Whether ``bound`` (the token's pod) is the pod this identity speaks for: only then
        may events carry the sender proof (the admission policy admits it from no one else)."""
        return bound is not None and (bound.namespace, bound.name, bound.uid) == (
            self.namespace, self.pod_name, self.pod_uid)

    def missing(self, *, need_task: bool = True) -> list[str]:
        """The settings an event needs but lacks, by their environment names. Without a task
        the emitter reports about its own pod (the watcher finds the task by its labels)."""
        need = {"POD_NAMESPACE": self.namespace, "POD_NAME": self.pod_name,
                "POD_UID": self.pod_uid}
        if need_task:
            need["TIDINGS_TASK"] = self.task
        return [k for k, v in need.items() if not v]


def learned_identity(identity: Identity, transport: object) -> tuple[Identity, bool]:
    """What the environment did not say about this pod, from the pod the transport's token is
    bound to; and whether events carry the sender proof: as the transport says, else when
    the token is bound to the very pod the events speak for."""
    bound = getattr(transport, "bound_pod", None)
    identity = identity.completed_by(bound)
    forced = getattr(transport, "pod_bound", None)
    return identity, bool(forced) if forced is not None else identity.bound_to(bound)


def token_says(transport: object) -> str:
    """What the transport's token says of the pod, for the one line that says why events
    cannot be sent."""
    if transport is None or getattr(transport, "sink", False):
        return "no cluster is configured"
    if not hasattr(transport, "bound_pod"):
        return "the transport names no token"
    bound = transport.bound_pod
    if bound is None:
        return "the service-account token is bound to no pod"
    return f"the service-account token is bound to another pod ({bound.name})"


def task_from_labels(path: str) -> str:
    """The ``tidings.dev/task`` value from a downward-API labels file, or "" when absent."""
    try:
        text = Path(path).read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        m = _LABEL_LINE.match(line.strip())
        if m:
            return m.group(1)
    return ""
