"""The task-keyed work queue: client-go semantics (dirty set, processing set), pure threading."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import FakeClock, eventually
from tidings.watcher.queue import ShutDown, WorkQueue


def test_fifo_and_duplicates_collapse_while_dirty() -> None:
    q: WorkQueue[str] = WorkQueue()
    for k in ["a", "b", "a", "c", "b", "a"]:
        q.add(k)
    assert len(q) == 3
    assert [q.get(0), q.get(0), q.get(0)] == ["a", "b", "c"]
    assert q.get(0) is None


def test_key_added_while_processing_is_requeued_after_done_not_before() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # arrives while a worker holds "a"
    q.add("a")  # and again: still one pending
    assert q.get(0) is None, "a second worker must not get a key that is being processed"
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None
    assert q.pending() == 0


def test_done_without_readd_does_not_requeue() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None


def test_other_keys_flow_while_one_key_is_busy() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("slow")
    assert q.get(0) == "slow"  # held for a long time by one worker
    for k in ["b", "slow", "c"]:
        q.add(k)
    assert q.get(0) == "b"
    assert q.get(0) == "c"
    assert q.get(0) is None


def test_add_after_delays_and_keeps_the_earliest_time_of_a_key() -> None:
    """As client-go's delaying queue: a key waits once, at the earliest time asked."""
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 2.0)
    q.add_after("a", 1.0)  # earlier: replaces
    q.add_after("a", 3.0)  # later: the earlier stands
    assert q.get(0) is None
    assert q.pending() == 1
    clock.now = 1.0
    assert q.get(0) == "a"
    q.done("a")
    clock.now = 3.0
    assert q.get(0) is None and q.pending() == 0, "one delayed add per key, not three"
    q.add_after("a", 1.0)  # (once due, a key may wait again)
    clock.now = 4.0
    assert q.get(0) == "a"


def test_add_after_while_processing_goes_dirty() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("a")
    assert q.get(0) == "a"
    q.add_after("a", 1.0)
    clock.now = 1.0
    assert q.get(0) is None, "the key is processing: the due add marks it dirty"
    q.done("a")
    assert q.get(0) == "a"


def test_add_after_wakes_a_blocked_getter() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(5)))
    t.start()
    t0 = time.monotonic()
    q.add_after("x", 0.1)
    t.join(5)
    assert got == ["x"]
    assert 0.08 <= time.monotonic() - t0 < 2


def test_shutdown_drains_then_raises() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.shutdown()
    q.add("b")  # ignored after shutdown
    assert q.get(0) == "a"
    with pytest.raises(ShutDown):
        q.get(0)


def test_concurrent_workers_never_share_a_key_and_lose_nothing() -> None:
    q: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    lock = threading.Lock()
    adds = {k: 0 for k in range(20)}
    processed_after_last_add: dict[int, bool] = {}
    violations: list[int] = []

    def worker() -> None:
        while True:
            try:
                k = q.get()
            except ShutDown:
                return
            if k is None:
                continue
            with lock:
                if k in active:
                    violations.append(k)
                active.add(k)
                processed_after_last_add[k] = True
            time.sleep(0.0005)
            with lock:
                active.discard(k)
            q.done(k)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for i in range(3000):
        k = i % 20
        with lock:
            adds[k] += 1
            processed_after_last_add[k] = False
        q.add(k)
    eventually(lambda: q.pending() == 0, 10, "the queue to drain")
    q.shutdown()
    for t in threads:
        t.join(5)
    assert not violations, "two workers held the same key"
    assert all(processed_after_last_add.values()), "an add was lost: key not processed after it"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "get", "done"]), st.integers(0, 3)),
                max_size=60))
def test_model(ops: list[tuple[str, int]]) -> None:
    """Against a reference model: waiting keys are distinct, processing keys are never handed
    out, and every add is followed by a hand-out of that key after the add."""
    q: WorkQueue[int] = WorkQueue()
    processing: set[int] = set()
    owed: set[int] = set()  # keys added since their last hand-out began
    for op, k in ops:
        if op == "add":
            q.add(k)
            owed.add(k)
        elif op == "get":
            got = q.get(0)
            if got is None:
                assert all(key in processing for key in owed)
            else:
                assert got not in processing
                processing.add(got)
                owed.discard(got)
        elif op == "done" and k in processing:
            processing.discard(k)
            q.done(k)
    # drain: every owed key comes out exactly once more
    for k in list(processing):
        q.done(k)
    out = []
    while (got := q.get(0)) is not None:
        out.append(got)
        q.done(got)
    assert sorted(out) == sorted(owed)


def test_serve_survives_a_failing_key_and_marks_every_key_done() -> None:
    q: WorkQueue[str] = WorkQueue()
    handled: list[str] = []
    failed: list[str] = []

    def handle(key: str) -> None:
        handled.append(key)
        if key == "bad":
            raise RuntimeError("boom")

    for key in ("a", "bad", "b"):
        q.add(key)
    q.shutdown()  # serve drains what is queued, then returns
    q.serve(handle, failed.append)
    assert handled == ["a", "bad", "b"]
    assert failed == ["bad"]
    assert q.pending() == 0


@given(st.lists(st.lists(st.sampled_from("abcde"), max_size=6), max_size=6),
       st.lists(st.sampled_from("abcde"), max_size=3))
def test_add_many_is_repeated_add_with_one_wake_up_call(
        batches: list[list[str]], held: list[str]) -> None:
    one: WorkQueue[str] = WorkQueue()
    many: WorkQueue[str] = WorkQueue()
    for q in (one, many):  # keys a worker holds are deferred alike
        for k in dict.fromkeys(held):
            q.add(k)
            assert q.get(0) == k
    calls: list[int] = []
    notify = many._cond.notify
    many._cond.notify = lambda n=1: (calls.append(n), notify(n))[1]  # type: ignore[method-assign]
    for batch in batches:
        for k in batch:
            one.add(k)
        many.add_many(batch)
    assert len(calls) <= len(batches)
    for q in (one, many):
        for k in dict.fromkeys(held):
            q.done(k)
    drained = [[q.get(0) for _ in range(len(q))] for q in (one, many)]
    assert drained[0] == drained[1]


def test_add_many_wakes_every_waiting_worker_it_has_keys_for() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str] = []
    workers = [threading.Thread(target=lambda: got.append(str(q.get(5)))) for _ in range(3)]
    for w in workers:
        w.start()
    eventually(lambda: len(q._cond._waiters) == 3)  # type: ignore[attr-defined]
    q.add_many(["a", "b", "c"])
    for w in workers:
        w.join(5)
    assert sorted(got) == ["a", "b", "c"]
