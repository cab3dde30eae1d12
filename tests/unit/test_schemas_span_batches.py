"""SpanSummaries: many span names in one note. Rows round-trip exactly, stay consistent after
rounding, are refused by reason when hostile, and packing never changes the folded state."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import expanded
from tidings._compat import UTC
from tidings.schemas import (
    Limits,
    ParsedEvent,
    Payload,
    PodRef,
    SpanSummaries,
    SpanSummary,
    TaskRef,
    build_event,
    fold_all,
    parse_event,
    span_summaries,
)
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.constants import NOTE_LIMIT
from tidings.schemas.wire.note import decode_obj, encode_note_bytes
from tidings.schemas.wire.payloads import SPAN_ROWS_MAX, span_row
from tidings.schemas.wire.rejection import Rejection, RejectReason

TASK = TaskRef("team-a", "train-42")
POD = PodRef("worker-0", "uid-0")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
BASE = 1_764_471_600_000_000  # T0 in epoch microseconds

# Real spans: (start, duration, error) as a workload records them.
span_lists = st.lists(st.tuples(st.floats(1.6e9, 1.8e9), st.floats(0, 1e4), st.booleans()),
                      min_size=1, max_size=40)


def _aggregate(items: list[tuple[float, float, bool]]) -> list[Any]:
    """The emitter's aggregate list for these spans (emitter/aggregate.py's arithmetic)."""
    total = 0.0
    for _, d, _ in items:
        total += d
    return [len(items), total, min(d for _, d, _ in items), max(d for _, d, _ in items),
            min(s for s, _, _ in items), max(s + d for s, d, _ in items),
            sum(1 for *_, e in items if e)]


@given(st.lists(span_lists, min_size=2, max_size=6))
def test_rows_of_real_spans_stay_consistent_after_rounding(groups: list[Any]) -> None:
    aggs = [_aggregate(g) for g in groups]
    base = min(int(a[4] * 1e6) for a in aggs) - 1
    rows = [span_row(f"n{i}", *a, base) for i, a in enumerate(aggs)]
    res = decode_obj({"v": 1, "t": "SpanSummaries", "base_us": base, "spans": rows})
    assert not isinstance(res, Rejection), res
    got = res[0]
    assert isinstance(got, SpanSummaries)
    for s, a in zip(got.spans, aggs, strict=True):
        assert (s.count, s.errors) == (a[0], a[6])
        assert abs(s.total_s - a[1]) <= 1e-9 * max(1.0, a[1])  # nanoseconds, nearest
        assert s.min_s <= a[2] + 1e-9 and s.max_s >= a[3] - 1e-9  # outward
        assert s.first_start <= a[4] + 1e-6 and s.last_end >= a[5] - 1e-6


@given(st.lists(span_lists, min_size=2, max_size=10))
def test_the_wire_form_round_trips_byte_for_byte(groups: list[Any]) -> None:
    aggs = [_aggregate(g) for g in groups]
    base = min(int(a[4] * 1e6) for a in aggs) - 1
    p = SpanSummaries(base_us=base,
                      spans=[span_row(f"name-{i}", *a, base) for i, a in enumerate(aggs)])
    note = encode_note_bytes(p, instance="inst-1", seq=7)
    back = decode_obj(orjson.loads(note))
    assert not isinstance(back, Rejection), back
    assert back[0] == p and encode_note_bytes(back[0], instance="inst-1", seq=7) == note


def test_a_dozen_names_fit_one_note() -> None:
    base = BASE
    rows = [span_row(f"stage.{i:03d}", 390, 0.39, 0.000999, 0.0011, base / 1e6,
                     base / 1e6 + 1.0, 1, base) for i in range(14)]
    note = encode_note_bytes(SpanSummaries(base_us=base, spans=rows), instance="a" * 32,
                             seq=2**40)
    assert len(note) <= NOTE_LIMIT


def _note(rows: Any, base: Any = BASE) -> dict[str, Any]:
    return {"v": 1, "t": "SpanSummaries", "base_us": base, "spans": rows}


GOOD = ["epoch", 2, 3_000_000_000, 1_000_000_000, 2_000_000_000, 0, 5_000_000, 0]


@pytest.mark.parametrize(("rows", "base", "reason"), [
    ([GOOD[:7]], BASE, RejectReason.INVALID_PAYLOAD),  # wrong arity
    ([[*GOOD[:5], -1, 5_000_000, 0]], BASE, RejectReason.INVALID_PAYLOAD),  # before base
    ([[*GOOD[:5], 0, 5.5e6, 0]], BASE, RejectReason.INVALID_PAYLOAD),  # a float time
    ([[*GOOD[:7], 3]], BASE, RejectReason.INCONSISTENT_SPAN),  # errors > count
    ([[GOOD[0], 2, 1, *GOOD[3:]]], BASE, RejectReason.INCONSISTENT_SPAN),  # total < count*min
    ([[*GOOD[:5], 0, 1_000, 0]], BASE, RejectReason.INCONSISTENT_SPAN),  # max beyond extent
    ([["x\u200by", *GOOD[1:]]], BASE, None),  # an invisible character in a name
    ([[7, *GOOD[1:]]], BASE, None),  # a name that is not text
    ([GOOD] * (SPAN_ROWS_MAX + 1), BASE, None),  # too many rows
    ([], BASE, None),  # no rows
    ("epoch", BASE, None),  # not a list
    ([GOOD], -5, None),  # a negative base
    ([[*GOOD[:6], 10**17, 0]], BASE, RejectReason.INVALID_PAYLOAD),  # past the epoch bound
])
def test_hostile_rows_refuse_the_note_with_a_reason(rows: Any, base: Any,
                                                    reason: RejectReason | None) -> None:
    got = decode_obj(_note(rows, base))
    assert isinstance(got, Rejection), got
    if reason is not None:
        assert got.reason is reason, got
    assert got.message.startswith("SpanSummaries:")


def _event(p: Payload, seq: int, instance: str = "inst-1") -> ParsedEvent:
    raw = build_event(task=TASK, pod=POD, payload=p, instance=instance, seq=seq,
                      time=T0 + timedelta(seconds=seq))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


rows_st = st.lists(
    st.tuples(st.sampled_from("abcdef"), st.integers(1, 10**6), st.integers(0, 10**4),
              st.integers(0, 10**6), st.integers(0, 10**6)),
    min_size=1, max_size=24)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(rows_st, st.randoms(use_true_random=False),
       st.sampled_from([Limits(spans=3), Limits()]))
def test_packing_names_into_notes_never_changes_the_folded_state(
        raw: list[tuple[str, int, int, int, int]], rnd: random.Random, limits: Limits) -> None:
    rows = []
    for name, count, d_ns, start, length in raw:
        # A consistent row: count spans of d_ns each, within [start, start + extent].
        extent = max(length, -(-d_ns // 1000))
        rows.append([name, count, count * d_ns, d_ns, d_ns, start, start + extent, count // 3])
    whole = SpanSummaries(base_us=BASE, spans=rows)
    singles = list(whole.spans)  # the same summaries, one note each
    # A random packing of the same summaries: singles and notes of up to five rows.
    packed: list[Payload] = []
    order = list(range(len(rows)))
    rnd.shuffle(order)
    i = 0
    while i < len(order):
        k = rnd.randint(1, 5)
        part = [rows[j] for j in order[i:i + k]]
        packed.append(SpanSummaries(base_us=BASE, spans=part) if k > 1 or rnd.random() < 0.5
                      else whole.spans[order[i]])
        i += k
    one_by_one = fold_all(TASK, [_event(p, s) for s, p in enumerate(singles)], limits)
    evs = [_event(p, s) for s, p in enumerate(packed)]
    rnd.shuffle(evs)
    together = fold_all(TASK, evs, limits)
    a, b = to_status(one_by_one), to_status(together)
    assert a.get("spans") == b.get("spans")
    assert a.get("counters", {}).get("spansCapped") == b.get("counters", {}).get("spansCapped")
    assert sum(len(span_summaries(p)) for p in packed) == len(rows)
    # Every span is counted: kept in the status, or its summary counted as capped.
    kept = sum(s["events"] for s in expanded(b).get("spans", {}).values())
    assert kept + b.get("counters", {}).get("spansCapped", 0) == len(rows)


def test_an_unknown_newer_watcher_view_keeps_counting() -> None:
    """A SpanSummaries note of a newer schema version is kept as unknown, never a crash."""
    got = decode_obj({"v": 9, "t": "SpanSummaries", "base_us": BASE, "spans": [GOOD]})
    assert not isinstance(got, Rejection) and got[0].TYPE == "Unknown"


def test_span_summaries_of_every_payload_kind() -> None:
    one = SpanSummary(name="a", count=1, total_s=1.0, min_s=1.0, max_s=1.0, first_start=1.0,
                      last_end=2.0)
    many = SpanSummaries(base_us=BASE, spans=[GOOD, ["b", *GOOD[1:]]])
    assert span_summaries(one) == (one,)
    assert [s.name for s in span_summaries(many)] == ["epoch", "b"]
    assert span_summaries(many.spans[0].model_copy()) == (many.spans[0],)
