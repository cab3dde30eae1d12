"""Benchmark (not a test): the workload-thread cost of one emit call against
``logging.Logger.info`` to a handler writing to /dev/null, and the memory ceiling of the queue.

    .venv/bin/python bench/bench_emit.py [--calls 200000]

Each call is timed on its own with perf_counter_ns (so p99 includes GC pauses and GIL
hand-overs to the sender thread); the timer's own cost is measured and subtracted.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from tidings.emitter import Emitter, EmitterConfig, Identity, Span

ME = Identity(namespace="bench", pod_name="bench-0", pod_uid="0000-1111", task="bench")


class NullTransport:
    """Accepts every event at once: isolates the emitter from the network."""

    sink = False

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        return True


def timings(fn: Callable[[int], object], n: int) -> list[int]:
    clock = time.perf_counter_ns
    out = [0] * n
    for i in range(n):
        t0 = clock()
        fn(i)
        out[i] = clock() - t0
    return out


def summary(ns: list[int], overhead: float) -> tuple[float, float]:
    ns = sorted(ns)
    median = statistics.median(ns) - overhead
    p99 = ns[int(len(ns) * 0.99)] - overhead
    return max(median, 0.0), max(p99, 0.0)


def bench_calls(n: int) -> list[tuple[str, float, float]]:
    overhead = statistics.median(timings(lambda i: None, n))

    logger = logging.getLogger("bench.devnull")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives for the whole run
    logger.addHandler(logging.StreamHandler(devnull))

    em = Emitter(EmitterConfig(max_queue=n + 10, burst=1e9, rate=1e9, span_window_s=0.5),
                 identity=ME, transport=NullTransport())
    urls = [f"https://wandb.ai/acme/runs/{i}" for i in range(n)]

    def with_span(i: int) -> None:
        with Span(em, "step"):
            pass

    cases: list[tuple[str, Callable[[int], object]]] = [
        ("logging.Logger.info -> /dev/null", lambda i: logger.info("step %d done", i)),
        ("progress(f, msg)  [coalesced]", lambda i: em.progress(i / n, "training")),
        ("record_span(name, t0, t1)", lambda i: em.record_span("step", 1.0, 2.0)),
        ("with span(name): pass", with_span),
        ("log_link(name, url)  [critical, queued]", lambda i: em.log_link("run", urls[i])),
    ]
    rows = []
    for label, fn in cases:
        timings(fn, min(n, 20_000))  # warm up (first-use allocations, thread start)
        em.flush(30)
        median, p99 = summary(timings(fn, n), overhead)
        rows.append((label, median, p99))
        em.flush(30)
    em.close(5)
    devnull.close()
    return rows


def bench_memory(bound: int) -> tuple[int, int, int]:
    """Bytes held by a queue filled to its bound with LogLinks, and by a full span window."""
    em = Emitter(EmitterConfig(max_queue=bound), identity=ME, transport=NullTransport(),
                 autostart=False)  # no sender: the queue stays full
    names = [f"link-{i}" for i in range(bound)]
    urls = [f"https://wandb.ai/acme/runs/{i}" for i in range(bound)]  # the caller's strings
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    for i in range(bound + 1000):  # overshoot: the extra 1000 must be dropped, not stored
        em.log_link(names[i % bound], urls[i % bound])
    after = tracemalloc.take_snapshot()
    queue_bytes = sum(s.size_diff for s in after.compare_to(base, "filename"))
    assert em.stats()["queued"] == bound and em.stats()["dropped_queue_full"] == 1000

    span_names = [f"span-{i}" for i in range(em.config.max_span_names)]
    base = tracemalloc.take_snapshot()
    for name in span_names:
        em.record_span(name, 1.0, 2.0)
    after = tracemalloc.take_snapshot()
    window_bytes = sum(s.size_diff for s in after.compare_to(base, "filename"))
    tracemalloc.stop()
    return bound, queue_bytes, window_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--bound", type=int, default=EmitterConfig().max_queue)
    parser.add_argument("--smoke", action="store_true",
                        help="a few iterations only, to check that the bench runs (no figures)")
    args = parser.parse_args()
    if args.smoke:
        args.calls, args.bound = 2_000, 200

    rows = bench_calls(args.calls)
    log_median, log_p99 = rows[0][1], rows[0][2]
    print(f"\nCost of one call in the workload thread ({args.calls:,} calls each, "
          "timer overhead subtracted)\n")
    print(f"{'call':44} {'median ns':>10} {'p99 ns':>10} {'vs logging (median)':>20}")
    print("-" * 88)
    for label, median, p99 in rows:
        ratio = median / log_median if log_median else float("nan")
        print(f"{label:44} {median:10.0f} {p99:10.0f} {ratio:19.2f}x")
    print(f"\n(logging p99 {log_p99:.0f} ns)")

    bound, queue_bytes, window_bytes = bench_memory(args.bound)
    print("\nMemory ceiling (tracemalloc)\n")
    print(f"{'structure':44} {'items':>10} {'bytes':>12} {'bytes/item':>12}")
    print("-" * 81)
    print(f"{'critical queue at its bound (LogLink)':44} {bound:10,} {queue_bytes:12,} "
          f"{queue_bytes / bound:12.0f}")
    spans = EmitterConfig().max_span_names
    print(f"{'span window at max_span_names':44} {spans:10,} {window_bytes:12,} "
          f"{window_bytes / spans:12.0f}")
    print("\n(the caller's own name/url strings are not counted; the sender additionally "
          "holds at most 64 built events)")


if __name__ == "__main__":
    main()
