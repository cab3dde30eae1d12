"""What every framework callback reports, written once: a worker's progress, the run's metrics
and tracker links (rank 0 only), its end or its crash. Framework-free: the callbacks translate
their framework's hooks into these calls.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import wraps
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

from tidings.emitter import Emitter, get_emitter
from tidings.emitter.core import started_emitters
from tidings.emitter.outcome import install_crash_hooks, report_failure
from tidings.emitter.spans import Span

log = logging.getLogger("tidings.integrations")

#: The MLflow UI's address as people reach it, when the tracking URI the workload uses is an
#: in-cluster one (``http://mlflow.mlflow.svc:5000``); its run page is built on this instead.
MLFLOW_PUBLIC_URL_ENV = "TIDINGS_MLFLOW_URL"

#: The spans every framework callback records (one lane per pod in the task's timeline): a
#: training step (Hugging Face: an optimizer step with its accumulated micro-batches;
#: Lightning: a training batch) and an evaluation (a validation run).
STEP_SPAN = "train_step"
EVAL_SPAN = "evaluation"

#: How long a framework callback declares its pod quiet on purpose before a checkpoint is
#: saved or an evaluation runs, in seconds (the watcher holds it to its ``--quiet-max``, 1 h
#: by default): the pod is not called Stalled meanwhile. Its next progress report, sent as
#: the checkpoint or the evaluation ends, ends the period; so a save that hangs is Stalled
#: this long (and the usual allowance) after it began. 0: never declared.
QUIET_S = 1800.0

P = ParamSpec("P")
R = TypeVar("R")


def guarded(hook: Callable[P, R | None]) -> Callable[P, R | None]:
    """A framework hook that never raises into the training loop: anything it throws is
    logged once per hook at DEBUG and the hook returns None."""
    failed: list[bool] = []

    @wraps(hook)
    def call(*args: P.args, **kwargs: P.kwargs) -> R | None:
        try:
            return hook(*args, **kwargs)
        except Exception:
            if not failed:
                failed.append(True)
                log.debug("tidings: %s failed; the run goes on", hook.__qualname__,
                          exc_info=True)
            return None

    return call


class RunReporter:
    """One process's view of a training run: ``begin`` with its ranks, ``step`` as it goes,
    ``metrics`` and ``links`` from global rank 0, ``end`` or ``crashed``.

    Progress is per pod (the fold keeps one record per reporting pod), so with several
    processes per pod only local rank 0 reports it, and the declared worker count is the
    number of pods: ``world_size / local_world_size`` (the world size with one process per
    pod). Every rank reports its own crash: one failed rank fails the task.
    """

    def __init__(self, emitter: Emitter | None = None, quiet_s: float = QUIET_S) -> None:
        self._emitter = emitter
        self.quiet_s = quiet_s
        self.global_rank = 0
        self.local_rank = 0
        self.world_size = 1
        self._linked: set[str] = set()
        self._ended = False
        self._open: dict[str, Span] = {}  # spans begun and not yet ended, by name

    @property
    def emitter(self) -> Emitter:
        return self._emitter if self._emitter is not None else get_emitter()

    @property
    def reports_progress(self) -> bool:
        return self.local_rank == 0

    @property
    def reports_run(self) -> bool:
        """Metrics and links: once per run, from global rank 0."""
        return self.global_rank == 0

    def begin(self, *, global_rank: int, local_rank: int, world_size: int,
              local_world_size: int) -> None:
        self.global_rank, self.local_rank, self.world_size = global_rank, local_rank, world_size
        self._ended = False
        em = self.emitter
        install_crash_hooks(started_emitters)
        if self.reports_progress:
            em.declare_workers(max(1, world_size // max(1, local_world_size)))
            em.progress(0.0, "training started")

    def step(self, step: int, max_steps: int) -> None:
        if self.reports_progress and max_steps > 0:
            self.emitter.progress(min(1.0, step / max_steps), f"step {step}/{max_steps}")

    def quiet(self, reason: str) -> None:
        """The pod is about to be quiet on purpose (``reason``: a checkpoint, an evaluation)
        for up to ``quiet_s`` (local rank 0, as its progress; one event). Its next progress
        report ends the period: call ``step`` again as the quiet work ends."""
        if self.reports_progress and self.quiet_s > 0:
            self.emitter.quiet(self.quiet_s, reason)

    def begin_span(self, name: str) -> None:
        """A span of this pod's work starts (local rank 0: the pod's lane in the timeline);
        O(1), never blocking: the emitter folds it into its span window."""
        if self.reports_progress:
            self._open[name] = Span(self.emitter, name)

    def end_span(self, name: str, error: bool = False) -> None:
        span = self._open.pop(name, None)
        if span is not None:
            span.end(error)

    def span(self, name: str, start: float, end: float) -> None:
        """A span measured by the framework itself (local rank 0)."""
        if self.reports_progress:
            self.emitter.record_span(name, start, end)

    def metrics(self, values: Mapping[str, Any], step: int | None) -> None:
        """Send every scalar of ``values`` as a Metric (rank 0 only), NaN and infinities
        too: a diverging loss is the task's ``NonFiniteMetrics`` condition, not a gap."""
        if not self.reports_run:
            return
        em = self.emitter
        for name, value in values.items():
            number = scalar(value)
            if number is not None:
                em.metric(name, number, step=step)

    def links(self, candidates: Iterable[tuple[str, str | None]]) -> None:
        """Send each named link once per run (rank 0 only); None: not known yet."""
        if not self.reports_run:
            return
        for name, url in candidates:
            if url and name not in self._linked:
                self._linked.add(name)
                self.emitter.log_link(name, url)

    def end(self, message: str = "training finished") -> None:
        """The worker's successful final (local rank 0; once)."""
        if self.reports_progress and not self._ended:
            self._ended = True
            self.emitter.progress(1.0, message, final=True)

    def crashed(self, exc: BaseException) -> None:
        """A failed final naming ``exc`` (every rank; once per exception), keeping the
        progress made; the spans it interrupted end as errors."""
        self._ended = True
        for name in list(self._open):
            self.end_span(name, error=True)
        report_failure(exc, self.emitter)


def scalar(value: Any) -> float | None:
    """A float (NaN and infinities included) from a number, a 0-d tensor or array
    (``.item()``); else None."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, int | float):
        item = getattr(value, "item", None)
        size = getattr(value, "numel", None) or getattr(value, "size", None)
        if not callable(item) or (callable(size) and size() != 1):
            return None
        value = item()
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
    return float(value)


# --- tracker links --------------------------------------------------------------------------


def wandb_run_url() -> str | None:
    """The active W&B run's page (None in offline mode or with no run). Never imports wandb:
    a run exists only if the workload imported it."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    if run is None:
        return None
    url = getattr(run, "url", None)
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def mlflow_run_url(tracking_uri: str | None, experiment_id: str | None,
                   run_id: str | None) -> str | None:
    """The MLflow UI's page of a run: on ``$TIDINGS_MLFLOW_URL`` when set (the public address
    of an in-cluster tracking server), else on an http(s) tracking URI; None for file or
    database stores, which have no page."""
    if not experiment_id or not run_id:
        return None
    base = os.environ.get(MLFLOW_PUBLIC_URL_ENV, "").strip() or (tracking_uri or "")
    if not base.startswith(("https://", "http://")):
        return None
    return (f"{base.rstrip('/')}/#/experiments/{quote(str(experiment_id), safe='')}"
            f"/runs/{quote(str(run_id), safe='')}")


def mlflow_active_run_url() -> str | None:
    """The page of MLflow's active (fluent API) run, as the Trainer's MLflowCallback makes it.
    Never imports mlflow."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return None
    run = mlflow.active_run()
    if run is None:
        return None
    return mlflow_run_url(mlflow.get_tracking_uri(), run.info.experiment_id, run.info.run_id)


# How many processes this pod runs, as each launcher says it, the first set (and sane) wins:
# - DeepSpeed's launcher sets LOCAL_SIZE and no LOCAL_WORLD_SIZE (deepspeed/launcher/launch.py:
#   ``current_env["LOCAL_SIZE"] = str(num_local_procs)``, beside RANK, LOCAL_RANK, WORLD_SIZE);
# - Open MPI's mpirun sets OMPI_COMM_WORLD_LOCAL_SIZE (with OMPI_COMM_WORLD_{RANK,SIZE,
#   LOCAL_RANK});
# - MPICH's and Intel MPI's Hydra (mpiexec) set MPI_LOCALNRANKS (with PMI_RANK, PMI_SIZE,
#   MPI_LOCALRANKID); MVAPICH2 sets MV2_COMM_WORLD_LOCAL_SIZE;
# - torchrun (and accelerate launch, which runs it) sets LOCAL_WORLD_SIZE.
# The launchers' own names come first: on CPU, accelerate writes LOCAL_WORLD_SIZE itself from a
# list that lacks LOCAL_SIZE, so under DeepSpeed's launcher it says 1 (accelerate/state.py,
# get_cpu_distributed_information).
LOCAL_SIZE_ENV = ("LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                  "MV2_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")


def local_world_size(world_size: int = 0, default: int = 1) -> int:
    """Processes in this pod, as its launcher says (``LOCAL_SIZE_ENV``): the first value that
    is a positive integer and, with ``world_size``, divides it; else ``default``."""
    for name in LOCAL_SIZE_ENV:
        try:
            n = int(os.environ.get(name, ""))
        except ValueError:
            continue
        if n >= 1 and (world_size <= 0 or world_size % n == 0):
            return n
    return default
