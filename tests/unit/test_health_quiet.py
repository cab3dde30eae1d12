"""A quiet period declared on purpose (``tidings.emitter.quiet``, a ``Quiet`` event): a worker
writing a checkpoint or evaluating is not called Stalled until the period it declared, and
its usual allowance after it, are over, and is shown quiet meanwhile; its next report ends
the period; the watcher holds a declaration to its cap (``quiet_max``), so no sender keeps
health quiet for ever. The pure part: the fold keeps it per worker, order-insensitive, and
the status carries it."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.unit.test_schemas_fold import TASK, make_event
from tests.unit.test_schemas_health import at, conds, received, reports, status_of
from tidings.schemas import ParsedEvent, PodRef, Quiet, fold_all
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.health import HealthSettings, evaluate, next_stall
from tidings.schemas.status.roster_text import decode_quiet, encode_quiet

# Stalled after 2 report intervals, and at least 5 s: a worker reporting every second is
# Stalled 5 s after its last report unless it declared a quiet period.
TIGHT = HealthSettings(stall_factor=2, stall_min=5)


def quiet(pod: int, t: float, seconds: float, reason: str = "checkpoint",
          seq: int = 1000) -> ParsedEvent:
    return make_event(Quiet(seconds=seconds, reason=reason), f"inst-{pod}", seq,
                      at(t), pod=PodRef(f"w-{pod}", f"uid-{pod}"))


def test_a_worker_quiet_on_purpose_is_not_stalled_until_its_period_is_over() -> None:
    evs = received(reports(0, list(range(30))) + reports(1, list(range(200)))
                   + [quiet(0, 29.5, 120)], 0)
    s = fold_all(TASK, evs)
    # Its usual limit (5 s after t=29) passed: quiet on purpose, shown as such.
    c = conds(s, at(60), TIGHT)["Stalled"]
    assert c["status"] == "False" and c["reason"] == "QuietOnPurpose", c["message"]
    assert c["message"] == ("no running worker is silent beyond its pace or the quiet period "
                            "it declared; 1 worker quiet on purpose: w-0 (checkpoint) until "
                            "2026-11-30T03:02:29Z")
    health = status_of(s, at(60), TIGHT)["health"]
    assert health["summary"] == "Healthy"
    assert health["quiet"] == ["w-0"] and health["counts"] == {"quiet": 1}
    # Until the period (120 s from when it was received, t=29) and 5 s more are over.
    assert conds(s, at(29 + 120 + 4.9), TIGHT)["Stalled"]["status"] == "False"
    c = conds(s, at(29 + 120 + 5), TIGHT)["Stalled"]
    assert c["status"] == "True" and c["message"].startswith("w-0 silent for 2m"), c["message"]
    assert "quiet" not in status_of(s, at(29 + 120 + 5), TIGHT)["health"]
    # The health clock comes when it is shown quiet, then when it stalls.
    assert next_stall(s, at(30), TIGHT) == at(34)
    assert next_stall(s, at(34), TIGHT) == at(29 + 120 + 5)


def test_the_next_report_ends_the_quiet_period() -> None:
    evs = received([*reports(0, list(range(30))), quiet(0, 29.5, 600),
                    *reports(0, [40], [0.5], seq0=30)], 0)
    s = fold_all(TASK, evs)
    # Reported at t=40 after the declaration: its usual limit counts from there.
    assert conds(s, at(44), TIGHT)["Stalled"]["status"] == "False"
    c = conds(s, at(46), TIGHT)["Stalled"]
    assert c["status"] == "True", c["message"]
    assert "quiet" not in c["message"]


def test_a_report_received_in_the_same_second_after_it_ends_it_too() -> None:
    evs = received([quiet(0, 10.2, 600), *reports(0, [0, 5, 10.5], [0.1, 0.2, 0.3])], 0)
    assert conds(fold_all(TASK, evs), at(30), TIGHT)["Stalled"]["status"] == "True"
    evs = received([*reports(0, [0, 5, 10.1], [0.1, 0.2, 0.3]), quiet(0, 10.2, 600)], 0)
    assert conds(fold_all(TASK, evs), at(30), TIGHT)["Stalled"]["status"] == "False"


def test_a_period_longer_than_the_watchers_cap_is_held_to_it() -> None:
    evs = received([*reports(0, list(range(10))), quiet(0, 9.5, 86400)], 0)
    s = fold_all(TASK, evs)
    c = conds(s, at(600), TIGHT)["Stalled"]
    assert c["reason"] == "QuietOnPurpose"
    assert "until 2026-11-30T04:00:09Z (a longer period declared, held to the watcher's " \
           "cap)" in c["message"]
    assert conds(s, at(9 + 3600 + 5), TIGHT)["Stalled"]["status"] == "True"
    shorter = HealthSettings(stall_factor=2, stall_min=5, quiet_max=60)
    assert conds(s, at(9 + 60 + 5), shorter)["Stalled"]["status"] == "True"
    ignored = HealthSettings(stall_factor=2, stall_min=5, quiet_max=0)
    assert conds(s, at(15), ignored)["Stalled"]["status"] == "True"


@pytest.mark.parametrize("seconds", [0.0, -1.0, 86_400.5, 1e300, math.inf, math.nan])
def test_a_period_out_of_range_is_refused(seconds: float) -> None:
    with pytest.raises(ValidationError):
        Quiet(seconds=seconds, reason="x")


def test_a_final_ends_a_quiet_period_whichever_comes_first() -> None:
    fin = reports(0, [0, 1, 2], final=True)
    a = fold_all(TASK, [quiet(0, 1.5, 100), *fin])
    b = fold_all(TASK, [*fin, quiet(0, 1.5, 100)])
    assert a == b and not a.roster.quiet
    assert a.counters["quiet_declared"] == 1


def test_the_quiet_periods_round_trip_through_the_status() -> None:
    evs = received([*reports(0, list(range(10))), quiet(0, 9.5, 120, "eval; final=true ,x"),
                    *reports(1, list(range(10)))], 0)
    s = fold_all(TASK, evs)
    st_ = status_of(s, at(30), TIGHT)
    assert st_["quiet"] == ["w-0 1796007609000 500 120000 eval; final=true ,x"]
    back = decode_status(TASK, st_)
    assert back.roster.quiet == s.roster.quiet
    assert conds(back, at(30), TIGHT) == conds(s, at(30), TIGHT)
    for bad in ("w-0 9000 500 0 x", "w-0 9000 500 86400001 x", "W-0 9000 500 1 x",
                "w-0 9000 500 1", "w-0 x 500 1 y", "w-0 9000 500 1 " + "r" * 65):
        with pytest.raises(ValueError):
            decode_quiet(bad)
    assert encode_quiet(dict([decode_quiet("w-0 -5 -3 1 ")])) == ["w-0 -5 -3 1 "]


def test_a_long_reason_is_cut() -> None:
    s = fold_all(TASK, [quiet(0, 1, 10, "r" * 500)])
    assert len(next(iter(s.roster.quiet.values())).reason) <= 64


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0, 300), st.floats(0.5, 7200)),
                max_size=6),
       st.lists(st.floats(0, 300), min_size=1, max_size=8), st.floats(0, 9000),
       st.randoms(use_true_random=False))
def test_quiet_periods_fold_in_any_order_and_only_put_a_stall_off(
        declared: list[tuple[int, float, float]], times: list[float], now_s: float,
        rnd: random.Random) -> None:
    """Whatever quiet periods three workers declare: the state is the same in any order,
    round-trips through the status, a worker is stalled with them only where it is without
    them (they put a stall off, never cause one), and stalling stays monotone in time."""
    base = [ev for i in range(3) for ev in reports(i, sorted(times))]
    qs = [quiet(pod, t, secs, seq=2000 + n) for n, (pod, t, secs) in enumerate(declared)]
    evs = received(base + qs, 0)
    s = fold_all(TASK, evs)
    rnd.shuffle(evs)
    assert fold_all(TASK, evs) == s
    assert decode_status(TASK, status_of(s, at(now_s), TIGHT)).roster.quiet == s.roster.quiet
    without = fold_all(TASK, received(base, 0))
    now = at(now_s)
    stalled = set(evaluate(s, now, TIGHT).stalled)
    assert stalled <= set(evaluate(without, now, TIGHT).stalled)
    assert stalled <= set(evaluate(s, now + timedelta(hours=3), TIGHT).stalled)
    nxt = next_stall(s, now, TIGHT)
    if nxt is not None:
        assert set(evaluate(s, nxt - timedelta(microseconds=1), TIGHT).stalled) == stalled
    assert set(evaluate(s, now + timedelta(hours=3), TIGHT).stalled) == {"w-0", "w-1", "w-2"}


def test_a_quiet_period_before_any_report_waits_for_one() -> None:
    s = fold_all(TASK, received([quiet(0, 0, 120), *reports(0, [1, 2], [0.1, 0.2])], 0))
    # Declared before its reports: the reports end it.
    assert conds(s, at(10), TIGHT)["Stalled"]["status"] == "True"


def test_the_terminal_and_the_page_flag_a_worker_quiet_on_purpose() -> None:
    from tidings.schemas.view.model import task_view

    evs = received([*reports(0, list(range(30))), quiet(0, 29.5, 120),
                    *reports(1, list(range(60)))], 0)
    s = fold_all(TASK, evs)
    flags = {w.pod: w.flags for w in task_view(s, status_of(s, at(60), TIGHT)).workers}
    assert flags == {"w-0": ("quiet",), "w-1": ()}


@pytest.mark.parametrize("seconds", ["1e9", "0", "-1", "\"600\""])
def test_a_hand_written_note_out_of_range_is_refused_by_the_watcher_s_parse(
        seconds: str) -> None:
    import orjson

    from tidings.schemas import Rejection, RejectReason, build_event, parse_event

    raw = build_event(task=TASK, pod=PodRef("w-0", "uid-0"), payload=Quiet(seconds=5.0),
                      instance="i" * 32, seq=1, time=at(0))
    raw["note"] = raw["note"].replace('"seconds":5.0', f'"seconds":{seconds}')
    got = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(got, Rejection) and got.reason == RejectReason.INVALID_PAYLOAD, got
