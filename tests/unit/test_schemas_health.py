"""Health from silence and from the numbers, the pure derivation: Stalled
(a running worker silent far longer than its own pace, judged at a given time), Straggling
(far behind the median pace) and NonFiniteMetrics (a NaN or infinite latest value), as
metav1 conditions and as the status's ``health`` lists. Order-insensitive like the fold."""

from __future__ import annotations

import ast
import math
import random
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings.schemas import Metric, ParsedEvent, PodRef, Progress, TaskState, fold_all
from tidings.schemas.engine.roster import pod_hash
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.status.health import (
    DEFAULT_HEALTH,
    HealthSettings,
    evaluate,
    judge,
    next_stall,
    next_stall_of,
    stalled_since_written,
)
from tidings.schemas.status.roster_text import decode_paces, encode_paces
from tidings.watcher.settings import Settings, health_settings


def reports(pod: int, times: Sequence[float], fractions: Sequence[float] | None = None,
            final: bool = False, seq0: int = 0) -> list[ParsedEvent]:
    """Progress reports of pod ``w-<pod>`` at T0 + each of ``times`` seconds (seqs from
    ``seq0``)."""
    fractions = fractions or [min(1.0, 0.01 * (i + 1)) for i in range(len(times))]
    out = []
    for seq, (t, f) in enumerate(zip(times, fractions, strict=True)):
        last = final and seq == len(times) - 1
        out.append(make_event(Progress(fraction=1.0 if last else f, message=f"step {seq}",
                                       final=last),
                              f"inst-{pod}", seq0 + seq, T0 + timedelta(seconds=t),
                              pod=PodRef(f"w-{pod}", f"uid-{pod}")))
    return out


def status_of(state: TaskState, now: datetime | None,
              s: HealthSettings = DEFAULT_HEALTH) -> dict[str, Any]:
    """The status as the watcher writes it: encoded, with its health judged at ``now``."""
    return to_status(state, health=judge(state, now, s))


def conds(state: TaskState, now: datetime | None,
          s: HealthSettings = DEFAULT_HEALTH) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in status_of(state, now, s)["conditions"]}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_worker_reporting_every_second_is_stalled_within_two_minutes_and_clears() -> None:
    evs = reports(0, list(range(30))) + reports(1, list(range(30)))
    s = fold_all(TASK, evs)  # both last reported at t=29
    assert conds(s, at(29 + 59))["Stalled"]["status"] == "False"
    c = conds(s, at(29 + 61))["Stalled"]
    assert c["status"] == "True" and c["reason"] == "NoProgressReports"
    assert c["message"] == ("w-0 silent for 61s (reports every 1s), "
                            "w-1 silent for 61s (reports every 1s) (2 of 2 running)")
    assert c["lastTransitionTime"] == "2026-11-30T03:01:29Z"  # when the silence passed 60 s
    st_ = status_of(s, at(90))
    assert st_["health"] == {"summary": "Stalled", "evaluatedAt": "2026-11-30T03:01:30Z",
                             "stalled": ["w-0", "w-1"], "counts": {"stalled": 2}}
    # w-1's next report clears it for w-1; w-0 stays stalled, named alone.
    s2 = fold_all(TASK, evs + reports(1, [95], [0.5], seq0=100))
    c2 = conds(s2, at(96))["Stalled"]
    assert c2["status"] == "True" and c2["message"].startswith("w-0 silent for 67s")
    assert "w-1" not in c2["message"]
    s3 = fold_all(TASK, evs + reports(1, [95], [0.5], seq0=100) + reports(0, [96], [0.5], seq0=100))
    assert conds(s3, at(97))["Stalled"]["status"] == "False"


def test_the_limit_follows_the_workers_own_pace() -> None:
    slow = fold_all(TASK, reports(0, [0, 30, 60, 90]))  # every 30 s: 300 s of silence allowed
    assert conds(slow, at(90 + 299))["Stalled"]["status"] == "False"
    assert conds(slow, at(90 + 301))["Stalled"]["status"] == "True"
    assert next_stall(slow, at(100)) == at(390)
    once = fold_all(TASK, reports(0, [0]))  # one report: no pace, 600 s
    assert conds(once, at(599))["Stalled"]["status"] == "False"
    assert "(one report)" in conds(once, at(601))["Stalled"]["message"]
    tight = HealthSettings(stall_factor=2, stall_min=5, stall_unpaced=30)
    assert conds(slow, at(90 + 61), tight)["Stalled"]["status"] == "True"


def test_only_running_workers_of_a_running_task_stall() -> None:
    done = reports(0, [0, 1, 2], final=True)
    s = fold_all(TASK, done + reports(1, [0, 1, 2]))
    assert list(evaluate(s, at(10_000)).stalled) == ["w-1"]  # w-0 is final
    over = fold_all(TASK, done)
    c = conds(over, at(10_000))["Stalled"]
    assert c["status"] == "False" and c["reason"] == "NotRunning"
    assert next_stall(over, at(0)) is None


def test_silence_is_judged_only_when_the_time_is_given() -> None:
    s = fold_all(TASK, reports(0, [0, 1]))
    assert "Stalled" not in conds(s, None)
    assert "evaluatedAt" not in status_of(s, None)["health"]
    assert status_of(s, None)["health"]["summary"] == "Healthy"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.floats(0, 3600), min_size=1, max_size=6), min_size=1,
                max_size=4), st.floats(0, 20_000), st.randoms(use_true_random=False))
def test_stalling_is_monotone_in_time_and_next_stall_is_when_it_changes(
        workers: list[list[float]], now_s: float, rnd: random.Random) -> None:
    evs = [ev for i, ts in enumerate(workers) for ev in reports(i, sorted(ts))]
    s = fold_all(TASK, evs)
    rnd.shuffle(evs)
    assert fold_all(TASK, evs) == s  # (and so is its health: a function of the state)
    now = at(now_s)
    found = set(evaluate(s, now).stalled)
    nxt = next_stall(s, now)
    # Over every worker, the clock's look at the workers a fold moved is the same time.
    assert next_stall_of(s, [f"w-{i}" for i in range(len(workers))], now) == nxt
    later = set(evaluate(s, now + timedelta(days=30)).stalled)
    assert found <= later  # silence only grows until a fact comes
    if nxt is None:
        assert found == later  # nothing changes any more
    else:
        assert nxt > now
        assert set(evaluate(s, nxt - timedelta(microseconds=1)).stalled) == found
        assert set(evaluate(s, nxt).stalled) > found


def test_a_worker_far_behind_the_median_pace_straggles() -> None:
    times = [0, 10, 20, 30]
    evs = (reports(0, times, [0.0, 0.1, 0.2, 0.3]) + reports(1, times, [0.0, 0.1, 0.2, 0.3])
           + reports(2, times, [0.0, 0.11, 0.22, 0.33]) + reports(3, times, [0.0, 0.03, 0.06,
                                                                              0.09]))
    s = fold_all(TASK, evs)
    c = conds(s, at(31))["Straggling"]
    assert c["status"] == "True" and c["reason"] == "BehindMedianPace"
    assert c["message"] == "w-3 at 0.30 of the median pace (1 of 4 with a pace)"
    assert status_of(s, at(31))["health"]["straggling"] == ["w-3"]
    # Fewer workers with a pace than the minimum: no judgment.
    assert conds(fold_all(TASK, evs[4:]), at(31))["Straggling"]["status"] == "True"
    assert conds(fold_all(TASK, evs[8:]), at(31))["Straggling"]["status"] == "False"
    assert conds(s, at(31), HealthSettings(straggle_ratio=0.2))["Straggling"]["status"] == \
        "False"


def test_a_non_finite_metric_is_a_condition_that_names_it_and_clears() -> None:
    ok = make_event(Metric(name="lr", value=0.1), "m", 0, T0)
    bad = [make_event(Metric(name="loss", value=math.nan, step=7), "m", 1, at(5)),
           make_event(Metric(name="grad_norm", value=math.inf), "m", 2, at(6))]
    s = fold_all(TASK, [ok, *bad, *reports(0, [0, 1])])
    c = conds(s, at(7))["NonFiniteMetrics"]
    assert c["status"] == "True" and c["reason"] == "NonFiniteValue"
    assert c["message"] == "grad_norm=Infinity, loss=NaN"
    assert c["lastTransitionTime"] == "2026-11-30T03:00:05Z"
    assert status_of(s, None)["health"] == {"summary": "NonFiniteMetrics",
                                       "nonFinite": ["grad_norm", "loss"],
                                       "counts": {"nonFinite": 2}}
    healed = fold_all(TASK, [ok, *bad, make_event(Metric(name="loss", value=0.3), "m", 3,
                                                  at(8)),
                             make_event(Metric(name="grad_norm", value=1.0), "m", 4, at(8))])
    assert conds(healed, None)["NonFiniteMetrics"]["status"] == "False"


def test_a_restarted_watcher_sees_what_went_silent_while_it_was_down() -> None:
    s = fold_all(TASK, reports(0, list(range(10))))
    written = status_of(s, at(10))  # not stalled then
    assert not stalled_since_written(s, written, DEFAULT_HEALTH, at(30))
    assert stalled_since_written(s, written, DEFAULT_HEALTH, at(200))
    assert not stalled_since_written(s, status_of(s, at(200)), DEFAULT_HEALTH, at(300))


def test_the_watchers_flags_default_to_the_same_thresholds() -> None:
    assert health_settings(Settings()) == DEFAULT_HEALTH


def test_a_status_encoded_without_a_judgment_says_nothing_of_health() -> None:
    """Health sits beside the status: encoding a state (to keep it compact, say) judges
    nothing, and its outcome's conditions are the same as in the judged status."""
    s = fold_all(TASK, reports(0, [0, 1]) + reports(1, [0, 1]) + [
        make_event(Metric(name="loss", value=math.nan), "m", 0, at(2))])
    plain, judged = to_status(s), status_of(s, at(10_000))
    assert "health" not in plain and "health" in judged
    assert [c["type"] for c in plain["conditions"]] == ["Completed", "Failed", "PodsReady"]
    assert judged["conditions"][:3] == plain["conditions"]
    assert {k: v for k, v in judged.items() if k not in ("conditions", "health")} == \
        {k: v for k, v in plain.items() if k != "conditions"}


def loaded(imports: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after ``import <imports>``."""
    code = f"import sys, {imports}\nprint(sorted(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return list(ast.literal_eval(out))


def test_the_status_encoder_does_not_load_health() -> None:
    assert loaded("tidings.schemas.status.encoder, tidings.schemas.engine.folding",
                  ("tidings.schemas.status.health",)) == []


def test_health_and_the_watchers_settings_load_no_pydantic() -> None:
    # `tidings watcher run --help` builds its flags from the registry's thresholds.
    assert loaded("tidings.schemas.status.health, tidings.watcher.settings",
                  ("pydantic", "tidings.schemas.engine.state")) == []


def received(evs: list[ParsedEvent], behind: float) -> list[ParsedEvent]:
    """``evs`` as the API server received them: its ``creationTimestamp`` (whole seconds)
    ``behind`` seconds after what the sender's eventTime says (its clock is behind; negative:
    ahead)."""
    return [replace(ev, created=(ev.event_time + timedelta(seconds=behind)).replace(
        microsecond=0)) for ev in evs]


def test_silence_is_judged_by_when_a_report_was_received_not_the_sender_s_clock() -> None:
    """A worker whose clock is 2 minutes behind but reports every 10 s is not "silent for
    2m": the API server received its latest report 5 s ago. Silent for real, it stalls when
    any worker of its pace does, by the time its reports were received."""
    behind = received(reports(0, list(range(0, 300, 10))), 120)  # received T0+120..T0+410
    on_time = received(reports(1, list(range(120, 420, 10))), 0)
    s = fold_all(TASK, behind + on_time)
    c = conds(s, at(415))["Stalled"]
    assert c["status"] == "False", c["message"]
    assert conds(s, at(509))["Stalled"]["status"] == "False"
    c = conds(s, at(511))["Stalled"]
    assert c["message"] == ("w-0 silent for 101s (reports every 10s), "
                            "w-1 silent for 101s (reports every 10s) (2 of 2 running)")
    assert next_stall(s, at(415)) == at(510)
    # The status a restarted watcher reads back judges the same.
    back = decode_status(TASK, status_of(s, at(415)))
    assert conds(back, at(415))["Stalled"]["status"] == "False"
    assert next_stall(back, at(415)) == at(510)


@settings(max_examples=60, deadline=None)
@given(st.integers(-7200, 7200), st.integers(0, 400))
def test_health_is_the_same_whatever_a_sender_s_clock_says(skew: int, later: int) -> None:
    """Every worker's clock off by ``skew`` seconds: health judges what the API server
    received and when, so it says the same as with clocks that agree."""
    evs = (reports(0, list(range(0, 200, 10))) + reports(1, list(range(0, 100, 5)))
           + reports(2, list(range(0, 200, 20)), [0.01 * i for i in range(10)]))
    true = fold_all(TASK, received(evs, 0))
    skewed = fold_all(TASK, received([replace(ev, event_time=ev.event_time
                                              - timedelta(seconds=skew)) for ev in evs], skew))
    now = at(200 + later)
    assert status_of(skewed, now)["health"] == status_of(true, now)["health"]
    for kind in ("Stalled", "Straggling"):
        assert conds(skewed, now)[kind]["message"] == conds(true, now)[kind]["message"]
    assert next_stall(skewed, now) == next_stall(true, now)


def test_a_pace_keeps_when_it_was_heard_and_an_older_one_reads_as_heard_at_its_latest() -> None:
    old = decode_paces("w-0 3 1000 10 2000 30")  # written before heard times were kept
    assert old[pod_hash("w-0")].heard_ms == 3000
    heard = decode_paces("w-0 3 1000 10 2000 30 -1500,w-1 1 5 0 0 0 120000")
    assert [p.heard_ms for p in heard.values()] == [1500, 120005]
    assert encode_paces(heard) == ["w-0 3 1000 10 2000 30 -1500,w-1 1 5 0 0 0 120000"]
    assert encode_paces(old) == ["w-0 3 1000 10 2000 30"]
    for bad in ("w-0 3 1000 10 2000 30 x", "w-0 3 1000 10 2000 30 1 2",
                "w-0 3 1000 10 2000 30 --1", "w-0 3 1000 10 2000 30 +1"):
        with pytest.raises(ValueError):
            decode_paces(bad)


def test_workers_whose_progress_went_back_do_not_hide_a_stuck_one() -> None:
    """Two workers resumed from an earlier checkpoint (their progress went back) and one
    stuck at 0.10: each restarted worker is judged by its pace since it went back, a pace
    that is not forward never makes the median, so the stuck one is flagged."""
    times = [0, 10, 20, 30, 40]
    evs = (reports(0, times, [0.4, 0.5, 0.6, 0.3, 0.35])
           + reports(1, times, [0.4, 0.5, 0.6, 0.2, 0.3])
           + reports(2, times, [0.1] * 5))
    s = fold_all(TASK, evs)
    c = conds(s, at(41))["Straggling"]
    assert c["status"] == "True", c["message"]
    assert c["message"] == "w-2 at 0.00 of the median pace (1 of 3 with a pace)"
    assert status_of(s, at(41))["health"]["straggling"] == ["w-2"]
    # The restarted workers' paces since they went back survive the status round trip.
    back = decode_status(TASK, status_of(s, at(41)))
    assert conds(back, at(41))["Straggling"]["message"] == c["message"]


def test_a_worker_that_just_went_back_is_behind_but_never_the_median() -> None:
    """A worker whose latest report is its lowest (it just went back, or it is stuck) has
    no forward pace of its own: it may be behind, but it is no part of the median."""
    times = [0, 10, 20, 30]
    evs = (reports(0, times, [0.0, 0.1, 0.2, 0.3]) + reports(1, times, [0.0, 0.1, 0.2, 0.3])
           + reports(2, times, [0.5, 0.6, 0.7, 0.1]) + reports(3, times, [0.5, 0.6, 0.7, 0.2]))
    s = fold_all(TASK, evs)
    c = conds(s, at(31))["Straggling"]
    # w-3 went back to 0.2 and has not moved since: not forward, behind the others' pace.
    assert c["message"] == ("w-2 at -1.33 of the median pace, w-3 at -1.00 of the median "
                            "pace (2 of 4 with a pace)"), c["message"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 100), min_size=2, max_size=6), min_size=0,
                max_size=4), st.randoms(use_true_random=False))
def test_no_restarted_worker_hides_a_stuck_one_and_the_pace_is_order_insensitive(
        restarted: list[list[int]], rnd: random.Random) -> None:
    """Three workers moving forward at 1 % per 10 s and one stuck: however many others
    report whatever fractions (restarts, back and forth), the stuck one is flagged, and
    the state is the same in any order of its events."""
    times = [0, 10, 20, 30, 40]
    evs = [ev for i in range(3) for ev in reports(i, times, [0.01 * (k + 1) for k in range(5)])]
    evs += reports(3, times, [0.1] * 5)
    for i, fractions in enumerate(restarted, start=4):
        evs += reports(i, [5 * k for k in range(len(fractions))],
                       [f / 100 for f in fractions])
    s = fold_all(TASK, evs)
    rnd.shuffle(evs)
    assert fold_all(TASK, evs) == s
    named = evaluate(s, at(41)).named("Straggling")
    assert "w-3" in named
    back = decode_status(TASK, status_of(s, at(41)))
    assert back.roster.paces == s.roster.paces
