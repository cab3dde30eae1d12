"""The one fold engine against the reference per-event fold, on random hostile streams.

``fold``, ``fold_many`` (in any batching) and ``fold_checked`` all run schemas/engine/folding.py's
engine; ``tests/unit/reference_fold.py`` is the per-event fold it replaced (a batch is the
per-event fold of its events in creation order). Streams mix
re-deliveries, other tasks' events, sender clocks far ahead of the API server's (clamped),
events created long before others (late, skipped), more instances than the cap (compaction)
and caps of one or two entries, so every branch of the engine meets its reference.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime, timedelta
from functools import reduce

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import reference_fold as ref
from tests.unit.test_schemas_fold import PODS, T0, TASK, make_event, names, payloads
from tests.unit.test_schemas_fold_many import _chunks
from tidings.schemas import (
    Limits,
    LogLink,
    ParsedEvent,
    Payload,
    SpanSummaries,
    TaskRef,
    TaskState,
    fold,
    fold_many,
    new_state,
)
from tidings.schemas.engine import folding
from tidings.schemas.engine.folding import creation_order, fold_checked
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.payloads import span_row

OTHER = TaskRef("team-b", "other")
TINY = Limits(links=2, decks=1, spans=2, span_lanes=2, pods=2, unknown_types=1, workers=2,
              clock_skew=timedelta(seconds=5), event_ttl=timedelta(seconds=60),
              ttl_margin=timedelta(seconds=10), max_instances=3)
LIMITS = st.sampled_from([TINY, Limits(), Limits(links=0, decks=0, spans=0, pods=0,
                                                 unknown_types=0, workers=0, max_instances=1),
                          Limits(spans=3, span_lanes=0), Limits(spans=2, span_lanes=3)])

span_batches: st.SearchStrategy[Payload] = st.builds(
    lambda rows, base: SpanSummaries(base_us=base, spans=[
        span_row(n, c, 0.5 * c, 0.5, 0.5, base / 1e6 + s, base / 1e6 + s + c, 0, base)
        for n, c, s in rows]),
    st.lists(st.tuples(names, st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=4,
             unique_by=lambda r: r[0]),
    st.just(1_700_000_000_000_000))
all_payloads = st.one_of(payloads, span_batches)


@st.composite
def streams(draw: st.DrawFn) -> list[ParsedEvent]:
    """Distinct events of up to 8 instances, re-delivered, mixed with other tasks' events."""
    keys = draw(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 6)), unique=True,
                         max_size=40))
    # Creation seconds, shared objects (as the parsers intern them) or fresh equal ones.
    seconds = [T0 + timedelta(seconds=s) for s in range(0, 400, 7)]
    out: list[ParsedEvent] = []
    for inst, seq in keys:
        ev = make_event(draw(all_payloads), f"i-{inst}", seq,
                        T0 + timedelta(seconds=draw(st.integers(0, 400))),
                        pod=draw(st.sampled_from(PODS)), warning=draw(st.booleans()))
        how = draw(st.sampled_from(["none", "shared", "fresh"]))
        if how != "none":
            c: datetime = draw(st.sampled_from(seconds))
            ev = dataclasses.replace(ev, created=c if how == "shared" else c + timedelta(0))
        out.append(ev)
    dups = [draw(st.sampled_from(out)) for _ in range(draw(st.integers(0, 10)))] if out else []
    wrong = [dataclasses.replace(ev, task=OTHER) for ev in out[:2]]
    stream = out + dups + wrong
    draw(st.randoms(use_true_random=False)).shuffle(stream)
    return stream


def same(got: TaskState, want: TaskState) -> None:
    assert orjson.dumps(to_status(got)) == orjson.dumps(to_status(want))  # byte-identical
    assert got == want
    assert got.counters == want.counters


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(streams(), LIMITS, st.randoms(use_true_random=False))
def test_every_fold_equals_the_reference_fold(stream: list[ParsedEvent], limits: Limits,
                                              rnd: random.Random) -> None:
    cut = rnd.randint(0, len(stream))
    start = reduce(ref.fold, stream[:cut], new_state(TASK, limits))  # a non-empty start
    rest = stream[cut:]
    want = reduce(ref.fold, rest, start)
    same(reduce(fold, rest, start), want)
    assert want.counters["fold_errors"] == 0
    # A batch is folded in creation order, whatever order it came in: the per-event fold of
    # its events in that order.
    same(fold_many(start, rest), reduce(ref.fold, creation_order(rest), start))
    chunks = _chunks(rest, rnd)
    same(reduce(fold_many, chunks, start),
         reduce(lambda s, chunk: reduce(ref.fold, creation_order(chunk), s), chunks, start))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(streams(), LIMITS, st.randoms(use_true_random=False))
def test_the_watchers_batch_fold_equals_its_per_event_loop(
        stream: list[ParsedEvent], limits: Limits, rnd: random.Random) -> None:
    stream = [ev for ev in stream if ev.task == TASK]
    verdicts = {(ev.instance, ev.seq): rnd.random() < 0.8 for ev in stream}
    asked: list[tuple[str, int, bool]] = []

    def admit(ev: ParsedEvent, late: bool) -> bool:
        asked.append((ev.instance, ev.seq, late))
        return verdicts[(ev.instance, ev.seq)]

    start = fold_many(new_state(TASK, limits), stream[: len(stream) // 3])
    want_state, want_taken, want_dups = ref.fold_checked(start, list(creation_order(stream)),
                                                         admit)
    want_asked, asked[:] = list(asked), []
    got = fold_checked(start, stream, admit)
    same(got.state, want_state)
    assert got.taken == want_taken
    assert got.duplicates == want_dups
    assert asked == want_asked  # the sender check sees the same events, in the same order


def test_a_cap_eviction_inside_a_batch_counts_the_evicted_events() -> None:
    # spans=1: "a" is summed in place twice, then "0" (smaller) evicts it within one batch.
    lim = Limits(spans=1)
    evs = [make_event(p, "i", s, T0) for s, p in enumerate(
        [_span("b"), _span("b"), _span("a"), _span("a"), _span("0")])]
    want = reduce(ref.fold, evs, new_state(TASK, lim))
    got = fold_many(new_state(TASK, lim), evs)
    same(got, want)
    assert list(got.spans) == ["0"] and got.counters["spans_capped"] == 4


def _span(name: str) -> Payload:
    from tidings.schemas import SpanSummary

    return SpanSummary(name=name, count=1, total_s=0.5, min_s=0.5, max_s=0.5,
                       first_start=1.7e9, last_end=1.7e9 + 1)


def test_an_internal_error_in_the_watchers_fold_is_counted_and_asks_no_one_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setitem(folding.APPLY, LogLink, broken)
    evs = [make_event(p, "i", s, T0) for s, p in enumerate(
        [_span("a"), LogLink(name="w", url="https://x.y/"), _span("b")])]
    asked: list[int] = []

    def admit(ev: ParsedEvent, late: bool) -> bool:
        asked.append(ev.seq)
        return True

    got = fold_checked(new_state(TASK), evs + evs[:1], admit)
    assert asked == [0, 1, 2]  # each event's sender checked once, the bug notwithstanding
    assert got.state.counters["fold_errors"] == 1 and got.duplicates == 1
    assert got.taken == evs
    assert sorted(got.state.spans) == ["a", "b"]
