"""The watcher's settings, declared once: each one's default, flag help, environment variable
and bounds. `tidings watcher run` builds its flags from these fields and from the health
conditions' thresholds (schemas/status/health.py's registry, ``THRESHOLDS``), the process
(``app``) checks them and the controller reads them.

Only the standard library is imported, and schemas/status/health.py, which imports nothing more:
the CLI reads these declarations to build its --help.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from tidings.schemas.status.health import THRESHOLDS, HealthSettings


def setting(default: Any, help: str | None = None, *, env: str | None = None,
            flag: tuple[str, ...] = (), minimum: float | None = None,
            maximum: float | None = None, unit: str = "",
            choices: tuple[str, ...] = ()) -> Any:
    """A setting's declaration. With ``help`` it is a flag of `tidings watcher run`
    (``flag``: its spellings, default --name-with-dashes; ``env``: the environment variable
    it may come from); ``minimum``/``maximum``/``choices`` are checked by ``problems``."""
    meta = {"help": help, "env": env, "flag": flag, "minimum": minimum, "maximum": maximum,
            "unit": unit, "choices": choices}
    if isinstance(default, list | dict):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    """What the controller (reflectors, folds, writes) runs with."""

    namespaces: list[str] = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        [], "Namespace to watch (repeatable or comma-separated; default: all).",
        env="TIDINGS_WATCH_NAMESPACES", flag=("--namespace", "-n"))
    concurrency: int = setting(
        8, "Fold workers (tasks folded in parallel).", env="TIDINGS_CONCURRENCY",
        minimum=1)
    write_concurrency: int = setting(
        8, "Status writes in flight at once (each to another task).",
        env="TIDINGS_WRITE_CONCURRENCY", minimum=1)
    write_interval: float = setting(
        0.5, "Minimum seconds between status writes of one task with a critical change "
        "(a link, a deck, a final or failed report, a phase change).",
        env="TIDINGS_WRITE_INTERVAL", minimum=0)
    coalesce_interval: float = setting(
        5.0, "Minimum seconds between status writes of one task whose changes are only "
        "spans and non-final progress (merged meanwhile).",
        env="TIDINGS_COALESCE_INTERVAL", minimum=0)
    write_budget: float = setting(
        0.5, "API-server CPU (cores) the status writes may use, estimated from each "
        "write's size; critical changes go first (0: unlimited).",
        env="TIDINGS_WRITE_BUDGET", minimum=0)
    max_write_rate: float = setting(
        0.0, "Status writes/s over all tasks, on top of the budget (0: unlimited).",
        env="TIDINGS_MAX_WRITE_RATE", minimum=0)
    write_policy: str = setting(
        "priority", "priority (critical changes first, then the oldest), or fifo (one line: "
        "the order before, for comparison).", env="TIDINGS_WRITE_POLICY",
        choices=("priority", "fifo"))
    watch_timeout: int = setting(60, "Server-side watch timeout (s).")
    page_size: int = setting(500)
    sender_retry: float = setting(1.0)
    evict_after: float = setting(
        7200.0, "Drop a task from memory after this many idle seconds once its state is "
        "written (it is reloaded from its status on its next event; 0: never).",
        env="TIDINGS_EVICT_AFTER", minimum=0)
    compact_after: float = setting(
        60.0, "Keep a task compact (its compressed status, rebuilt on its next event) after "
        "this many idle seconds once its state is written (0: never).",
        env="TIDINGS_COMPACT_AFTER", minimum=0)
    ttl_after_finished: float = setting(
        0.0, "Delete a finished TaskFeedback that nobody owns (no ownerReferences) and its "
        "bus events this many seconds after its last fact (0: never).",
        env="TIDINGS_TTL_AFTER_FINISHED", minimum=0)
    # schemas.engine.state.CLOCK_SKEW, written out: importing the state module would load pydantic
    # into every `tidings --help` (a unit test keeps the two equal).
    clock_skew: float = setting(
        2.0, "Seconds an event's eventTime may be ahead of the API "
        "server's creationTimestamp for ordering; later times are clamped and counted "
        "(counters.timeClamped). Node clocks are NTP-synced and creationTimestamp has whole "
        "seconds: 2 s tolerates a second of clock error, and is all a sender claiming the "
        "future can gain over another sender.",
        env="TIDINGS_CLOCK_SKEW", minimum=0, maximum=86400, unit=" s")
    event_ttl: float = setting(
        3600.0, "The API server's --event-ttl in seconds: dedup entries of instances whose "
        "events were created more than this (plus 10 min) before the newest are compacted.",
        env="TIDINGS_EVENT_TTL", minimum=60, unit=" s")
    max_instances: int = setting(
        512, "Emitter instances kept per task for dedup; beyond it the oldest are compacted "
        "and later events created before them skipped (counted).",
        env="TIDINGS_MAX_INSTANCES", minimum=16)
    task_label_keys: str = setting(
        "", "Pod label keys that name a sender's task, comma-separated, most specific first "
        "(the first key a pod carries wins). Default: tidings.dev/task, "
        "trainer.kubeflow.org/trainjob-name, training.kubeflow.org/job-name, "
        "jobset.sigs.k8s.io/jobset-name, workflows.argoproj.io/workflow, "
        "batch.kubernetes.io/job-name.", env="TIDINGS_TASK_LABEL_KEYS")
    track: str = setting(
        "platform", "Which tasks exist before any pod of theirs reports: platform (every "
        "Job, JobSet, TrainJob and Workflow that is a task of its own, and every pod carrying "
        "a task key, in the watched namespaces but kube-* and the watcher's own) or "
        "reported-only (a task exists from its first fact).", env="TIDINGS_TRACK",
        choices=("platform", "reported-only"))
    track_selector: str = setting(
        "", "With --track platform, only objects and pods whose labels match this selector "
        "(key=value, key!=value, key, !key; comma-separated, all must hold).",
        env="TIDINGS_TRACK_SELECTOR")
    track_skip_namespaces: list[str] = setting(  # noqa: RUF009 - setting() is a field
        [], "With --track platform, namespaces besides kube-* and the watcher's own whose "
        "objects are not tracked (repeatable or comma-separated).",
        env="TIDINGS_TRACK_SKIP_NAMESPACES")
    # Health: each condition's thresholds by name (schemas/status/health.py's registry declares them
    # with their flags; absent: the default). The watcher judges silence on a clock and
    # writes a task's status only when a worker's silence passes its limit.
    health: dict[str, float] = setting({})  # noqa: RUF009 - setting() is a dataclasses.field
    # A test hook (None: from the environment): extra seconds per status write, by task.
    slow_writes: dict[str, float] | None = setting(None)  # noqa: RUF009 - a field

    def __post_init__(self) -> None:
        # Flags may repeat and each may list several: one sorted set.
        self.namespaces = sorted({n.strip() for v in self.namespaces or []
                                  for n in v.split(",") if n.strip()})
        self.track_skip_namespaces = sorted({n.strip() for v in self.track_skip_namespaces
                                             or [] for n in v.split(",") if n.strip()})


@dataclass
class Options(Settings):
    """What the watcher process runs with: the controller's settings, and how it connects,
    serves and elects its leader."""

    kubeconfig: str | None = setting(
        None, "Kubeconfig file (default: in-cluster service account).", env="KUBECONFIG")
    context: str | None = setting(None, "Kubeconfig context.")
    metrics_host: str = setting(
        "0.0.0.0", "Address for /metrics, /healthz, /readyz, /tasks.",
        env="TIDINGS_METRICS_HOST")
    metrics_port: int = setting(
        8080, "Port for the HTTP endpoints (0 picks a free one).", env="TIDINGS_METRICS_PORT",
        minimum=0, maximum=65535)
    leader_elect: bool = setting(
        True, "Run as one of several replicas behind a Lease.",
        flag=("--leader-elect/--no-leader-elect",))
    lease_namespace: str = setting(
        "", "Namespace of the leader Lease (default: $POD_NAMESPACE or default).",
        env="TIDINGS_LEASE_NAMESPACE")
    lease_name: str = setting("tidings-watcher", "Name of the leader Lease.",
                              env="TIDINGS_LEASE_NAME")
    lease_duration: float = setting(
        15.0, "Seconds a lease is valid without renewal.", env="TIDINGS_LEASE_DURATION",
        minimum=1, unit=" s")
    renew_deadline: float | None = setting(
        None, "Seconds the leader keeps trying to renew (default: 2/3 lease).")
    retry_period: float | None = setting(
        None, "Seconds between lease attempts (default: 2/15 lease).")
    identity: str | None = setting(None, "Lease holder identity.")
    flush_timeout: float = setting(10.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.lease_namespace = self.lease_namespace or os.environ.get("POD_NAMESPACE") \
            or "default"


def flag_names(name: str) -> tuple[str, ...]:
    """The spellings of setting ``name``'s flag."""
    declared: tuple[str, ...] = next(f.metadata["flag"] for f in fields(Options)
                                     if f.name == name)
    return declared or ("--" + name.replace("_", "-"),)


def problems(o: Options) -> list[str]:
    """Each setting outside its declared bounds, as the message the user gets."""
    out = []
    for f in fields(o):
        value, meta = getattr(o, f.name), f.metadata
        where = flag_names(f.name)[0].split("/")[0]
        if meta.get("choices") and value not in meta["choices"]:
            out.append(f"{where} must be {' or '.join(meta['choices'])}")
        elif value is not None and meta.get("minimum") is not None:
            out += _out_of_bounds(where, value, meta["minimum"], meta["maximum"],
                                  meta.get("unit", ""))
    for t in THRESHOLDS.values():
        out += _out_of_bounds(t.flag, o.health.get(t.name, t.default), t.minimum, t.maximum,
                              t.unit)
    return out


def _out_of_bounds(where: str, value: float, low: float, high: float | None,
                   unit: str) -> list[str]:
    if high is not None and not low <= value <= high:
        return [f"{where} must be {low:g}..{high:g}{unit}"]
    if high is None and value < low:
        return [f"{where} must not be negative" if low == 0
                else f"{where} must be at least {low:g}{unit}"]
    return []


def options(**flags: Any) -> Options:
    """The ``Options`` a command line gives: each health threshold's flag (schemas/status/health.py
    declares them: ``Threshold.flag``, ``Threshold.env``) goes into ``health``."""
    health = {name: flags.pop(name) for name in THRESHOLDS if name in flags}
    return Options(**flags, health=health)


def health_settings(s: Settings) -> HealthSettings:
    """The ``schemas.status.health.HealthSettings`` these settings name."""
    return HealthSettings(**s.health)


def task_keys(s: Settings) -> tuple[str, ...]:
    """The task key list the settings name (schemas/wire/platform.py's default when unset).
    Raises ValueError for a bad list."""
    from tidings.schemas.wire.platform import DEFAULT_TASK_KEYS, parse_task_keys

    return parse_task_keys(s.task_label_keys) if s.task_label_keys.strip() \
        else DEFAULT_TASK_KEYS
