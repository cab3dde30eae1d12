"""Benchmark what the record of deleted TaskFeedbacks costs the watcher: the check of each
listed event against it (delivery's ``_not_deleted``: a relist of ``-n`` events over ``-t``
tasks, with no deletion recorded and with ``-d``, half of the listed tasks among them), and
the record's durable form at its byte budget (encode, decode, its size).
Times are medians of ``-r`` runs on this process's CPU time.
Run: ``.venv/bin/python bench/bench_deleted_runs.py [-n 100000] [-t 2000] [-d 10000] [-r 5]
[--smoke]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tidings.schemas import LogLink, ParsedEvent, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.engine.deletions import MAX_BYTES, Deletions
from tidings.watcher.delivery import Delivery
from tidings.watcher.logs import RejectionLog
from tidings.watcher.metrics import Metrics
from tidings.watcher.queue import WorkQueue
from tidings.watcher.senders import Senders
from tidings.watcher.store import Store

NS = "bench"
T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def events(n: int, tasks: int) -> list[ParsedEvent]:
    one = parse_event(build_event(task=TaskRef(NS, "t0"), pod=PodRef("p", "uid-p", NS),
                                  payload=LogLink(name="w", url="https://x.y/"),
                                  instance="i" * 32, seq=1, time=T0, sender_proof=False))
    assert isinstance(one, ParsedEvent)
    refs = [TaskRef(NS, f"t{i}") for i in range(tasks)]
    return [replace(one, task=refs[i % tasks], seq=i + 1,
                    created=T0 - timedelta(seconds=60 if i % 2 else -60)) for i in range(n)]


def cpu(f: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.process_time()
        f()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100_000)
    ap.add_argument("-t", type=int, default=2000)
    ap.add_argument("-d", type=int, default=10_000)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="small sizes, one run: to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.n, a.t, a.d, a.r = 2000, 40, 200, 1
    print(f"load average {os.getloadavg()[0]:.2f}")
    evs = events(a.n, a.t)
    recorded = Deletions.of([(TaskRef(NS, f"t{i}" if i < a.t // 2 else f"gone{i}"), T0)
                             for i in range(a.d)])
    for label, deletions in (("none recorded", Deletions()),
                             (f"{a.d} recorded", recorded)):
        d = Delivery(Store(), WorkQueue(), Senders(lambda path: None), Metrics(),
                     RejectionLog(lambda reason: None), retry_after=3600, deletions=deletions)
        s = cpu(lambda d=d: d._not_deleted(evs), a.r)  # type: ignore[misc]
        kept = len(d._not_deleted(evs))
        print(f"check of a listed event, {label}: {s / a.n * 1e6:.3f} µs "
              f"({a.n - kept} of {a.n} dropped)")
    full = Deletions.of([(TaskRef(f"namespace-{i % 50:04d}", f"task-{i:08d}-{'x' * 20}"),
                          T0 + timedelta(seconds=i)) for i in range(20_000)])
    text, left_out = full.encode()
    print(f"durable form of 20,000 deletions: {len(text.encode()):,} bytes "
          f"(budget {MAX_BYTES:,}; {left_out:,} oldest left out), encode "
          f"{cpu(full.encode, a.r) * 1e3:.1f} ms, decode "
          f"{cpu(lambda: Deletions.decode(text), a.r) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
