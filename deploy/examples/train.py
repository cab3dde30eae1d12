"""A sample workload for the demo: a tiny "training job" that reports through tidings.

Run inside a pod: the emitter learns the pod from its service-account token and the watcher
the task from the pod's labels (the downward-API POD_NAME, POD_NAMESPACE, POD_UID and
TIDINGS_TASK still override). Its link and deck names carry the worker's name: POD_NAME,
else HOSTNAME (a container's hostname is its pod's name). With no cluster configured it runs
anyway and reports nothing.
"""

from __future__ import annotations

import os
import random
import sys
import time

from tidings import emitter as tidings


def worker_name() -> str:
    return os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or "local"


def train(epochs: int) -> None:
    worker = worker_name()
    tidings.log_link(f"wandb-{worker}", f"https://wandb.example/tidings/runs/{worker}")
    for epoch in range(1, epochs + 1):
        with tidings.span("epoch"):
            for _ in range(200):
                with tidings.span("batch"):
                    pass  # a real job computes here; spans are summed, not sent one by one
            time.sleep(random.uniform(0.05, 0.15))
        tidings.progress(epoch / epochs * 0.9, f"{worker}: epoch {epoch}/{epochs}")
        print(f"epoch {epoch}/{epochs} done", flush=True)
    with tidings.span("evaluate"):
        time.sleep(0.05)
    tidings.deck_ready(f"report-{worker}", f"s3://decks/tidings/{worker}/report.html")


if __name__ == "__main__":
    # Usage: train.py [EPOCHS] [--final]   (--final: also send this worker's terminal report;
    # with several workers, set TIDINGS_EMIT_WORKERS to their number in each of them)
    args = [a for a in sys.argv[1:] if a != "--final"]
    train(int(args[0]) if args else 5)
    if "--final" in sys.argv[1:]:
        tidings.progress(1.0, f"{worker_name()}: done", final=True)
    delivered = tidings.flush(15)
    print(f"  {worker_name()}: delivered={delivered} "
          f"stats={ {k: v for k, v in tidings.stats().items() if v} }")
    sys.exit(0 if delivered else 1)
