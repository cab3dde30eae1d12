"""The Window payload: a worker's coalescible facts in one note, folded part by part exactly as
each part's own event would be."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tidings.schemas import (
    Metrics,
    ParsedEvent,
    PodRef,
    Progress,
    SpanSummaries,
    SpanSummary,
    TaskRef,
    Window,
    build_event,
    decode_note,
    encode_note,
    fold_all,
    new_state,
    parse_event,
    span_summaries,
)
from tidings.schemas.wire.kinds import COALESCIBLE, urgency

TASK = TaskRef("ml", "run-7")
POD = PodRef("train-0", "uid-train-0")
T = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)


def _event(payload: object, seq: int = 5, pod: PodRef = POD) -> ParsedEvent:
    ev = parse_event(orjson.loads(orjson.dumps(build_event(
        task=TASK, pod=pod, payload=payload, instance=pod.uid[-1] * 32,  # type: ignore[arg-type]
        seq=seq, time=T))))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def _window() -> Window:
    return Window.model_validate({
        "progress": {"fraction": 0.25, "message": "step 250/1000", "workers": 2},
        # loss with its extremes and two earlier points of its curve
        "metrics": [["loss", 0.5, 250, 0.25, 2.0, [0, 2.0, 128, 0.75]],
                    ["learning_rate", 1e-4, 250]],
        "base_us": 1_790_000_000_000_000,
        "spans": [["step", 10, 1_000_000_000, 90_000_000, 110_000_000, 0, 1_000_000, 0],
                  ["evaluation", 1, 2_000_000_000, 2_000_000_000, 2_000_000_000, 5_000_000,
                   7_000_000, 0]]})


def test_a_window_round_trips_through_its_note() -> None:
    w = _window()
    note = encode_note(w, instance="a" * 32, seq=5)
    assert len(note.encode()) < 1024
    assert decode_note(note) == w
    assert orjson.loads(note)["t"] == "Window"
    assert orjson.loads(note)["v"] == 2  # a metric row with extremes and points
    assert orjson.loads(note)["metrics"][1] == ["learning_rate", 1e-4, 250]  # trailing unset
    assert orjson.loads(encode_note(Window.model_validate(
        {"metrics": [["loss", 0.5, 3]]}), instance="a" * 32, seq=5))["v"] == 1
    assert [s.name for s in span_summaries(w)] == ["step", "evaluation"]


def test_a_window_is_coalescible_and_refuses_a_final_or_nothing() -> None:
    assert urgency(_window()) == COALESCIBLE
    with pytest.raises(ValidationError, match="final progress"):
        Window(progress=Progress(fraction=1.0, final=True))
    with pytest.raises(ValidationError, match="carries"):
        Window()
    with pytest.raises(ValidationError):  # one metric name twice
        Window.model_validate({"metrics": [["loss", 1.0, None], ["loss", 2.0, None]]})


def test_each_part_folds_as_its_own_event_would() -> None:
    w = _window()
    assert w.progress is not None
    whole = fold_all(TASK, [_event(w)])
    progress = fold_all(TASK, [_event(w.progress)])
    metrics = fold_all(TASK, [_event(Metrics(metrics=w.metrics))])
    wire = w.model_dump()
    spans = fold_all(TASK, [_event(SpanSummaries.model_validate(
        {"base_us": wire["base_us"], "spans": wire["spans"]}))])
    assert whole.workers == progress.workers and whole.roster == progress.roster
    assert whole.named["metrics"] == metrics.named["metrics"]
    assert whole.spans == spans.spans
    assert whole.named["metrics"]["loss"].series == metrics.named["metrics"]["loss"].series
    series = whole.named["metrics"]["loss"].series
    assert series is not None and (series.lo, series.hi) == (0.25, 2.0)
    assert series.points == ((0, 2.0), (128, 0.75), (250, 0.5))
    assert list(whole.spans["step"].lanes) == [POD.name]  # the Window's sender's lane
    assert whole.counters["events_applied"] == 1  # one event, however many parts
    # ...and twice is once (the dedup key is the event's).
    twice = fold_all(TASK, [_event(w), _event(w)])
    assert twice.counters["duplicates"] == 1
    assert replace(twice, counters=whole.counters) == whole


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(6)))
def test_windows_fold_in_any_order_to_the_same_state(order: list[int]) -> None:
    events = [_event(Window.model_validate({
        "progress": {"fraction": seq / 10, "message": f"step {seq}"},
        "metrics": [["loss", 1 / (seq + 1), seq]],
        "base_us": 1_790_000_000_000_000 + seq * 1_000_000,
        "spans": [["step", 2, 20_000, 10_000, 10_000, 0, 30, 0],
                  [f"s{seq}", 1, 5, 5, 5, 0, 1, 0]]}), seq=seq) for seq in range(6)]
    assert fold_all(TASK, events) == fold_all(TASK, [events[i] for i in order])


PODS = (POD, PodRef("train-1", "uid-train-1"))


def _pod_window(seq: int, pod: int) -> dict[str, object]:
    """A window of pod ``pod`` (0 or 1): progress, a metric with the extremes and points its
    curve has to tell, and spans of a shared name and of its own."""
    value = (1 + pod) / (seq + 1)
    return {
        "progress": {"fraction": seq / 10, "message": f"step {seq}"},
        "metrics": [["loss", value, seq * 100, value / 2, value * 4,
                     [seq * 100 - 50, value * 3, seq * 100 - 20, value * 2] if seq else []]],
        "base_us": 1_790_000_000_000_000 + seq * 1_000_000,
        "spans": [["step", 2, 20_000 * (1 + pod), 10_000 * (1 + pod), 10_000 * (1 + pod), 0,
                   30 * (1 + pod), 0], [f"s{seq}", 1, 5, 5, 5, 0, 1, 0]]}


def _parts(w: dict[str, object]) -> list[object]:
    return [Progress.model_validate(w["progress"]),
            Metrics.model_validate({"metrics": w["metrics"]}),
            SpanSummaries.model_validate({"base_us": w["base_us"], "spans": w["spans"]})]


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(8)), st.permutations(range(24)))
def test_windows_of_two_pods_fold_as_their_parts_in_any_order(
        order: list[int], parts_order: list[int]) -> None:
    """Metric extremes and points, and spans into per-pod lanes: a Window's parts fold
    exactly as their own events would, the sender pod being the Window's, in any order."""
    windows = [(_pod_window(seq, pod), seq, PODS[pod]) for seq in range(4) for pod in (0, 1)]
    events = [_event(Window.model_validate(w), seq=seq, pod=pod) for w, seq, pod in windows]
    state = fold_all(TASK, [events[i] for i in order])
    assert state == fold_all(TASK, events)
    parts = [_event(part, seq=seq * 3 + k, pod=pod) for w, seq, pod in windows
             for k, part in enumerate(_parts(w))]
    alone = fold_all(TASK, [parts[i] for i in parts_order])
    assert state.spans == alone.spans and set(state.spans["step"].lanes) == {"train-0", "train-1"}
    # The metrics' values and curves (their order keys differ: the parts have seqs of their own).
    curves = [{k: (n.value, n.events, n.series) for k, n in st.named["metrics"].items()}
              for st in (state, alone)]
    assert curves[0] == curves[1] and state.named["metrics"]["loss"].series is not None


def test_spans_of_a_window_are_its_rows() -> None:
    w = Window.model_validate({"base_us": 10, "spans": [["a", 1, 5, 5, 5, 0, 1, 0]]})
    assert span_summaries(w) == (SpanSummary(name="a", count=1, total_s=5e-9, min_s=5e-9,
                                             max_s=5e-9, first_start=1e-5, last_end=1.1e-5),)
    assert fold_all(TASK, [_event(w)]).spans["a"].count == 1
    assert new_state(TASK).spans == {}
