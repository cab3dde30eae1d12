"""Time and names, pure: a future eventTime wins for at most the clock skew (2 s by
default, the watcher's one setting), an emitter instance's own seq orders its facts even
after its clock steps back, and a name is kept whole or refused, never merged with another."""

from __future__ import annotations

import dataclasses
import logging
import random
import types
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_emitter_core import make
from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings._compat import UTC
from tidings.schemas import LogLink, ParsedEvent, PodRef, fold_all
from tidings.schemas.engine.state import CLOCK_SKEW
from tidings.schemas.status.encoder import to_status
from tidings.watcher.app import Options
from tidings.watcher.controller import Settings

FAR = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
OTHER = PodRef("worker-b", "uid-b")


def link(url: str, instance: str, seq: int, t: datetime, created: datetime,
         pod: PodRef | None = None) -> ParsedEvent:
    ev = make_event(LogLink(name="wandb", url=url), instance, seq, t,
                    **({"pod": pod} if pod else {}))
    return dataclasses.replace(ev, created=created)


def test_the_skew_is_seconds_and_declared_once() -> None:
    assert timedelta(seconds=2) == CLOCK_SKEW
    assert Settings().clock_skew == Options().clock_skew == CLOCK_SKEW.total_seconds()


def test_a_future_dated_link_loses_to_one_sent_seconds_later_by_another_instance() -> None:
    """The issue's run: a LogLink dated 9999 against one sent 5 s later by another emitter."""
    evil = link("https://evil.example/", "i-evil", 0, FAR, T0)
    honest = link("https://wandb.ai/ok", "i-good", 0, T0 + timedelta(seconds=5.3),
                  T0 + timedelta(seconds=5), pod=OTHER)
    for order in ([evil, honest], [honest, evil]):
        s = fold_all(TASK, order)
        assert s.links == {"wandb": "https://wandb.ai/ok"}
        assert s.counters["time_clamped"] == 1
    # Within the skew the claim still stands (that much clock error is tolerated).
    close = dataclasses.replace(honest, event_time=T0 + timedelta(seconds=1.5),
                                created=T0 + timedelta(seconds=1))
    assert fold_all(TASK, [evil, close]).links == {"wandb": "https://evil.example/"}


def test_an_instance_whose_clock_stepped_back_keeps_its_seq_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The emitter's eventTimes never go back with its seq: after a clock step from 9999 to
    now, the later link still carries 9999, so within the server's bound (the same second,
    or a later one) the later seq wins the register."""
    em, rec = make()
    clock = types.SimpleNamespace(time=lambda: FAR.timestamp())
    monkeypatch.setattr("tidings.emitter.core.time", clock)
    em.log_link("wandb", "https://wandb.ai/stale")
    clock.time = lambda: T0.timestamp()  # NTP steps the clock back
    em.log_link("wandb", "https://wandb.ai/fresh")
    em.progress(0.5)
    assert em.flush(5)
    parsed = sorted(rec.parsed(), key=lambda e: e.seq)
    assert [e.event_time for e in parsed] == [parsed[0].event_time] * 3
    one, two = parsed[0], parsed[1]
    assert (one.seq, two.seq) == (1, 2) and one.event_time == FAR.replace(microsecond=0)
    for gap in (0, 1):  # created in the same second, or the next
        evs = [dataclasses.replace(one, created=T0),
               dataclasses.replace(two, created=T0 + timedelta(seconds=gap))]
        for order in (evs, evs[::-1]):
            assert fold_all(one.task, order).links == {"wandb": "https://wandb.ai/fresh"}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 120), st.integers(0, 6)),
                min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_no_claimed_time_orders_beyond_its_creation_plus_the_skew(
        sends: list[tuple[int, int, int]], rnd: random.Random) -> None:
    """Whatever eventTimes senders claim, the winner is in any order the same, and a link
    created more than the skew after another (and honest about its time) beats it."""
    evs = [link(f"https://x.y/{k}", f"i-{inst}", k, T0 + timedelta(seconds=c + claim),
                T0 + timedelta(seconds=c))
           for k, (inst, claim, c) in enumerate(sends)]
    base = fold_all(TASK, evs)
    shuffled = evs[:]
    rnd.shuffle(shuffled)
    assert to_status(fold_all(TASK, shuffled)) == to_status(base)
    latest = max(c for _, _, c in sends)
    last = link("https://x.y/honest", "i-late", 0,
                T0 + timedelta(seconds=latest + 3), T0 + timedelta(seconds=latest + 3))
    assert fold_all(TASK, [*shuffled, last]).links == {"wandb": "https://x.y/honest"}


# --- names are kept whole or refused ------------------------------------------------------


def test_two_long_names_that_differ_late_are_both_refused_counted_and_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    em, rec = make()
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        em.log_link("x" * 63 + "AAAAA", "https://e.com/1")
        em.log_link("x" * 63 + "BBBBB", "https://e.com/2")
        em.deck_ready("d" * 65, "s3://b/k")
        em.record_span("s" * 65, 1.0, 2.0)
        em.log_link("wandb", "https://e.com/ok")
        assert not em.flush(5)  # four refused: flush does not report success
    assert [e.payload for e in rec.parsed()] == [LogLink(name="wandb", url="https://e.com/ok")]
    assert em.stats()["invalid"] >= 3
    said = [r.getMessage() for r in caplog.records if "never cut" in r.getMessage()]
    assert said and len([m for m in said if "LogLink" in m]) == 1, said
