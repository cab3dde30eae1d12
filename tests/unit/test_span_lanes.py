"""One lane per pod under each span name: the fold keeps each sender pod's
aggregate of a span name beside the name's totals, for the task's smallest (name, pod)
pairs, the rest counted; the same for any order; the totals stay exact; the status budget
gives the lanes up before anything else of the spans."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import expanded
from tests.unit import reference_fold
from tidings._compat import UTC
from tidings.schemas import (
    Limits,
    ParsedEvent,
    PodRef,
    SpanSummary,
    TaskRef,
    build_event,
    fold_all,
    new_state,
    parse_event,
)
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import BUDGET_DROP_ORDER, to_status
from tidings.schemas.wire.payloads import SpanSummaries, span_row

TASK = TaskRef("ml", "bert-7")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
PODS = [PodRef(f"trainer-{i}", f"uid-{i}") for i in range(4)]


def step(name: str, start: float, seconds: float, count: int = 1) -> SpanSummary:
    return SpanSummary(name=name, count=count, total_s=seconds * count, min_s=seconds,
                       max_s=seconds, first_start=start, last_end=start + seconds * count)


def event(p: SpanSummary | SpanSummaries, pod: PodRef, seq: int, instance: str = "") -> ParsedEvent:
    raw = build_event(task=TASK, pod=pod, payload=p, instance=instance or "i" + pod.uid,
                      seq=seq, time=T0 + timedelta(seconds=seq))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def test_each_pod_has_its_lane_and_the_totals_stay_exact() -> None:
    t = 1.7e9
    events = [event(step("train_step", t + i, 0.2), PODS[0], i + 1) for i in range(5)]
    events += [event(step("train_step", t + i, 0.9), PODS[1], i + 1) for i in range(5)]
    state = fold_all(TASK, events)
    s = state.spans["train_step"]
    assert s.count == 10 and s.max_s == 0.9 and s.events == 10
    fast, slow = s.lanes["trainer-0"], s.lanes["trainer-1"]
    assert (fast.count, fast.max_s, slow.count, slow.min_s) == (5, 0.2, 5, 0.9)
    assert fast.total_ns + slow.total_ns == s.total_ns  # the lanes add up to the totals
    status = to_status(state)
    assert sorted(status["spanLanes"]["train_step"]) == ["trainer-0", "trainer-1"]
    assert sorted(expanded(status)["spans"]["train_step"]["pods"]) == ["trainer-0", "trainer-1"]
    assert decode_status(TASK, status) == state


def test_a_name_one_pod_sent_names_the_pod_instead_of_repeating_its_aggregate() -> None:
    events = [event(step("evaluation", 1.7e9 + 10 * i, 3.0), PODS[2], i + 1) for i in range(3)]
    state = fold_all(TASK, events)
    status = to_status(state)
    entry = expanded(status)["spans"]["evaluation"]
    assert entry["pod"] == "trainer-2" and "pods" not in entry and "spanLanes" not in status
    assert state.spans["evaluation"].lanes["trainer-2"] == state.spans["evaluation"].totals
    assert decode_status(TASK, to_status(state)) == state


def test_rows_of_one_note_each_go_to_the_senders_lane() -> None:
    base = 1_700_000_000_000_000
    rows = [span_row("fwd", 2, 0.2, 0.1, 0.1, 1.7e9, 1.7e9 + 0.2, 0, base),
            span_row("bwd", 1, 0.3, 0.3, 0.3, 1.7e9, 1.7e9 + 0.3, 0, base)]
    state = fold_all(TASK, [event(SpanSummaries(base_us=base, spans=rows), PODS[3], 1)])
    assert {n: list(s.lanes) for n, s in state.spans.items()} == {
        "fwd": ["trainer-3"], "bwd": ["trainer-3"]}


@st.composite
def span_events(draw: st.DrawFn) -> list[ParsedEvent]:
    out = []
    for seq in range(1, draw(st.integers(1, 25)) + 1):
        name = draw(st.sampled_from(["a", "b", "c"]))
        start = 1.7e9 + draw(st.integers(0, 50))
        seconds = draw(st.sampled_from([0.001, 0.25, 2.0]))
        out.append(event(step(name, start, seconds, draw(st.integers(1, 3))),
                         draw(st.sampled_from(PODS)), seq, draw(st.sampled_from(["x", "y"]))))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_events(), st.randoms(use_true_random=False),
       st.sampled_from([Limits(), Limits(span_lanes=3), Limits(spans=2, span_lanes=2),
                        Limits(span_lanes=0)]))
def test_lanes_are_the_smallest_pairs_of_the_kept_names_in_any_order(
        events: list[ParsedEvent], rnd: random.Random, lim: Limits) -> None:
    state = fold_all(TASK, events, lim)
    shuffled = list(events)
    rnd.shuffle(shuffled)
    assert to_status(fold_all(TASK, shuffled, lim)) == to_status(state)
    ref = new_state(TASK, lim)
    for ev in events:
        ref = reference_fold.fold(ref, ev)
    assert ref == state
    pairs = sorted({(p.payload.name, ev.sender.name) for ev in events  # type: ignore[union-attr]
                    for p in [ev] if p.payload.name in state.spans})  # type: ignore[union-attr]
    kept = sorted((n, q) for n, s in state.spans.items() for q in s.lanes)
    assert kept == pairs[:lim.span_lanes]
    for s in state.spans.values():  # every summary of a kept name: in a lane, or unlaned
        assert sum(lane.events for lane in s.lanes.values()) + s.unlaned == s.events
        assert sum(lane.count for lane in s.lanes.values()) <= s.count
    assert decode_status(TASK, to_status(state), lim) == state


def test_a_status_read_under_a_smaller_lanes_cap_keeps_the_smallest_pairs() -> None:
    events = [event(step(n, 1.7e9, 1.0), pod, k + 1)
              for k, (n, pod) in enumerate((n, p) for n in "ab" for p in PODS)]
    status = to_status(fold_all(TASK, events))
    small = decode_status(TASK, status, Limits(span_lanes=3))
    assert [(n, q) for n, s in sorted(small.spans.items()) for q in sorted(s.lanes)] == [
        ("a", "trainer-0"), ("a", "trainer-1"), ("a", "trainer-2")]
    assert small.spans["a"].unlaned == 1 and small.spans["b"].unlaned == 4
    assert small == fold_all(TASK, events, Limits(span_lanes=3))


def test_the_budget_gives_up_lanes_first_and_keeps_every_totals() -> None:
    assert BUDGET_DROP_ORDER.index("spanLanes") < BUDGET_DROP_ORDER.index("metricHistory")
    assert BUDGET_DROP_ORDER.index("spanLanes") < BUDGET_DROP_ORDER.index("spans")
    pods = [PodRef(f"trainer-{i:02d}-" + "p" * 200, f"uid-{i}") for i in range(64)]
    events = [event(step(f"span-{n}", 1.7e9 + i, 0.1 * (i + 1)), pod, n + 1)
              for i, pod in enumerate(pods) for n in range(4)]
    state = fold_all(TASK, events)
    full = to_status(state)
    written = to_status(state, budget=64 * 1024)
    assert len(orjson.dumps(full)) > 64 * 1024 >= len(orjson.dumps(written))
    full, written = expanded(full), expanded(written)
    dropped = written["budgetDropped"]
    assert set(dropped) <= {"pods", "spanLanes"} and dropped["spanLanes"] >= 1
    assert sorted(written["spans"]) == sorted(full["spans"])  # every name's totals stay
    for name, entry in written["spans"].items():
        assert entry["count"] == full["spans"][name]["count"]
