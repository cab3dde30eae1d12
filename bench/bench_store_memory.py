"""Benchmark (not a test): the watcher's memory per tracked task, live vs compact, against
the size of the same task's status JSON, in the same run (at most 2 KB per idle
task, 100k tasks in at most 250 MB).

    .venv/bin/python bench/bench_store_memory.py [--tasks 100000] [--sample 5000]

Each task gets 10 events from 2 emitter instances on 2 pods (links, a deck, span summaries,
progress, a final), with server creation times, folded and marked written as the watcher
does. Then:

- tracemalloc over ``--sample`` tasks: the bytes the store holds per task, live, then after
  ``compact_idle`` (every entry compact), with the status JSON and its zlib size beside;
- RSS (``/proc/self/statm``) over ``--tasks`` tasks: the process's growth per task, live
  and compact (what an operator sees; includes allocator slack).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
import types
import uuid
import zlib
from datetime import datetime, timedelta, timezone

import orjson

from tidings.schemas import (
    DeckReady,
    Limits,
    LogLink,
    ParsedEvent,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    build_event,
    fold_all,
    parse_event,
)
from tidings.schemas.status.encoder import to_status
from tidings.watcher.store import Store

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)


def task_events(task: TaskRef, k: int) -> list[ParsedEvent]:
    pods = [PodRef(f"{task.name}-worker-{i}", str(uuid.UUID(int=k * 2 + i)), task.namespace)
            for i in range(2)]
    instances = [uuid.UUID(int=k * 2 + i + 1 << 64).hex for i in range(2)]
    t = T0 + timedelta(seconds=k % 3600)
    payloads = [
        LogLink(name="wandb", url=f"https://wandb.ai/acme/runs/{k}"),
        LogLink(name="logs", url=f"https://grafana.example.com/d/logs?var-task={task.name}"),
        SpanSummary(name="epoch", count=3, total_s=12.5, min_s=3.5, max_s=5.0,
                    first_start=t.timestamp(), last_end=t.timestamp() + 14),
        SpanSummary(name="load", count=40, total_s=2.0, min_s=0.01, max_s=0.2,
                    first_start=t.timestamp(), last_end=t.timestamp() + 3),
        Progress(fraction=0.3, message="epoch 3/10", workers=2),
        SpanSummary(name="epoch", count=2, total_s=9.0, min_s=4.0, max_s=5.0,
                    first_start=t.timestamp() + 20, last_end=t.timestamp() + 30),
        Progress(fraction=0.6, message="epoch 6/10", workers=2),
        DeckReady(name="report", uri=f"s3://bucket/runs/{k}/deck.html"),
        Progress(fraction=1.0, message="done", final=True, workers=2),
        Progress(fraction=0.9, message="epoch 9/10", workers=2),
    ]
    out = []
    for seq, p in enumerate(payloads):
        i = seq % 2
        raw = build_event(task=task, pod=pods[i], payload=p, instance=instances[i], seq=seq // 2,
                          time=t + timedelta(seconds=seq))
        raw["metadata"]["creationTimestamp"] = (t + timedelta(seconds=seq)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        ev = parse_event(orjson.loads(orjson.dumps(raw)))
        assert isinstance(ev, ParsedEvent), ev
        out.append(ev)
    return out


def fill(store: Store, n: int, offset: int = 0) -> list[int]:
    """Track ``n`` tasks as the watcher does (fold, put, written); returns status sizes."""
    sizes = []
    for k in range(offset, offset + n):
        task = TaskRef(f"team-{k % 50}", f"train-{k:06d}")
        store.load(task, None)
        base, _ = store.take(task)
        evs = task_events(task, k)
        state = fold_all(task, evs)
        store.written(task, store.put(task, state, base=base, events=evs), str(k))
        if len(sizes) < 2000:
            sizes.append(len(orjson.dumps(to_status(state))))
    return sizes


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reachable(root: object) -> int:
    """Bytes of the objects reachable from ``root`` (each once; types, functions, modules
    and the shared Limits left out): what the store alone keeps alive."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type | types.ModuleType | types.FunctionType
                                       | Limits):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def rss_run(mode: str, n: int, warm: int) -> int:
    out = subprocess.run([sys.executable, __file__, "--rss-run", mode, "--tasks", str(n),
                          "--warm", str(warm)], check=True, capture_output=True, text=True).stdout
    return int(out.split()[-1])


def rss_child(mode: str, n: int, warm: int) -> None:
    """RSS growth for ``n`` tasks: all live, or compacted as they go idle (the sweep after
    every 1,000 tasks, as the watcher's sweep would find them)."""
    fill(Store(), warm, offset=10**7)  # the same warm caches as the parent's figures
    gc.collect()
    store = Store()
    r0 = rss()
    for chunk in range(0, n, 1000):
        fill(store, min(1000, n - chunk), offset=10**6 + chunk)
        if mode == "compact":
            store.compact_idle(0.0, busy=lambda t: False)
    gc.collect()
    assert len(store) == n
    print(rss() - r0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--sample", type=int, default=5000)
    ap.add_argument("--rss-run", choices=("live", "compact"), help=argparse.SUPPRESS)
    ap.add_argument("--warm", type=int, default=5000, help="tasks filled first to warm the "
                    "process-wide caches")
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.tasks, a.sample, a.warm = 300, 200, 200
    if a.rss_run:
        rss_child(a.rss_run, a.tasks, a.warm)
        return

    # Warm the process-wide caches (instance ids, senders' strings, lru caches) first, so
    # the figures below are what each further task adds. Traced from the start, so that
    # cache entries evicted later are subtracted too.
    tracemalloc.start()
    fill(Store(), a.warm, offset=10**7)
    gc.collect()

    # tracemalloc: bytes the process holds per further task.
    store = Store()
    before = tracemalloc.get_traced_memory()[0]
    sizes = fill(store, a.sample)
    gc.collect()
    live = (tracemalloc.get_traced_memory()[0] - before) / a.sample
    live_reach = reachable(store._entries) / a.sample
    compacted = store.compact_idle(0.0, busy=lambda t: False)
    gc.collect()
    compact = (tracemalloc.get_traced_memory()[0] - before) / a.sample
    tracemalloc.stop()
    compact_reach = reachable(store._entries) / a.sample
    assert compacted == a.sample and store.not_compactable == 0
    st = store.get(TaskRef("team-0", "train-000000"))
    assert st is not None
    packed = len(zlib.compress(orjson.dumps(to_status(st)), 1))
    m = min(1000, a.sample)
    for k in range(m):
        store.take(TaskRef(f"team-{k % 50}", f"train-{k:06d}"))  # hot again
    t0 = time.perf_counter()
    store.compact_idle(0.0, busy=lambda t: False)
    pack_us = (time.perf_counter() - t0) / m * 1e6
    t0 = time.perf_counter()
    for k in range(m):
        store.take(TaskRef(f"team-{k % 50}", f"train-{k:06d}"))
    unpack_us = (time.perf_counter() - t0) / m * 1e6
    del store
    gc.collect()

    # RSS over --tasks tasks, each mode in a fresh process (freed memory stays with a
    # process, so one process cannot measure both).
    r_live = rss_run("live", a.tasks, a.warm)
    r_compact = rss_run("compact", a.tasks, a.warm)
    total_live, total_compact = r_live / a.tasks, r_compact / a.tasks

    json_size = statistics.median(sizes)
    print(f"tasks: {a.sample} (tracemalloc), {a.tasks} (RSS); 10 events, 2 instances each")
    print("| measure | bytes per task | vs the status JSON |")
    print("|---|---|---|")
    print(f"| status JSON (median) | {json_size:,.0f} | 1.00x |")
    print(f"| status JSON, zlib level 1 | {packed:,} | {packed / json_size:.2f}x |")
    print(f"| store, live (reachable objects) | {live_reach:,.0f} | "
          f"{live_reach / json_size:.2f}x |")
    print(f"| store, compact (reachable objects) | {compact_reach:,.0f} | "
          f"{compact_reach / json_size:.2f}x |")
    print(f"| process, live (tracemalloc) | {live:,.0f} | {live / json_size:.2f}x |")
    print(f"| process, compact (tracemalloc) | {compact:,.0f} | {compact / json_size:.2f}x |")
    print(f"| process RSS growth, live | {total_live:,.0f} | {total_live / json_size:.2f}x |")
    print(f"| process RSS growth, compacted as they go idle | {total_compact:,.0f} | "
          f"{total_compact / json_size:.2f}x |")
    print(f"{a.tasks:,} tasks: RSS live {r_live / 2**20:,.0f} MiB, compacted as they go "
          f"idle {r_compact / 2**20:,.0f} MiB; compact_idle {pack_us:.0f} µs/task "
          f"(verified), rebuild on next use {unpack_us:.0f} µs/task")


if __name__ == "__main__":
    main()
