"""Benchmark the watcher's hot path per event: raw watch line -> parse + validate -> fold.

The baseline, measured in the same run: the official client's path for the same lines,
``kubernetes.watch.Watch().unmarshal_event(line, "EventsV1Event")`` (JSON -> model objects,
no validation, no fold). The watcher's path is ``fast_watch_line`` (schemas/wire/fastpath.py,
msgspec; the same results as ``parse_watch_line``, the reference, which property tests
prove) with ``fold`` (single) or, as the watcher runs it, ``fold_many`` of each task's
events of one socket read (batched). The reference path (``parse_watch_line``, no msgspec)
is timed the same two ways, and stage rows time each part alone.
Times are medians of ``-r`` runs of each path, taken round-robin, on this process's CPU time
by default (``--clock wall`` for perf_counter): on a shared machine wall time mostly measures
the neighbours. The load average is printed before and after.
Run: ``.venv/bin/python bench/bench_parse_fold.py [-n 20000] [-r 5] [-b 256] [--clock cpu]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tidings.schemas import (
    DeckReady,
    LogLink,
    ParsedEvent,
    Payload,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    TaskState,
    build_event,
    fold,
    fold_many,
    new_state,
    parse_watch_line,
)
from tidings.schemas.wire.fastpath import fast_watch_line


def make_lines(n: int, tasks: int = 8, instances_per_task: int = 4, seed: int = 1) -> list[bytes]:
    """``n`` watch lines shaped like what the API server streams for bus Events."""
    rnd = random.Random(seed)
    t0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
    seqs: dict[tuple[int, int], int] = {}
    lines = []
    for i in range(n):
        k = rnd.randrange(tasks)
        inst_no = rnd.randrange(instances_per_task)
        seq = seqs.get((k, inst_no), 0)
        seqs[(k, inst_no)] = seq + 1
        task = TaskRef("ml-team", f"train-run-{k:04d}-a1b2c3d4")
        pod = PodRef(f"{task.name}-worker-{inst_no}", f"6f1c2a9e-{k:04d}-4000-8000-{inst_no:012d}")
        r = rnd.random()
        payload: Payload
        if r < 0.70:
            lo = rnd.uniform(0.001, 0.5)
            start = 1.7e9 + i
            count = rnd.randint(2, 5000)  # consistent aggregates (SpanSummary checks them)
            payload = SpanSummary(
                name=rnd.choice(["train_step", "dataloader.fetch", "eval", "checkpoint.save"]),
                count=count,
                total_s=lo * (count - 1) + lo * 3,
                min_s=lo,
                max_s=lo * 3,
                first_start=start,
                last_end=start + 10,
                errors=rnd.randint(0, 2),
            )
        elif r < 0.85:
            payload = Progress(fraction=min(1.0, i / n), message=f"epoch {i // 1000}: loss 0.{i}")
        elif r < 0.95:
            payload = LogLink(
                name=rnd.choice(["wandb", "tensorboard", "grafana"]),
                url=f"https://wandb.ai/acme/proj/runs/{rnd.getrandbits(40):x}?workspace=user",
            )
        else:
            payload = DeckReady(name="report", uri=f"s3://acme-decks/{task.name}/{i}/deck.html")
        ev = build_event(
            task=task,
            pod=pod,
            payload=payload,
            instance=f"{pod.uid[:8]}{inst_no:08x}",
            seq=seq,
            time=t0 + timedelta(microseconds=i * 1731),
        )
        created = ev["eventTime"][:19] + "Z"
        ev["metadata"].update(
            {
                "uid": f"0a0b0c0d-{i:04x}-4e0f-8a0b-{i:012x}",
                "resourceVersion": str(100000 + i),
                "creationTimestamp": created,
                "managedFields": [
                    {
                        "manager": "tidings-emitter",
                        "operation": "Update",
                        "apiVersion": "events.k8s.io/v1",
                        "time": created,
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {
                            "f:action": {},
                            "f:eventTime": {},
                            "f:note": {},
                            "f:reason": {},
                            "f:regarding": {},
                            "f:related": {},
                            "f:reportingController": {},
                            "f:reportingInstance": {},
                            "f:type": {},
                        },
                    }
                ],
            }
        )
        lines.append(orjson.dumps({"type": "ADDED", "object": ev}))
    return lines


def make_run_fold(parse: Callable[[bytes], Any]) -> Callable[[list[bytes]], int]:
    def run(lines: list[bytes]) -> int:
        return _run_fold(lines, parse)

    return run


def _run_fold(lines: list[bytes], parse: Callable[[bytes], Any]) -> int:
    states: dict[TaskRef, TaskState] = {}
    applied = 0
    for line in lines:
        item = parse(line)
        ev = item.result
        if isinstance(ev, ParsedEvent):
            st = states.get(ev.task)
            if st is None:
                st = new_state(ev.task)
            states[ev.task] = fold(st, ev)
            applied += 1
    return applied


def make_run_batched(batch: int, parse: Callable[[bytes], Any] = parse_watch_line
                     ) -> Callable[[list[bytes]], int]:
    def run(lines: list[bytes]) -> int:
        states: dict[TaskRef, TaskState] = {}
        applied = 0
        for i in range(0, len(lines), batch):
            groups: dict[TaskRef, list[ParsedEvent]] = {}
            for line in lines[i : i + batch]:
                ev = parse(line).result
                if isinstance(ev, ParsedEvent):
                    group = groups.get(ev.task)
                    if group is None:
                        groups[ev.task] = group = []
                    group.append(ev)
            for task, evs in groups.items():
                st = states.get(task)
                states[task] = fold_many(st if st is not None else new_state(task), evs)
                applied += len(evs)
        return applied

    return run


def _parsed(lines: list[bytes]) -> list[ParsedEvent]:
    out = []
    for line in lines:
        ev = fast_watch_line(line).result  # as the watcher's fold gets them
        assert isinstance(ev, ParsedEvent), ev
        out.append(ev)
    return out


def make_run_fold_only(lines: list[bytes]) -> Callable[[list[bytes]], int]:
    evs = _parsed(lines)

    def run(_: list[bytes]) -> int:
        states: dict[TaskRef, TaskState] = {}
        for ev in evs:
            st = states.get(ev.task)
            states[ev.task] = fold(st if st is not None else new_state(ev.task), ev)
        return sum(s.counters["events_applied"] for s in states.values())

    return run


def make_run_fold_many_only(lines: list[bytes], batch: int) -> Callable[[list[bytes]], int]:
    evs = _parsed(lines)
    # Grouped outside the timed region: this row is the fold alone.
    batches: list[dict[TaskRef, list[ParsedEvent]]] = []
    for i in range(0, len(evs), batch):
        groups: dict[TaskRef, list[ParsedEvent]] = {}
        for ev in evs[i : i + batch]:
            groups.setdefault(ev.task, []).append(ev)
        batches.append(groups)

    def run(_: list[bytes]) -> int:
        states: dict[TaskRef, TaskState] = {}
        for groups in batches:
            for task, group in groups.items():
                st = states.get(task)
                states[task] = fold_many(st if st is not None else new_state(task), group)
        return sum(s.counters["events_applied"] for s in states.values())

    return run


def run_parse_only(lines: list[bytes]) -> int:
    return sum(isinstance(parse_watch_line(line).result, ParsedEvent) for line in lines)


def run_fast_parse_only(lines: list[bytes]) -> int:
    return sum(isinstance(fast_watch_line(line).result, ParsedEvent) for line in lines)


def run_json_floor(lines: list[bytes]) -> int:
    # Any path that validates the whole object must at least parse the line once.
    return sum(orjson.loads(line)["type"] == "ADDED" for line in lines)


def make_run_official() -> Callable[[list[bytes]], int]:
    from kubernetes.watch import Watch

    w = Watch()

    def run(lines: list[bytes]) -> int:
        n = 0
        for line in lines:
            js: Any = w.unmarshal_event(line.decode(), "EventsV1Event")
            n += js["object"].note is not None
        return n

    return run


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def timed(
    paths: dict[str, Callable[[list[bytes]], int]],
    lines: list[bytes],
    runs: int,
    clock: Callable[[], float],
) -> dict[str, list[float]]:
    """``runs`` timings of each path, taken round-robin so that a burst of load from other
    processes lands on every path alike rather than on whichever path was running."""
    out: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(runs):
        for name, fn in paths.items():
            gc.collect()
            t = clock()
            count = fn(lines)
            out[name].append(clock() - t)
            assert count == len(lines), (name, count, len(lines))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=20_000, help="watch lines")
    ap.add_argument("-r", "--runs", type=int, default=5, help="runs per path (median reported)")
    ap.add_argument("-b", "--batch", type=int, default=256, help="lines per fold_many batch")
    ap.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: this process's CPU time (steady on a shared machine); wall: perf_counter",
    )
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.runs = 300, 1

    lines = make_lines(args.n)
    size = sum(len(x) for x in lines) / len(lines)
    load_before = os.getloadavg()
    t = timed(
        {
            "official": make_run_official(),
            "fast": make_run_fold(fast_watch_line),
            "fast_batched": make_run_batched(args.batch, fast_watch_line),
            "ref": make_run_fold(parse_watch_line),
            "ref_batched": make_run_batched(args.batch),
            "fast_parse_only": run_fast_parse_only,
            "parse_only": run_parse_only,
            "fold_only": make_run_fold_only(lines),
            "fold_many_only": make_run_fold_many_only(lines, args.batch),
            "floor": run_json_floor,
        },
        lines,
        args.runs,
        CLOCKS[args.clock],
    )
    load_after = os.getloadavg()
    med = {name: statistics.median(xs) for name, xs in t.items()}
    m_off = med["official"]
    b = args.batch
    rows = [
        ('kubernetes Watch.unmarshal_event("EventsV1Event") (baseline)', "official"),
        ("watcher: fast_watch_line + fold (single)", "fast"),
        (f"watcher: fast_watch_line + fold_many per task per read of {b} (batched)",
         "fast_batched"),
        ("reference: parse_watch_line + fold (single)", "ref"),
        (f"reference: parse_watch_line + fold_many per task per read of {b} (batched)",
         "ref_batched"),
        ("  stage: fast_watch_line alone", "fast_parse_only"),
        ("  stage: parse_watch_line alone", "parse_only"),
        ("  stage: fold alone (events of fast_watch_line)", "fold_only"),
        (f"  stage: fold_many alone (batches of {b})", "fold_many_only"),
        ("  floor: orjson.loads(line) alone", "floor"),
    ]
    n = len(lines)
    print(f"{n} watch lines of {size:.0f} B on average; {args.runs} runs of each path, "
          f"round-robin; {args.clock} clock; medians")
    print(f"load average (1, 5, 15 min): before {_load(load_before)}, after {_load(load_after)}"
          f"; {os.cpu_count()} CPUs\n")
    print(f"{'path':<74} {'us/event':>9} {'min-max':>12} {'events/s':>10} {'x official':>10}")
    for label, key in rows:
        xs = t[key]
        us = [1e6 * x / n for x in xs]
        print(f"{label:<74} {1e6 * med[key] / n:>9.1f} {min(us):>5.1f}-{max(us):<6.1f} "
              f"{n / med[key]:>10,.0f} {m_off / med[key]:>9.1f}x")
    print(f"\ngoal: the watcher path >= 8x the baseline per event; "
          f"single {m_off / med['fast']:.1f}x, batched {m_off / med['fast_batched']:.1f}x")
    print(f"ceiling if parse, validation and fold were free (orjson.loads alone): "
          f"{m_off / med['floor']:.1f}x")


def _load(avg: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg)


if __name__ == "__main__":
    main()
