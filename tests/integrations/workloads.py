"""Tiny training runs with the real frameworks, as a workload process: a model built from a
config (nothing downloaded), a few steps on CPU, ``callbacks=[TidingsCallback()]``.

    python tests/integrations/workloads.py hf|lightning --out result.json
        [--steps N] [--crash-at STEP] [--diverge-at STEP] [--report-to none|wandb|mlflow]
        [--devices N] [--save]

The identity comes from the environment, as in a pod (POD_NAME, POD_NAMESPACE, POD_UID,
TIDINGS_TASK, KUBECONFIG). Writes the training time, the slowest callback hook and the
emitter's counters to ``--out`` (global rank 0; another rank to ``--out`` + ``.rank<N>``);
``--crash-at`` raises inside the model's forward at that training step, so the process dies
of it as a real crash would; ``--diverge-at`` makes the model's output NaN from that step on,
as a diverging run's is (the run itself goes on). Started by a launcher (torchrun, accelerate
launch, DeepSpeed's launcher, mpirun), each process trains its rank of a data-parallel run on
CPU (gloo); ``--devices`` is Lightning's processes per node. ``--save`` saves a checkpoint
every 3 steps; the quiet periods the callback declares (``Emitter.quiet``: before each
evaluation and checkpoint) are written to ``--out`` as ``quiet``, each with the step then.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOOKS = ("on_train_begin", "on_train_start", "on_step_begin", "on_step_end",
         "on_train_batch_start", "on_train_batch_end", "on_log", "on_evaluate",
         "on_validation_start", "on_validation_end", "on_train_end", "on_exception",
         "on_save", "on_save_checkpoint", "on_epoch_end")


class SimulatedOOM(RuntimeError):
    pass


seen: dict[str, Any] = {}  # what the framework said of the run (its world size)


def record_quiet() -> None:
    """Each quiet period the callback declares, with the progress reported before it."""
    from tidings.emitter import Emitter

    declare = Emitter.quiet
    seen["quiet"] = []

    def quiet(self: Emitter, seconds: float, reason: str = "") -> Any:
        seen["quiet"].append([seconds, reason, self._fraction])
        return declare(self, seconds, reason)

    Emitter.quiet = quiet  # type: ignore[method-assign]


def timed_hooks(callback: Any, slowest: list[float]) -> Any:
    """Wrap the callback's hooks to record the slowest call (the frameworks look hooks up on
    the instance, so the wrappers are what they call)."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                slowest[0] = max(slowest[0], time.perf_counter() - t)
        return call

    for name in HOOKS:
        if hasattr(callback, name):
            setattr(callback, name, wrap(getattr(callback, name)))
    return callback


def crash_after(model: Any, steps: int) -> None:
    """The model's forward raises once ``steps`` training forwards have run."""
    calls = [0]

    def hook(module: Any, inputs: Any) -> None:
        if module.training:
            calls[0] += 1
            if calls[0] > steps:
                raise SimulatedOOM(f"CUDA out of memory at step {steps + 1} \x1b[31m(simulated)")

    model.register_forward_pre_hook(hook)


def diverge_after(model: Any, steps: int) -> None:
    """The model's training outputs are NaN once ``steps`` training forwards have run."""
    calls = [0]

    def hook(module: Any, inputs: Any, output: Any) -> Any:
        if not module.training:
            return output
        calls[0] += 1
        if calls[0] <= steps:
            return output
        if hasattr(output, "logits"):  # a transformers ModelOutput
            output.logits = output.logits * float("nan")
            return output
        return output * float("nan")

    model.register_forward_hook(hook)


def run_hf(a: argparse.Namespace, slowest: list[float]) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from tidings.integrations.transformers import TidingsCallback

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config)
    if a.crash_at:
        crash_after(model, a.crash_at - 1)
    if a.diverge_at:
        diverge_after(model.classifier, a.diverge_at - 1)
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)}
            for i in range(32)]
    args = TrainingArguments(
        output_dir=a.workdir, max_steps=a.steps, per_device_train_batch_size=4,
        logging_steps=2, eval_strategy="steps", eval_steps=3,
        save_strategy="steps" if a.save else "no", save_steps=3,
        report_to=[] if a.report_to == "none" else [a.report_to], use_cpu=True,
        disable_tqdm=True, run_name="tidings-it")
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8],
                      callbacks=[timed_hooks(TidingsCallback(), slowest)])
    seen["world_size"] = int(trainer.args.world_size)
    trainer.train()


def run_lightning(a: argparse.Namespace, slowest: list[float]) -> None:
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    from tidings.integrations.lightning import TidingsCallback

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    model = Regression()
    if a.crash_at:
        crash_after(model.layer, a.crash_at - 1)
    if a.diverge_at:
        diverge_after(model.layer, a.diverge_at - 1)
    logger: Any = False
    if a.report_to == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger

        logger = MLFlowLogger(experiment_name="tidings-it",
                              tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    elif a.report_to == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        logger = WandbLogger(project="tidings-it", save_dir=a.workdir)
    trainer = pl.Trainer(max_steps=a.steps, accelerator="cpu", devices=a.devices,
                         strategy="ddp" if a.devices > 1 else "auto", logger=logger,
                         enable_checkpointing=a.save, enable_progress_bar=False,
                         enable_model_summary=False, log_every_n_steps=2,
                         val_check_interval=3, limit_val_batches=2, num_sanity_val_steps=0,
                         default_root_dir=a.workdir,
                         callbacks=[timed_hooks(TidingsCallback(), slowest), *(
                             [ModelCheckpoint(dirpath=a.workdir, every_n_train_steps=3,
                                              save_top_k=-1)] if a.save else [])])
    seen["world_size"] = int(trainer.world_size)
    trainer.fit(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=["hf", "lightning"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--crash-at", type=int, default=0)
    ap.add_argument("--diverge-at", type=int, default=0)
    ap.add_argument("--report-to", default="none", choices=["none", "wandb", "mlflow"])
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--local_rank", type=int, default=0)  # DeepSpeed's launcher passes it
    ap.add_argument("--save", action="store_true")
    a = ap.parse_args()
    record_quiet()
    a.workdir = a.workdir or str(Path(a.out).parent / "work")
    slowest = [0.0]
    t0 = time.monotonic()
    (run_hf if a.framework == "hf" else run_lightning)(a, slowest)
    took = time.monotonic() - t0

    import tidings.emitter

    # The counters once what training emitted had its chance to go (a few steps take well
    # under a second, less than the sender's first transport set-up on a loaded machine).
    flushed = tidings.emitter.flush(5)

    rank = next((os.environ[k] for k in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
                 if k in os.environ), "0")
    out = Path(a.out if rank == "0" else f"{a.out}.rank{rank}")
    out.write_text(json.dumps({"train_seconds": took, "slowest_hook_seconds": slowest[0],
                               "stats": tidings.emitter.stats(), "flushed": flushed, **seen}))


if __name__ == "__main__":
    main()
