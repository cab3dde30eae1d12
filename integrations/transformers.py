"""Hugging Face ``Trainer`` reporting: ``Trainer(..., callbacks=[TidingsCallback()])`` is the
whole change. Imports transformers (and so torch); nothing else in tidings does.
"""

from __future__ import annotations

import time
from typing import Any

# The frameworks are not in make lint's venv: their names are Any there (hence the ignores).
from transformers import (  # type: ignore[import-not-found, unused-ignore]
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from tidings.emitter import Emitter

from .report import (
    EVAL_SPAN,
    QUIET_S,
    STEP_SPAN,
    RunReporter,
    guarded,
    local_world_size,
    mlflow_active_run_url,
    wandb_run_url,
)

__all__ = ["TidingsCallback"]


class TidingsCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]
    """Reports a ``Trainer`` run over the bus.

    Every pod's progress (global step over max steps), the task's worker count (the world
    size, in pods), each optimizer step and each evaluation as spans (``train_step``,
    ``evaluation``: the pod's lanes in ``tidings timeline``), a quiet period before each
    evaluation and checkpoint (``quiet_s``: the pod is not Stalled while it writes or
    evaluates; its report after ends it), the logged training and
    evaluation metrics as Metric facts and the W&B or MLflow run page as a LogLink (both from
    global rank 0), and the end of training as the worker's final. A crash inside
    ``train()`` leaves the process through the emitter's excepthook as a failed final. Every
    call is O(1) and none raises into the loop.
    """

    def __init__(self, emitter: Emitter | None = None, quiet_s: float = QUIET_S) -> None:
        self.reporter = RunReporter(emitter, quiet_s)

    @guarded
    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, **kwargs: Any) -> None:
        world = max(1, int(args.world_size))
        self.reporter.begin(global_rank=int(args.process_index),
                            local_rank=int(args.local_process_index), world_size=world,
                            local_world_size=local_world_size(world))
        self._links()

    @guarded
    def on_step_begin(self, args: TrainingArguments, state: TrainerState,
                      control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.begin_span(STEP_SPAN)

    @guarded
    def on_step_end(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, **kwargs: Any) -> None:
        self.reporter.end_span(STEP_SPAN)
        self.reporter.step(int(state.global_step), int(state.max_steps or 0))
        self._quiet_ahead(control)

    @guarded
    def on_epoch_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        self._quiet_ahead(control)

    @guarded
    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        # The checkpoint is written: a report ends the quiet period declared before it.
        self.reporter.step(int(state.global_step), int(state.max_steps or 0))

    @guarded
    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs:
            self.reporter.metrics(logs, int(state.global_step))
        self._links()

    @guarded
    def on_evaluate(self, args: TrainingArguments, state: TrainerState,
                    control: TrainerControl, metrics: dict[str, Any] | None = None,
                    **kwargs: Any) -> None:
        # The Trainer also logs these through on_log; sending the latest twice is harmless
        # (latest wins) and covers evaluate() called outside train().
        if metrics:
            self.reporter.metrics(metrics, int(state.global_step))
            # The Trainer times the evaluation itself ("<prefix>_runtime", seconds) and
            # calls this hook as it ends; there is no hook at its start.
            runtime = next((v for k, v in metrics.items() if k.endswith("_runtime")), None)
            if isinstance(runtime, int | float) and 0 <= runtime < 1e7:
                end = time.time()
                self.reporter.local_rank = int(args.local_process_index)
                self.reporter.span(EVAL_SPAN, end - float(runtime), end)
        # The evaluation is over: a report ends the quiet period declared before it.
        self.reporter.step(int(state.global_step), int(state.max_steps or 0))

    @guarded
    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: Any) -> None:
        self._links()
        self.reporter.end(f"finished at step {int(state.global_step)}")

    def _quiet_ahead(self, control: TrainerControl) -> None:
        """The Trainer evaluates and saves right after a step's (or an epoch's) hooks, when
        its flow callback, which runs first, set these flags: there is no hook before either,
        so the pod declares its quiet period here."""
        ahead = [what for what, due in (("evaluation", control.should_evaluate),
                                        ("checkpoint", control.should_save)) if due]
        if ahead:
            self.reporter.quiet(" and ".join(ahead))

    def _links(self) -> None:
        self.reporter.links((("wandb", wandb_run_url()), ("mlflow", mlflow_active_run_url())))
