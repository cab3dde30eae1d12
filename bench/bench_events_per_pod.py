"""Benchmark the bus's footprint per pod: the Events a realistic training pod creates per
minute, and their bytes in the API and in etcd, for several emitter windows in the same run.

The pod is the real Hugging Face ``Trainer`` with ``callbacks=[TidingsCallback()]`` (a tiny
BERT built from a config, nothing downloaded, CPU), paced to ``--steps-per-s`` (10) with
``logging_steps=10``, evaluating every ``--eval-every`` steps; the workload also sends a log
link at the start and a deck mid-run (critical facts), and the callback its final at the end.
Each variant runs it for ``--seconds`` with the default budget (burst 20, then 2/s):

  window 6 s   the default: one Window event (progress, metrics, spans) per 6 s, the first at
               once;
  window 2 s   the span window before this change;
  window 0     every coalescible fact as soon as the budget allows (the budget-bound sender
               before windows: the baseline);
  no curves    the default window with no metric curve in the pod (each metric row its latest
               value only, as before the metric history): what the history costs.

Per variant: Events per pod-minute by reason, their size as the API serves them (JSON) and as
etcd stores them (the values under the task's ``/registry/events/`` keys, read from etcd's
v3 JSON gateway), and the longest wait of a critical fact (link, deck, final) from the call to
its delivery (goal: <= 12 Events per pod-minute at the default budget, no critical fact
delayed). The Trainer runs in the frameworks' venv (``make integrations-venv``; ``--python``),
with this checkout first on its path.

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python \
    bench/bench_events_per_pod.py``
Not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from support import REPO, add_control_plane_arg, control_plane, load_average  # bench/support.py

VARIANTS = {"window 6 s (default)": None, "window 6 s, no metric curves": None,
            "window 2 s": 2.0, "window 0 (budget-bound)": 0.0}
# The variant whose emitter keeps no metric curve (the Window rows before metrics kept
# their curve: the latest value only, no extremes, no points).
NO_CURVES = "window 6 s, no metric curves"


def frameworks_python() -> str | None:
    """The frameworks' venv (make integrations-venv): $TIDINGS_INTEGRATIONS_PYTHON, else the
    checkout's newest complete one."""
    explicit = os.environ.get("TIDINGS_INTEGRATIONS_PYTHON")
    if explicit:
        return explicit
    venvs = sorted((p.parent for p in (REPO / ".cache" / "integrations").glob("*/.complete")),
                   key=lambda d: (d / ".complete").stat().st_mtime, reverse=True)
    return str(venvs[0] / "bin" / "python") if venvs else None


# --- the workload (runs in the frameworks' venv) ------------------------------------------


def child(a: argparse.Namespace) -> None:
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from tidings.emitter import Emitter, EmitterConfig
    from tidings.integrations.transformers import TidingsCallback

    if a.no_curves:
        from tidings.emitter.items import LatestSlot

        put = LatestSlot.put
        LatestSlot.put = lambda self, key, update, point=None: put(self, key, update)  # type: ignore[method-assign]
    cfg = EmitterConfig() if a.window < 0 else EmitterConfig(span_window_s=a.window)
    em = Emitter(cfg)
    waits: list[float] = []

    def delivered(reason: str) -> int:
        return int(em.stats().get("delivered_by_reason", {}).get(reason, 0))

    def timed_critical(reason: str, send: Any) -> None:
        n, t0 = delivered(reason), time.monotonic()
        send()
        while delivered(reason) == n and time.monotonic() - t0 < 30:
            time.sleep(0.005)
        waits.append(time.monotonic() - t0)

    class Pace(TrainerCallback):  # type: ignore[misc]
        """10 steps/s (the step's work off the CPU, as on a GPU), a deck half-way."""

        def __init__(self) -> None:
            self.next = time.monotonic()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.next += 1 / a.steps_per_s
            time.sleep(max(0.0, self.next - time.monotonic()))
            if state.global_step == state.max_steps // 2:
                timed_critical("DeckReady", lambda: em.deck_ready(
                    "eval", f"s3://bench/{a.task}/eval.html"))

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=2))
    data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)}
            for i in range(64)]
    steps = int(a.seconds * a.steps_per_s)
    args = TrainingArguments(
        output_dir=a.workdir, max_steps=steps, per_device_train_batch_size=4, logging_steps=10,
        eval_strategy="steps", eval_steps=a.eval_every, save_strategy="no", report_to=[],
        use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8],
                      callbacks=[TidingsCallback(em), Pace()])
    timed_critical("LogLink", lambda: em.log_link("logs", f"https://logs.example/{a.task}"))
    t0 = time.monotonic()
    n_final = delivered("Progress")
    trainer.train()  # its on_train_end sends the final
    t_end = time.monotonic()
    elapsed = t_end - t0
    while delivered("Progress") == n_final and time.monotonic() - t_end < 30:
        time.sleep(0.005)
    waits.append(time.monotonic() - t_end)
    em.flush(10)
    print(json.dumps({"seconds": elapsed, "steps": steps, "critical_wait_max": max(waits),
                      "stats": em.stats()}), flush=True)


# --- the parent ------------------------------------------------------------------------------


def etcd_bytes(etcd_url: str, prefix: str) -> tuple[int, int]:
    """(keys, value bytes) under ``prefix`` in etcd (its v3 JSON gateway)."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode()}).encode()
    req = urllib.request.Request(f"{etcd_url}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        kvs = json.loads(resp.read()).get("kvs") or []
    return len(kvs), sum(len(base64.b64decode(kv.get("value", ""))) for kv in kvs)


def run_variant(name: str, window: float | None, a: argparse.Namespace, cp: Any, kube: Any,
                ns: str, python: str, tmp: Path) -> dict[str, Any]:
    from tidings.schemas.wire.constants import BUS_CONTROLLER, TASK_LABEL

    task = f"hf-{uuid.uuid4().hex[:6]}"
    pod = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body={
        "metadata": {"name": f"{task}-0", "labels": {TASK_LABEL: task}},
        "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "main", "image": "x"}]}})
    env = {**os.environ, "PYTHONPATH": str(REPO), "KUBECONFIG": str(cp.kubeconfig("admin")),
           "POD_NAME": pod["metadata"]["name"], "POD_NAMESPACE": ns,
           "POD_UID": pod["metadata"]["uid"], "TIDINGS_TASK": task,
           "TIDINGS_SENDER_PROOF": "0"}
    workdir = tmp / task
    out = subprocess.run(
        [python, __file__, "--child", "--task", task, "--seconds", str(a.seconds),
         "--steps-per-s", str(a.steps_per_s), "--eval-every", str(a.eval_every),
         "--window", str(-1.0 if window is None else window), "--workdir", str(workdir),
         *(["--no-curves"] if name == NO_CURVES else [])],
        env=env, capture_output=True, text=True, timeout=a.seconds * 4 + 300)
    if out.returncode != 0:
        raise SystemExit(f"{name}: the training run failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    items = kube.list_all(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", [(
        "fieldSelector", f"reportingController={BUS_CONTROLLER},regarding.name={task}")])[0]
    by_reason: dict[str, int] = {}
    for ev in items:
        by_reason[ev["reason"]] = by_reason.get(ev["reason"], 0) + 1
    api_bytes = sum(len(json.dumps(ev, separators=(",", ":"))) for ev in items)
    keys, stored = etcd_bytes(cp.etcd_url, f"/registry/events/{ns}/{task}.")
    minutes = res["seconds"] / 60
    return {"events": len(items), "per_min": len(items) / minutes, "by_reason": by_reason,
            "api_bytes": api_bytes, "etcd_keys": keys, "etcd_bytes": stored,
            "etcd_per_min": stored / minutes, "wait": res["critical_wait_max"],
            "seconds": res["seconds"], "steps": res["steps"],
            "coalesced": res["stats"].get("progress_coalesced", 0)
            + res["stats"].get("metrics_coalesced", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="training time per variant")
    ap.add_argument("--steps-per-s", type=float, default=10.0)
    ap.add_argument("--eval-every", type=int, default=200, help="steps between evaluations")
    ap.add_argument("--python", default=None, help="the frameworks' venv python (default: "
                    "$TIDINGS_INTEGRATIONS_PYTHON, else .cache/integrations/*/bin/python)")
    add_control_plane_arg(ap)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--window", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--no-curves", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    if a.smoke:
        a.seconds, a.eval_every = 2.0, 10
    python = a.python or frameworks_python()
    if python is None:
        raise SystemExit("no frameworks venv: run `make integrations-venv` or pass --python")
    import tempfile

    from tidings.kube import connect

    tmp = Path(tempfile.mkdtemp(prefix="bench-events-per-pod-"))
    load0 = load_average()
    results: dict[str, dict[str, Any]] = {}
    with control_plane(a.control_plane, "bench-events-per-pod-") as cp:
        kube = connect(str(cp.kubeconfig("admin")))
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                     body={"metadata": {"name": "default"}})
        for name, window in VARIANTS.items():
            results[name] = run_variant(name, window, a, cp, kube, ns, python, tmp)
    base = results["window 0 (budget-bound)"]
    print(f"\nHugging Face Trainer, {a.steps_per_s:g} steps/s, logging every 10 steps, "
          f"evaluating every {a.eval_every}; {a.seconds:g} s per variant; default budget "
          f"(burst 20, 2/s); {load0} before, {load_average()} after\n")
    print("| emitter | Events | per pod-minute | vs budget-bound | Windows per minute | by "
          "reason | API bytes (JSON) | etcd bytes | etcd bytes per pod-minute | longest critical "
          "wait |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["by_reason"].items()))
        print(f"| {name} | {r['events']} | {r['per_min']:.1f} | "
              f"{r['per_min'] / max(base['per_min'], 1e-9):.2f}x | "
              f"{r['by_reason'].get('Window', 0) / (r['seconds'] / 60):.1f} | {reasons} | "
              f"{r['api_bytes']:,} | {r['etcd_bytes']:,} ({r['etcd_keys']} keys) | "
              f"{r['etcd_per_min']:,.0f} | {r['wait'] * 1000:.0f} ms |")
    print("\n(goal: <= 12 Events per pod-minute at the default budget, no final, "
          "failure, link or deck delayed; a critical wait is the call to its delivery. A pod-"
          "minute is a minute of the run as it went: a loaded machine stretches the steps. "
          "The run's own critical facts, a link, a deck and the final, are in the count)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
