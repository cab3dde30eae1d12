"""Numbers at their limits: every finite double a metric may hold (±1.8e308,
subnormals, a range that overflows) draws in the terminal's sparkline and the page's SVG and
prints, and the extremes the fold keeps cover every point it keeps (a sender's ``min``/``max``
only widen them)."""

from __future__ import annotations

import io
import itertools
import math
import re
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_kinds import TASK, event_of
from tidings.cli.snapshot import SOURCE_CR, Snapshot
from tidings.cli.taskrender import SPARK_BLOCKS, SPARK_WIDTH, render, sparkline
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.view.model import task_view
from tidings.schemas.wire import history
from tidings.schemas.wire.history import curve_value, heights
from tidings.schemas.wire.payloads import Metric

finite = st.floats(allow_nan=False, allow_infinity=False)
# The edges a curve meets: the largest doubles, the subnormals, zero of both signs.
EDGES = [sys.float_info.max, -sys.float_info.max, 1e308, -1e308, 5e-324, -5e-324,
         sys.float_info.min, 0.0, -0.0, 1.0]
edgy = st.one_of(finite, st.sampled_from(EDGES))
curves = st.lists(edgy, min_size=1, max_size=40)


def rendered(state: Any) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render(Snapshot(state, SOURCE_CR)))
    return out.getvalue()


@settings(max_examples=400, deadline=None)
@given(curves)
def test_heights_are_finite_and_span_zero_to_one(values: list[float]) -> None:
    hs = heights(values)
    assert len(hs) == len(values) and all(0.0 <= h <= 1.0 for h in hs)
    if max(values) > min(values):
        assert hs[values.index(min(values))] == 0.0 and hs[values.index(max(values))] == 1.0
        # Order is kept: a larger value never sits lower.
        pairs = sorted(zip(values, hs, strict=True))
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(pairs))
    else:
        assert set(hs) == {0.5}


@settings(max_examples=400, deadline=None)
@given(curves)
def test_the_sparkline_draws_any_finite_curve(values: list[float]) -> None:
    line = sparkline(values)
    shown = values[-SPARK_WIDTH:]
    assert len(line) == len(shown) and set(line) <= set(SPARK_BLOCKS)
    if max(shown) > min(shown):
        assert line[shown.index(min(shown))] == SPARK_BLOCKS[0]
        assert line[shown.index(max(shown))] == SPARK_BLOCKS[-1]


@settings(max_examples=400, deadline=None)
@given(st.lists(edgy, min_size=2, max_size=40))
def test_the_pages_polyline_is_numbers_within_its_box(values: list[float]) -> None:
    pages = pytest.importorskip("tidings.ui.pages", reason="the ui extra is not installed")
    line = pages.spark(values)
    assert re.fullmatch(r"[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)*", line), line
    points = [tuple(map(float, p.split(","))) for p in line.split()]
    assert len(points) == len(values)
    assert all(0 <= x <= pages.SPARK_W and 0 <= y <= pages.SPARK_H for x, y in points)


def test_a_curve_from_1e308_to_minus_1e308_prints_and_draws() -> None:
    """The issue's report: `tidings state` crashed (NaN in the sparkline) and the page drew
    ``points="0.0,nan …"``."""
    state = fold_all(TASK, [event_of(Metric(name="huge", value=v, step=n), seq=n + 1)
                            for n, v in enumerate([1e308, -1e308, 0.0, 5e-324])])
    text = rendered(state)
    (row,) = [ln for ln in text.splitlines() if "huge" in ln]
    assert "-1e+308" in row and "1e+308" in row and "▁" in row and "█" in row
    pages = pytest.importorskip("tidings.ui.pages", reason="the ui extra is not installed")
    (table,) = [t for t in task_view(state).tables if t.kind.section == "metrics"]
    assert "nan" not in pages.spark(table.rows[0].points)


# --- the extremes cover every point kept ------------------------------------------------------

points_of = st.lists(st.tuples(st.integers(0, 2**40), edgy), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(edgy, st.one_of(st.none(), edgy), st.one_of(st.none(), edgy),
                          points_of), min_size=1, max_size=5))
def test_the_folds_extremes_cover_every_value_and_point_and_survive_the_status(
        reports: list[tuple[float, float | None, float | None, list[tuple[int, float]]]]
) -> None:
    # (The model refuses extremes that exclude the value itself; not so the points.)
    events = [event_of(Metric(name="m", value=v, step=n, min=None if lo is None else min(lo, v),
                              max=None if hi is None else max(hi, v), points=tuple(pts)),
                       seq=n + 1)
              for n, (v, lo, hi, pts) in enumerate(reports)]
    state = fold_all(TASK, events)
    s = state.named["metrics"]["m"].series
    assert s is not None and s.lo is not None and s.hi is not None
    told = [v for v, *_ in reports] + [x for *_, pts in reports for _, x in pts]
    assert s.lo <= min(told) and s.hi >= max(told)  # every value and point, kept or not
    # A kept point is rounded: it lies within the extremes rounded the same way.
    assert all(curve_value(s.lo) <= v <= curve_value(s.hi) for v in s.values)
    # The status keeps the same series (nothing widened twice, nothing lost).
    again = decode_status(TASK, to_status(state)).named["metrics"]["m"].series
    assert again == s
    text = rendered(state)
    assert "m " in text or "m\n" in text


def test_a_point_beyond_the_senders_extremes_widens_them() -> None:
    """The issue's report: value 1, a point at 50: min 1, max 1 before."""
    state = fold_all(TASK, [event_of(Metric(name="m", value=1.0, step=100, min=1.0, max=1.0,
                                            points=((0, 50.0), (10, -3.0))), seq=1)])
    s = state.named["metrics"]["m"].series
    assert s is not None and (s.lo, s.hi) == (-3.0, 50.0)
    (table,) = [t for t in task_view(state).tables if t.kind.section == "metrics"]
    assert (table.rows[0].low, table.rows[0].high) == (-3.0, 50.0)


def test_a_hand_edited_history_beyond_its_extremes_widens_them_when_read() -> None:
    entry = {"min": 1.0, "max": 1.0, "history": {"shift": 0, "steps": [0, 5],
                                                 "values": [50.0, 1.0]}}
    s = history.from_status(entry)
    assert (s.lo, s.hi) == (1.0, 50.0)
    # Within rounding it is the fold's own: a max of 0.9999996 keeps its point of 1.0.
    near = history.from_status({"min": 0.5, "max": 0.9999996,
                                "history": {"steps": [0], "values": [1.0]}})
    assert (near.lo, near.hi) == (0.5, 0.9999996)
    assert math.isclose(curve_value(0.9999996), 1.0)
    # No extremes at all (a status of a non-finite value with points): the points give them.
    bare = history.from_status({"history": {"steps": [0, 1], "values": [2.0, -1.0]}})
    assert (bare.lo, bare.hi) == (-1.0, 2.0)
