"""Benchmark what judging the health of every worker costs at scale: a task
of N reporting workers (64, 1,000, 10,000), one of them silent and one straggling, both last
in name order; per N the memory the folded state holds per worker, the fold's time per
progress report, the time to judge its health (``judge``, inside every status write) and to
find the health clock's next time (``next_stall``, after every fold that moved a pace), the
status bytes (whole, and as written under the 64 KiB budget), and what the health says.

The "before" is another source tree of tidings (``--before DIR``, e.g. the commit this branch
started from: ``git archive <commit> | tar -x -C DIR``), measured by the same code in a child
process of the same Python in the same run (its ``tidings`` first on ``sys.path``), so the
ratios compare like with like under the same load.

Pure (no cluster). Prints one table, medians of ``--runs`` runs, and the load average.
Run: ``.venv/bin/python bench/bench_health_scale.py [--before DIR] [--sizes 64,1000,10000]``.
Not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 12, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=100)
REPORTS = 3  # per worker, 10 s apart; the silent one's last 300 s before NOW


def events(n: int) -> list[Any]:
    """Progress of ``n`` workers ``w-00000`` ...: each 3 reports 10 s apart ending at NOW,
    the last worker's ending 300 s before (silent), the one before it at a fifth of the
    pace (straggling)."""
    from tidings.schemas import PodRef, Progress, TaskRef, build_event, parse_event

    task = TaskRef("ml", "big")
    out = []
    for i in range(n):
        pod = f"w-{i:05d}"
        end = NOW - timedelta(seconds=300 if i == n - 1 else 0)
        pace = 0.0002 if i == n - 2 else 0.001
        for k in range(REPORTS):
            t = end - timedelta(seconds=10 * (REPORTS - 1 - k))
            raw = build_event(task=task, pod=PodRef(pod, f"uid-{i}"), instance=f"i-{i}",
                              seq=k, payload=Progress(fraction=round(0.1 + pace * 10 * k, 4)),
                              time=t)
            out.append(parse_event(raw))
    return out


def median_of(fn: Callable[[], object], runs: int, inner: int) -> float:
    """Median of ``runs`` runs of ``inner`` calls, seconds per call."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def measure(n: int, runs: int) -> dict[str, Any]:
    import orjson

    from tidings.schemas import fold_all
    from tidings.schemas.status import health as h
    from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
    from tidings.schemas.wire.event import TaskRef

    evs = events(n)
    task = TaskRef("ml", "big")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    state = fold_all(task, evs)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    fold_s = median_of(lambda: fold_all(task, evs), runs, 1) / len(evs)
    inner = max(1, 2000 // n)
    judge_s = median_of(lambda: h.judge(state, NOW), runs, inner)
    next_s = median_of(lambda: h.next_stall(state, NOW), runs, inner)
    # What the health clock does after a fold of one worker's report: before, next_stall
    # over the detailed workers; now, over the workers that reported.
    of = getattr(h, "next_stall_of", None)
    one = [f"w-{n // 2:05d}"]
    clock_s = next_s if of is None else median_of(lambda: of(state, one, NOW), runs, 2000)
    judged = h.judge(state, NOW)
    whole = to_status(state, health=judged)
    written = to_status(state, STATUS_BUDGET, health=judged)
    conditions = {c["type"]: c for c in written.get("conditions", [])}
    return {
        "n": n, "bytes_per_worker": held / n, "fold_us_per_report": fold_s * 1e6,
        "judge_ms": judge_s * 1e3, "next_stall_ms": next_s * 1e3, "clock_ms": clock_s * 1e3,
        "status_kb": len(orjson.dumps(whole)) / 1024,
        "written_kb": len(orjson.dumps(written)) / 1024,
        "dropped": written.get("budgetDropped", {}),
        "summary": written["health"]["summary"],
        "stalled": conditions["Stalled"]["status"],
        "straggling": conditions["Straggling"]["status"],
    }


def child(before: str, n: int, runs: int) -> dict[str, Any]:
    """The same measurements of the tree ``before``, in a child process."""
    env = {**os.environ, "PYTHONPATH": before, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", "--runs", str(runs),
                          "--sizes", str(n)], env=env, check=True, capture_output=True,
                         text=True)
    (row,) = json.loads(out.stdout)
    return dict(row)


NUMBERS = ("bytes_per_worker", "fold_us_per_report", "judge_ms", "next_stall_ms", "clock_ms",
           "status_kb", "written_kb")


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {**rows[0], **{k: statistics.median(r[k] for r in rows) for k in NUMBERS}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="64,1000,10000")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds, each measuring this tree and the before alternately")
    ap.add_argument("--runs", type=int, default=3, help="runs of each timing in a round")
    ap.add_argument("--before", metavar="DIR", help="another source tree, measured alike")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations (figures meaningless): that the bench still runs")
    a = ap.parse_args()
    sizes = [100] if a.smoke else [int(x) for x in a.sizes.split(",")]
    runs, rounds = (1, 1) if a.smoke else (a.runs, a.rounds)
    if a.child:
        print(json.dumps([measure(n, runs) for n in sizes]))
        return
    load = os.getloadavg()[0]
    now: list[dict[str, Any]] = []
    then: list[dict[str, Any]] = []
    for n in sizes:  # this tree and the before alternately, so load hits both alike
        mine, theirs = [], []
        for _ in range(rounds):
            mine.append(measure(n, runs))
            if a.before:
                theirs.append(child(a.before, n, runs))
        now.append(medians(mine))
        if theirs:
            then.append(medians(theirs))
    import tidings

    print(f"health at scale: N workers x {REPORTS} progress reports, the last by name silent "
          f"for 300 s, the one before it at a fifth of the pace; medians of {rounds} rounds "
          f"x {runs} runs")
    print(f"this tree: {os.path.dirname(os.path.dirname(tidings.__file__))}"
          + (f"; before: {a.before}" if a.before else ""))
    cols = [("bytes_per_worker", "B/worker", "{:.0f}"),
            ("fold_us_per_report", "fold us/rep", "{:.2f}"),
            ("judge_ms", "judge ms", "{:.3f}"), ("next_stall_ms", "next_stall ms", "{:.3f}"),
            ("clock_ms", "clock/fold ms", "{:.4f}"), ("status_kb", "status kB", "{:.1f}"),
            ("written_kb", "written kB", "{:.1f}")]
    print(f"{'':8}{'N':>7}" + "".join(f"{t:>15}" for _, t, _ in cols)
          + "  health (Stalled/Straggling)")
    for i, row in enumerate(now):
        for label, r in [("now", row)] + ([("before", then[i])] if then else []):
            cells = "".join(f"{f.format(r[k]):>15}" for k, _, f in cols)
            print(f"{label:8}{r['n']:>7}{cells}  {r['summary']} "
                  f"({r['stalled']}/{r['straggling']})")
        if then:
            b = then[i]
            ratios = "".join(f"{(row[k] / b[k] if b[k] else float('nan')):>14.2f}x"
                             for k, _, _ in cols)
            print(f"{'ratio':8}{'':>7}{ratios}")
        if row["dropped"]:
            print(f"{'':15}now written under the budget, dropped: {row['dropped']}")
    print("clock/fold: what the health clock computes after a fold of one worker's report "
          "(before: next_stall over the detailed workers; now: over the workers that "
          "reported)")
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after "
          f"({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
