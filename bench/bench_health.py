"""Benchmark what task health costs the watcher: the CPU of judging a task's health inside
each status write and of scheduling its next judgment after each fold, against the status
encode and the fold they ride on (measured in the same run), and the status writes the
health clock makes for many idle tasks (simulated time: a write when a worker's silence
passes its limit, never else).

Pure (no cluster). Prints two tables and the load average.
Run: ``.venv/bin/python bench/bench_health.py [--tasks 1000] [--workers 8]``. Not a test.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from tidings.schemas import (
    Metric,
    PodRef,
    Progress,
    TaskRef,
    build_event,
    fold,
    fold_all,
    parse_event,
)
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.encoder import to_status
from tidings.schemas.status.health import evaluate, judge, next_stall
from tidings.schemas.wire.event import ParsedEvent

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def event(task: TaskRef, pod: int, seq: int, payload: object, t: datetime) -> ParsedEvent:
    ev = parse_event(build_event(task=task, pod=PodRef(f"w-{pod}", f"uid-{pod}"),
                                 payload=payload, instance=f"i-{pod}", seq=seq, time=t))
    assert isinstance(ev, ParsedEvent)
    return ev


def training_task(name: str, workers: int, reports: int, rnd: random.Random
                  ) -> tuple[TaskState, ParsedEvent]:
    """A running task: ``workers`` pods reporting every 1-30 s (each its own pace), 16
    metrics; and one more progress report (what the next fold folds)."""
    task = TaskRef("ml", name)
    evs = []
    for w in range(workers):
        every = rnd.uniform(1, 30)
        for k in range(reports):
            evs.append(event(task, w, k, Progress(fraction=min(0.9, 0.01 * k), workers=workers),
                             T0 + timedelta(seconds=every * k)))
    for m in range(16):
        evs.append(event(task, 0, 10_000 + m, Metric(name=f"m{m}", value=0.1 * m, step=m), T0))
    nxt = event(task, 0, reports, Progress(fraction=0.95, workers=workers),
                T0 + timedelta(seconds=reports * 30))
    return fold_all(task, evs), nxt


def per_call(fn: Callable[[], object], n: int) -> float:
    """Median of 5 runs, microseconds per call."""
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def clock_writes(states: list[TaskState], hours: float) -> tuple[int, int]:
    """Simulate the watcher's health clock over ``hours`` of silence: (writes it makes in
    the first hour, writes in the hours after)."""
    now = T0 + timedelta(days=1)  # every task's last report is far behind: all of it silence
    start = min(max(w.at[0] for w in s.workers.values()) for s in states)
    heap: list[tuple[datetime, int]] = []
    for i, s in enumerate(states):
        due = next_stall(s, start)
        if due is not None:
            heap.append((due, i))
    heapq.heapify(heap)
    first = later = 0
    end = start + timedelta(hours=hours)
    while heap and heap[0][0] <= end:
        due, i = heapq.heappop(heap)
        if due - start <= timedelta(hours=1):
            first += 1
        else:
            later += 1
        nxt = next_stall(states[i], due)
        if nxt is not None:
            heapq.heappush(heap, (nxt, i))
    del now
    return first, later


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reports", type=int, default=40)
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations (figures meaningless): that the bench still runs")
    a = ap.parse_args()
    if a.smoke:
        a.tasks, a.reports = 20, 5
    scale = 100 if a.smoke else 1
    rnd = random.Random(7)
    state, nxt = training_task("bert", a.workers, a.reports, rnd)
    now = T0 + timedelta(hours=1)
    rows = [
        ("fold one event (baseline)", per_call(lambda: fold(state, nxt), 2000 // scale)),
        ("next_stall after a fold", per_call(lambda: next_stall(state, now), 20000 // scale)),
        ("to_status, no health (baseline)",
         per_call(lambda: to_status(state), 500 // scale)),
        ("to_status with health judged at now",
         per_call(lambda: to_status(state, health=judge(state, now)), 500 // scale)),
        ("evaluate() alone", per_call(lambda: evaluate(state, now), 5000 // scale)),
    ]
    print(f"one task: {a.workers} workers x {a.reports} reports, 16 metrics; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'operation':45} {'us/call':>9} {'ratio':>7}")
    for i, (name, us) in enumerate(rows):
        base = rows[0][1] if i < 2 else rows[2][1]
        print(f"{name:45} {us:9.1f} {us / base:7.2f}")

    states = [training_task(f"t{i}", a.workers, 4, rnd)[0] for i in range(a.tasks)]
    first, later = clock_writes(states, hours=24)
    print()
    print(f"health clock, {a.tasks} idle running tasks x {a.workers} workers, 24 h of silence:")
    print(f"{'status writes in the first hour':45} {first:9d}  "
          f"(at most one per worker: {a.tasks * a.workers})")
    print(f"{'status writes in the 23 hours after':45} {later:9d}")


if __name__ == "__main__":
    main()
