"""The training run bench_trainer_peer.py measures, as a workload process in the frameworks'
venv: a real Hugging Face ``Trainer`` (a tiny BERT built from a config, nothing downloaded, on
CPU) whose steps are paced to ``--step-s`` so both reporters see the same run, reporting either
through ``tidings.integrations.transformers`` or through transformers' own ``KubeflowCallback``
(``report_to=["kubeflow"]``, its server named by the environment as the Trainer injects it).

    python bench/trainer_peer_run.py tidings|kubeflow --steps N --step-s S --logging-steps L
        --out FILE

Prints ``BEGIN`` when training starts and ``END`` when ``train()`` returned, each with the wall
time, so the bench opens and closes its window on the training itself; writes every logged
training loss (step, wall time of the log, value) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("tidings", "kubeflow"))
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--step-s", type=float, default=0.5)
    ap.add_argument("--logging-steps", type=int, default=10)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp")
    a = ap.parse_args()

    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    logs: list[dict[str, Any]] = []

    class Pace(TrainerCallback):  # type: ignore[misc]
        """Pads every optimizer step to ``step_s`` (a real model's step, not the tiny one's),
        and records each logged loss when the Trainer logs it."""

        def __init__(self) -> None:
            self.began = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            print(f"BEGIN {time.time():.6f}", flush=True)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.began = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            left = a.step_s - (time.monotonic() - self.began)
            if left > 0:
                time.sleep(left)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
                   **kw: Any) -> None:
            if logs and "loss" in logs:
                record.append({"step": state.global_step, "t": time.time(),
                               "loss": float(logs["loss"])})

    record = logs
    torch.set_num_threads(1)  # a tiny model: more threads only contend with the plane
    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config)
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)}
            for i in range(64)]
    callbacks: list[Any] = [Pace()]
    if a.mode == "tidings":
        from tidings.integrations.transformers import TidingsCallback
        callbacks.append(TidingsCallback())
    args = TrainingArguments(
        output_dir=a.workdir, max_steps=a.steps, per_device_train_batch_size=4,
        logging_steps=a.logging_steps, eval_strategy="no", save_strategy="no",
        report_to=["kubeflow"] if a.mode == "kubeflow" else [], use_cpu=True,
        disable_tqdm=True, run_name="peer-bench")
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    print(f"END {time.time():.6f}", flush=True)
    with open(a.out, "w") as f:
        json.dump(logs, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
