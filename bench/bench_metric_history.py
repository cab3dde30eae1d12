"""Benchmark (not a test): a long training run's metrics, end to end through the real emitter
and the fold: the TaskFeedback status size of a million-step run with 64 metrics (the
budget is ``STATUS_BUDGET``), the notes it took, the workload-thread cost of
``Emitter.metric`` with the curve (emitter/curves.py) against the same call without it, and
the watcher's cost of the run's events (the fast parse of each watch line, ``fold_many`` of
batches of 256, the status as written with the budget) with the curves' extremes and points
in the metric rows against the same events with plain ``[name, value, step]`` rows, all
measured in the same run (process CPU time, medians of ``--runs``).

    .venv/bin/python bench/bench_metric_history.py [--steps 1000000] [--metrics 64]
        [--window-steps 2000] [--pods 2] [--runs 5] [--smoke]

Every metric is logged at every step by global rank 0's emitter; a window (the sender's
``Window`` event, every 6 s in a pod) closes every ``--window-steps`` steps. The other pods report
progress and their train_step spans, as the Hugging Face callback does. The status is
``TaskState.to_status`` of the fold of every event sent, and ``status_body`` with the
budget, as the watcher writes it.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import time
from typing import Any

import orjson
from support import KeepEvents, load_averages  # bench/support.py

from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.items import LatestSlot
from tidings.schemas import ParsedEvent, TaskRef, fold_all, fold_many, new_state, parse_event
from tidings.schemas.status.decoder import expanded
from tidings.schemas.status.encoder import NAMED_FIELDS, STATUS_BUDGET, to_status
from tidings.schemas.wire.fastpath import fast_watch_line
from tidings.schemas.wire.record import fields_of

TASK = "train-1m"


def curve(step: int, k: int) -> float:
    """A loss-like value: decays, with noise and a spike now and then."""
    noise = math.sin(step * 12.9898 + k * 78.233) * 0.01
    return (k + 1) * (0.1 + 2.0 / (1 + step / 5000)) + noise + (1.0 if step % 99_991 == 7 else 0)


def run(steps: int, metrics: int, window: int, pods: int
        ) -> tuple[list[dict[str, Any]], int, float]:
    transports = [KeepEvents() for _ in range(pods)]
    # No API budget here: a pod's budget delays metrics (the latest value wins meanwhile); the
    # status is what this measures.
    ems = [Emitter(EmitterConfig(span_window_s=3600.0, exit_flush_s=30.0, burst=1e9, rate=1e9),
                   identity=Identity(namespace="bench", pod_name=f"trainer-{p}",
                                     pod_uid=f"uid-{p}", task=TASK), transport=t)
           for p, t in enumerate(transports)]
    for em in ems:
        em.declare_workers(pods)
    names = [f"train/metric_{k:02d}" for k in range(metrics)]
    t0 = time.monotonic()
    clock = time.time
    for step in range(1, steps + 1):
        start = clock()
        m = ems[0].metric
        for k, name in enumerate(names):
            m(name, curve(step, k), step=step)
        end = clock()
        for em in ems:
            em.record_span("train_step", start, end)
        if step % window == 0 or step == steps:
            for em in ems:
                em.progress(step / steps, f"step {step}/{steps}", final=step == steps)
                em.flush(30)
    for em in ems:
        em.close(30)
    took = time.monotonic() - t0
    bodies = [orjson.loads(orjson.dumps(body)) for t in transports for body in t.bodies]
    return bodies, len(bodies), took


def parsed(bodies: list[dict[str, Any]]) -> list[ParsedEvent]:
    events = []
    for body in bodies:
        ev = parse_event(body)
        assert isinstance(ev, ParsedEvent), ev
        events.append(ev)
    return events


def plain(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same events with each metric row cut to ``[name, value, step]`` (no extremes, no
    points; schema version 1): the baseline of the watcher's cost."""
    out = []
    for body in bodies:
        note = orjson.loads(body["note"])
        if note.get("metrics"):
            note["metrics"] = [row[:3] for row in note["metrics"]]
            note["v"] = 1
        out.append({**body, "note": orjson.dumps(note).decode()})
    return out


def watcher_cost(variants: dict[str, list[dict[str, Any]]], runs: int
                 ) -> dict[str, dict[str, float]]:
    """Median CPU µs per event of the watcher's stages for each variant's events: the fast
    parse of each watch line, ``fold_many`` in batches of 256, and one status as written
    (with the budget) of the folded task, in ms. The variants' runs alternate."""
    task = TaskRef("bench", TASK)
    inputs = {}
    for name, bodies in variants.items():
        events = parsed(bodies)
        inputs[name] = ([orjson.dumps({"type": "ADDED", "object": b}) for b in bodies],
                        [events[i:i + 256] for i in range(0, len(events), 256)])
    clock = time.process_time
    out: dict[str, dict[str, list[float]]] = {
        name: {"parse": [], "fold": [], "status": []} for name in variants}
    for _ in range(runs):
        for name, (lines, batches) in inputs.items():
            gc.collect()
            t0 = clock()
            for line in lines:
                fast_watch_line(line)
            t1 = clock()
            state = new_state(task)
            for batch in batches:
                state = fold_many(state, batch)
            t2 = clock()
            to_status(state, budget=STATUS_BUDGET)
            t3 = clock()
            o = out[name]
            o["parse"].append((t1 - t0) / len(lines) * 1e6)
            o["fold"].append((t2 - t1) / len(lines) * 1e6)
            o["status"].append((t3 - t2) * 1e3)
    return {name: {k: statistics.median(v) for k, v in o.items()} for name, o in out.items()}


def call_cost(n: int) -> tuple[float, float]:
    """Median ns of one metric update into the latest slot, with and without its curve."""
    def timed(with_curve: bool) -> float:
        slot = LatestSlot(256)
        key = ("Metric", "loss")
        put = slot.put
        clock = time.perf_counter_ns
        out = []
        for i in range(n):
            v = 1.0 / (i + 1)
            update = ({"name": "loss", "value": v, "step": i}, 0.0)
            t0 = clock()
            if with_curve:
                put(key, update, (v, i))
            else:
                put(key, update)
            out.append(clock() - t0)
        return statistics.median(out)

    base = [timed(False) for _ in range(3)]
    new = [timed(True) for _ in range(3)]
    return statistics.median(base), statistics.median(new)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--metrics", type=int, default=64)
    ap.add_argument("--window-steps", type=int, default=2000)
    ap.add_argument("--pods", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5, help="runs of the watcher's cost (median)")
    ap.add_argument("--smoke", action="store_true",
                    help="a short run only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    calls = 200_000
    if a.smoke:
        a.steps, a.metrics, calls, a.runs = 20_000, 8, 2_000, 1
    print(f"load average before: {load_averages()}")
    bodies, notes, took = run(a.steps, a.metrics, a.window_steps, a.pods)
    events = parsed(bodies)
    state = fold_all(TaskRef("bench", TASK), events)
    full = to_status(state)
    written = to_status(state, budget=STATUS_BUDGET)
    metrics = full["metrics"]
    # Each metric is one record string; its history is the record's field of that name.
    history = sum(len(str(fields_of(e, NAMED_FIELDS["metrics"]).get("history", "")))
                  for e in metrics.values())
    points = [len(e.get("history", {}).get("steps", ()))
              for e in expanded(full)["metrics"].values()]
    windows = -(-a.steps // a.window_steps)
    print(f"\n{a.steps:,} steps, {a.metrics} metrics logged every step, {a.pods} pods, "
          f"a window every {a.window_steps} steps ({windows} windows), run in {took:.0f} s")
    print(f"{'':38}{'bytes':>10}")
    print(f"{'status (everything folded)':38}{len(orjson.dumps(full)):>10,}")
    print(f"{'status as written (with the budget)':38}{len(orjson.dumps(written)):>10,}")
    print(f"{'  of which the metrics section':38}{len(orjson.dumps(metrics)):>10,}")
    print(f"{'  of which their histories':38}{history:>10,}")
    print(f"{'the budget (STATUS_BUDGET)':38}{STATUS_BUDGET:>10,}")
    print(f"budget dropped: {written.get('budgetDropped', 'nothing')}")
    print(f"history points per metric: min {min(points)}, max {max(points)}; "
          f"events sent {notes:,} ({notes / windows:.1f} per window), "
          f"{len(events):,} folded")
    base, new = call_cost(calls)
    print(f"\nlatest-slot put per metric call (median of 3 x {calls:,}): without the curve "
          f"{base:.0f} ns, with it {new:.0f} ns ({new / base:.2f}x)")
    cost = watcher_cost({"plain": plain(bodies), "curves": bodies}, a.runs)
    without, with_ = cost["plain"], cost["curves"]
    print(f"\nthe watcher's cost of these {len(bodies):,} events (CPU, median of {a.runs}), "
          f"plain metric rows vs with the curves:")
    for key, unit in (("parse", "µs/event"), ("fold", "µs/event"), ("status", "ms/write")):
        print(f"  {key + ' (' + unit + ')':24}{without[key]:>9.1f}{with_[key]:>9.1f}"
              f"{with_[key] / without[key]:>8.2f}x")
    print(f"load average after: {load_averages()}")


if __name__ == "__main__":
    main()
