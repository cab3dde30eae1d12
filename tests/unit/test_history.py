"""A metric's extremes and history (schemas/wire/history.py): exact min and max,
at most HISTORY_POINTS points spread over the run with the first and last kept, and the same
series for any order, grouping or repetition of the reports (the fold's invariants)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.schemas.wire import history
from tidings.schemas.wire.history import (
    BUCKETS,
    HISTORY_POINTS,
    Series,
    curve_value,
    join,
    merge,
    sample,
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
steps = st.integers(0, 2**53)
Report = tuple[float, int | None, float | None, float | None, list[tuple[int, float]]]


def valid(r: Report) -> Report:
    """As the Metric model admits it: min <= value <= max."""
    value, step, lo, hi, points = r
    return (value, step, None if lo is None else min(lo, value),
            None if hi is None else max(hi, value), points)


# A report: value, step (None: no point), and what a sender adds: min, max, earlier points.
report = st.tuples(finite, st.none() | steps, st.none() | finite, st.none() | finite,
                   st.lists(st.tuples(steps, finite), max_size=5)).map(valid)
# Small steps collide in buckets and on equal steps, which is where order could leak in.
small_report = st.tuples(finite, st.none() | st.integers(0, 300), st.none() | finite,
                         st.none() | finite,
                         st.lists(st.tuples(st.integers(0, 300), finite), max_size=5)).map(valid)
reports = st.lists(st.one_of(report, small_report), min_size=1, max_size=40)


def fold(rs: list[Report]) -> Series:
    s: Series | None = None
    for value, step, lo, hi, points in rs:
        s = merge(s, value, step, lo, hi, points)
    assert s is not None
    return s


def every_point(rs: list[Report]) -> list[tuple[int, float]]:
    out = [(st_, curve_value(v)) for _, _, _, _, ps in rs for st_, v in ps]
    return out + [(step, curve_value(v)) for v, step, _, _, _ in rs if step is not None]


def from_scratch(rs: list[Report]) -> Series:
    """The oracle: the extremes of every number (the points' too: a sender's extremes only
    widen them), the sample of every point at once."""
    numbers = [x for v, _, lo, hi, ps in rs
               for x in (v, lo, hi, *(p for _, p in ps)) if x is not None]
    shift, points = sample(every_point(rs))
    return Series(min(numbers) + 0.0, max(numbers) + 0.0, shift, points)


@settings(max_examples=400, deadline=None)
@given(reports, st.randoms(use_true_random=False))
def test_any_order_grouping_or_repetition_gives_the_series_of_the_set(
        rs: list[Report], rnd: random.Random) -> None:
    expected = from_scratch(rs)
    assert fold(rs) == expected
    shuffled = rs + rs[: len(rs) // 2]  # re-deliveries
    rnd.shuffle(shuffled)
    assert fold(shuffled) == expected
    # Two folds of a split (two pods, two emitter instances, a watcher that restarted from
    # its status) joined in either order.
    cut = rnd.randrange(1, len(shuffled) + 1)
    a, b = fold(shuffled[:cut]), (fold(shuffled[cut:]) if shuffled[cut:] else history.EMPTY)
    assert join(a, b) == join(b, a) == expected
    assert join(expected, expected) == expected
    assert history.from_status(history.to_status(expected)) == expected


@settings(max_examples=200, deadline=None)
@given(reports)
def test_the_history_is_bounded_ascending_and_keeps_the_first_and_last_points(
        rs: list[Report]) -> None:
    s = fold(rs)
    points = every_point(rs)
    assert len(s.points) <= HISTORY_POINTS
    assert list(s.points) == sorted(s.points)
    if points:
        assert s.points[0] == min(points) and s.points[-1] == max(points)
        assert set(s.points) <= set(points)
        # A finer grid would have held more buckets than allowed.
        if s.shift:
            assert len({p[0] >> (s.shift - 1) for p in points}) > BUCKETS
    else:
        assert not s.points


def test_a_million_steps_keep_a_spread_history_and_the_exact_extremes() -> None:
    s: Series | None = None
    lo, hi = float("inf"), float("-inf")
    for step in range(1, 1_000_001):
        value = 2.0 / (1 + step / 1000) + (step % 7) * 1e-9
        lo, hi = min(lo, value), max(hi, value)
        s = merge(s, value, step)
    assert s is not None and s.lo == lo and s.hi == hi
    got = s.steps
    assert got[0] == 1 and got[-1] == 1_000_000 and len(got) <= HISTORY_POINTS
    assert len(got) >= HISTORY_POINTS // 2  # never fewer than half a grid's buckets
    gaps = [b - a for a, b in itertools.pairwise(got)]
    assert max(gaps) <= 2 ** (s.shift + 1)  # spread over the whole run, no hole
    assert s.values[-1] == curve_value(2.0 / 1001 + (1_000_000 % 7) * 1e-9)


def test_values_are_kept_to_six_digits_and_minus_zero_is_zero() -> None:
    assert curve_value(0.6931471805599453) == 0.693147
    assert curve_value(1.234567890123e-05) == 1.23457e-05
    assert str(curve_value(-0.0)) == "0.0"
    a = merge(merge(None, -0.0, 1), 0.0, 1)
    b = merge(merge(None, 0.0, 1), -0.0, 1)
    assert a == b and str(a.lo) == "0.0"


def test_non_finite_numbers_are_no_part_of_the_curve_or_the_extremes() -> None:
    s = merge(merge(None, 1.0, 1), float("nan"), 2, float("-inf"), float("inf"),
              [(0, float("nan"))])
    assert s == Series(1.0, 1.0, 0, ((1, 1.0),))


@pytest.mark.parametrize("entry", [
    {"min": "0"}, {"min": 2.0, "max": 1.0}, {"history": []},
    {"history": {"shift": 99, "steps": [], "values": []}},
    {"history": {"shift": 0, "steps": [1, 2], "values": [1.0]}},
    {"history": {"shift": 0, "steps": [-1], "values": [1.0]}},
    {"history": {"shift": 0, "steps": [1], "values": [float("nan")]}},
    {"history": {"shift": 0, "steps": list(range(200)), "values": [0.0] * 200}},
])
def test_an_unreadable_entry_is_refused(entry: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        history.from_status(entry)


def test_a_hand_edited_history_is_sampled_again() -> None:
    edited = {"min": 0.0, "max": 9.0,
              "history": {"shift": 0, "steps": list(range(100, 0, -1)), "values": [1.0] * 100}}
    s = history.from_status(edited)
    assert len(s.points) <= HISTORY_POINTS and s.points[0] == (1, 1.0)
    assert s.points[-1] == (100, 1.0) and s == history.from_status(history.to_status(s))
