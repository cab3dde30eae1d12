"""The status bytes are a contract: the same folded input must encode to the same bytes, before
and after any refactoring of the code that builds them.

A seeded generator builds many random task states by folding random events (progress of many
workers with finals and failures, metrics finite and not with their extremes and samples,
spans of several pods, links, decks, lineage, unknown types, warnings, duplicates, clamped and
compacted times, small caps) and observing random pod ends, waiting pods and platform
outcomes. For each, ``encodings`` makes what the watcher writes and what a reader rebuilds:
the status with its health judged at a random time under random thresholds, cut to a random
byte budget and to the real one with refusals and unreadable entries merged back, the status
read back (also a hand-damaged copy, entry by entry) and written again, and when the health
clock would judge the task next. ``data/status_golden.json`` holds a digest of each, per seed,
recorded with the code as it was when the test was written.

When a change of the status is *intended* (a new field, another message), regenerate the file
and say why in the commit:

    .venv/bin/python -m tests.unit.test_status_golden --write

and read the diff of the status for a few seeds first (``--show SEED`` prints them).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tests.support import expanded
from tidings._compat import UTC
from tidings.schemas import (
    Limits,
    ParsedEvent,
    PodRef,
    TaskRef,
    TaskState,
    build_event,
    parse_event,
)
from tidings.schemas.engine.folding import fold_all, fold_many
from tidings.schemas.engine.observed import PlatformOutcome, PodVerdict
from tidings.schemas.engine.observing import observe
from tidings.schemas.status.decoder import read_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.status.health import (
    DEFAULT_HEALTH,
    HealthSettings,
    judge,
    next_stall,
    stalled_since_written,
)
from tidings.schemas.wire import payloads as pay
from tidings.watcher.writer import status_body

GOLDEN = Path(__file__).parent / "data" / "status_golden.json"
SEEDS = range(400)
TASK = TaskRef("golden", "task-7")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
_TIGHT = Limits(links=2, decks=2, metrics=3, spans=3, span_lanes=3, pods=4, unknown_types=1,
                workers=4, roster=8, observed_pods=3, waiting=2)
_COMPACTING = Limits(event_ttl=timedelta(minutes=2), ttl_margin=timedelta(seconds=30),
                     max_instances=3)
LIMITS = (Limits(), Limits(), _TIGHT, _COMPACTING)
NAMES = ("loss", "lr", "acc", "grad_norm", "samples_per_s", "z" * 40)
REASONS = ("OOMKilled", "Error", "Evicted", "DeletionByPodGC", "Completed")


# --- the generator (keep it unchanged: the recorded digests are of its states) --------------


@dataclass
class _Worker:
    pod: PodRef
    fraction: float
    pace: float  # the most its fraction grows in one report
    every: float  # seconds between its reports, about
    instances: list[str]  # its emitter's instance ids (a second: the process restarted)
    seqs: list[int]
    t: float  # seconds after T0 of its latest report


def _event(rnd: random.Random, payload: pay.Payload, instance: str, seq: int, t: datetime,
           pod: PodRef) -> ParsedEvent:
    raw = build_event(task=TASK, pod=pod, payload=payload, instance=instance, seq=seq, time=t,
                      warning=rnd.random() < 0.1)
    roll = rnd.random()
    if roll < 0.6:  # the API server's creation time: mostly honest, sometimes far behind
        ahead = rnd.choice([0, 0, 1, 5, 40])
        raw["metadata"]["creationTimestamp"] = (t - timedelta(seconds=ahead)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def _value(rnd: random.Random) -> float:
    roll = rnd.random()
    if roll < 0.06:
        return math.nan
    if roll < 0.09:
        return rnd.choice([math.inf, -math.inf])
    return round(rnd.uniform(-5, 5), rnd.choice([1, 3, 9]))


def _metric(rnd: random.Random, step: int) -> pay.Metric:
    value = _value(rnd)
    finite = math.isfinite(value)
    lo = value - rnd.random() if finite and rnd.random() < 0.3 else None
    hi = value + rnd.random() if finite and rnd.random() < 0.3 else None
    points = tuple((max(0, step - k * 7), round(rnd.uniform(-5, 5), 2))
                   for k in range(rnd.choice([0, 0, 1, 3])))
    return pay.Metric(name=rnd.choice(NAMES), value=value,
                  step=step if rnd.random() < 0.8 else None, min=lo, max=hi, points=points)


def _span(rnd: random.Random, t: datetime) -> pay.SpanSummary:
    count = rnd.randint(1, 50)
    lo = round(rnd.uniform(0.001, 0.5), 4)
    hi = lo if count == 1 else round(lo + rnd.uniform(0, 2), 4)
    start = t.timestamp() - rnd.uniform(0, 30)
    return pay.SpanSummary(name=rnd.choice(("train_step", "eval", "io", "ckpt")), count=count,
                       total_s=hi + lo * (count - 1), min_s=lo, max_s=hi,
                       first_start=round(start, 6),
                       last_end=round(start + rnd.uniform(hi, hi + 60), 6),
                       errors=rnd.randint(0, min(count, 2)) if rnd.random() < 0.2 else 0)


def _payload(rnd: random.Random, worker: _Worker, t: datetime, step: int,
             declared: int) -> pay.Payload:
    roll = rnd.random()
    if roll < 0.42:
        worker.fraction = min(1.0, worker.fraction + rnd.uniform(0, worker.pace))
        final = rnd.random() < 0.04
        failed = final and rnd.random() < 0.3
        message = rnd.choice(["", f"step {step}", "x" * rnd.choice([10, 300]), "déjà vu ✓"])
        return pay.Progress(fraction=1.0 if final and not failed else worker.fraction,
                        message=message, final=final, failed=failed,
                        workers=declared if rnd.random() < 0.5 else 0)
    if roll < 0.6:
        return _metric(rnd, step)
    if roll < 0.66:
        rows = {m.name: m for m in (_metric(rnd, step) for _ in range(rnd.randint(1, 3)))}
        return pay.Metrics(metrics=list(rows.values()))
    if roll < 0.76:
        return _span(rnd, t)
    if roll < 0.84:
        worker.fraction = min(1.0, worker.fraction + rnd.uniform(0, worker.pace))
        return pay.Window(progress=pay.Progress(fraction=worker.fraction, message=f"w {step}"),
                      metrics=(_metric(rnd, step),))
    if roll < 0.89:
        n = rnd.randint(0, 5)
        return pay.LogLink(name=f"link-{n}", url=f"https://runs.example/{n}/{rnd.randint(0, 3)}")
    if roll < 0.93:
        return pay.DeckReady(name=f"deck-{rnd.randint(0, 3)}",
                             uri=f"s3://decks/{rnd.randint(0, 9)}")
    if roll < 0.96:
        return pay.PodSpawned(pod_name=f"spawned-{rnd.randint(0, 4)}",
                              pod_uid=f"u{rnd.randint(0, 9)}", app="app")
    return pay.UnknownPayload(type=rnd.choice(("FutureThing", "Other", "Third")), version=2,
                          raw={"k": rnd.randint(0, 3)})


def _verdict(rnd: random.Random, pod: str, at: datetime, waiting: bool) -> PodVerdict:
    if waiting:
        return PodVerdict(pod, f"uid-{pod}", "Waiting",
                          rnd.choice(("ImagePullBackOff", "Unschedulable", "CrashLoopBackOff")),
                          rnd.choice(("", "back-off pulling image")), None, at)
    failed = rnd.random() < 0.5
    return PodVerdict(pod, f"uid-{pod}", "Failed" if failed else "Succeeded",
                      rnd.choice(REASONS) if failed else "Completed",
                      rnd.choice(("", "the container ran out of memory")),
                      rnd.choice((None, 1, 137)) if failed else 0, at,
                      explained=rnd.random() < 0.85)


def random_state(seed: int) -> tuple[TaskState, datetime | None, dict[str, float], int]:
    """A random folded state, when its health is judged (None: silence is not), the health
    thresholds and a byte budget: all from ``seed`` alone."""
    rnd = random.Random(seed)
    limits = rnd.choice(LIMITS)
    n_pods = rnd.choice([1, 1, 2, 3, 5, 6, 9, 12])
    declared = rnd.choice([0, n_pods, n_pods + 1])
    workers = [_Worker(pod=PodRef(f"w-{i}", f"uid-w-{i}"), fraction=0.0,
                       pace=rnd.choice([0.001, 0.02, 0.05, 0.2]), every=rnd.choice([1, 5, 30]),
                       instances=[f"{seed:04x}{i:02x}{k:02x}" + "a" * 24 for k in range(2)],
                       seqs=[0, 0], t=rnd.uniform(0, 20)) for i in range(n_pods)]
    events: list[ParsedEvent] = []
    for step in range(rnd.choice([0, 3, 20, 60, 150])):
        w = rnd.choice(workers)
        w.t += w.every * rnd.uniform(0.5, 1.5)
        k = 1 if rnd.random() < 0.1 else 0  # a restarted process: a second instance
        t = T0 + timedelta(seconds=w.t)
        events.append(_event(rnd, _payload(rnd, w, t, step, declared), w.instances[k],
                             w.seqs[k], t, w.pod))
        w.seqs[k] += 1 + (rnd.random() < 0.05)  # now and then a gap: an event still due
    if events and rnd.random() < 0.3:
        events += rnd.sample(events, min(len(events), 5))  # redelivered
    rnd.shuffle(events)
    cut = rnd.randint(0, len(events))
    state = fold_all(TASK, events[:cut], limits)
    last = max((w.t for w in workers), default=0.0)
    end = T0 + timedelta(seconds=last)
    if rnd.random() < 0.5:
        pods = [w.pod.name for w in workers] + ["never-reported"]
        gone = rnd.sample(pods, rnd.randint(0, len(pods)))
        ended = [_verdict(rnd, p, end - timedelta(seconds=rnd.uniform(0, 30)), False)
                 for p in gone]
        rest = [p for p in pods if p not in gone]
        waiting = [_verdict(rnd, p, end - timedelta(seconds=rnd.uniform(0, 30)), True)
                   for p in rnd.sample(rest, rnd.randint(0, min(5, len(rest))))]
        state = observe(state, ended, waiting=waiting if rnd.random() < 0.7 else None)
    if rnd.random() < 0.25:
        phase = rnd.choice(("Running", "Succeeded", "Failed"))
        state = observe(state, platform=PlatformOutcome(
            "batch/v1", "Job", "job-7", "uid-job-7", phase,
            "BackoffLimitExceeded" if phase == "Failed" else "",
            rnd.choice(("", "Job has reached the specified backoff limit")),
            None if rnd.random() < 0.2 else end))
    state = fold_many(state, events[cut:])
    now = None if rnd.random() < 0.15 else end + timedelta(seconds=rnd.choice(
        [0, 5, 59, 61, 400, 700, 5000]) * rnd.random())
    thresholds = {"stall_factor": rnd.choice([2.0, 10.0]),
                  "stall_min_s": rnd.choice([5.0, 60.0]),
                  "stall_unpaced_s": rnd.choice([30.0, 600.0]),
                  "straggle_ratio": rnd.choice([0.0, 0.5, 0.9]),
                  "straggle_min_workers": rnd.choice([2, 3])}
    budget = rnd.choice([400, 900, 1500, 3000, 8000, 64 * 1024])
    return state, now, thresholds, budget


def _damaged(rnd: random.Random, status: dict[str, Any]) -> dict[str, Any]:
    """A hand-edited copy: an entry or two that do not read, and a stray part."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(status))
    for section in ("links", "metrics", "spans"):
        if out.get(section) and rnd.random() < 0.5:
            name = rnd.choice(sorted(out[section]))
            out[section][name] = {"broken": True}
    if out.get("workers") and rnd.random() < 0.5:
        out["workers"].append({"pod": "hand-made", "fraction": 7})
    if rnd.random() < 0.2:
        out["counters"] = {"eventsApplied": -1}
    if rnd.random() < 0.1:
        out["roster"] = "not a roster"
    return out


# --- what is encoded (update the calls when the code moves; never the generator) --------------


def _settings(thresholds: dict[str, float]) -> HealthSettings:
    # (the generator's names are those HealthSettings had when the digests were recorded)
    return HealthSettings(**{k.removesuffix("_s"): v for k, v in thresholds.items()})


def _status(state: TaskState, now: datetime | None, settings: HealthSettings,
            budget: int | None = None) -> dict[str, Any]:
    """What a reader is shown and the watcher writes: the status with its health judged."""
    return to_status(state, budget, health=judge(state, now, settings))


def encodings(seed: int) -> list[bytes]:
    """The bytes whose digests are recorded for ``seed``."""
    state, now, thresholds, budget = random_state(seed)
    rnd = random.Random(seed ^ 0x5EED)
    settings = _settings(thresholds)
    plain = _status(state, None, DEFAULT_HEALTH)
    judged = _status(state, now, settings, budget)
    written = status_body(state, {"unknown_sender": 2} if rnd.random() < 0.3 else None,
                          now=now or T0, health=settings)
    back = read_status(TASK, orjson.loads(orjson.dumps(plain)), state.limits)
    damaged = read_status(TASK, _damaged(rnd, judged), state.limits)
    again = damaged.unread.merge_into(_status(damaged.state, now, settings), damaged.state)
    clock = "" if now is None else str(next_stall(state, now, settings))
    since = now is not None and stalled_since_written(state, plain, settings, now)
    return [orjson.dumps(plain), orjson.dumps(judged), orjson.dumps(written),
            orjson.dumps(_status(back.state, None, DEFAULT_HEALTH)) + repr(back.unread).encode(),
            orjson.dumps(again) + repr(damaged.unread.problems).encode()
            + str(damaged.unread.partial).encode(),
            f"{clock} {since}".encode()]


def digests(seed: int) -> list[str]:
    return [hashlib.sha256(b).hexdigest()[:16] for b in encodings(seed)]


def test_the_status_bytes_are_those_recorded_for_every_seeded_state() -> None:
    recorded = json.loads(GOLDEN.read_text())["digests"]
    assert len(recorded) == len(SEEDS)
    wrong = [seed for seed in SEEDS if digests(seed) != recorded[str(seed)]]
    assert not wrong, (f"{len(wrong)} seeded states encode differently, e.g. seed {wrong[0]} "
                       f"(an intended change: see this module's docstring)")


def test_the_generator_reaches_every_part_of_the_status() -> None:
    """The digests prove nothing about a part no seeded state has: count the parts."""
    seen: dict[str, int] = {}
    for seed in SEEDS[::4]:
        state, now, thresholds, budget = random_state(seed)
        st = _status(state, now, _settings(thresholds), budget)
        parts = set(st) | {f"dropped:{k}" for k in st.get("budgetDropped", {})}
        parts |= {c["type"] for c in st.get("conditions", []) if c["status"] == "True"}
        parts |= {f"{c['type']}:{c['reason']}" for c in st.get("conditions", [])
                  if c["type"] == "PodsReady" and c["status"] == "False"}
        parts |= {f"phase:{st['phase']}"}
        fields = expanded(st)
        parts |= {"lanes" for s in fields.get("spans", {}).values() if "pods" in s}
        parts |= {"history" for m in fields.get("metrics", {}).values() if "history" in m}
        parts |= {"nonFinite" for m in fields.get("metrics", {}).values() if "nonFinite" in m}
        parts |= {f"counter:{c}" for c in st.get("counters", {})}
        for part in parts:
            seen[part] = seen.get(part, 0) + 1
    wanted = {"conditions", "health", "progress", "links", "decks", "metrics", "spans",
              "workers", "roster", "podOutcomes", "waitingPods", "platform", "pods",
              "unknownTypes", "counters", "applied", "compactedBefore", "budgetDropped",
              "lanes", "history", "nonFinite", "Stalled", "Straggling", "NonFiniteMetrics",
              "PodsReady", "PodsReady:PodsPending", "reason",
              "phase:Running", "phase:Succeeded", "phase:Failed",
              "dropped:pods", "dropped:podOutcomes", "dropped:workerMessages",
              "dropped:metricHistory", "counter:timeClamped", "counter:duplicates",
              "counter:workersCapped", "counter:instancesCompacted", "counter:warnings"}
    assert {p for p in wanted if seen.get(p, 0) < 2} == set(), seen


def _write() -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    data = {"about": "tests/unit/test_status_golden.py: digests of each seeded state's "
                     "encodings; regenerate only for an intended change of the status",
            "digests": {str(seed): digests(seed) for seed in SEEDS}}
    GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=False) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        _write()
    elif sys.argv[1:2] == ["--show"]:
        for b in encodings(int(sys.argv[2])):
            print(b.decode(errors="replace"))
    else:
        sys.exit(__doc__)
