"""The health clock (watcher/health_clock.py): a running task is judged again once, when its
next worker's silence passes its limit, and not before when the worker reported since; the
waiting is the work queue's delay. Real time, with limits of a fraction of a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from tests.support import eventually
from tests.unit.test_schemas_fold import TASK, make_event
from tidings.schemas import PodRef, Progress, TaskRef, TaskState, fold_all
from tidings.schemas.status.health import HealthSettings, next_stall
from tidings.watcher.health_clock import HealthClock
from tidings.watcher.store import Store

# One report a tenth of a second: stalled after 1 s of silence (10 intervals, 0.5 s at least).
FAST = HealthSettings(stall_factor=10, stall_min=0.5)


def reporting(last: datetime, seq0: int = 0) -> TaskState:
    """A task whose one worker reported every 0.1 s, last at ``last``."""
    pod = PodRef("w-0", "uid-0")
    return fold_all(TASK, [make_event(Progress(fraction=0.1 * (i + 1)), "inst-0", seq0 + i,
                                      last - timedelta(seconds=0.1 * (2 - i)), pod=pod)
                           for i in range(3)])


def running(store: Store, state: TaskState, task: TaskRef = TASK) -> None:
    store.load(task, None, exists=False)
    store.put(task, state)


@contextmanager
def ticking() -> Iterator[tuple[Store, HealthClock, list[tuple[TaskRef, float]]]]:
    """A store, its health clock running on its thread, and what it judged (task, when)."""
    store = Store()
    judged: list[tuple[TaskRef, float]] = []
    clock = HealthClock(store, FAST, due=lambda task: judged.append((task, time.time())))
    worker = threading.Thread(target=clock.run, daemon=True)
    worker.start()
    try:
        yield store, clock, judged
    finally:
        clock.stop()
        worker.join(5)


def test_a_silent_worker_is_judged_once_when_its_limit_passes() -> None:
    with ticking() as (store, clock, judged):
        state = reporting(datetime.now(UTC))
        running(store, state)
        due = next_stall(state, datetime.now(UTC), FAST)
        assert due is not None
        clock.schedule(TASK, state)
        assert clock.pending(TASK)
        eventually(lambda: judged, 10, "the task judged once its worker stalled")
        assert judged[0][1] >= due.timestamp()
        # Judged: nothing more is due (the worker stays silent, already stalled).
        eventually(lambda: not clock.pending(TASK), 5, "the clock done with the task")
        assert len(judged) == 1


@pytest.mark.parametrize("pods", [None, {"w-0"}], ids=["every worker", "those a fold moved"])
def test_a_worker_that_reported_since_is_judged_at_its_new_limit_not_the_old_one(
        pods: set[str] | None) -> None:
    """With ``pods`` (a task of 10,000 workers is folded many times a
    second, so after a fold the clock looks at the workers that reported only), the 1 s
    stays and comes early: the clock writes nothing then, and judges at the true time."""
    with ticking() as (store, clock, judged):
        now = datetime.now(UTC)
        first = reporting(now)
        running(store, first)
        clock.schedule(TASK, first)  # due in 1 s
        later = reporting(now + timedelta(seconds=1.5), seq0=10)  # it reported again
        store.put(TASK, later)
        clock.schedule(TASK, later, pods=pods)  # due in 2.5 s (or early: 1 s stays)
        new_due = next_stall(later, now, FAST)
        assert new_due is not None
        eventually(lambda: judged, 10, "the task judged")
        assert judged[0][1] >= new_due.timestamp(), "judged at the old limit"
        assert len(judged) == 1


def test_a_task_that_stops_running_is_not_judged() -> None:
    other = TaskRef(TASK.namespace, "other")
    with ticking() as (store, clock, judged):
        now = datetime.now(UTC)
        running(store, reporting(now))
        clock.schedule(TASK, store.get(TASK))  # due in 1 s ...
        clock.schedule(TASK, None)  # ... but it finished (or the TTL deleted it)
        assert not clock.pending(TASK)
        later = reporting(now + timedelta(seconds=0.5))
        running(store, later, other)
        clock.schedule(other, later)  # due after TASK's time
        eventually(lambda: judged, 10, "the other task judged")
        assert [task for task, _ in judged] == [other]


def test_a_fold_that_ends_the_task_ends_its_clock() -> None:
    """A worker's final folds the task out of Running: nothing is due any more, so the
    task may leave memory at once (an idle task waited for its old stall time before)."""
    with ticking() as (store, clock, _):
        now = datetime.now(UTC)
        state = reporting(now)
        running(store, state)
        clock.schedule(TASK, state)  # due in 1 s
        ended = fold_all(TASK, [*[make_event(Progress(fraction=0.1 * (i + 1)), "inst-0", i,
                                             now - timedelta(seconds=0.1 * (2 - i)),
                                             pod=PodRef("w-0", "uid-0")) for i in range(3)],
                                make_event(Progress(fraction=1.0, final=True), "inst-0", 3,
                                           now, pod=PodRef("w-0", "uid-0"))])
        assert ended.phase != "Running"
        store.put(TASK, ended)
        clock.schedule(TASK, ended, pods={"w-0"})
        assert not clock.pending(TASK)


def test_a_fold_that_brings_a_stall_nearer_moves_the_time_up() -> None:
    with ticking() as (store, clock, judged):
        now = datetime.now(UTC)
        slow = fold_all(TASK, [make_event(Progress(fraction=0.1), "inst-9", 0, now,
                                          pod=PodRef("w-9", "uid-9"))])
        running(store, slow)
        clock.schedule(TASK, slow)  # one report: stall_unpaced (600 s) away
        both = fold_all(TASK, [make_event(Progress(fraction=0.1), "inst-9", 0, now,
                                          pod=PodRef("w-9", "uid-9"))]
                        + [make_event(Progress(fraction=0.1 * (i + 1)), "inst-0", i,
                                      now - timedelta(seconds=0.1 * (2 - i)),
                                      pod=PodRef("w-0", "uid-0")) for i in range(3)])
        store.put(TASK, both)
        clock.schedule(TASK, both, pods={"w-0"})  # w-0's limit: 1 s
        eventually(lambda: judged, 10, "the task judged at the new worker's limit")
