"""Benchmark the roster past its cap: folding N one-report workers and observing N pod ends
(N = 10,000 and 100,000; the roster keeps 20,000), per report and per end, and the status
bytes a state of N running or N ended workers writes under the status budget (whole, and
its roster), against that one budget for the whole status; and the fold of the first 30,000
pods' reports as the API server creates them (one emitter instance a pod, 1,000 new pods a
second: past the 512 kept instances each new one ends a fold run). Past the cap
each new pod used to cost a scan of the 20,000 kept hashes (``max()``); a heap of them makes
it O(log n).

The "before" is another source tree (``--before DIR``, e.g. ``git archive <commit> | tar -x
-C DIR``), measured by the same code in a child process of the same Python (its ``tidings``
first on ``sys.path``). Pure (no cluster). Prints one table and the load average.
Run: ``.venv/bin/python bench/bench_roster_scale.py [--sizes 10000,100000] [--before DIR]``.
Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 12, 1, tzinfo=UTC)
CREATED_N = 30_000


def measure(n: int) -> dict[str, Any]:
    """One row: fold of ``n`` one-report workers, observe of their ``n`` pod ends."""
    from tidings.schemas import PodRef, Progress, TaskRef, build_event, fold_all, parse_event
    from tidings.schemas.engine.observed import PodVerdict
    from tidings.schemas.engine.observing import observe
    from tidings.schemas.status.encoder import STATUS_BUDGET, to_status

    task = TaskRef("ml", "big")
    # (500 emitter instances: a real run's version vector keeps at most 512, compacted by
    # the events' creation times, which these lack; one instance a pod would put 189 KiB of
    # version vector in the status that no real run writes.)
    events = [parse_event(build_event(task=task, pod=PodRef(f"w-{i:06d}", f"uid-{i}"),
                                      instance=f"i-{i % 500}", seq=i // 500,
                                      payload=Progress(fraction=0.5), time=T0))
              for i in range(n)]
    t = time.perf_counter()
    state = fold_all(task, events)
    fold_s = time.perf_counter() - t
    # As the API server creates them: one instance a pod, 1,000 new pods a second, so every
    # new instance past the 512 kept ends a fold run (compaction may forget instances). The
    # first ``CREATED_N`` pods only: before the runs shared the roster's maps this was
    # quadratic (minutes at 100,000).
    m = min(n, CREATED_N)
    created = []
    for i in range(m):
        at = T0 + timedelta(seconds=i // 1000)
        raw = build_event(task=task, pod=PodRef(f"w-{i:06d}", f"uid-{i}"), instance=f"c-{i}",
                          seq=0, payload=Progress(fraction=0.5), time=at)
        raw["metadata"]["creationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        created.append(parse_event(raw))
    t = time.perf_counter()
    fold_all(task, created)
    created_s = time.perf_counter() - t
    t = time.perf_counter()
    running = to_status(state, budget=STATUS_BUDGET)
    write_s = time.perf_counter() - t
    ends = [PodVerdict(f"w-{i:06d}", f"uid-{i}", "Failed", "OOMKilled", "", 137,
                       T0 + timedelta(seconds=60)) for i in range(n)]
    t = time.perf_counter()
    ended = observe(state, ends)
    observe_s = time.perf_counter() - t
    done = to_status(ended, budget=STATUS_BUDGET)
    size = len(json.dumps(running, separators=(",", ":")))
    return {"n": n, "fold_us": fold_s / n * 1e6, "observe_us": observe_s / n * 1e6,
            "kept": len(state.roster.marks), "running_kib": size / 1024,
            "roster_kib": len(json.dumps(running["roster"])) / 1024,
            "ended_kib": len(json.dumps(done, separators=(",", ":"))) / 1024,
            "write_ms": write_s * 1e3, "budget_kib": STATUS_BUDGET / 1024,
            "created_us": created_s / m * 1e6, "created_n": m}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--before", default="")
    ap.add_argument("--row", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true",
                    help="one small size, to check that the bench runs (no figures)")
    args = ap.parse_args()
    if args.smoke:
        args.sizes = "300"
    if args.row:
        print(json.dumps(measure(args.row)))
        return
    trees = [("after", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    if args.before:
        trees.insert(0, ("before", args.before))
    print(f"{'tree':7} {'N':>7} {'kept':>6} {'fold us/report':>15} {'observe us/end':>15} "
          f"{'status KiB (running)':>21} {'roster KiB':>11} {'status KiB (ended)':>19} "
          f"{'budget KiB':>11} {'encode ms':>10} {'fold us (created)':>18}")
    for size in (int(s) for s in args.sizes.split(",")):
        for name, root in trees:
            out = subprocess.run([sys.executable, __file__, "--row", str(size)],
                                 env={**os.environ, "PYTHONPATH": root}, check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out)
            print(f"{name:7} {r['n']:>7} {r['kept']:>6} {r['fold_us']:>15.1f} "
                  f"{r['observe_us']:>15.1f} {r['running_kib']:>21.0f} {r['roster_kib']:>11.0f} "
                  f"{r['ended_kib']:>19.0f} {r.get('budget_kib', 64):>11.0f} "
                  f"{r.get('write_ms', 0):>10.0f} "
                  f"{r['created_us']:>12.1f} of {r['created_n']}")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
