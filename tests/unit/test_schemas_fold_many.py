"""fold_many and the fold's fast paths: a batch fold is exactly repeated fold.

``fold_many`` copies each map once per batch and records the batch's (instance, seq) pairs in
the version vector at the end; these tests pin it to ``functools.reduce(fold, ...)`` on whole
states (``to_status()`` and ``==``), duplicates and wrong-task events included.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from functools import reduce

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import PODS, SMALL, T0, TASK, event_sets, make_event
from tidings.schemas import (
    Limits,
    LogLink,
    ParsedEvent,
    SpanSummary,
    TaskRef,
    TaskState,
    VersionVector,
    fold,
    fold_all,
    fold_many,
    new_state,
)
from tidings.schemas.engine.state import SpanAgg
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire._fast import slot_constructor

OTHER = TaskRef("team-b", "other")


def _chunks(events: list[ParsedEvent], rnd: random.Random) -> list[list[ParsedEvent]]:
    out, i = [], 0
    while i < len(events):
        n = rnd.randint(1, 12)
        out.append(events[i : i + n])
        i += n
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    event_sets(),
    event_sets(),
    st.randoms(use_true_random=False),
    st.sampled_from([SMALL, Limits(), Limits(links=0, decks=0, spans=0, pods=0, unknown_types=0)]),
)
def test_fold_many_equals_repeated_fold(
    events: list[ParsedEvent], foreign: list[ParsedEvent], rnd: random.Random, limits: Limits
) -> None:
    # A delivery with re-deliveries (within and across batches) and another task's events.
    wrong = [dataclasses.replace(ev, task=OTHER) for ev in foreign[:3]]
    dups = [rnd.choice(events) for _ in range(rnd.randint(0, 15))] if events else []
    delivered = events + dups + wrong
    rnd.shuffle(delivered)
    cut = rnd.randint(0, len(delivered))
    start = reduce(fold, delivered[:cut], new_state(TASK, limits))  # a non-empty start state
    rest = delivered[cut:]

    expected = reduce(fold, rest, start)
    got = fold_many(start, rest)
    assert to_status(got) == to_status(expected)
    assert got == expected
    # Any split into batches, and a generator as input, give the same state.
    batched = reduce(fold_many, _chunks(rest, rnd), start)
    assert to_status(batched) == to_status(expected)
    assert to_status(fold_many(start, iter(rest))) == to_status(expected)
    assert got.counters["fold_errors"] == 0


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event_sets(), st.randoms(use_true_random=False))
def test_fold_many_is_pure(events: list[ParsedEvent], rnd: random.Random) -> None:
    start = fold_all(TASK, events[: len(events) // 2], SMALL)
    before = to_status(start)
    fold_many(start, events)
    assert to_status(start) == before


def test_fold_many_of_nothing_is_the_state() -> None:
    s = new_state(TASK)
    assert fold_many(s, []) == s and to_status(fold_many(s, iter(()))) == to_status(s)


def test_a_failing_event_counts_as_fold_error_in_a_batch_too() -> None:
    good = [
        make_event(LogLink(name=f"l{i}", url="https://x.y/"), "i", i, T0 + timedelta(seconds=i))
        for i in range(4)
    ]
    # A naive time cannot be compared with the aware ones: fold counts it in fold_errors.
    bad = dataclasses.replace(good[3], seq=99, event_time=good[3].event_time.replace(tzinfo=None))
    evs = [good[0], good[1], bad, good[2], good[3]]
    expected = reduce(fold, evs, new_state(TASK))
    assert expected.counters["fold_errors"] == 1
    got = fold_many(new_state(TASK), evs)
    assert got == expected and to_status(got) == to_status(expected)


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6)), max_size=6),
    ),
    st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 70)), max_size=40),
)
def test_version_vector_batch_add_matches_one_by_one(
    base: dict[str, list[tuple[int, int]]], pairs: list[tuple[str, int]]
) -> None:
    vv = VersionVector.from_json(
        {k: [[lo, lo + w] for lo, w in rs] for k, rs in base.items() if rs}
    )
    one_by_one = reduce(lambda v, p: v.add(*p), pairs, vv)
    added: dict[str, set[int]] = {}
    for inst, seq in pairs:
        added.setdefault(inst, set()).add(seq)
    batch = vv.with_seqs(added)
    assert batch == one_by_one and batch.to_json() == one_by_one.to_json()
    ref = {(k, s) for k in "abc" for lo, hi in vv.ranges(k) for s in range(lo, hi + 1)}
    ref |= set(pairs)
    for inst in "abcd":
        assert all(batch.contains(inst, s) == ((inst, s) in ref) for s in range(-1, 80))


def test_slot_constructors_build_equal_objects() -> None:
    ev = make_event(LogLink(name="w", url="https://x.y/"), "i", 1, T0, pod=PODS[1], warning=True)
    values = [getattr(ev, f.name) for f in dataclasses.fields(ParsedEvent)]
    fast = slot_constructor(ParsedEvent)(*values)
    assert type(fast) is ParsedEvent and fast == ParsedEvent(*values) and fast == ev
    assert hash(fast) == hash(ParsedEvent(*values))
    agg = slot_constructor(SpanAgg)(1, 2, 0.5, 0.5, 1.0, 2.0, 0, 1, 0, ((1, 2),), {}, 0)
    assert agg == SpanAgg(1, 2, 0.5, 0.5, 1.0, 2.0, 0, 1, 0, ((1, 2),))
    try:
        agg.count = 5  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a fast-built object must stay frozen")


def test_fold_shares_the_maps_an_event_does_not_touch() -> None:
    s0 = fold(
        new_state(TASK),
        make_event(LogLink(name="w", url="https://x.y/"), "i", 0, T0),
    )
    span = SpanSummary(
        name="s", count=1, total_s=1.0, min_s=1.0, max_s=1.0, first_start=1.0, last_end=2.0
    )
    s1 = fold(s0, make_event(span, "i", 1, T0))
    assert s1.link_entries is s0.link_entries and s1.deck_entries is s0.deck_entries
    assert s1.spans is not s0.spans and s0.spans == {}
    dup = fold(s1, make_event(span, "i", 1, T0))
    assert isinstance(dup, TaskState) and dup.spans is s1.spans
    assert dup.counters["duplicates"] == 1
