"""Health for every worker and health that reads right, the
attacker's tests: a silent or straggling worker beyond the 64 detailed records (100, 128, 512
and 10,000 pods, the culprit last in name order) is judged and named; what cannot be judged
(a running worker whose pace a budget-cut status did not keep, pods beyond the roster) makes
its condition Unknown and the summary not Healthy; progress that goes back is a pace, behind
the others; a sub-second interval reads as one; a report that ends a stall is written as
soon as the stall was."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest

from tidings._compat import UTC
from tidings.schemas import ParsedEvent, PodRef, Progress, TaskRef, build_event, parse_event
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.engine.state import Limits, TaskState
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.status.health import NAMES_LISTED, HealthSettings, evaluate, judge, next_stall
from tidings.schemas.wire.payloads import Metric, Window

TASK = TaskRef("team-a", "big-job")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)


def event(pod: str, seq: int, t: float, payload: Any) -> ParsedEvent:
    raw = build_event(task=TASK, pod=PodRef(pod, f"uid-{pod}"), payload=payload,
                      instance=f"i-{pod}"[:64], seq=seq, time=T0 + timedelta(seconds=t))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def reports(pod: str, times: list[float], pace: float = 0.001, start: float = 0.0
            ) -> list[ParsedEvent]:
    """Progress of ``pod`` at each of ``times`` (seconds after T0), ``pace`` a second."""
    return [event(pod, seq, t, Progress(fraction=round(min(0.99, start + pace * t), 4)))
            for seq, t in enumerate(times)]


def name(i: int, n: int) -> str:
    return f"w-{i:0{len(str(n - 1))}d}"  # w-000 ... w-511: the last is the largest name


EVERY_5S = [float(t) for t in range(0, 301, 5)]


def job(n: int, silent: int | None = None, slow: int | None = None) -> TaskState:
    """``n`` workers reporting every 5 s for 300 s at one pace; ``silent`` stops at 30 s,
    ``slow`` goes at a fifth of the pace."""
    evs: list[ParsedEvent] = []
    for i in range(n):
        times = EVERY_5S[:7] if i == silent else EVERY_5S
        evs += reports(name(i, n), times, 0.0002 if i == slow else 0.001)
    return fold_all(TASK, evs)


def conds(state: TaskState, t: float, s: HealthSettings | None = None) -> dict[str, Any]:
    status = to_status(state, health=judge(state, T0 + timedelta(seconds=t),
                                           s or HealthSettings()))
    return {c["type"]: c for c in status["conditions"]} | {"health": status["health"]}


# --- every worker judged ----------------------------------------------------------


@pytest.mark.parametrize("n", [100, 128, 512])
def test_a_silent_worker_last_in_name_order_is_stalled(n: int) -> None:
    """Before: only the 64 smallest names were judged, so `w-099` of 100 was never stalled
    and the task said Healthy."""
    last = name(n - 1, n)
    state = job(n, silent=n - 1)
    assert last not in state.workers  # beyond the detailed records
    c = conds(state, 301)
    assert c["Stalled"]["status"] == "True"
    assert c["Stalled"]["message"] == f"{last} silent for 4m (reports every 5s) (1 of {n} running)"
    assert c["health"]["stalled"] == [last] and c["health"]["summary"] == "Stalled"
    assert c["health"]["counts"] == {"stalled": 1}
    # The same silence at the smallest name is caught as before.
    first = conds(job(n, silent=0), 301)
    assert first["health"]["stalled"] == [name(0, n)]
    # Everyone reporting: every running worker judged, and the message says how many.
    ok = conds(job(n), 301)
    assert ok["Stalled"]["status"] == "False"
    assert ok["Stalled"]["message"] == f"all {n} running workers reported within their pace"
    assert ok["health"]["summary"] == "Healthy"


def test_a_straggler_beyond_the_64_detailed_workers_is_named() -> None:
    state = job(100, slow=99)
    c = conds(state, 301)
    assert c["Straggling"]["status"] == "True"
    assert c["Straggling"]["message"] == "w-99 at 0.20 of the median pace (1 of 100 with a pace)"
    assert c["health"]["straggling"] == ["w-99"]


def test_the_health_clock_wakes_for_a_worker_beyond_the_detailed_ones() -> None:
    state = job(100, silent=99)  # w-99's last report at 30 s: 60 s allowed (10 x 5 s)
    assert next_stall(state, T0 + timedelta(seconds=31)) == T0 + timedelta(seconds=90)
    assert list(evaluate(state, T0 + timedelta(seconds=90)).stalled) == ["w-99"]


def test_ten_thousand_workers_are_judged_named_first_few_and_counted() -> None:
    n = 10_000
    evs: list[ParsedEvent] = []
    for i in range(n):  # two reports each: 10 s apart, the last pod silent since
        pod = name(i, n)
        evs += reports(pod, [0.0, 10.0] if i == n - 1 else [0.0, 290.0])
    state = fold_all(TASK, evs)
    c = conds(state, 301)
    assert c["Stalled"]["message"] == \
        "w-9999 silent for 4m (reports every 10s) (1 of 10000 running)"
    assert c["health"]["stalled"] == ["w-9999"]
    # All of them silent: five named, the rest counted; the list holds the 64 smallest.
    late = conds(state, 100_000)
    assert late["Stalled"]["message"].endswith(" and 9995 more (10000 of 10000 running)")
    assert late["health"]["stalled"] == [name(i, n) for i in range(NAMES_LISTED)]
    assert late["health"]["counts"] == {"stalled": n}
    # The status stays in its budget: the paces go (counted), never the judgment.
    written = to_status(state, STATUS_BUDGET, health=judge(state, T0 + timedelta(seconds=301)))
    assert written["budgetDropped"]["paces"] >= 1 and written["health"]["stalled"] == ["w-9999"]
    # A watcher that reads that status cannot judge the workers whose pace went: it says so.
    read = decode_status(TASK, orjson.loads(orjson.dumps(written)))
    again = conds(read, 301)
    assert again["Stalled"]["status"] == "Unknown" and again["Stalled"]["reason"] == "NotJudged"
    assert "not judged: no pace kept" in again["Stalled"]["message"]
    assert again["health"]["summary"] == "Unknown"


def test_what_is_not_judged_is_said_and_never_healthy() -> None:
    """A status read without the paces (its budget dropped them, or an older watcher wrote
    it): the 64 detailed workers' records still give a pace, the rest are not judged."""
    state = job(100)
    status = to_status(state)
    del status["paces"]
    read = decode_status(TASK, status)
    assert len(read.roster.paces) == 64
    c = conds(read, 301)
    for ctype in ("Stalled", "Straggling"):
        assert c[ctype]["status"] == "Unknown" and "36 running workers not judged" in \
            c[ctype]["message"], c[ctype]
    assert c["Stalled"]["message"].startswith("64 running workers reported within their pace")
    assert c["health"]["summary"] == "Unknown"
    # A stall among the judged still holds (True), and says what was not judged.
    silent = to_status(job(100, silent=0))
    del silent["paces"]
    c2 = conds(decode_status(TASK, silent), 301)
    assert c2["Stalled"]["status"] == "True" and "36 running workers not judged" in \
        c2["Stalled"]["message"]
    assert c2["health"]["summary"] == "Stalled"


def test_pods_beyond_the_roster_are_said_not_seen() -> None:
    lim = Limits(roster=4, workers=2)
    evs = [ev for i in range(6) for ev in reports(f"w-{i}", EVERY_5S[:3])]
    state = fold_all(TASK, evs, lim)
    assert state.counters["roster_capped"] > 0
    c = conds(state, 11)
    assert c["Stalled"]["status"] == "Unknown"
    assert "pods beyond the roster's cap are not seen" in c["Stalled"]["message"]


def test_a_final_ends_a_workers_pace_in_any_order() -> None:
    evs = [*reports("w-0", [0.0, 5.0]), event("w-0", 9, 6.0, Progress(fraction=1.0,
                                                                        final=True))]
    for order in (evs, evs[::-1]):
        s = fold_all(TASK, order)
        assert s.roster.paces == {}
    assert to_status(fold_all(TASK, evs)).get("paces") is None


def test_paces_round_trip_and_a_bad_item_is_kept_aside() -> None:
    state = job(130)
    status = orjson.loads(orjson.dumps(to_status(state)))
    assert len(status["paces"]) == 3  # 64 + 64 + 2 pods
    assert decode_status(TASK, status) == state
    status["paces"][1] = "w-064 x 1 2 3 4"
    from tidings.schemas.status.decoder import read_status

    read = read_status(TASK, status)
    assert read.unread.items["paces"] == ("w-064 x 1 2 3 4",) and not read.unread.partial
    assert len(read.state.roster.paces) == 130 - 64
    assert conds(read.state, 301)["Stalled"]["status"] == "Unknown"


# --- health that reads right -----------------------------------------------------


def test_progress_that_goes_back_is_behind_and_still_a_pace() -> None:
    """0.5 then 0.1 had no pace before, so with three workers nothing was judged."""
    evs = reports("w-0", [0.0, 10.0, 20.0]) + reports("w-1", [0.0, 10.0, 20.0])
    evs += [event("w-2", 0, 0.0, Progress(fraction=0.5)),
            event("w-2", 1, 20.0, Progress(fraction=0.1))]
    c = conds(fold_all(TASK, evs), 21)
    assert c["Straggling"]["status"] == "True" and c["health"]["straggling"] == ["w-2"]
    assert c["Straggling"]["message"].startswith("w-2 at -20.00 of the median pace")


def test_too_few_paces_say_so() -> None:
    evs = reports("w-0", [0.0, 10.0]) + reports("w-1", [0.0])
    c = conds(fold_all(TASK, evs), 11)["Straggling"]
    assert c["status"] == "False" and c["reason"] == "TooFewPaced"
    assert c["message"] == "1 running worker with a pace, fewer than the 3 Straggling is " \
        "judged among"


def test_a_sub_second_interval_reads_as_one() -> None:
    evs = reports("w-0", [0.2 * k for k in range(10)])  # every 0.2 s, then silent
    c = conds(fold_all(TASK, evs), 100)["Stalled"]
    assert c["message"] == "w-0 silent for 98s (reports every 0.2s) (1 of 1 running)"


def test_a_report_of_a_stalled_worker_is_as_urgent_as_the_stall() -> None:
    """The watcher wrote Stalled at once (the health clock) but the next report that cleared
    it waited for the coalescing interval: 5 of every 6 s stalled for a worker reporting
    every 6 s against a 5 s limit."""
    from tidings.schemas.wire.constants import TASK_LABEL
    from tidings.schemas.wire.platform import PodTask
    from tidings.watcher.coalesce import ends_stall, reporters
    from tidings.watcher.controller import Controller, Settings
    from tidings.watcher.metrics import Metrics

    p1 = event("w-1", 5, 40.0, Progress(fraction=0.5))
    metrics_only = event("w-1", 6, 41.0, Window(metrics=[Metric(name="loss", value=1.0)]))
    windowed = event("w-1", 7, 42.0, Window(progress=Progress(fraction=0.6)))
    other = event("w-2", 5, 40.0, Progress(fraction=0.5))
    assert reporters([p1, metrics_only, windowed, other]) == {"w-1", "w-2"}
    assert reporters([metrics_only]) == set()
    assert ends_stall(reporters([p1]), {"w-1"}, False)
    assert ends_stall(reporters([windowed]), {"w-1"}, False)
    assert not ends_stall(reporters([other, metrics_only]), {"w-1"}, False)
    assert ends_stall(reporters([other]), {"w-1"}, True)  # a cut list: any may be stalled
    assert not ends_stall(reporters([p1]), set(), False)
    assert not ends_stall(set(), {"w-1"}, True)

    c = Controller(None, Settings(coalesce_interval=60), Metrics())  # type: ignore[arg-type]
    c.store.load(TASK, None, exists=False)
    for pod in ("w-1", "w-2"):
        c.senders.put((TASK.namespace, pod, f"uid-{pod}"), PodTask(TASK.name, TASK_LABEL))
    stalled = {"phase": "Running", "conditions": [{"type": "Stalled", "status": "True"}],
               "health": {"summary": "Stalled", "stalled": ["w-1"],
                          "counts": {"stalled": 1}}}
    c.store.push_many(reports("w-1", [0.0]) + reports("w-2", [0.0]))
    c.folder.fold_task(TASK)  # the task's first facts (a phase change): critical
    co = c.writer.co
    assert co.next(1e9)[0] == TASK
    co.end(TASK, 1e9, True)  # written; the clock then wrote w-1 stalled:
    c.writer._written_health(TASK, stalled)
    c.store.push_many(reports("w-2", [0.0, 5.0])[1:])
    c.folder.fold_task(TASK)
    assert not co._keys[TASK].critical  # another worker's report: coalesced
    c.store.push_many(reports("w-1", [0.0, 5.0])[1:])
    c.folder.fold_task(TASK)
    assert co._keys[TASK].critical  # the stalled worker spoke: written at once


def test_the_view_shows_what_was_not_judged() -> None:
    """`tidings state` and the page give a health condition a line of its own when it holds
    and, now, when it is Unknown: the line says what was not judged."""
    from tidings.schemas.view.model import task_view

    status = to_status(job(100))
    del status["paces"]
    read = decode_status(TASK, status)
    judged = to_status(read, health=judge(read, T0 + timedelta(seconds=301)))
    v = task_view(read, judged)
    assert v.health_summary == "Unknown"
    lines = {c.type: c for c in v.notable}
    assert lines["Stalled"].reason == "NotJudged" and "36 running workers not judged" in \
        lines["Stalled"].message
    assert "Completed" not in lines
