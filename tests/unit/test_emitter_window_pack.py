"""Window packing (emitter/window.py), pure: whatever the waiting facts, one packed note fits
the note limit as it is (nothing shrunk), takes the oldest names first, and takes out of the
waiting containers exactly what it carries (the rest waits for the next note)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.emitter import window
from tidings.emitter.aggregate import Agg
from tidings.emitter.items import LatestKey, LatestUpdate
from tidings.schemas.wire.constants import NOTE_LIMIT, SEQ_MAX
from tidings.schemas.wire.note import encode_note_bytes
from tidings.schemas.wire.payloads import Window

INSTANCE = "a" * 32
names = st.from_regex(r"[a-z][a-z0-9_.]{0,80}", fullmatch=True)
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**6, 10**6).map(float)


@st.composite
def spans(draw: st.DrawFn) -> Agg:
    count = draw(st.integers(1, 10**6))
    lo = draw(st.floats(0, 100))
    hi = draw(st.floats(lo, 200))
    first = draw(st.floats(1.7e9, 1.8e9))
    return [float(count), hi * count, lo, hi, first, first + hi,
            float(draw(st.integers(0, count)))]


@settings(max_examples=100, deadline=None)
@given(metrics=st.dictionaries(names, st.tuples(values, st.integers(0, 10**9)), max_size=40),
       pending=st.dictionaries(names, spans(), max_size=40),
       progress=st.none() | st.tuples(st.floats(0, 1), st.text(max_size=300)))
def test_a_packed_window_fits_one_note_and_takes_exactly_what_it_carries(
        metrics: dict[str, tuple[float, int]], pending: dict[str, Agg],
        progress: tuple[float, str] | None) -> None:
    latest: dict[LatestKey, LatestUpdate] = {
        ("Metric", n): ({"name": n, "value": v, "step": s}, 1.0) for n, (v, s) in metrics.items()}
    waiting_metrics, waiting_spans = list(latest), list(pending)
    packed = window.pack(window.room(INSTANCE), None if progress is None else (*progress, 2.0),
                         4, latest, {}, pending)
    if isinstance(packed, window.Alone):  # a message that alone fills a note
        assert progress is not None and packed.kind == "Progress"
        assert packed.fields["message"] == progress[1] and packed.fields["workers"] == 4
        return
    taken_metrics = [("Metric", row[0]) for row in packed.metrics]
    taken_spans = [name for name, _ in packed.taken]
    # Oldest first: what it took is the head of each line, what it left is the rest.
    assert taken_metrics + list(latest) == waiting_metrics
    assert taken_spans + list(pending) == waiting_spans
    if not (packed.progress or packed.metrics or packed.spans):
        assert not waiting_metrics and not waiting_spans and progress is None
        return
    payload = Window.model_validate(packed.fields())
    # (A Window has no text the codec may cut: one that does not fit raises.)
    assert len(encode_note_bytes(payload, instance=INSTANCE, seq=SEQ_MAX)) <= NOTE_LIMIT
