"""The store's eviction keeps memory bounded without ever dropping unsaved work."""

from __future__ import annotations

from datetime import datetime

from tidings._compat import UTC
from tidings.schemas import LogLink, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.event import ParsedEvent
from tidings.watcher.store import Store

A, B, C, D = (TaskRef("ns", name) for name in ("a", "b", "c", "d"))


def event(task: TaskRef) -> ParsedEvent:
    ev = parse_event(build_event(task=task, pod=PodRef("p", "u1", "ns"),
                                 payload=LogLink(name="l", url="https://example.com/"),
                                 instance="i1", seq=1, time=datetime.now(UTC)))
    assert isinstance(ev, ParsedEvent)
    return ev


def test_only_idle_written_unheld_tasks_are_evicted() -> None:
    store = Store()
    for task in (A, B, C, D):
        store.load(task, None)
    store.push(event(B))  # pending: not folded yet
    store.put(C, store.take(C)[0])  # folded but not written
    evicted = store.evict_idle(0.0, busy=lambda t: t == D)  # D: a worker holds it
    assert evicted == 1
    assert set(store.tasks()) == {B, C, D}
    assert not store.seeded(A)


def test_recent_tasks_stay_and_an_evicted_task_returns_unseeded() -> None:
    store = Store()
    store.load(A, None)
    assert store.evict_idle(3600.0, busy=lambda t: False) == 0
    assert store.evict_idle(0.0, busy=lambda t: False) == 1
    store.push(event(A))  # a late event recreates the entry...
    assert not store.seeded(A)  # ...which must be seeded from its status before folding
    store.load(A, None)
    assert store.seeded(A) and len(store.take(A)[1]) == 1
