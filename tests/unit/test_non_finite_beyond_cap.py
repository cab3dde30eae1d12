"""NonFiniteMetrics never claims what it did not see: with the metrics cap
full, a name beyond it sent as NaN was capped away and the condition said AllFinite. A name
beyond the cap now keeps its latest value's finiteness (``state.beyond``, ``metricsBeyond``
in the status) for the ``Limits.beyond`` smallest such names; reports of names beyond those
are counted (``metricsUnjudged``) and make the condition Unknown unless it holds."""

from __future__ import annotations

import math
import random
from datetime import timedelta
from functools import reduce
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit import reference_fold as ref
from tests.unit.test_kinds import POD, T0, TASK, event_of
from tidings.schemas import ParsedEvent, build_event, parse_event
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.engine.state import Limits, TaskState, new_state
from tidings.schemas.status.decoder import decode_status, read_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.status.health import judge
from tidings.schemas.wire.payloads import Metric, Metrics


def at(payload: Any, seq: int, secs: int) -> ParsedEvent:
    raw = build_event(task=TASK, pod=POD, payload=payload, instance="i" * 32, seq=seq,
                      time=T0 + timedelta(seconds=secs))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent)
    return ev


def conds(state: TaskState) -> dict[str, Any]:
    status = to_status(state, health=judge(state, None))
    return {c["type"]: c for c in status["conditions"]} | {"health": status["health"]}


def held(n: int) -> list[Any]:
    """``n`` metric names ``m-00`` ... reported finite (the cap is 64)."""
    return [event_of(Metric(name=f"m-{i:02d}", value=float(i)), seq=i + 1) for i in range(n)]


def test_a_nan_beyond_the_cap_reaches_the_condition_and_clears() -> None:
    """The issue's report: 64 names held, a 65th sent as NaN: AllFinite before."""
    nan = event_of(Metric(name="zz-65th", value=math.nan, step=3), seq=100)
    state = fold_all(TASK, [*held(64), nan])
    assert "zz-65th" not in state.named["metrics"] and state.counters["metrics_capped"] == 1
    c = conds(state)
    assert c["NonFiniteMetrics"]["status"] == "True"
    assert c["NonFiniteMetrics"]["message"] == "zz-65th=NaN"
    assert c["health"]["nonFinite"] == ["zz-65th"]
    healed = event_of(Metric(name="zz-65th", value=0.5), seq=101)
    for order in ([*held(64), nan, healed], [healed, nan, *held(64)]):
        s = fold_all(TASK, order)
        assert conds(s)["NonFiniteMetrics"]["status"] == "False"
        assert s.beyond["metrics"]["zz-65th"].events == 2


def test_a_kept_name_evicted_by_a_smaller_one_keeps_its_nan() -> None:
    late = [event_of(Metric(name="a-small", value=1.0), seq=200)]
    nan = event_of(Metric(name="m-63", value=math.inf), seq=100)
    for order in ([*held(64), nan, *late], [*late, nan, *held(64)]):
        s = fold_all(TASK, order)
        assert "m-63" not in s.named["metrics"] and s.beyond["metrics"]["m-63"].non_finite \
            == "Infinity"
        assert conds(s)["NonFiniteMetrics"]["message"] == "m-63=Infinity"


def test_names_beyond_what_is_kept_are_counted_and_the_condition_is_unknown() -> None:
    lim = Limits(metrics=2, beyond=2)
    evs = [event_of(Metric(name=n, value=1.0), seq=i + 1)
           for i, n in enumerate(["a", "b", "c", "d", "e", "f"])]
    s = fold_all(TASK, evs, lim)
    assert sorted(s.named["metrics"]) == ["a", "b"] and sorted(s.beyond["metrics"]) == ["c", "d"]
    assert s.counters["metrics_unjudged"] == 2  # e and f
    c = conds(s)["NonFiniteMetrics"]
    assert c["status"] == "Unknown" and c["reason"] == "NotJudged"
    assert c["message"] == ("every judged metric's latest value is finite; 2 reports of "
                            "metric names beyond the 4 judged were not judged")
    assert conds(s)["health"]["summary"] == "Unknown"
    bad = fold_all(TASK, [*evs, event_of(Metric(name="d", value=math.nan), seq=50)], lim)
    assert conds(bad)["NonFiniteMetrics"]["status"] == "True"
    assert conds(bad)["NonFiniteMetrics"]["message"].startswith("d=NaN; 2 reports")


def test_the_status_keeps_them_whatever_its_budget_and_reads_them_back() -> None:
    state = fold_all(TASK, [*held(64), event_of(Metric(name="zz", value=math.nan), seq=100)])
    status = orjson.loads(orjson.dumps(to_status(state, budget=STATUS_BUDGET)))
    assert status["metricsBeyond"]["zz"].endswith(" 1 NaN")
    assert decode_status(TASK, status) == state
    tiny = to_status(state, budget=2000)  # metrics dropped for the budget: these stay
    assert tiny["budgetDropped"]["metrics"] >= 32 and "zz" in tiny["metricsBeyond"]
    status["metricsBeyond"]["yy"] = "not an entry"
    read = read_status(TASK, status)
    assert read.unread.entries == {"metricsBeyond": {"yy": "not an entry"}}
    assert not read.unread.partial and read.state.beyond == state.beyond


names = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])
values = st.sampled_from([1.0, -2.5, math.nan, math.inf, -math.inf])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, values, st.integers(0, 5), st.booleans()), min_size=1,
                max_size=30), st.randoms(use_true_random=False))
def test_any_order_gives_the_reference_and_the_condition_of_the_latest_values(
        rows: list[tuple[str, float, int, bool]], rnd: random.Random) -> None:
    lim = Limits(metrics=2, beyond=2)
    evs = [at(Metrics(metrics=[[n, v, None]]) if batch else Metric(name=n, value=v), i + 1,
              secs) for i, (n, v, secs, batch) in enumerate(rows)]
    state = fold_all(TASK, evs, lim)
    assert state == reduce(ref.fold, evs, new_state(TASK, lim))
    shuffled = evs[:]
    rnd.shuffle(shuffled)
    assert fold_all(TASK, shuffled, lim) == state
    assert decode_status(TASK, orjson.loads(orjson.dumps(to_status(state))), lim) == state
    # The oracle: each name's latest report (by order key); the 4 smallest names are judged.
    latest: dict[str, tuple[Any, float]] = {}
    for ev, (n, v, _, _) in zip(evs, rows, strict=True):
        key = (ev.event_time, ev.instance, ev.seq)
        if n not in latest or key > latest[n][0]:
            latest[n] = (key, v)
    judged = sorted(latest)[:4]
    bad = [n for n in judged if not math.isfinite(latest[n][1])]
    c = conds(state)
    assert c["health"].get("nonFinite", []) == bad
    expected = "True" if bad else "Unknown" if len(latest) > 4 else "False"
    assert c["NonFiniteMetrics"]["status"] == expected
