"""Order never matters, at any size: a task with more emitter instances than the dedup cap
(``Limits.max_instances``) folds to the same state whether its events come in creation
order, in name order (a relist lists by name: a hash of instance and seq, so a random
permutation), or one by one; above all, no worker's final is skipped as "late".

The scene is a restart: every worker reported progress twice, the watcher was down while
each sent its final, and the relist hands all of it to the fold at once.
"""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from functools import reduce

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings.schemas import (
    Limits,
    ParsedEvent,
    PodRef,
    Progress,
    TaskRef,
    fold,
    fold_many,
    new_state,
)
from tidings.schemas.engine.folding import fold_checked
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.event import event_name


def restart_scene(n: int, *, spread: int = 20, seed: int = 7) -> list[ParsedEvent]:
    """``n`` workers, one emitter instance each: two progress reports, then a final. Each
    round is created over ``spread`` seconds (the workers are not in step), the final ones
    a minute after the second round."""
    rnd = random.Random(seed)
    out: list[ParsedEvent] = []
    for k in range(n):
        inst = f"{rnd.getrandbits(128):032x}"
        pod = PodRef(f"worker-{k}", f"uid-{k}")
        reports = [(0.3, False, 0), (0.6, False, 60), (1.0, True, 180)]
        for seq, (fraction, final, at) in enumerate(reports):
            when = T0 + timedelta(seconds=at + rnd.randrange(spread))
            ev = make_event(Progress(fraction=fraction, message="step", final=final,
                                     workers=n), inst, seq, when, pod=pod)
            out.append(dataclasses.replace(ev, created=when))
    return out


def creation_order(events: list[ParsedEvent]) -> list[ParsedEvent]:
    """The order the API server created them in (ties by instance and seq: a total order)."""
    return sorted(events, key=lambda ev: (ev.created or T0, ev.instance, ev.seq))


def by_name(events: list[ParsedEvent]) -> list[ParsedEvent]:
    return sorted(events, key=lambda ev: event_name(TASK.name, ev.instance, ev.seq))


def finals(state: TaskState) -> int:
    return state.roster.finals


def test_a_relist_in_name_order_keeps_every_final_past_the_instance_cap() -> None:
    """600 workers over the 512-instance cap: every order gives 600 finals, and one state."""
    events = restart_scene(600)
    start = new_state(TASK)
    in_creation = fold_many(start, creation_order(events))
    in_names = fold_many(start, by_name(events))
    one_by_one = reduce(fold, creation_order(events), start)
    assert finals(in_creation) == 600
    assert finals(in_names) == 600, f"name order kept {finals(in_names)} of 600 finals"
    assert in_names.counters["late_skipped"] == 0
    assert in_names.phase == "Succeeded"
    assert to_status(in_names) == to_status(in_creation) == to_status(one_by_one)
    # The watcher's fold (admission asked of every event) takes every event in.
    checked = fold_checked(start, by_name(events))
    assert checked.state == in_creation and len(checked.taken) == len(events)


def test_two_thousand_instances_keep_two_thousand_finals() -> None:
    """The restart at N=2,000 (almost four times the cap): 2,000 of 2,000 finals."""
    events = restart_scene(2000)
    state = fold_many(new_state(TASK), by_name(events))
    assert finals(state) == 2000, f"kept {finals(state)} of 2,000 finals"
    assert state.phase == "Succeeded" and state.counters["late_skipped"] == 0
    assert len(state.instance_times) <= Limits().max_instances  # still bounded


def test_a_relist_after_the_status_was_written_skips_no_new_final() -> None:
    """The watcher folded the progress, wrote its state (compacted: more instances than the
    cap) and stopped; the finals were sent while it was down; the relist lists everything.
    Every final lands; what is skipped is only what was applied before the stop."""
    events = restart_scene(600)
    progress = [ev for ev in events if not ev.payload.final]  # type: ignore[union-attr]
    before = fold_many(new_state(TASK), creation_order(progress))
    assert before.counters["instances_compacted"] > 0
    after = fold_many(before, by_name(events))
    assert finals(after) == 600 and after.phase == "Succeeded"
    assert after.counters["events_applied"] == len(events)


# The property: the cap of a few instances and a short TTL, so that small sets of events
# cross both; every permutation of a batch folds to one state, the fold of its events one by
# one in creation order, and no event is skipped as late that a fold in creation order
# would apply.
COMPACT = Limits(event_ttl=timedelta(seconds=60), ttl_margin=timedelta(seconds=10),
                 max_instances=4)


@st.composite
def many_instances(draw: st.DrawFn) -> list[ParsedEvent]:
    """Events of up to 12 instances (three times the cap), each instance's seqs counting
    up in creation time as an emitter sends them, finals last."""
    n = draw(st.integers(1, 12))
    out: list[ParsedEvent] = []
    for k in range(n):
        start = draw(st.integers(0, 40))
        steps = draw(st.lists(st.integers(0, 30), min_size=1, max_size=4))
        at = start
        for seq, step in enumerate(steps):
            at += step
            final = seq == len(steps) - 1 and draw(st.booleans())
            when = T0 + timedelta(seconds=at)
            ev = make_event(Progress(fraction=(seq + 1) / len(steps), final=final),
                            f"i-{k:02d}", seq, when, pod=PodRef(f"w-{k:02d}", f"u-{k}"))
            out.append(dataclasses.replace(ev, created=when))
    return out


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(many_instances(), st.randoms(use_true_random=False))
def test_any_order_of_a_batch_past_the_instance_cap_folds_to_one_state(
        events: list[ParsedEvent], rnd: random.Random) -> None:
    want = reduce(fold, creation_order(events), new_state(TASK, COMPACT))
    shuffled = events[:]
    rnd.shuffle(shuffled)
    got = fold_many(new_state(TASK, COMPACT), shuffled)
    assert got == want and to_status(got) == to_status(want)
    assert fold_checked(new_state(TASK, COMPACT), shuffled).state == want
    # Every final sent is kept, whatever the cap forgot along the way.
    sent = {ev.sender.name for ev in events if ev.payload.final}  # type: ignore[union-attr]
    assert got.roster.finals == len(sent)
    assert got.counters["late_skipped"] == 0
    assert got.counters["events_applied"] == len(events)
    # A relist of the same events later (the state written, the watcher restarted, every
    # event listed again in any order): nothing applied twice, nothing new lost.
    rnd.shuffle(shuffled)
    again = fold_many(got, shuffled)
    assert again.counters["events_applied"] == len(events)
    assert again.roster == got.roster


# --- the watcher: a relist comes in pages; its fold waits for the last one ----------------


def test_the_watcher_folds_a_relist_in_pages_as_one_batch() -> None:
    """The restart as the watcher sees it: its state read back from the status written before
    the stop (compacted: more instances than the cap), then the relist, by name, in pages of
    500, a fold worker free between pages. Folded page by page, a later page's older events
    would meet a watermark the earlier pages' finals raised; the fold waits for the list's
    end, and every final lands."""
    from tidings.schemas.status.decoder import decode_status
    from tidings.schemas.wire.constants import TASK_LABEL
    from tidings.schemas.wire.platform import PodTask
    from tidings.watcher.controller import Controller, Settings
    from tidings.watcher.delivery import EventSource
    from tidings.watcher.metrics import Metrics

    n = 2000
    events = restart_scene(n)
    progress = [ev for ev in events if not ev.payload.final]  # type: ignore[union-attr]
    before = fold_many(new_state(TASK), creation_order(progress))
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.store.load(TASK, to_status(before))
    assert c.store.get(TASK) == decode_status(TASK, to_status(before))
    for k in range(n):
        c.senders.put((TASK.namespace, f"worker-{k}", f"uid-{k}"),
                      PodTask(TASK.name, TASK_LABEL))
    source = EventSource(c.delivery)
    listed = by_name(events)
    source.list_begin()
    for i in range(0, len(listed), 500):
        c.delivery.deliver_many(listed[i:i + 500])
        c.folder.fold_task(TASK)  # a fold worker takes the task between pages
    source.list_done("1")
    assert len(c.queue) == 1  # the list's end hands the task to the fold
    c.folder.fold_task(TASK)
    state = c.store.get(TASK)
    assert state is not None
    assert finals(state) == n and state.phase == "Succeeded"
    assert state.counters["events_applied"] == len(events)
    # What was skipped as late is the progress of the instances compaction forgot before
    # the stop, listed again: counted apart from a late fact from the watch (the alert's).
    late = c.metrics.registry.get_sample_value
    assert late("tidings_watcher_events_skipped_total", {"cause": "late"}) == 0
    assert late("tidings_watcher_events_skipped_total", {"cause": "late_relisted"}) \
        == state.counters["late_skipped"] > 0


def test_a_late_event_from_the_watch_is_counted_as_a_fact_lost() -> None:
    """Outside a list, an event created before the watermark reached the watcher after
    compaction passed it: cause "late" (what the alert watches), not "late_relisted"."""
    from tidings.schemas.wire.constants import TASK_LABEL
    from tidings.schemas.wire.platform import PodTask
    from tidings.watcher.controller import Controller, Settings
    from tidings.watcher.metrics import Metrics

    events = creation_order(restart_scene(600))
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.store.load(TASK, None, exists=False)
    for k in range(600):
        c.senders.put((TASK.namespace, f"worker-{k}", f"uid-{k}"),
                      PodTask(TASK.name, TASK_LABEL))
    c.delivery.deliver_many(events[1:])
    c.folder.fold_task(TASK)
    c.delivery.deliver_many(events[:1])  # the oldest of all, after the rest: late
    c.folder.fold_task(TASK)
    value = c.metrics.registry.get_sample_value
    assert value("tidings_watcher_events_skipped_total", {"cause": "late"}) == 1
    assert value("tidings_watcher_events_skipped_total", {"cause": "late_relisted"}) == 0


def test_a_list_holds_back_only_its_own_namespaces_folds() -> None:
    """A namespace whose list keeps failing holds back no other's folds; a cluster-wide list
    holds back every task's."""
    from tidings.watcher.store import Store

    store = Store()
    mine, other = TaskRef("team-a", "x"), TaskRef("team-b", "y")
    store.hold("team-a")
    assert store.wait_for_list(mine) and not store.wait_for_list(other)
    store.hold("team-a")  # (a second source of the same namespace)
    assert store.release("team-a") == []
    assert store.release("team-a") == [mine]
    assert not store.wait_for_list(mine)
    store.hold(None)
    assert store.wait_for_list(mine) and store.wait_for_list(other)
    assert sorted(store.release(None)) == sorted([mine, other])
