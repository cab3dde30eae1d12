"""Past the roster's cap a new pod costs O(log n) (a heap of the kept hashes, not a scan of
them): the pods kept are still the cap smallest hashes, whatever the order and however the
ends and reports are batched. Pure; hypothesis. The times are bench/bench_roster_scale.py's."""

from __future__ import annotations

import copy
import dataclasses
import random
from datetime import timedelta
from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK, make_event
from tidings.schemas import Limits, PodRef, Progress, fold, fold_all, new_state
from tidings.schemas.engine.folding import creation_order, fold_many
from tidings.schemas.engine.observed import PodVerdict
from tidings.schemas.engine.observing import observe
from tidings.schemas.engine.roster import pod_hash

CAP = Limits(roster=5)


def end(i: int, secs: int, explained: bool) -> PodVerdict:
    return PodVerdict(f"p-{i}", f"uid-{i}", "Failed", "OOMKilled" if explained else "Deleted",
                      "", None, T0 + timedelta(seconds=secs), explained)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 14), st.integers(0, 30), st.booleans()),
                max_size=40), st.randoms(use_true_random=False), st.integers(1, 6))
def test_the_ends_past_the_cap_keep_the_smallest_hashes_in_any_batching(
        raw: list[tuple[int, int, bool]], rnd: random.Random, batch: int) -> None:
    verdicts = [end(*r) for r in raw]
    whole = observe(new_state(TASK, CAP), verdicts)
    shuffled = verdicts[:]
    rnd.shuffle(shuffled)
    state = new_state(TASK, CAP)
    for k in range(0, len(shuffled), batch):
        state = observe(state, shuffled[k:k + batch])
    assert state.roster == whole.roster
    kept = sorted({pod_hash(v.pod) for v in verdicts})[:CAP.roster]
    assert sorted(whole.roster.ends) == kept


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 14), max_size=40), st.randoms(use_true_random=False),
       st.integers(1, 6))
def test_the_marks_past_the_cap_keep_the_smallest_hashes_in_any_batching(
        pods: list[int], rnd: random.Random, batch: int) -> None:
    events = [make_event(Progress(fraction=0.5), f"inst-{i}-{k}".ljust(32, "a"), 0,
                         T0 + timedelta(seconds=k), pod=PodRef(f"p-{i}", f"uid-{i}"))
              for k, i in enumerate(pods)]
    whole = fold_all(TASK, events, CAP)
    rnd.shuffle(events)
    state = new_state(TASK, CAP)
    for k in range(0, len(events), batch):
        state = fold_many(state, events[k:k + batch])
    assert state.roster == whole.roster
    assert sorted(whole.roster.marks) == sorted({pod_hash(f"p-{i}") for i in pods})[:CAP.roster]
    assert whole.counters.get("roster_capped", 0) == state.counters.get("roster_capped", 0)


SMALL = Limits(roster=6, max_instances=4)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 14), st.integers(0, 5), st.booleans()), max_size=40),
       st.lists(st.tuples(st.integers(0, 14), st.integers(0, 30), st.booleans()), max_size=8),
       st.integers(1, 40))
def test_a_batch_past_the_instance_cap_leaves_its_input_as_it_was(
        raw: list[tuple[int, int, bool]], ended: list[tuple[int, int, bool]], cut: int
        ) -> None:
    """A batch whose new emitter instances pass the dedup cap ends a fold run at each of
    them; the runs hand the roster's maps on rather than copying them (a copy of 20,000
    marks per new instance made such a batch quadratic), so the state folded before the
    batch must stay as it was, and the batch gives what one event at a time gives."""
    events = [dataclasses.replace(
        make_event(Progress(fraction=0.1 * (k % 10), final=final),
                   f"inst-{k}".ljust(32, "a"), 0, T0 + timedelta(seconds=secs),
                   pod=PodRef(f"p-{i}", f"uid-{i}")), created=T0 + timedelta(seconds=secs))
        for k, (i, secs, final) in enumerate(raw)]
    before = observe(fold_many(new_state(TASK, SMALL), events[:cut]), [end(*e) for e in ended])
    kept = copy.deepcopy(before)
    batch = fold_many(before, events[cut:])
    assert before == kept
    one_by_one = reduce(fold, creation_order(events[cut:]), before)
    assert batch == one_by_one
