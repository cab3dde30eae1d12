"""The span aggregator: the emitter's per-window span budget (pure; the token bucket is the
pacing kit's, tested in test_flowcontrol.py)."""

from __future__ import annotations

import threading

from tidings.emitter.aggregate import SpanAggregator, merge


def test_aggregator_sums_one_window_per_name() -> None:
    agg = SpanAggregator()
    agg.record("epoch", 10.0, 2.0)
    agg.record("epoch", 11.0, 1.0, error=True)
    agg.record("epoch", 9.0, 4.0)
    agg.record("load", 5.0, -1.0)  # a clock step: clamped to zero, not negative
    window = agg.drain()
    assert window["epoch"] == [3, 7.0, 1.0, 4.0, 9.0, 13.0, 1]
    assert window["load"] == [1, 0.0, 0.0, 0.0, 5.0, 5.0, 0]
    assert agg.drain() == {}
    assert agg.recorded == 4


def test_aggregator_bounds_the_names_per_window_and_counts_the_rest() -> None:
    agg = SpanAggregator(max_names=2)
    assert agg.record("a", 0, 1) and agg.record("b", 0, 1) and agg.record("a", 0, 1)
    assert not agg.record("c", 0, 1)
    assert agg.dropped == 1
    agg.drain()
    assert agg.record("c", 0, 1)


def test_aggregator_loses_nothing_under_concurrent_writers() -> None:
    agg = SpanAggregator()
    drained: dict[str, list] = {}

    def work(i: int) -> None:
        for k in range(20_000):
            agg.record(f"s{i % 3}", float(k), 0.001)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        merge(drained, agg.drain())  # the sender drains while workers write
    merge(drained, agg.drain())
    assert sum(a[0] for a in drained.values()) == 120_000
    assert drained["s0"][4] == 0.0 and drained["s0"][5] == 19_999.001


def test_merge_folds_windows() -> None:
    into = {"x": [2, 3.0, 1.0, 2.0, 10.0, 13.0, 0]}
    merge(into, {"x": [1, 0.5, 0.5, 0.5, 5.0, 5.5, 1], "y": [1, 1.0, 1.0, 1.0, 1.0, 2.0, 0]})
    assert into["x"] == [3, 3.5, 0.5, 2.0, 5.0, 13.0, 1]
    assert into["y"] == [1, 1.0, 1.0, 1.0, 1.0, 2.0, 0]
