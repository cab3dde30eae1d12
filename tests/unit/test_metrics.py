"""Metric facts: the fold keeps the latest value per name (last writer
wins by order key, like links), idempotent, order-insensitive and capped like the reference
fold; NaN and infinities never get in; the emitter sends the latest value per name per
window, so a loop that logs every step does not spend the API budget."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support import eventually, expanded
from tests.unit import reference_fold
from tests.unit.test_emitter_core import Recorder, make, unpack
from tidings._compat import UTC
from tidings.emitter import Emitter
from tidings.schemas import ParsedEvent, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.engine.folding import fold, fold_all
from tidings.schemas.engine.state import Limits, new_state
from tidings.schemas.status.decoder import decode_status, read_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.constants import NOTE_LIMIT
from tidings.schemas.wire.note import decode_note, encode_note
from tidings.schemas.wire.payloads import Metric, Metrics
from tidings.schemas.wire.rejection import Rejection

TASK = TaskRef("ml", "run-7")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
PODS = [PodRef(f"train-{i}", f"uid-{i}") for i in range(3)]


def event(p: Metric | Metrics, instance: str, seq: int, dt: float, pod: PodRef = PODS[0]
          ) -> ParsedEvent:
    raw = build_event(task=TASK, pod=pod, payload=p, instance=instance, seq=seq,
                      time=T0 + timedelta(seconds=dt))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def metric(draw: st.DrawFn) -> Metric:
    """A report as the emitter sends it: a value at a step, sometimes with the extremes it
    saw (around the value) and earlier points of its sample."""
    value = draw(finite)
    lo, hi = draw(st.none() | finite), draw(st.none() | finite)
    small = draw(st.booleans())  # small steps share buckets and steps: where order could leak
    step = st.integers(0, 300) if small else st.integers(0, 2**53)
    return Metric(name=draw(st.sampled_from(["loss", "lr", "acc", "samples_per_s"])),
                  value=value, step=draw(st.none() | step),
                  min=None if lo is None else min(lo, value),
                  max=None if hi is None else max(hi, value),
                  points=draw(st.lists(st.tuples(step, finite), max_size=4)))


batch = st.lists(metric(), min_size=1, max_size=4, unique_by=lambda m: m.name).map(
    lambda ms: Metrics(metrics=ms))


def rows(ev: ParsedEvent) -> tuple[Metric, ...]:
    p = ev.payload
    assert isinstance(p, Metric | Metrics)
    return p.metrics if isinstance(p, Metrics) else (p,)


@st.composite
def metric_events(draw: st.DrawFn) -> list[ParsedEvent]:
    n = draw(st.integers(1, 24))
    out = []
    for k in range(n):
        inst = draw(st.sampled_from(["a" * 32, "b" * 32]))
        # Equal times on purpose: the order key's instance and seq break the tie.
        dt = draw(st.sampled_from([0.0, 1.0, 2.5]))
        out.append(event(draw(st.one_of(metric(), batch)), inst, k + 1, dt,
                         draw(st.sampled_from(PODS))))
    return out


LIMITS = st.sampled_from([Limits(), Limits(metrics=2), Limits(metrics=0)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metric_events(), st.randoms(use_true_random=False), LIMITS)
def test_the_fold_of_metrics_is_order_insensitive_idempotent_and_the_references(
        events: list[ParsedEvent], rnd: random.Random, lim: Limits) -> None:
    ref = new_state(TASK, lim)
    for ev in events:
        ref = reference_fold.fold(ref, ev)
    state = fold_all(TASK, events, lim)
    assert to_status(state) == to_status(ref) and state == ref
    shuffled = list(events)
    rnd.shuffle(shuffled)
    again = fold_all(TASK, shuffled + shuffled[: len(shuffled) // 2], lim)
    a, b = to_status(state), to_status(again)
    a.get("counters", {}).pop("duplicates", None)
    b.get("counters", {}).pop("duplicates", None)
    assert a == b  # any order, any re-deliveries: the same status but for the duplicates
    assert decode_status(TASK, to_status(state), lim) == state


@settings(max_examples=100, deadline=None)
@given(metric_events())
def test_each_name_holds_the_value_of_its_latest_report(events: list[ParsedEvent]) -> None:
    metrics = expanded(to_status(fold_all(TASK, events))).get("metrics", {})
    for name, entry in metrics.items():
        mine = [(ev, m) for ev in events for m in rows(ev) if m.name == name]
        _, last = max(mine, key=lambda em: (em[0].event_time, em[0].instance, em[0].seq))
        assert entry["value"] == last.value and entry.get("step") == last.step
        assert entry["events"] == len(mine)  # a row of a Metrics note counts as one event
        # The extremes of every value, point and what the senders saw, exact.
        seen = [x for _, m in mine for x in (m.value, m.min, m.max, *(v for _, v in m.points))
                if x is not None]
        assert entry["min"] == min(seen) and entry["max"] == max(seen)
    assert set(metrics) == {m.name for ev in events for m in rows(ev)}


def test_the_cap_keeps_the_smallest_names_and_counts_the_rest() -> None:
    lim = Limits(metrics=2)
    evs = [event(Metric(name=n, value=float(i)), "a" * 32, i + 1, 0.0)
           for i, n in enumerate(["zeta", "alpha", "mid", "alpha", "beta"])]
    for order in (evs, evs[::-1]):
        st_ = expanded(to_status(fold_all(TASK, order, lim)))
        assert sorted(st_["metrics"]) == ["alpha", "beta"]
        assert st_["counters"]["metricsCapped"] == 2  # zeta and mid, one event each
        assert st_["metrics"]["alpha"]["events"] == 2


@pytest.mark.parametrize(("value", "wire"), [(math.nan, "NaN"), (math.inf, "Infinity"),
                                             (-math.inf, "-Infinity")])
def test_non_finite_values_are_kept_and_spelt_as_strings_on_the_wire(value: float,
                                                                    wire: str) -> None:
    """A diverging loss is a health fact: the model keeps it, the note
    spells it as protobuf's JSON mapping does (JSON has no NaN), and it reads back."""
    m = Metric(name="loss", value=value, step=3)
    note = encode_note(m)
    assert orjson.loads(note)["value"] == wire
    back = decode_note(note)
    assert isinstance(back, Metric) and back == m  # (NaN is one object: states compare)
    rows = Metrics(metrics=[["loss", value, None], ["lr", 0.1, None]])
    assert orjson.loads(encode_note(rows))["metrics"][0][1] == wire
    assert decode_note(encode_note(rows)) == rows


@pytest.mark.parametrize("body", [b'"value":null', b'"value":"nan"', b'"value":"0.5"',
                                  b'"value":1e999', b'"value":true'])
def test_a_note_without_a_number_is_rejected_not_folded(body: bytes) -> None:
    note = b'{"v":1,"t":"Metric","name":"loss",' + body + b"}"
    assert isinstance(decode_note(note), Rejection)


def test_a_non_finite_metric_folds_into_its_entry_and_round_trips() -> None:
    evs = [event(Metric(name="loss", value=0.5, step=1), "a" * 32, 1, 0),
           event(Metric(name="loss", value=math.nan, step=2), "a" * 32, 2, 1),
           event(Metrics(metrics=[["grad", -math.inf, 2], ["lr", 0.1, 2]]), "a" * 32, 3, 1)]
    for order in (evs, evs[::-1]):
        s = fold_all(TASK, order)
        written = to_status(s)
        assert written["metrics"]["loss"].startswith("nonFinite=NaN; step=2; at=")
        st_ = expanded(written)
        # (the curve is the finite values': the NaN is no point and no extreme of it)
        assert st_["metrics"]["loss"] == {
            "nonFinite": "NaN", "step": 2, "at": st_["metrics"]["loss"]["at"], "events": 2,
            "min": 0.5, "max": 0.5, "history": {"shift": 0, "steps": [1], "values": [0.5]}}
        assert st_["metrics"]["grad"]["nonFinite"] == "-Infinity"
        assert {"min", "max", "history"}.isdisjoint(st_["metrics"]["grad"])
        assert "value" not in st_["metrics"]["grad"] and st_["metrics"]["lr"]["value"] == 0.1
        assert decode_status(TASK, orjson.loads(orjson.dumps(written))) == s
        assert s == reduce(reference_fold.fold, order, new_state(TASK))
    # A finite value reported later replaces it (last writer wins, as for any value).
    healed = fold_all(TASK, [*evs, event(Metric(name="loss", value=0.4), "a" * 32, 4, 2)])
    assert expanded(to_status(healed))["metrics"]["loss"]["value"] == 0.4


def test_a_hostile_metric_entry_is_kept_verbatim_and_costs_nothing_else() -> None:
    good = fold(new_state(TASK), event(Metric(name="loss", value=0.5, step=3), "a" * 32, 1, 0))
    st_ = to_status(good)
    record = st_["metrics"]["loss"]
    fields = expanded(st_)["metrics"]["loss"]
    assert fields["value"] == 0.5 and fields["step"] == 3
    # As layout 2 wrote an entry (an object) and as layout 3 does (a record).
    bad_entries: list[Any] = [{**fields, "value": bad} for bad in ("0.5", None, True, [1])]
    bad_entries.append({**fields, "step": -1})
    bad_entries += [record.replace("value=0.5", f"value={bad}")
                    for bad in ("nan", "0.5x", "1e999", "", "0x1", "1_0")]
    bad_entries += [record.replace("step=3", "step=-1"), record + "; value=0.6",
                    record + "; color=red", record.replace("; ", ";"), record + "; ", "", 7,
                    "x" * 10_000, record.replace("events=1", "events=1.0")]
    for bad in bad_entries:
        hostile = {**st_, "metrics": {"loss": bad}}
        read = read_status(TASK, hostile)
        assert "metrics" not in read.state.named and not read.unread.partial
        assert read.state.phase == good.phase and read.state.applied == good.applied
        assert read.unread.entries == {"metrics": {"loss": bad}}
        assert read.unread.merge_into(to_status(read.state), read.state)["metrics"] == {
            "loss": bad}


def test_metric_names_follow_the_name_rules() -> None:
    with pytest.raises(ValidationError, match="invisible"):
        Metric(name="lo\u200bss", value=1.0)
    with pytest.raises(ValidationError):
        Metric(name="   ", value=1.0)
    # Kept whole or refused like every name: never cut into another.
    with pytest.raises(ValidationError, match="never cut"):
        Metric(name="x" * 500, value=1.0)
    assert Metric(name="x" * 64, value=1.0).name == "x" * 64


# ---- the emitter ----------------------------------------------------------------------------


def sent_metrics(rec: Recorder) -> list[Metric]:
    """The metrics the emitter sent, a note's rows one by one, in seq order."""
    out: list[Metric] = []
    for ev in sorted(rec.parsed(), key=lambda e: e.seq):
        out.extend(f for f in unpack(ev.payload) if isinstance(f, Metric))
    return out


def opened(**cfg: Any) -> tuple[Emitter, Recorder]:
    """An emitter whose window is open (its first window, sent at once, is behind it and
    forgotten by the recorder), so what follows waits for the window or a flush."""
    em, rec = make(span_window_s=30.0, **cfg)
    em.progress(0.0, "warm")
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window")
    rec.bodies.clear()
    return em, rec


def test_a_loop_logging_every_step_sends_the_latest_value_per_name_per_window() -> None:
    em, rec = opened()
    for step in range(1000):
        em.metric("loss", 1.0 / (step + 1), step=step)
        em.metric("lr", 1e-4, step=step)
    assert em.flush(5)
    assert len(rec.bodies) == 1  # one note for both names, not 2,000 events
    latest = {p.name: p for p in sent_metrics(rec)}
    assert len(latest) == 2
    assert latest["loss"].value == 1.0 / 1000 and latest["loss"].step == 999
    assert latest["lr"].step == 999
    s = em.stats()
    assert s["metrics_coalesced"] == 1998 and s["delivered"] == 2 and s["invalid"] == 0


def test_non_finite_metrics_are_sent_and_no_number_is_counted() -> None:
    em, rec = opened()
    em.metric("loss", 0.25, step=1)
    em.metric("loss", math.nan, step=2)  # the latest wins: a diverging run says so
    em.metric("grad_norm", math.inf)
    em.metric("lr", "oops")  # type: ignore[arg-type]
    assert not em.flush(5)  # one refused: flush does not report success
    got = {m.name: (m.value, m.step) for m in sent_metrics(rec)}
    assert got["loss"][1] == 2 and math.isnan(got["loss"][0])
    assert got["grad_norm"] == (math.inf, None) and "lr" not in got
    assert em.stats()["invalid"] == 1


def test_pending_metrics_go_out_before_the_final() -> None:
    em, rec = opened()
    em.metric("eval_accuracy", 0.91)
    em.progress(1.0, "done", final=True)
    assert em.flush(5)
    kinds = [type(ev.payload).__name__ for ev in sorted(rec.parsed(), key=lambda e: e.seq)]
    assert kinds == ["Window", "Progress"]
    assert [m.name for m in sent_metrics(rec)] == ["eval_accuracy"]


def test_an_invalid_step_is_counted_once_sent_never() -> None:
    em, rec = opened()
    em.metric("loss", 0.5, step=-3)
    assert not em.flush(5)  # nothing delivered
    assert rec.bodies == [] and em.stats()["invalid"] == 1


def test_names_waiting_for_the_window_are_bounded_and_the_rest_counted() -> None:
    em, rec = opened(max_span_names=2)
    for name in ("a", "b", "c", "a"):
        em.metric(name, 1.0)
    assert not em.flush(5)  # "c" was dropped
    assert sorted(m.name for m in sent_metrics(rec)) == ["a", "b"]
    s = em.stats()
    assert (s["dropped_metric_names"], s["metrics_coalesced"], s["delivered"]) == (1, 1, 2)


def test_many_names_share_few_notes_each_within_the_note_limit() -> None:
    em, rec = opened()
    names = [f"eval/accuracy_of_class_{i:03d}_" + "é" * 20 for i in range(100)]
    for i, name in enumerate(names):
        em.metric(name, i / 7, step=10**12 + i)
    assert em.flush(5)
    assert sorted(m.name for m in sent_metrics(rec)) == sorted(names)
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)
    assert len(rec.bodies) <= 12  # ~10 rows of ~90 bytes per 1 kB note


def test_one_bad_row_costs_only_itself() -> None:
    em, rec = opened()
    em.metric("loss", 0.5, step=3)
    em.metric("lr", 1e-4, step=-1)  # refused by the model when the note is built
    em.metric("acc", 0.9)
    assert not em.flush(5)  # "lr" was refused
    assert {(m.name, m.value, m.step) for m in sent_metrics(rec)} == {
        ("loss", 0.5, 3), ("acc", 0.9, None)}
    assert em.stats()["invalid"] == 1


def test_a_metrics_note_round_trips_and_refuses_duplicate_or_bad_rows() -> None:
    m = Metrics(metrics=[["loss", 0.5, 3], ["lr", 1e-4, None]])
    assert Metrics.model_validate(m.model_dump()) == m
    assert m.model_dump() == {"metrics": [["loss", 0.5, 3], ["lr", 1e-4, None]]}
    for rows in ([["a", 1.0, None], ["a", 2.0, None]], [["a", "nan", None]],
                 [["a", 1.0]], [], [["a\u200b", 1.0, None]]):
        with pytest.raises(ValidationError):
            Metrics(metrics=rows)


def test_the_budget_gives_up_histories_before_metric_names() -> None:
    """Over budget, the metrics keep their names, values and extremes; the
    histories go first (budgetDropped.metricHistory), from the largest names on."""
    from tidings.schemas.status.encoder import BUDGET_DROP_ORDER

    assert BUDGET_DROP_ORDER.index("metricHistory") < BUDGET_DROP_ORDER.index("metrics")
    evs = []
    for k in range(64):
        name = f"{k:02d}" + "m" * 62
        points = [(s, 1.0 / (s + 1) + k * 1e-7) for s in range(0, 3100, 100)]
        evs.append(event(Metric(name=name, value=0.123456789, step=3100, min=1e-9, max=9.0,
                                points=points), "a" * 32, k + 1, 0.0))
    state = fold_all(TASK, evs)
    full = expanded(to_status(state))
    assert all(len(e["history"]["steps"]) >= 16 for e in full["metrics"].values())
    written = expanded(to_status(state, budget=64 * 1024 - 30_000))
    dropped = written["budgetDropped"]
    assert list(dropped) == ["pods", "metricHistory"], dropped  # (the sender pods go first)
    kept = written["metrics"]
    assert sorted(kept) == sorted(full["metrics"])  # every name, value and extremes stay
    assert all({"value", "min", "max"} <= set(e) for e in kept.values())
    with_history = [n for n in sorted(kept) if "history" in kept[n]]
    assert with_history == sorted(kept)[: len(with_history)]  # the largest names went first
    assert len(kept) - len(with_history) == dropped["metricHistory"]
