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
from tidings.schemas.kinds import COALESCIBLE, urgency

TASK = TaskRef("ml", "run-7")
POD = PodRef("train-0", "uid-train-0")
T = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)


def _event(payload: object, seq: int = 5) -> ParsedEvent:
    ev = parse_event(orjson.loads(orjson.dumps(build_event(
        task=TASK, pod=POD, payload=payload, instance="a" * 32, seq=seq,  # type: ignore[arg-type]
        time=T))))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def _window() -> Window:
    return Window.model_validate({
        "progress": {"fraction": 0.25, "message": "step 250/1000", "workers": 2},
        "metrics": [["loss", 0.5, 250], ["learning_rate", 1e-4, 250]],
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


def test_spans_of_a_window_are_its_rows() -> None:
    w = Window.model_validate({"base_us": 10, "spans": [["a", 1, 5, 5, 5, 0, 1, 0]]})
    assert span_summaries(w) == (SpanSummary(name="a", count=1, total_s=5e-9, min_s=5e-9,
                                             max_s=5e-9, first_start=1e-5, last_end=1.1e-5),)
    assert fold_all(TASK, [_event(w)]).spans["a"].count == 1
    assert new_state(TASK).spans == {}
