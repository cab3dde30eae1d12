"""The status as an API: phase, conditions, the completion rule of many workers, eventTime
bounded by creationTimestamp, and the compact version vector. Pure; hypothesis where the
rule must hold for every arrival order."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from functools import reduce
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings.schemas import (
    CLOCK_SKEW,
    Limits,
    LogLink,
    ParsedEvent,
    PodRef,
    Progress,
    SpanSummary,
    VersionVector,
    fold,
    fold_all,
    fold_many,
    new_state,
)
from tidings.schemas.engine.folding import creation_order
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status

A, B = PodRef("worker-a", "uid-a"), PodRef("worker-b", "uid-b")


def progress(pod: PodRef, seq: int, fraction: float, *, final: bool = False,
             failed: bool = False, workers: int = 0, secs: int = 0) -> ParsedEvent:
    p = Progress(fraction=fraction, message=f"{pod.name} {fraction}", final=final,
                 failed=failed, workers=workers)
    return make_event(p, pod.name, seq, T0 + timedelta(seconds=secs), pod=pod)


def test_one_worker_final_succeeds_with_deterministic_conditions() -> None:
    s = fold_all(TASK, [progress(A, 0, 0.5, secs=1), progress(A, 1, 1.0, final=True, secs=7)])
    st = to_status(s)
    assert s.finished and st["phase"] == "Succeeded" and st["progress"]["percent"] == 100
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Completed"]["status"] == "True" and conds["Failed"]["status"] == "False"
    assert conds["Completed"]["lastTransitionTime"] == "2026-11-30T03:00:07Z"
    assert conds["Failed"]["lastTransitionTime"] == "2026-11-30T03:00:01Z"  # the first event


def test_empty_task_is_pending_without_conditions() -> None:
    st = to_status(new_state(TASK))
    assert st["phase"] == "Pending" and "conditions" not in st and "progress" not in st
    assert not new_state(TASK).finished


def test_a_failed_final_fails_the_task_whatever_else_happens() -> None:
    evs = [progress(A, 0, 1.0, final=True, secs=1),
           progress(B, 0, 0.2, final=True, failed=True, secs=3),
           progress(B, 1, 0.9, secs=9)]  # a late non-final cannot undo the failure
    for order in (evs, evs[::-1], [evs[1], evs[0], evs[2]]):
        s = fold_all(TASK, order)
        st = to_status(s)
        assert s.failed and s.finished and st["phase"] == "Failed"
        conds = {c["type"]: c for c in st["conditions"]}
        assert conds["Failed"]["message"] == "worker-b 0.2"
        assert conds["Completed"]["reason"] == "Failed"
        assert conds["Failed"]["lastTransitionTime"] == "2026-11-30T03:00:03Z"


def test_failed_needs_final() -> None:
    try:
        Progress(fraction=0.1, failed=True)
    except ValueError:
        return
    raise AssertionError("failed without final must be refused")


def test_old_notes_without_the_new_fields_still_parse() -> None:
    ev = make_event(Progress(fraction=0.25), "i", 0, T0)
    assert isinstance(ev.payload, Progress) and not ev.payload.failed and ev.payload.workers == 0
    assert Progress(fraction=1 / 3).fraction == 0.3333  # rounded: no 17-digit floats in notes


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 3))
def test_two_workers_never_show_100_until_both_are_final_in_any_order(
        rnd: random.Random, dups: int) -> None:
    """Worker A reaches 100 % (final), B reports 60 % then its final; with the worker count
    declared, no prefix of any arrival order shows the task at 100 % or Succeeded before
    both finals, and the shown percentage never goes backwards because B spoke."""
    a_final = progress(A, 0, 1.0, final=True, workers=2, secs=1)
    b_part = progress(B, 0, 0.6, workers=2, secs=2)
    b_final = progress(B, 1, 1.0, final=True, workers=2, secs=3)
    evs = [a_final, b_part, b_final] + [rnd.choice([a_final, b_part, b_final])
                                        for _ in range(dups)]
    rnd.shuffle(evs)
    s = new_state(TASK)
    shown: list[int] = []
    for ev in evs:
        s = fold(s, ev)
        st = to_status(s)
        done = s.applied.contains(b_final.instance, b_final.seq) and \
            s.applied.contains(a_final.instance, a_final.seq)
        assert (st["phase"] == "Succeeded") == done
        if not done:
            assert st["progress"]["percent"] < 100
        shown.append(st["progress"]["percent"])
    assert shown == sorted(shown) and shown[-1] == 100


def test_undeclared_workers_complete_when_every_reporting_worker_is_final() -> None:
    s = fold_all(TASK, [progress(A, 0, 1.0, final=True), progress(B, 0, 0.6)])
    assert s.phase == "Running" and to_status(s)["progress"]["percent"] == 80
    s = fold(s, progress(B, 1, 1.0, final=True, secs=2))
    assert s.phase == "Succeeded"


def test_worker_progress_is_per_pod_and_bounded() -> None:
    pods = [PodRef(f"w-{i:03d}", f"u-{i}") for i in range(70)]
    evs = [progress(p, 0, 0.5) for p in pods]
    random.Random(3).shuffle(evs)
    s = fold_all(TASK, evs)
    assert sorted(s.workers) == [f"w-{i:03d}" for i in range(64)]
    assert s.counters["workers_capped"] == 6
    restored = decode_status(TASK, to_status(s))
    assert restored == s and to_status(restored) == to_status(s)


def test_event_time_is_bounded_by_the_servers_creation_time() -> None:
    honest = make_event(LogLink(name="wandb", url="https://wandb.ai/ok"), "good", 0,
                        T0 + timedelta(seconds=100))
    evil = make_event(LogLink(name="wandb", url="https://evil.example/"), "evil", 0,
                      T0.replace(year=9999))
    honest = dataclasses.replace(honest, created=T0 + timedelta(seconds=100))
    evil = dataclasses.replace(evil, created=T0)
    for order in ([evil, honest], [honest, evil]):
        s = fold_all(TASK, order)
        assert s.links == {"wandb": "https://wandb.ai/ok"}
        assert s.counters["time_clamped"] == 1
        assert s.last_event_time == T0 + timedelta(seconds=100)
        assert fold_many(new_state(TASK), order) == reduce(fold, order, new_state(TASK))
    # Within the allowance the sender's time stands (a pod clock slightly ahead is fine).
    ahead = dataclasses.replace(evil, event_time=T0 + CLOCK_SKEW, created=T0)
    assert fold_all(TASK, [ahead]).counters["time_clamped"] == 0


@given(st.dictionaries(st.sampled_from(["a", "b-1", "c.x:y"]),
                       st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=8)))
def test_version_vector_text_round_trips(data: dict[str, list[int]]) -> None:
    vv = VersionVector()
    for inst, seqs in data.items():
        for seq in seqs:
            vv = vv.add(inst, seq)
    text = vv.to_text()
    assert VersionVector.from_text(text) == vv
    assert " " not in text or len(data) > 1


def test_version_vector_text_refuses_garbage() -> None:
    for bad in ["a", "a=", "a=1-", "a=x", "a=1 a=2", "a=-1", 5, None, "a=99999999999999999999"]:
        try:
            VersionVector.from_text(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")


# --- dedup compaction -------------------------------------------------------------------

COMPACT = Limits(event_ttl=timedelta(seconds=60), ttl_margin=timedelta(seconds=10),
                 max_instances=4)


def created_event(inst: str, seq: int, secs: int, payload: Any = None) -> ParsedEvent:
    ev = make_event(payload or LogLink(name=f"l-{inst}", url="https://x.y/"), inst, seq,
                    T0 + timedelta(seconds=secs))
    return dataclasses.replace(ev, created=T0 + timedelta(seconds=secs))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["i-a", "i-b", "i-c", "i-d", "i-e", "i-f"]),
                          st.integers(0, 4), st.integers(0, 200)),
                unique_by=lambda t: (t[0], t[1]), max_size=40),
       st.randoms(use_true_random=False))
def test_fold_many_equals_fold_while_compacting(keys: list[tuple[str, int, int]],
                                                rnd: random.Random) -> None:
    evs = [created_event(i, s, t) for i, s, t in keys]
    delivered = evs + [rnd.choice(evs) for _ in range(5)] if evs else []
    rnd.shuffle(delivered)
    # A batch is folded in creation order, whatever order it came in.
    expected = reduce(fold, creation_order(delivered), new_state(TASK, COMPACT))
    got = fold_many(new_state(TASK, COMPACT), delivered)
    assert got == expected and to_status(got) == to_status(expected)
    times = got.instance_times.values()
    # Bounded: beyond the cap, only the instances of the newest second are kept.
    assert sum(t < max(times) for t in times) <= COMPACT.max_instances
    # Never double counted: every applied event is distinct, whatever was compacted.
    c = got.counters
    assert c["events_applied"] + c["late_skipped"] + c["duplicates"] == len(delivered)
    assert c["events_applied"] <= len(evs)
    restored = decode_status(TASK, to_status(got), COMPACT)
    assert restored == got


def test_events_older_than_the_ttl_horizon_are_compacted_and_skipped() -> None:
    s = fold_all(TASK, [created_event("old", 0, 0), created_event("new", 0, 100)], COMPACT)
    assert s.instance_times == {"new": 100 + int(T0.timestamp())}
    assert s.counters["instances_compacted"] == 1 and "old" not in s.applied.instances
    again = fold(s, created_event("old", 0, 0))  # a relist of the expired event: skipped
    assert again.counters["late_skipped"] == 1 and again.counters["events_applied"] == 2
    assert to_status(s)["compactedBefore"] == "2026-11-30T03:00:30Z"


def test_22000_instances_on_one_task_stay_under_budget_and_complete() -> None:
    """The issue's burst: 22,000 events, each from a fresh emitter instance, then the final
    progress. The version vector stays bounded, the status under its byte budget, the final
    state is complete, and the counters say what was compacted."""
    evs = [created_event(f"{k:032x}", 0, k // 400,
                         Progress(fraction=min(1.0, k / 22000), message=f"step {k}"))
           for k in range(22000)]
    evs.append(created_event("f" * 32, 0, 56, Progress(fraction=1.0, message="done",
                                                        final=True)))
    s = fold_many(new_state(TASK), evs)
    st = to_status(s, budget=STATUS_BUDGET)
    size = len(orjson.dumps(st))
    print(f"\n22,001 events / instances: status {size} B, "
          f"{len(s.instance_times)} instances kept, counters {st['counters']}")
    assert size <= STATUS_BUDGET and s.phase == "Succeeded"
    assert st["counters"]["eventsApplied"] == 22001 and "lateSkipped" not in st["counters"]
    assert st["counters"]["instancesCompacted"] >= 22001 - Limits().max_instances
    assert len(s.instance_times) <= Limits().max_instances
    assert fold_many(s, evs[:100]).counters["late_skipped"] == 100  # a relist: none twice


def test_the_instance_cap_holds_when_one_second_holds_too_many() -> None:
    evs = [created_event(f"i-{k}", 0, 5) for k in range(6)] + [created_event("i-next", 0, 6)]
    s = fold_all(TASK, evs, COMPACT)
    assert len(s.instance_times) <= COMPACT.max_instances
    c = s.counters
    assert c["events_applied"] + c["late_skipped"] == len(evs)
    assert fold_many(new_state(TASK, COMPACT), evs) == reduce(fold, evs, new_state(TASK, COMPACT))


def test_a_final_in_the_same_second_as_a_burst_over_the_cap_is_applied() -> None:
    """A burst of more instances than the cap within one second, then the final in that same
    second (as a fast API server gives it): the final is applied, not skipped as late, and
    the next second forgets the burst's instances."""
    burst = [created_event(f"i-{k}", 0, 7, Progress(fraction=k / 10)) for k in range(10)]
    final = created_event("i-final", 0, 7, Progress(fraction=1.0, final=True))
    for s in (fold_all(TASK, [*burst, final], COMPACT),
              fold_many(new_state(TASK, COMPACT), [*burst, final])):
        assert s.phase == "Succeeded" and s.counters["events_applied"] == 11
        assert s.counters["late_skipped"] == 0
        later = fold(s, created_event("i-later", 0, 8))
        assert len(later.instance_times) <= COMPACT.max_instances
        assert fold(later, burst[3]).counters["late_skipped"] == 1  # a relist: never twice


def test_settled_waits_for_the_windows_sent_before_a_final() -> None:
    span = SpanSummary(name="evaluate", count=3, total_s=0.15, min_s=0.05, max_s=0.05,
                       first_start=1.79e9, last_end=1.79e9 + 1)
    start = make_event(Progress(fraction=0.5), "inst", 0, T0)
    window = make_event(span, "inst", 1, T0)
    final = make_event(Progress(fraction=1.0, final=True), "inst", 2, T0)
    s = fold_all(TASK, [start, final])
    assert s.finished and not s.settled  # seq 1 (a span window) is still on its way
    assert fold(s, window).settled
    assert not fold(new_state(TASK), start).settled  # not over: never settled
