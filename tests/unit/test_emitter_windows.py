"""The emitter's windows: a worker's coalescible facts (progress, metrics, spans) leave as one
Window event per window, the first at once; critical facts never wait for a window."""

from __future__ import annotations

import time

from tests.support import eventually
from tests.unit.test_emitter_core import Recorder, make
from tidings.emitter import Emitter, EmitterConfig
from tidings.schemas.wire.constants import NOTE_LIMIT
from tidings.schemas.wire.payloads import Progress, Window, span_summaries


def _training_loop(em: object, seconds: float, steps_per_s: float = 100.0) -> int:
    """A Trainer-like loop: progress every step, spans every step, metrics every 10 steps."""
    step = 0
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        step += 1
        now = time.time()
        em.record_span("step", now - 0.001, now)  # type: ignore[attr-defined]
        em.progress(min(0.99, step / 10_000), f"step {step}/10000")  # type: ignore[attr-defined]
        if step % 10 == 0:
            em.metric("loss", 1 / step, step=step)  # type: ignore[attr-defined]
            em.metric("learning_rate", 1e-4, step=step)  # type: ignore[attr-defined]
        time.sleep(1 / steps_per_s)
    return step


def test_a_training_loop_sends_one_window_per_window_with_all_its_facts() -> None:
    em, rec = make(span_window_s=0.5)
    seconds = 3.0
    _training_loop(em, seconds)
    assert em.flush(5)
    parsed = rec.parsed()
    assert all(isinstance(p.payload, Window) for p in parsed)
    # One per window (the first at once, the flush's own), however many facts were offered.
    assert len(parsed) <= seconds / 0.5 + 2, [p.payload for p in parsed]
    full = [p.payload for p in parsed if isinstance(p.payload, Window)
            and p.payload.progress and p.payload.metrics and p.payload.spans]
    assert len(full) >= len(parsed) - 2  # the first window may precede the first metrics
    assert sum(s.count for p in parsed for s in span_summaries(p.payload)) == \
        em.stats()["spans_sent"]
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)


def after_the_first_window() -> tuple[Emitter, Recorder]:
    """An emitter with an hour-long span window whose first window ("started", progress 0.1)
    was sent at once: from here, coalescible facts wait for the window."""
    em, rec = make(span_window_s=3600.0)
    em.progress(0.1, "started")
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window sent at once")
    return em, rec


def test_the_first_window_goes_at_once_the_next_after_the_window() -> None:
    em, rec = after_the_first_window()
    em.progress(0.2, "later")
    # The window is open: the second waits for it. Shown without a clock: the sender takes
    # the latest progress on every pass, so the pass that sends the link took "later" too,
    # and had it not held it for the window it would have sent it on that pass, before the
    # deck that the next pass sends.
    em.log_link("wandb", "https://wandb.example/run/7")
    eventually(lambda: "LogLink" in [b["reason"] for b in rec.bodies], 5, "the link at once")
    em.deck_ready("report", "s3://decks/report.html")
    eventually(lambda: "DeckReady" in [b["reason"] for b in rec.bodies], 5, "the deck at once")
    assert [b["reason"] for b in rec.bodies] == ["Window", "LogLink", "DeckReady"]
    assert em.flush(5)  # ...or for a flush
    assert [p.payload.progress.message for p in rec.parsed()  # type: ignore[union-attr]
            if isinstance(p.payload, Window)] == ["started", "later"]


def test_critical_facts_never_wait_for_the_window() -> None:
    em, rec = after_the_first_window()
    em.progress(0.2, "coalescible: waits")
    em.log_link("wandb", "https://wandb.example/run/7")
    em.deck_ready("report", "s3://decks/report.html")
    eventually(lambda: len(rec.bodies) == 3, 5, "the link and the deck at once")
    kinds = [type(p.payload).__name__ for p in rec.parsed()]
    assert kinds == ["Window", "LogLink", "DeckReady"]
    em.progress(1.0, "done", final=True)
    eventually(lambda: any(isinstance(p.payload, Progress) and p.payload.final
                           for p in rec.parsed()), 5, "the final at once")
    em.close(1)


def test_a_progress_message_too_long_for_a_window_goes_on_its_own_shrunk() -> None:
    em, rec = make(span_window_s=3600.0)
    em.progress(0.5, "x" * 5000)
    assert em.flush(5)
    (p,) = rec.parsed()
    assert isinstance(p.payload, Progress) and p.payload.message.startswith("xxx")
    assert len(rec.bodies[0]["note"].encode()) <= NOTE_LIMIT


def test_what_one_note_cannot_hold_goes_in_more_windows_of_the_same_tick() -> None:
    em, rec = make(span_window_s=3600.0)
    for i in range(60):
        em.metric(f"eval/accuracy_of_class_{i:03d}", i / 7, step=10**12 + i)
        em.record_span(f"layer.{i:03d}.forward", 1000.0, 1000.5)
    em.progress(0.5, "half")
    assert em.flush(5)
    parsed = rec.parsed()
    assert 2 <= len(parsed) <= 12 and all(isinstance(p.payload, Window) for p in parsed)
    assert sum(len(p.payload.metrics) for p in parsed) == 60  # type: ignore[union-attr]
    assert sum(len(p.payload.spans) for p in parsed) == 60  # type: ignore[union-attr]
    assert sum(p.payload.progress is not None for p in parsed) == 1  # type: ignore[union-attr]
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)


def test_the_default_window_keeps_a_pod_within_twelve_events_a_minute() -> None:
    # The arithmetic the default stands for: one window every span_window_s, plus the
    # critical facts of a run (its links at the start, its final at the end).
    per_minute = 60 / EmitterConfig().span_window_s
    assert per_minute + 2 <= 12


def test_a_final_supersedes_the_progress_the_sender_holds_for_its_window() -> None:
    """The last window's non-final progress, still held when the final comes, is not sent
    after it: the fold keeps the final anyway, so it would cost an Event for nothing (the
    Events per pod-minute are bounded)."""
    em, rec = after_the_first_window()
    em.metric("loss", 0.5, step=10)
    em.progress(0.9, "step 90/100")
    # The sender takes the progress and holds it for the window (the case the fix is for; a
    # progress still in the slot would be superseded there, proving nothing).
    eventually(lambda: em._sender is not None and em._sender._progress_out is not None, 5,
               "the sender holding the progress")
    em.progress(1.0, "done", final=True)
    assert em.flush(5)
    parsed = rec.parsed()
    kinds = [type(p.payload).__name__ for p in parsed]
    assert kinds == ["Window", "Window", "Progress"], kinds  # the first, the metric, the final
    assert parsed[1].payload.progress is None and parsed[1].payload.metrics  # type: ignore
    assert parsed[2].payload.final  # type: ignore[union-attr]
    assert em.stats()["progress_coalesced"] >= 1


def test_every_span_recorded_before_a_final_is_in_an_event_created_before_it() -> None:
    """The final is critical and goes at once; the spans of the open window are coalescible
    and would wait for it: they leave first, so a reader that stops at the task's end (the
    completion rule counts the final) has every span the worker recorded before it."""
    em, rec = make(span_window_s=3600.0)
    em.record_span("step", 1000.0, 1000.25)
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window sent at once")
    for i in range(1, 60):  # the window is open: these wait for it
        em.record_span("step", 1000.0 + i, 1000.25 + i)
    em.progress(1.0, "done", final=True)
    assert em.flush(5)
    parsed = rec.parsed()
    final = next(i for i, p in enumerate(parsed)
                 if isinstance(p.payload, Progress) and p.payload.final)
    before = sum(s.count for p in parsed[:final] if isinstance(p.payload, Window)
                 for s in span_summaries(p.payload))
    assert before == 60 and final == len(parsed) - 1, [type(p.payload) for p in parsed]
    assert [p.seq for p in parsed] == sorted(p.seq for p in parsed)  # created in seq order
