"""The pacing kit (tidings.kube.flowcontrol): the one token bucket and the one backoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import FakeClock
from tidings.kube.flowcontrol import Backoff, TokenBucket


def test_take_reserves_into_debt_and_says_how_long_it_lasts() -> None:
    clock = FakeClock(100.0)
    b = TokenBucket(rate=10, burst=3, clock=clock)
    assert [b.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [b.take() for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert b.wait_time(0) == pytest.approx(0.3), "until the debt is paid"
    clock.now += 10  # refills up to the burst, not beyond
    assert b.tokens == 3.0


def test_take_of_a_cost_and_its_refund() -> None:
    clock = FakeClock(100.0)
    b = TokenBucket(rate=1.0, burst=1.0, clock=clock)
    assert b.take(5.0) == pytest.approx(4.0)  # a cost above the burst: debt, not refusal
    assert b.take(-2.0) == pytest.approx(2.0)  # the estimate was 2 too high
    assert b.take(-100.0) == 0.0
    assert b.tokens == 1.0, "a refund never fills beyond the burst"
    assert not b.try_take(1.5)
    assert b.try_take(1.0)


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 3)), max_size=60))
def test_the_bucket_never_lets_more_through_than_burst_plus_rate(steps: list[tuple[float, float]]
                                                                 ) -> None:
    clock = FakeClock(100.0)
    b = TokenBucket(rate=2.0, burst=4.0, clock=clock)
    start, spent = clock.now, 0.0
    for dt, cost in steps:
        clock.now += dt
        if b.try_take(cost):
            spent += cost
        assert b.tokens <= 4.0
    assert spent <= 4.0 + 2.0 * (clock.now - start) + 1e-9


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(base=0.4, cap=5.0, jitter=0.0)
    assert [b.next() for _ in range(6)] == [0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    b.reset()
    assert b.next() == 0.4
    assert b.delay(0) == 0.0
    assert Backoff(base=0.5, cap=10.0, jitter=0.0).delay(3) == 2.0  # the rule, count kept outside


def test_backoff_jitter_stretches_but_never_past_the_cap() -> None:
    b = Backoff(base=0.8, cap=30.0, jitter=0.5, rng=lambda: 1.0)
    assert b.next() == pytest.approx(1.2)
    assert max(b.next() for _ in range(100)) == 30.0


def test_bucket_allows_a_burst_then_the_rate() -> None:
    clock = FakeClock(100.0)
    bucket = TokenBucket(rate=2.0, burst=3.0, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_time() == 0.5
    clock.now += 0.25
    assert not bucket.try_take()
    clock.now += 0.25
    assert bucket.try_take()
    assert not bucket.try_take()


def test_bucket_never_holds_more_than_its_burst() -> None:
    clock = FakeClock(100.0)
    bucket = TokenBucket(rate=10.0, burst=2.0, clock=clock)
    clock.now += 3600
    assert bucket.tokens == 2.0
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]


def test_bucket_survives_a_clock_going_backwards_and_silly_settings() -> None:
    clock = FakeClock(100.0)
    bucket = TokenBucket(rate=0.0, burst=0.0, clock=clock)  # clamped: 1 token, tiny rate
    assert bucket.try_take()
    clock.now -= 50
    assert not bucket.try_take()
    assert bucket.wait_time() > 0
