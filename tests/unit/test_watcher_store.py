"""The store's eviction keeps memory bounded without ever dropping unsaved work."""

from __future__ import annotations

from datetime import datetime

from tidings._compat import UTC
from tidings.schemas import LogLink, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.event import ParsedEvent
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
    return to_status(fold_all(TASK, events))


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
    assert to_status(now) == _status(union)
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
    assert store.rebase(A, to_status(fold_all(A, [other])), rv="9")
    store.put(A, fold_all(A, ev), base=base, events=ev)  # folded onto the stale base
    now = store.get(A)
    assert now is not None and to_status(now) == to_status(fold_all(A, [other, *ev]))


# --- compact idle tasks: the compressed status, rebuilt exactly -------------------------

import dataclasses  # noqa: E402
from datetime import timedelta  # noqa: E402

from tests.unit.test_schemas_fold import SMALL  # noqa: E402
from tidings.schemas import Limits, Named, TaskState, fold  # noqa: E402
from tidings.watcher.store import pack_state, unpack_state  # noqa: E402


@st.composite
def streams(draw: st.DrawFn) -> list[ParsedEvent]:
    """Event sets with server creation times, some past eventTime + the clock skew (clamped)
    and some spread over hours (dedup compaction moves the watermark)."""
    out = []
    for ev in draw(event_sets()):
        if draw(st.booleans()):
            lag = draw(st.sampled_from([0, 1, 90, 3 * 3600, -7200]))
            ev = dataclasses.replace(ev, created=ev.event_time + timedelta(seconds=lag))
        out.append(ev)
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(streams(), st.randoms(use_true_random=False),
       st.sampled_from([SMALL, Limits(), Limits(max_instances=2)]))
def test_the_compact_form_rebuilds_a_written_state_exactly(
        events: list[ParsedEvent], rnd: object, limits: Limits) -> None:
    import random

    assert isinstance(rnd, random.Random)
    cut = rnd.randint(0, len(events))
    state = fold_all(TASK, events[:cut], limits)
    back = unpack_state(TASK, pack_state(state), limits)
    assert back == state and to_status(back) == to_status(state)
    assert to_status(back, budget=2048) == to_status(state, budget=2048)
    # And it folds on exactly as the live state would (same skips, same caps, same counters).
    a, b = state, back
    for ev in events[cut:] + events[:cut]:
        a, b = fold(a, ev), fold(b, ev)
    assert a == b and to_status(a) == to_status(b)


def _written(store: Store, task: TaskRef, events: list[ParsedEvent]) -> TaskState:
    store.load(task, None)
    base, _ = store.take(task)
    state = fold_all(task, events)
    store.written(task, store.put(task, state, base=base, events=events), "1")
    return state


def test_only_idle_written_unheld_tasks_are_compacted_and_come_back_exactly() -> None:
    store = Store()
    states = {t: _written(store, t, [event(t)]) for t in (A, B, C, D)}
    store.push(event(B))  # pending: not folded yet
    store.put(C, fold(states[C], event(C)))  # folded but not written
    assert store.compact_idle(3600.0, busy=lambda t: False) == 0  # not idle long enough
    assert store.compact_idle(0.0, busy=lambda t: t == D) == 1  # only A
    assert store.compacted == 1 and store.compact_idle(0.0, busy=lambda t: t == D) == 0
    assert store.get(A) == states[A] and store.compacted == 1  # a read keeps it compact
    store.push(event(A))  # its next event...
    state, pending = store.take(A)  # ...rebuilds it for the fold
    assert state == states[A] and len(pending) == 1 and store.compacted == 0
    assert store.seeded(A)  # no reload from the API server needed


def test_a_compact_task_rebases_and_evicts_like_a_live_one() -> None:
    store = Store()
    mine = _written(store, A, [event(A)])
    assert store.compact_idle(0.0, busy=lambda t: False) == 1
    other = parse_event(build_event(task=A, pod=PodRef("p", "u1", "ns"),
                                    payload=LogLink(name="m", url="https://example.com/m"),
                                    instance="i2", seq=7, time=datetime.now(UTC)))
    assert isinstance(other, ParsedEvent)
    assert store.rebase(A, to_status(fold(mine, other)), rv="9")
    assert store.get(A) == fold(mine, other) and store.compacted == 0
    assert store.compact_idle(0.0, busy=lambda t: False) == 1
    assert store.evict_idle(0.0, busy=lambda t: False) == 1 and store.compacted == 0


def test_a_state_its_status_cannot_rebuild_stays_live_and_is_counted() -> None:
    """The attacker's case for losslessness: a state whose status would not read back (here
    a name longer than any status may hold) must never be swapped for what it reads as."""
    store = Store()
    good = _written(store, A, [event(A)])
    bad = dataclasses.replace(good, named={"links": {"x" * 500: Named("https://e.x/", (
        good.first_event_time, "i1", 1), 1)}})
    store.put(A, bad, base=good)
    store.written(A, 2, "2")
    assert store.compact_idle(0.0, busy=lambda t: False) == 0
    assert store.not_compactable == 1 and store.get(A) is bad


def test_a_rebase_onto_a_re_created_object_starts_from_its_status() -> None:
    """The 409 re-read finds the task's object deleted and re-created (a
    new uid). Run 1's state must not be written onto it: the state becomes the new object's
    status, plus the unsaved events that name no object or the new one."""
    from tidings.schemas import Progress
    from tidings.schemas.engine.folding import fold_all
    from tidings.schemas.engine.state import new_state

    def ev(seq: int, uid: str, payload: object, inst: str = "i1") -> ParsedEvent:
        p = parse_event(build_event(task=A, pod=PodRef("p", "u1", "ns"),
                                    payload=payload, instance=inst,  # type: ignore[arg-type]
                                    seq=seq, time=datetime.now(UTC), task_uid=uid))
        assert isinstance(p, ParsedEvent)
        return p

    failed = ev(1, "uid-1", Progress(fraction=0.3, final=True, failed=True))
    store = Store()
    store.load(A, to_status(fold_all(A, [failed])), rv="5", uid="uid-1")
    late_run1 = ev(2, "uid-1", Progress(fraction=0.4))
    nameless = ev(1, "", Progress(fraction=0.6), inst="i2")
    base, _ = store.take(A)
    store.put(A, fold_all(A, [failed, late_run1, nameless]), base=base,
              events=[late_run1, nameless])
    assert store.rebase(A, to_status(new_state(A)), rv="9", uid="uid-2")
    snap = store.unwritten(A)
    assert snap is not None
    state, _, rv = snap
    assert rv == "9" and not state.failed and state.applied.instances == ["i2"]
    assert store.identity(A)[:2] == ("uid-2", frozenset({"uid-1"}))


def test_a_deleted_objects_state_does_not_move_onto_the_next_object() -> None:
    """The write finds the object gone (404). What was written to it goes
    with it; of the unsaved events only those naming no object re-create one."""
    from tidings.schemas import Progress
    from tidings.schemas.engine.folding import fold_all

    def ev(seq: int, uid: str, inst: str) -> ParsedEvent:
        p = parse_event(build_event(task=A, pod=PodRef("p", "u1", "ns"),
                                    payload=Progress(fraction=0.1 * seq), instance=inst,
                                    seq=seq, time=datetime.now(UTC), task_uid=uid))
        assert isinstance(p, ParsedEvent)
        return p

    written, named, nameless = ev(1, "uid-1", "i1"), ev(2, "uid-1", "i1"), ev(1, "", "i2")
    store = Store()
    store.load(A, to_status(fold_all(A, [written])), rv="5", uid="uid-1")
    base, _ = store.take(A)
    store.put(A, fold_all(A, [written, named, nameless]), base=base, events=[named, nameless])
    store.absent(A)
    snap = store.unwritten(A)
    assert snap is not None
    state, _, rv = snap
    assert rv is None and state.applied.instances == ["i2"]
    assert store.identity(A)[:2] == (None, frozenset({"uid-1"}))
    # Nothing unsaved names no object: nothing is left to write, no object is re-created.
    store2 = Store()
    store2.load(A, to_status(fold_all(A, [written])), rv="5", uid="uid-1")
    base, _ = store2.take(A)
    store2.put(A, fold_all(A, [written, named]), base=base, events=[named])
    store2.absent(A)
    assert store2.unwritten(A) is None


@given(st.lists(st.tuples(st.sampled_from(["", "uid-1", "uid-2"]),
                          st.sampled_from(["i1", "i2", "i3"])), min_size=1, max_size=30),
       st.booleans())
def test_a_state_never_carries_another_objects_events(names: list[tuple[str, str]],
                                                      gone: bool) -> None:
    """Whatever was folded for object uid-1 and not written, after a re-read finds uid-2 (or
    nothing): none of the events naming uid-1 is in the state, every other one is."""
    from tidings.schemas import Progress
    from tidings.schemas.engine.folding import fold_all
    from tidings.schemas.engine.state import new_state

    events = []
    for seq, (uid, inst) in enumerate(names, 1):
        p = parse_event(build_event(task=A, pod=PodRef("p", "u1", "ns"),
                                    payload=Progress(fraction=0.5), instance=inst, seq=seq,
                                    time=datetime.now(UTC), task_uid=uid))
        assert isinstance(p, ParsedEvent)
        events.append(p)
    store = Store()
    store.load(A, None, rv="1", uid="uid-1")
    base, _ = store.take(A)
    store.put(A, fold_all(A, events), base=base, events=events)
    if gone:
        store.absent(A)
    else:
        store.rebase(A, to_status(new_state(A)), rv="2", uid="uid-2")
    state = store.get(A)
    assert state is not None
    allowed = ("",) if gone else ("", "uid-2")
    for ev in events:
        assert state.applied.contains(ev.instance, ev.seq) == (ev.regarding_uid in allowed)


def test_a_health_write_is_not_lost_to_a_rebase_that_finds_the_state_equal() -> None:
    """The health clock asks for a write although the state did not change (the time did):
    a conflict's re-read finding the same state must not count it as written."""
    from tidings.schemas import fold_all

    store = Store()
    status = to_status(fold_all(A, [event(A)]))
    store.load(A, status, rv="1", uid="u")
    assert store.unwritten(A) is None
    assert store.touch(A) and store.unwritten(A) is not None
    store.rebase(A, status, rv="2", uid="u")
    assert store.unwritten(A) is not None, "the judgment still has to be written"
    _, version, _ = store.unwritten(A) or (None, 0, None)
    store.written(A, version, rv="3", uid="u")
    assert store.unwritten(A) is None
    assert not store.touch(B)  # a task not held: nothing to judge
