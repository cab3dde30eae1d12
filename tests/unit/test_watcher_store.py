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


# --- rebase after a 409: the newer status wins, our unsaved events are kept, nothing twice --

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.unit.test_schemas_fold import TASK, event_sets  # noqa: E402
from tidings.schemas import fold_all  # noqa: E402


def _status(events: list[ParsedEvent]) -> dict[str, object]:
    return fold_all(TASK, events).to_status()


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event_sets(), st.randoms(use_true_random=False))
def test_rebase_on_a_newer_status_loses_nothing_and_counts_nothing_twice(
        events: list[ParsedEvent], rnd: object) -> None:
    """Our state and the server's both grew from one base, by event sets that may overlap.
    After the conflict, the state to write is the fold of the union, whoever wrote what."""
    import random

    assert isinstance(rnd, random.Random)
    cut = rnd.randint(0, len(events))
    base, rest = events[:cut], events[cut:]
    ours = [e for e in rest if rnd.random() < 0.5]
    theirs = [e for e in rest if rnd.random() < 0.5]
    store = Store()
    store.load(TASK, _status(base), rv="1")
    state, _ = store.take(TASK)
    store.put(TASK, fold_all(TASK, base + ours), base=state, events=ours)

    changed = store.rebase(TASK, _status(base + theirs), rv="2")

    union = base + ours + [e for e in theirs if e not in ours]
    now = store.get(TASK)
    assert now is not None
    assert now.to_status() == _status(union)
    ours_keys = {(e.instance, e.seq) for e in ours}
    theirs_keys = {(e.instance, e.seq) for e in theirs}
    assert changed == (not theirs_keys <= ours_keys)
    snap = store.unwritten(TASK)
    if ours_keys <= theirs_keys:
        assert snap is None, "the newer status already holds all we know: nothing to write"
    else:
        assert snap is not None and snap[2] == "2", "the next write builds on what we read"
    store.written(TASK, store.put(TASK, now), "3")
    assert store.unwritten(TASK) is None


def test_a_fold_racing_a_rebase_lands_on_the_rebased_state() -> None:
    ev = [event(A)]
    store = Store()
    store.load(A, None)
    base, _ = store.take(A)
    other = parse_event(build_event(task=A, pod=PodRef("p", "u1", "ns"),
                                    payload=LogLink(name="m", url="https://example.com/m"),
                                    instance="i2", seq=7, time=datetime.now(UTC)))
    assert isinstance(other, ParsedEvent)
    # Meanwhile a conflict rebased the task on a status holding another writer's event.
    assert store.rebase(A, fold_all(A, [other]).to_status(), rv="9")
    store.put(A, fold_all(A, ev), base=base, events=ev)  # folded onto the stale base
    now = store.get(A)
    assert now is not None and now.to_status() == fold_all(A, [other, *ev]).to_status()
