"""Lightning ``Trainer`` reporting: ``Trainer(..., callbacks=[TidingsCallback()])`` is the
whole change. Imports lightning (and so torch); nothing else in tidings does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# The frameworks are not in make lint's venv: their names are Any there (hence the ignores).
from lightning.pytorch import (  # type: ignore[import-not-found, unused-ignore]
    Callback,
    LightningModule,
    Trainer,
)

from tidings.emitter import Emitter

from .report import (
    EVAL_SPAN,
    QUIET_S,
    STEP_SPAN,
    RunReporter,
    guarded,
    mlflow_run_url,
    wandb_run_url,
)

__all__ = ["TidingsCallback"]


class TidingsCallback(Callback):  # type: ignore[misc, unused-ignore]
    """Reports a Lightning ``fit`` over the bus.

    Every pod's progress (global step over the estimated stepping batches), the task's
    worker count (``num_nodes``: one pod per node), each training batch and each validation
    run as spans (``train_step``, ``evaluation``: the pod's lanes in ``tidings timeline``), a
    quiet period as each validation starts and each checkpoint is saved (``quiet_s``: the
    pod is not Stalled while it validates or writes; its next report ends it),
    the logged metrics as Metric facts at the
    Trainer's logging interval and after each validation, the W&B or MLflow logger's run
    page as a LogLink (both from global rank 0), the end of ``fit`` as the worker's final,
    and an exception inside ``fit`` as a failed final naming it, at once. No hook raises into
    the loop.
    """

    def __init__(self, emitter: Emitter | None = None, quiet_s: float = QUIET_S) -> None:
        self.reporter = RunReporter(emitter, quiet_s)
        self._max_steps = 0

    @guarded
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        nodes = max(1, int(trainer.num_nodes))
        world = max(1, int(trainer.world_size))
        self.reporter.begin(global_rank=int(trainer.global_rank),
                            local_rank=int(trainer.local_rank), world_size=world,
                            local_world_size=max(1, world // nodes))
        total = trainer.estimated_stepping_batches
        self._max_steps = int(total) if isinstance(total, int | float) and math.isfinite(
            total) else 0
        self._links(trainer)

    @guarded
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.reporter.begin_span(STEP_SPAN)

    @guarded
    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.reporter.end_span(STEP_SPAN)
        step = int(trainer.global_step)
        self.reporter.step(step, self._max_steps)
        every = int(getattr(trainer, "log_every_n_steps", 0) or 0)
        # Reading a tensor's value syncs with the device: only at the Trainer's own interval.
        if every and step % every == 0:
            self.reporter.metrics(trainer.logged_metrics, step)

    @guarded
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # (The sanity check's validation runs before on_train_start has set the ranks.)
        self.reporter.local_rank = int(trainer.local_rank)
        self.reporter.begin_span(EVAL_SPAN)
        if not trainer.sanity_checking:
            self.reporter.quiet("evaluation")

    @guarded
    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.reporter.end_span(EVAL_SPAN)
        if not trainer.sanity_checking:
            self.reporter.metrics(trainer.callback_metrics, int(trainer.global_step))
            # The validation is over: a report ends its quiet period (a checkpoint saved
            # after it, by ModelCheckpoint's own on_validation_end, declares its own).
            self.reporter.step(int(trainer.global_step), self._max_steps)

    @guarded
    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        # Called as the checkpoint is built, before the strategy writes it: the pod is quiet
        # on purpose until the next training batch reports.
        self.reporter.quiet("checkpoint")

    @guarded
    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.reporter.metrics(trainer.callback_metrics, int(trainer.global_step))
        self._links(trainer)
        self.reporter.end(f"finished at step {int(trainer.global_step)}")

    @guarded
    def on_exception(self, trainer: Trainer, pl_module: LightningModule,
                     exception: BaseException) -> None:
        self.reporter.crashed(exception)

    def _links(self, trainer: Trainer) -> None:
        if self.reporter.reports_run:
            self.reporter.links((("wandb", wandb_run_url()),
                                 *(("mlflow", url) for url in _mlflow_logger_urls(trainer))))


def _mlflow_logger_urls(trainer: Trainer) -> Iterator[str | None]:
    """The run page of each MLFlowLogger (it uses its own client, not MLflow's active run)."""
    for logger in getattr(trainer, "loggers", None) or ():
        # Its run_id would create the run (calls to the tracking server) when it has none
        # yet: only a logger that has started its run is read.
        if type(logger).__name__ == "MLFlowLogger" and getattr(logger, "_initialized", False):
            yield mlflow_run_url(getattr(logger, "_tracking_uri", None), logger.experiment_id,
                                 logger.run_id)
