"""The pod's side of a metric's curve (emitter/curves.py): the emitter sends
a window's latest value, so the extremes and the early points must come from it: each row
carries the extremes beyond what it told before and the sample's unsent points in the room
the note leaves, every note within 1 kB, O(1) per call and bounded memory."""

from __future__ import annotations

import itertools
import tracemalloc

from tests.support import eventually, expanded
from tests.unit.test_emitter_core import Recorder, make
from tests.unit.test_metrics import sent_metrics
from tidings.emitter.curves import Curve
from tidings.schemas import TaskRef, fold_all
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.constants import NOTE_LIMIT
from tidings.schemas.wire.history import BUCKETS, HISTORY_POINTS, curve_value, sample

TASK = TaskRef("ml", "run-7")


def loss(step: int) -> float:
    return 2.0 / (1 + step / 50) + (0.3 if step % 97 == 13 else 0.0)


def status_of(*recs: Recorder) -> dict[str, dict[str, object]]:
    events = [ev for rec in recs for ev in rec.parsed()]
    out: dict[str, dict[str, object]] = expanded(to_status(fold_all(TASK, events)))["metrics"]
    return out


def test_one_window_of_a_thousand_steps_keeps_the_first_point_and_the_exact_extremes() -> None:
    em, rec = make(span_window_s=30.0)
    for step in range(1, 1001):
        em.metric("loss", loss(step), step=step)
    assert em.flush(5)
    # The first window at once, then one note for the rest: the curve rides in it.
    assert len(rec.bodies) <= 2
    entry = status_of(rec)["loss"]
    values = [loss(s) for s in range(1, 1001)]
    assert entry["min"] == min(values) and entry["max"] == max(values)  # exact
    hist = entry["history"]
    assert isinstance(hist, dict)
    assert hist["steps"][0] == 1 and hist["steps"][-1] == 1000
    assert hist["values"][0] == curve_value(loss(1))
    assert 2 <= len(hist["steps"]) <= HISTORY_POINTS
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)


def test_many_windows_spread_the_history_over_the_run() -> None:
    em, rec = make(span_window_s=30.0)
    for step in range(1, 20_001):
        em.metric("loss", loss(step), step=step)
        em.metric("lr", 1e-3 * (1 - step / 20_000), step=step)
        if step % 500 == 0:  # a window every 500 steps
            assert em.flush(5)
    status = status_of(rec)
    steps = status["loss"]["history"]["steps"]  # type: ignore[index]
    assert steps[0] == 1 and steps[-1] == 20_000 and len(steps) <= HISTORY_POINTS
    shift = status["loss"]["history"]["shift"]  # type: ignore[index]
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert max(gaps) <= 2 ** (shift + 1), (shift, steps)  # no hole in the run
    # Every point the fold kept is one the workload reported, with its value.
    for s, v in zip(steps, status["loss"]["history"]["values"], strict=True):  # type: ignore[index]
        assert v == curve_value(loss(s))
    lr = status["lr"]
    assert lr["max"] == 1e-3 * (1 - 1 / 20_000) and lr["min"] == 0.0


def test_a_restarted_emitter_and_a_second_pod_fold_into_one_curve() -> None:
    first, rec1 = make(span_window_s=30.0)
    for step in range(1, 301):
        first.metric("loss", loss(step), step=step)
    assert first.flush(5)
    again, rec2 = make(span_window_s=30.0)  # a new instance (the process restarted)
    for step in range(301, 601):
        again.metric("loss", loss(step) - 1.5, step=step)
    assert again.flush(5)
    entry = status_of(rec1, rec2)["loss"]
    assert entry["min"] == min(loss(s) - 1.5 for s in range(301, 601))
    assert entry["max"] == max(loss(s) for s in range(1, 301))
    steps = entry["history"]["steps"]  # type: ignore[index]
    assert steps[0] == 1 and steps[-1] == 600
    assert status_of(rec2, rec1) == status_of(rec1, rec2)


def test_sixty_four_names_fill_no_more_notes_than_their_values_need() -> None:
    """Points only take the room the rows leave; a name's first point and its extremes are
    part of its row."""
    em, rec = make(span_window_s=3600.0)
    # The first window goes at once: sent before the values, so that all of them leave in
    # one window (the flush), however slowly a loaded machine runs the loop. (Taken midway,
    # it would carry part of the curves and the flush the rest: more notes, by chance.)
    em.progress(0.0, "start")
    eventually(lambda: len(rec.bodies) == 1, 10, "the first window")
    names = [f"metric_{i:02d}" for i in range(64)]
    for step in range(200):
        for i, name in enumerate(names):
            em.metric(name, (i + 1) / (step + 1), step=step)
    assert em.flush(5)
    rows = sent_metrics(rec)
    assert sorted({m.name for m in rows}) == names
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)
    # Each row: name, value, step, max (the first value), and its first point (~55 bytes).
    assert len(rec.bodies) - 1 <= 5, len(rec.bodies)
    status = status_of(rec)
    for i, name in enumerate(names):
        assert status[name]["max"] == float(i + 1)  # step 0, told beside the latest value
        assert status[name]["history"]["steps"][0] == 0  # type: ignore[index]


def test_a_point_that_found_no_room_goes_with_a_later_window() -> None:
    em, rec = make(span_window_s=30.0)
    for step in range(100):
        em.metric("loss", loss(step), step=step)
    # Everything fits at once here; what it would take is a window with no room, so look at
    # the curve itself: nothing is left to tell after the flush.
    assert em.flush(5)
    curve = em._latest.curves[("Metric", "loss")]
    assert not curve.pending
    em.metric("loss", 5.0, step=100)  # a new maximum
    assert curve.pending and em.flush(5)
    assert not curve.pending and status_of(rec)["loss"]["max"] == 5.0


def test_a_lost_note_tells_its_extremes_again() -> None:
    from tidings.emitter.retry import SendError

    em, rec = make(span_window_s=30.0, retry_max_s=0.01)
    em.metric("acc", 0.5, step=1)
    em.metric("acc", 0.9, step=2)
    em.metric("acc", 0.7, step=3)
    rec.fail = [SendError(403, "Forbidden: no")]  # the note with max 0.9 is refused
    assert not em.flush(5)
    assert em._latest.curves[("Metric", "acc")].pending  # the extremes are still to tell
    em.metric("acc", 0.6, step=4)
    assert em.flush(5)
    assert status_of(rec)["acc"]["max"] == 0.9


def test_the_curve_is_o1_per_call_and_bounded_for_a_million_steps() -> None:
    c = Curve()
    tracemalloc.start()
    for step in range(1000):
        c.add(1.0 / (step + 1), step)
    before = tracemalloc.get_traced_memory()[0]
    for step in range(1000, 1_000_000):
        c.add(1.0 / (step + 1), step)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(c.firsts) <= BUCKETS and grown < 8192, grown
    assert c.lo == 1.0 / 1_000_000 and c.hi == 1.0
    # The emitter's sample is the history's own rule applied to every point it saw.
    shift, points = sample((s, 1.0 / (s + 1)) for s in range(1_000_000))
    firsts = sorted((p[0], p[1]) for p in c.firsts.values())
    assert c.shift == shift and firsts == [p for p in points if p[0] != 999_999]


def test_a_non_finite_value_is_no_part_of_the_curve() -> None:
    c = Curve()
    for step, v in enumerate([1.0, float("nan"), float("inf"), -float("inf"), 0.5]):
        c.add(v, step)
    assert (c.lo, c.hi) == (0.5, 1.0) and sorted(p[0] for p in c.firsts.values()) == [0, 4]


def test_a_second_value_at_the_same_step_leaves_nothing_to_tell() -> None:
    """The bucket's first point (the smaller value) and the row's own value share a step:
    the point still goes, or the curve would ask for a window every window, forever."""
    from tests.support import eventually

    em, rec = make(span_window_s=30.0)
    em.progress(0.1, "started")
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window, at once")
    em.metric("loss", 0.5, step=10)
    em.metric("loss", 0.9, step=10)  # the same step again: the latest value, not the first
    assert em.flush(5)
    assert not em._latest.curves[("Metric", "loss")].pending
    entry = status_of(rec)["loss"]
    assert entry["value"] == 0.9 and (entry["min"], entry["max"]) == (0.5, 0.9)
    assert entry["history"] == {"shift": 0, "steps": [10, 10], "values": [0.5, 0.9]}


def test_a_non_finite_latest_value_is_sent_and_still_carries_the_extremes() -> None:
    """A diverging run: the window's latest value is NaN or an infinity and
    is sent as such; the finite values before it still reach the status as the curve's
    extremes and points, and later finite values extend them (a non-finite value told no
    extreme)."""
    import math

    em, rec = make(span_window_s=30.0)
    em.progress(0.1, "started")
    for step, v in enumerate([2.0, 0.5, 1.0, -math.inf], start=1):
        em.metric("loss", v, step=step)
    assert em.flush(5)
    entry = status_of(rec)["loss"]
    assert entry["nonFinite"] == "-Infinity" and "value" not in entry
    assert (entry["min"], entry["max"]) == (0.5, 2.0)
    assert entry["history"]["steps"] == [1, 2, 3]
    em.metric("loss", math.nan, step=5)
    assert em.flush(5)
    for step, v in ((6, 0.25), (7, math.inf), (8, 3.0)):  # one window: 0.25 only as its min
        em.metric("loss", v, step=step)
    assert em.flush(5)
    entry = status_of(rec)["loss"]
    assert (entry["value"], entry["min"], entry["max"]) == (3.0, 0.25, 3.0)
    assert not em._latest.curves[("Metric", "loss")].pending
    assert em.stats()["invalid"] == 0
