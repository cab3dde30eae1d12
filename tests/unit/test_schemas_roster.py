"""Many workers (the fold's half) and the estimated completion time: the completion rule
reads the roster of every reporting pod, so no failed or final
report is lost to the 64 detailed records, a task of up to WORKERS_MAX declared workers
completes, and the roster folds idempotently and in any order (against the reference fold).
Pure; hypothesis where a rule must hold for every arrival order."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from functools import reduce

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import reference_fold as ref
from tests.unit.test_schemas_fold import T0, TASK, make_event, without_duplicates
from tidings.schemas import Limits, ParsedEvent, PodRef, Progress, fold_all, new_state
from tidings.schemas.status.decoder import decode_status, read_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.status.roster_text import decode_marks, encode_marks
from tidings.schemas.wire.constants import WORKERS_MAX


def report(i: int, seq: int, fraction: float, *, final: bool = False, failed: bool = False,
           workers: int = 0, secs: float = 0, width: int = 2) -> ParsedEvent:
    pod = PodRef(f"w-{i:0{width}d}", f"uid-{i}")
    p = Progress(fraction=fraction, message=f"w-{i} {fraction}", final=final, failed=failed,
                 workers=workers)
    return make_event(p, f"inst-{i}", seq, T0 + timedelta(seconds=secs), pod=pod)


def test_a_failed_final_beyond_the_detailed_workers_fails_the_task() -> None:
    """The issue's run: 66 workers, the one that fails is w-65 (beyond the 64 smallest)."""
    evs = [report(i, 0, 1.0, final=True, secs=i) for i in range(65)]
    evs.append(report(65, 0, 0.4, final=True, failed=True, secs=70))
    for seed in range(3):
        random.Random(seed).shuffle(evs)
        s = fold_all(TASK, evs)
        st = to_status(s)
        assert st["phase"] == "Failed" and s.failed
        assert "w-65" not in s.workers and len(s.workers) == 64
        conds = {c["type"]: c for c in st["conditions"]}
        assert conds["Failed"]["message"] == "w-65 0.4"
        assert conds["Failed"]["lastTransitionTime"] == "2026-11-30T03:01:10Z"
        assert st["roster"]["failed"] == 1 and st["roster"]["firstFailure"]["pod"] == "w-65"


def test_66_declared_workers_with_66_finals_succeed() -> None:
    evs = [report(i, 0, 0.5, workers=66, secs=i) for i in range(66)]
    running = fold_all(TASK, evs)
    assert running.phase == "Running"
    assert to_status(running)["progress"]["percent"] == 50
    evs += [report(i, 1, 1.0, final=True, workers=66, secs=100 + i) for i in range(66)]
    s = fold_all(TASK, evs)
    st = to_status(s)
    assert st["phase"] == "Succeeded" and st["progress"]["percent"] == 100
    assert st["roster"]["reporting"] == 66 and st["roster"]["final"] == 66
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Completed"]["lastTransitionTime"] == "2026-11-30T03:02:45Z"  # w-65's final
    # 65 finals of 66 declared: still running, at 98 % (a pod beyond the detailed 64 counts).
    s65 = fold_all(TASK, [e for e in evs if not (e.instance == "inst-0" and e.seq == 1)])
    assert s65.phase == "Running" and to_status(s65)["progress"]["percent"] == 99


def test_a_pod_beyond_the_detailed_workers_that_never_finishes_blocks_success() -> None:
    evs = [report(i, 0, 1.0, final=True, secs=i) for i in range(64)]
    evs.append(report(99, 0, 0.3, secs=80))  # undeclared, not final, not detailed
    s = fold_all(TASK, evs)
    assert s.phase == "Running" and "w-99" not in s.workers
    assert to_status(s)["progress"]["percent"] == round((64 + 0.3) / 65 * 100)


def test_the_largest_declared_task_completes_and_round_trips() -> None:
    n = WORKERS_MAX
    evs = [report(i, 0, 1.0, final=True, workers=n, width=5) for i in range(n)]
    s = fold_all(TASK, evs)
    assert s.phase == "Succeeded"
    st = to_status(s, budget=STATUS_BUDGET)
    size = len(orjson.dumps(st))
    restored = decode_status(TASK, json.loads(json.dumps(st)))
    assert restored.phase == "Succeeded" and restored.roster == s.roster
    assert size <= STATUS_BUDGET
    print(f"{n} workers: status {size} bytes, roster packed {len(st['roster']['packed'])} chars")
    short = fold_all(TASK, evs[:-1])
    assert short.phase == "Running"
    assert to_status(short)["conditions"][0]["message"] == f"{n - 1} of {n} workers final"


def test_a_second_final_of_the_same_pod_counts_once() -> None:
    """Per pod, not per event: a pod that reports twice (two emitter instances, as two
    `tidings emit final` calls are) cannot complete a task of two declared workers alone."""
    a1 = report(1, 0, 1.0, final=True, workers=2)
    a2 = make_event(Progress(fraction=1.0, final=True, workers=2), "other", 0, T0,
                    pod=PodRef("w-01", "uid-1"))
    s = fold_all(TASK, [a1, a2])
    assert s.phase == "Running" and s.roster.finals == 1


def test_marks_round_trip_and_refuse_garbage() -> None:
    s = fold_all(TASK, [report(i, 0, i / 10, final=i % 2 == 0, failed=i == 4, secs=i)
                        for i in range(10)] + [report(3, 1, 0.05, secs=20)])
    assert decode_marks(encode_marks(s.roster.marks)) == s.roster.marks
    for bad in ["x", "AAAA", encode_marks(s.roster.marks)[:-4]]:
        st = to_status(s)
        st["roster"]["marks"] = bad
        # The rest reads; the roster is what its workers imply, and the read is partial (the
        # watcher never writes over it: that roster could hold pods beyond the workers).
        read = read_status(TASK, st)
        assert read.unread.partial and read.unread.problems[0].startswith("roster:")
        assert read.state.workers == s.workers and read.state.applied == s.applied


def test_a_status_from_before_the_roster_is_read_from_its_workers() -> None:
    s = fold_all(TASK, [report(i, 0, 1.0, final=True, workers=3) for i in range(3)])
    st = to_status(s)
    del st["roster"]
    restored = decode_status(TASK, st)
    # (The workers do not say which life of their pod reported: the next report tells.)
    assert restored.phase == "Succeeded" and restored.roster == s.roster._replace(lives={})


SMALL_ROSTER = Limits(workers=2, roster=4)


@st.composite
def reports(draw: st.DrawFn) -> list[ParsedEvent]:
    keys = draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3)), unique=True,
                         max_size=24))
    out = []
    for pod, seq in keys:
        final = draw(st.booleans())
        out.append(report(pod, seq, draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0])),
                          final=final, failed=final and draw(st.booleans()),
                          workers=draw(st.sampled_from([0, 3, 6])),
                          secs=draw(st.integers(0, 4))))
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reports(), st.randoms(use_true_random=False),
       st.sampled_from([SMALL_ROSTER, Limits()]))
def test_the_roster_is_order_insensitive_idempotent_and_the_reference(
        events: list[ParsedEvent], rnd: random.Random, limits: Limits) -> None:
    base = fold_all(TASK, events, limits)
    assert base == reduce(ref.fold, events, new_state(TASK, limits))
    shuffled = events[:]
    rnd.shuffle(shuffled)
    dups = [rnd.choice(events) for _ in range(rnd.randint(0, 6))] if events else []
    again = fold_all(TASK, shuffled + dups, limits)
    assert without_duplicates(to_status(again)) == without_duplicates(to_status(base))
    restored = decode_status(TASK, json.loads(json.dumps(to_status(base))), limits)
    assert restored == base
    # Beyond the roster cap, each event is counted once, whatever the order.
    if limits is SMALL_ROSTER:
        kept = len(base.roster.marks)
        assert kept <= 4 and (kept == 4 or base.counters.get("roster_capped", 0) == 0)


# --- the estimated completion time --------------------------------------------------------


def test_eta_extrapolates_each_workers_pace_and_takes_the_latest() -> None:
    evs = [report(0, 0, 0.1, workers=2, secs=0), report(0, 1, 0.3, workers=2, secs=20),
           report(1, 0, 0.0, workers=2, secs=0), report(1, 1, 0.5, workers=2, secs=10)]
    for order in (evs, evs[::-1]):
        s = fold_all(TASK, order)
        # w-0: 0.2 in 20 s, 0.7 to go: 70 s after t=20; w-1: 0.5 in 10 s: 10 s after t=10.
        assert s.progress is not None and s.progress.eta == T0 + timedelta(seconds=90)
        assert to_status(s)["progress"]["estimatedCompletionTime"] == "2026-11-30T03:01:30Z"
        assert decode_status(TASK, to_status(s)) == s


def test_eta_is_absent_when_it_cannot_be_estimated() -> None:
    def eta(*evs: ParsedEvent) -> object:
        s = fold_all(TASK, list(evs))
        return "estimatedCompletionTime" in to_status(s).get("progress", {})

    assert not eta(report(0, 0, 0.1))  # one report: no pace yet
    assert not eta(report(0, 0, 0.5), report(0, 1, 0.3, secs=5))  # backwards
    assert not eta(report(0, 0, 0.5), report(0, 1, 0.5, secs=5))  # no progress
    assert not eta(report(0, 0, 0.1, workers=2), report(0, 1, 0.3, workers=2, secs=5))  # w-1?
    assert not eta(report(0, 0, 0.1), report(0, 1, 1.0, final=True, secs=5))  # over
    assert eta(report(0, 0, 0.1), report(0, 1, 0.3, secs=5))
