"""One pod name, one life at a time: a pod deleted mid-run and re-created with its name and a
new uid (a StatefulSet, an operator, a retry that names its pods) is a new life of that
worker. The first life's end (or its failed final) never sticks to the second; the new life
decides, and the status shows the worker as replaced. Pure: the fold and ``observe``, in
every order of the facts and the observations."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK
from tidings.schemas import ParsedEvent, PodRef, Progress, build_event, fold_all, parse_event
from tidings.schemas.engine.folding import fold_many
from tidings.schemas.engine.observed import PodVerdict
from tidings.schemas.engine.observing import observe
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import to_status

FIRST = PodRef("recreate-0", "uid-first")
SECOND = PodRef("recreate-0", "uid-second")
OTHER = PodRef("steady-0", "uid-steady")


def said(pod: PodRef, instance: str, seq: int, secs: int, fraction: float, *,
         final: bool = False, failed: bool = False) -> ParsedEvent:
    """A report as the API server stored it: created when it was sent (the server's
    clock orders a name's lives: a pod's events are created while it exists)."""
    t = T0 + timedelta(seconds=secs)
    raw = build_event(task=TASK, pod=pod, instance=instance, seq=seq, time=t,
                      payload=Progress(fraction=fraction, message=f"{pod.uid} {fraction}",
                                       final=final, failed=failed))
    raw["metadata"]["creationTimestamp"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def deleted(pod: PodRef, secs: int) -> PodVerdict:
    """The first life deleted mid-run, as the watcher reads its last object."""
    return PodVerdict(pod.name, pod.uid, "Failed", "Deleted", "the pod was deleted", None,
                      T0 + timedelta(seconds=secs), False)


FIRST_LIFE = [said(FIRST, "a" * 32, 0, 0, 0.3)]
SECOND_LIFE = [said(SECOND, "b" * 32, 0, 20, 0.3), said(SECOND, "b" * 32, 1, 30, 0.6)]
SECOND_FINAL = said(SECOND, "b" * 32, 2, 40, 1.0, final=True)
STEADY = [said(OTHER, "c" * 32, 0, 1, 0.5)]


def steps(events: list[ParsedEvent], ends: list[PodVerdict], order: tuple[int, ...]
          ) -> TaskState:
    """The events and the ends folded one at a time in ``order`` (indexes into
    events + ends)."""
    state = fold_all(TASK, [])
    items: list[ParsedEvent | PodVerdict] = [*events, *ends]
    for i in order:
        item = items[i]
        state = observe(state, [item]) if isinstance(item, PodVerdict) \
            else fold_many(state, [item])
    return state


def orders(n: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(n)))


def conditions(s: TaskState) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in to_status(s)["conditions"]}


def test_a_pod_recreated_with_its_name_runs_on_while_its_new_life_reports() -> None:
    """The attack: the first life reported 0.3 and was deleted; the second reports 0.3 and
    0.6. Before, the task read Failed ("pod recreate-0 ended without a final report")."""
    events = [*FIRST_LIFE, *SECOND_LIFE]
    ends = [deleted(FIRST, 10)]
    for order in orders(len(events) + len(ends)):
        s = steps(events, ends, order)
        assert s.phase == "Running", (order, conditions(s)["Failed"])
        assert to_status(s)["progress"]["percent"] == 60, order
        assert s.roster.replaced == 1, order


def test_the_new_life_s_final_succeeds_the_task_whatever_came_first() -> None:
    events = [*FIRST_LIFE, *SECOND_LIFE, SECOND_FINAL]
    ends = [deleted(FIRST, 10)]
    first: TaskState | None = None
    for order in orders(len(events) + len(ends)):
        s = steps(events, ends, order)
        assert s.phase == "Succeeded", (order, conditions(s)["Failed"])
        if first is None:
            first = s
        assert to_status(s) == to_status(first), order


def test_the_new_life_s_own_end_decides_and_the_old_one_s_never() -> None:
    """The second life killed without a word fails the task with its own end; the first
    life's bare deletion is not it."""
    oom = PodVerdict(SECOND.name, SECOND.uid, "Failed", "OOMKilled", "container main: OOMKilled",
                     137, T0 + timedelta(seconds=35))
    events = [*FIRST_LIFE, *SECOND_LIFE]
    for order in orders(len(events) + 2):
        s = steps(events, [deleted(FIRST, 10), oom], order)
        assert s.phase == "Failed", order
        assert "OOMKilled" in conditions(s)["Failed"]["message"], order


def test_a_failed_final_of_the_old_life_does_not_fail_the_new_one() -> None:
    """A worker that said it failed, re-created by its controller: the new life decides."""
    events = [said(FIRST, "a" * 32, 0, 0, 0.3, final=True, failed=True), *SECOND_LIFE,
              SECOND_FINAL, *STEADY, said(OTHER, "c" * 32, 1, 41, 1.0, final=True)]
    for order in [tuple(range(len(events))), tuple(reversed(range(len(events))))]:
        s = steps(events, [], order)
        assert s.phase == "Succeeded", (order, conditions(s)["Failed"])


def test_an_old_life_s_late_reports_never_move_the_new_one() -> None:
    late = said(FIRST, "a" * 32, 1, 5, 0.9)
    s = fold_all(TASK, [*FIRST_LIFE, *SECOND_LIFE, late])
    assert to_status(s)["progress"]["percent"] == 60
    assert s.workers["recreate-0"].fraction == 0.6


def test_the_lives_survive_the_status_and_a_replaced_pod_shows_as_replaced() -> None:
    s = observe(fold_all(TASK, [*FIRST_LIFE, *SECOND_LIFE, *STEADY]), [deleted(FIRST, 10)])
    st = json.loads(json.dumps(to_status(s)))
    assert st["roster"]["replaced"] == 1
    back = decode_status(TASK, st)
    assert back.roster.lives == s.roster.lives and back.roster.ends == s.roster.ends
    assert to_status(back) == st
    # What a later fold does with it: the old life's end still does not stick.
    later = fold_many(back, [said(SECOND, "b" * 32, 3, 50, 0.7)])
    assert later.phase == "Running"


def test_a_status_written_before_lives_reads_and_the_end_sticks_as_it_did() -> None:
    """An older writer's roster (no lives): its marks and ends read as before."""
    s = observe(fold_all(TASK, FIRST_LIFE), [deleted(FIRST, 10)])
    st = json.loads(json.dumps(to_status(s)))
    for key in ("lives", "livesFrom", "outcomeUids", "replaced"):
        st["roster"].pop(key, None)
    back = decode_status(TASK, st)
    assert back.phase == "Failed"
    # The pod's next life reports: it adopts the unknown life of the mark, as before.
    assert fold_many(back, [said(FIRST, "a" * 32, 1, 5, 0.4)]).phase == "Failed"


@settings(max_examples=80, deadline=None)
@given(st.permutations(range(9)), st.sampled_from(["Deleted", "OOMKilled"]),
       st.sampled_from(["Deleted", "OOMKilled", None]))
def test_lives_fold_in_any_order(order: list[int], first_end: str, second_end: str | None
                                 ) -> None:
    """Three lives of one name, each created after the last one went, and the ends of the
    first two (bare deletions or explained): any arrival order of the reports and the ends,
    one at a time, gives the state of the reports folded first and the ends observed after,
    and it reads back from its status as it is."""
    third = PodRef("recreate-0", "uid-third")
    events = [*FIRST_LIFE, *SECOND_LIFE, said(third, "d" * 32, 0, 60, 0.2),
              said(third, "d" * 32, 1, 70, 0.5), *STEADY]

    def end(pod: PodRef, reason: str, secs: int) -> PodVerdict:
        return deleted(pod, secs) if reason == "Deleted" else PodVerdict(
            pod.name, pod.uid, "Failed", reason, "", 137, T0 + timedelta(seconds=secs))

    ends = [end(FIRST, first_end, 10), end(SECOND, second_end or "Deleted", 50)]
    if second_end is None:
        ends.append(end(third, "OOMKilled", 80))
    items = len(events) + len(ends)
    s = steps(events, ends, tuple(i for i in order if i < items) + tuple(range(9, items)))
    reference = observe(fold_all(TASK, events), ends)
    assert to_status(s) == to_status(reference)
    assert s.roster == reference.roster
    assert s.workers["recreate-0"].fraction == 0.5 and s.roster.replaced == 1
    assert s.phase == ("Failed" if second_end is None else "Running")
    assert decode_status(TASK, json.loads(json.dumps(to_status(s)))).roster == s.roster


def test_born_is_the_server_s_clock_not_the_sender_s() -> None:
    assert isinstance(SECOND_LIFE[0].created, datetime)


def test_the_view_shows_the_worker_running_and_replaced_not_failed() -> None:
    from tidings.schemas.view.model import task_view

    s = observe(fold_all(TASK, [*FIRST_LIFE, *SECOND_LIFE, *STEADY]), [deleted(FIRST, 10)])
    row = next(w for w in task_view(s).workers if w.pod == "recreate-0")
    assert row.state == "running" and not row.bad and not row.ended_failed
    assert row.ended == "replaced (its earlier pod Failed: Deleted)"
    # Its own end, once it comes, is shown beside it.
    oom = PodVerdict(SECOND.name, SECOND.uid, "Failed", "OOMKilled", "", 137,
                     T0 + timedelta(seconds=35))
    row = next(w for w in task_view(observe(s, [oom])).workers if w.pod == "recreate-0")
    assert row.state == "failed (pod)" and row.ended == "replaced; Failed: OOMKilled (exit 137)"


def test_no_life_s_end_is_lost_to_another_s() -> None:
    """The first life OOM-killed (an explained end), its pod re-created, the second deleted
    without a final (a bare deletion, which the explained end outranks in one life's join):
    the second life's own end decides, whatever arrived first."""
    oom = PodVerdict(FIRST.name, FIRST.uid, "Failed", "OOMKilled", "container main: OOMKilled",
                     137, T0 + timedelta(seconds=10))
    events = [*FIRST_LIFE, *SECOND_LIFE]
    states = [steps(events, [oom, deleted(SECOND, 45)], order)
              for order in orders(len(events) + 2)]
    for s in states:
        assert s.phase == "Failed", conditions(s)
        assert conditions(s)["Failed"]["lastTransitionTime"] == "2026-11-30T03:00:45Z"
        assert to_status(s) == to_status(states[0])
        back = decode_status(TASK, json.loads(json.dumps(to_status(s))))
        assert back.roster == s.roster
