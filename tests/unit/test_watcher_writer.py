"""Coalesced status writes: the pure bookkeeping, then the writer against a fake API."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import eventually
from tidings._compat import UTC
from tidings.kube import KubeError
from tidings.schemas.engine.folding import fold
from tidings.schemas.engine.state import TaskState, new_state
from tidings.schemas.wire.event import ParsedEvent, PodRef, TaskRef
from tidings.schemas.wire.payloads import LogLink, Progress, SpanSummaries, SpanSummary
from tidings.watcher.coalesce import COALESCIBLE, CRITICAL, Coalescer, fact_kind
from tidings.watcher.metrics import Metrics
from tidings.watcher.store import Store
from tidings.watcher.writer import StatusWriter, parse_slow_writes, status_body


def unjudged(status: Any) -> Any:
    """A status without the time its health was judged (each write judges it anew)."""
    if not isinstance(status, dict) or "health" not in status:
        return status
    health = {k: v for k, v in status["health"].items() if k != "evaluatedAt"}
    return {**status, "health": health}


# --- Coalescer (pure) ------------------------------------------------------------------


def test_a_change_asks_for_a_writer_only_when_one_must_look_again() -> None:
    """Waking a writer per fold was the watcher's largest CPU cost under load: a change wakes
    one only when its key is due now or sooner than every other waiting key."""
    c: Coalescer[str] = Coalescer(interval=1.0, coalesce_interval=5.0)
    assert c.changed("a", 0.0), "new and due at once"
    assert not c.changed("a", 0.1), "already queued"
    assert c.next(0.2) == ("a", 0.0)
    assert not c.changed("a", 0.3), "in flight: end() queues it"
    c.end("a", 0.4, ok=True)  # due again at 1.2: the writers wait until then
    assert c.changed("b", 0.5, critical=False), "a new task is due at once"
    assert c.next(0.5) == ("b", 0.0)
    c.end("b", 0.6, ok=True)
    assert not c.changed("b", 0.7, critical=False), "due at 5.5, after a's 1.2"
    assert not c.changed("b", 0.8, critical=True), "critical: due at 1.5, still after 1.2"
    assert c.next(1.2) == ("a", 0.0)
    c.end("a", 1.3, ok=True)
    assert c.next(1.3) == (None, pytest.approx(0.2)), "the writers wait for b's 1.5"
    assert c.changed("c", 0.9), "new: due at once"


def test_first_change_is_due_at_once_then_collapses() -> None:
    c: Coalescer[str] = Coalescer(interval=1.0)
    c.changed("a", 0.0)
    c.changed("a", 0.1)  # already queued: still one write
    assert c.next(0.2) == ("a", 0.0)
    assert c.next(0.2) == (None, None), "one write per key in flight, nothing else queued"
    c.changed("a", 0.3)  # in flight: remembered, queued when the write ends
    c.changed("a", 0.4)
    c.end("a", 0.5, ok=True)
    # the newer state goes next, one interval after the last start
    assert c.next(0.5) == (None, pytest.approx(0.7))
    assert c.next(1.2) == ("a", 0.0)
    c.end("a", 1.3, ok=True)
    assert c.idle()


def test_writes_of_a_key_are_spaced_by_its_interval() -> None:
    starts: dict[bool, list[float]] = {True: [], False: []}
    for critical in (True, False):
        c: Coalescer[str] = Coalescer(interval=0.5, coalesce_interval=2.0)
        for i in range(5000):  # 1000 changes/s for 5 s
            now = i / 1000
            c.changed("k", now, critical)
            key, _ = c.next(now)
            if key is not None:
                starts[critical].append(now)
                c.end("k", now + 0.01, ok=True)
    for critical, gap in ((True, 0.5), (False, 2.0)):
        gaps = [b - a for a, b in itertools.pairwise(starts[critical])]
        assert len(starts[critical]) <= 5 / gap + 1
        assert min(gaps) >= gap - 1e-9


def _critical_writes(change_every: float, seconds: float) -> tuple[list[float], float]:
    """One key with a critical change every ``change_every`` s, a 20 ms write each time it is
    taken: the write starts, and the longest any change waited for a write to start."""
    c: Coalescer[str] = Coalescer(interval=0.5, coalesce_interval=5.0)
    starts: list[float] = []
    waiting: list[float] = []  # changes not yet in a started write
    worst = 0.0
    in_flight_until = None
    for i in range(int(seconds * 1000)):
        now = i / 1000
        if in_flight_until is not None and now >= in_flight_until:
            c.end("k", now, ok=True)
            in_flight_until = None
        if i % round(change_every * 1000) == 0:
            c.changed("k", now, critical=True)
            waiting.append(now)
        key, _ = c.next(now)
        if key is not None:
            starts.append(now)
            worst = max([worst, *(now - t for t in waiting)])
            waiting.clear()
            in_flight_until = now + 0.02
    return starts, worst


def test_a_hot_tasks_critical_writes_are_paced_by_what_it_wrote_in_the_last_second() -> None:
    """A task with a critical fact every 10 ms is written once a second, not twice (the API
    server's cost of the bus is its status writes), and no fact waits more than 2 x interval;
    a task with a critical fact now and then is still written ``interval`` after the last."""
    starts, worst = _critical_writes(0.01, 10.0)
    assert 10 <= len(starts) <= 11, f"{len(starts)} writes in 10 s"
    assert worst <= 1.0 + 1e-9
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.5 - 1e-9 and max(gaps) <= 1.0 + 1e-9
    calm, worst = _critical_writes(1.5, 10.0)
    assert len(calm) == 7 and worst == 0.0, "an occasional fact is written at once"
    c: Coalescer[str] = Coalescer(interval=0.5)
    for t in (0.0, 0.5, 1.0):  # a burst of two, then one a second
        c.changed("k", t - 0.01)
        assert c.next(t) == ("k", 0.0)
        c.end("k", t + 0.02, ok=True)
    c.changed("k", 1.1)
    assert c.next(1.5) == (None, pytest.approx(0.5)), "hot: the third write in a second waits"
    assert c.next(2.0) == ("k", 0.0)
    c.end("k", 2.02, ok=True)
    c.changed("k", 5.0)
    assert c.next(5.0) == ("k", 0.0), "quiet for a while: written at once again"


def test_span_windows_packed_or_not_are_coalescible() -> None:
    """The emitter packs a window of several span names into one SpanSummaries note: it is
    spans all the same, and must not make every window a critical write (it made a training
    pod's task hot: a write a second instead of one per coalesce interval)."""
    task = TaskRef("ns", "t")
    one = SpanSummary(name="fwd", count=1, total_s=0.1, min_s=0.1, max_s=0.1,
                      first_start=1.0, last_end=1.1)
    packed = SpanSummaries.model_validate({"base_us": 1_000_000, "spans": [
        ["fwd", 1, 100_000, 100_000, 100_000, 0, 100_000, 0],
        ["bwd", 1, 100_000, 100_000, 100_000, 0, 100_000, 0]]})
    assert fact_kind(ev(task, 1, one)) == COALESCIBLE
    assert fact_kind(ev(task, 2, packed)) == COALESCIBLE
    assert fact_kind(ev(task, 3)) == CRITICAL  # a link


def test_failure_keeps_the_state_dirty_and_backs_off() -> None:
    c: Coalescer[str] = Coalescer(interval=0.0, retry_base=0.5, retry_cap=2.0)
    c.changed("a", 0.0)
    waits = []
    now = 0.0
    for _ in range(3):
        assert c.next(now)[0] == "a"
        c.end("a", now + 0.1, ok=False)
        _, wait = c.next(now + 0.1)
        assert wait is not None
        waits.append(wait)
        now += 0.1 + wait
    assert waits == pytest.approx([0.5, 1.0, 2.0])  # capped at 2
    assert c.next(now)[0] == "a"
    assert c.oldest(now) == pytest.approx(now), "the failed change stays as old as it was"
    c.end("a", now + 0.1, ok=True)
    assert c.idle()


def test_keys_are_independent() -> None:
    c: Coalescer[str] = Coalescer(interval=10.0)
    c.changed("a", 0.0)
    assert c.next(0.0)[0] == "a"
    c.changed("b", 0.1)
    assert c.next(0.1)[0] == "b"  # b is not held back by a's write or interval


def _line(priority: bool) -> list[str]:
    """Thirty tasks with coalescible changes, then one critical: the order they are taken."""
    c: Coalescer[str] = Coalescer(interval=0.0, priority=priority)
    for i in range(30):
        c.changed(f"span-{i}", i * 0.01, critical=False)
    c.changed("link", 1.0, critical=True)
    order = []
    while (key := c.next(2.0)[0]) is not None:
        order.append(key)
        c.end(key, 2.0, ok=True)
    return order


def test_a_critical_change_overtakes_a_line_of_coalescible_ones() -> None:
    assert _line(priority=True) == ["link"] + [f"span-{i}" for i in range(30)]
    # The old single line (the baseline): the link waits behind every span.
    assert _line(priority=False) == [f"span-{i}" for i in range(30)] + ["link"]


def test_a_queued_coalescible_key_jumps_the_line_when_it_turns_critical() -> None:
    c: Coalescer[str] = Coalescer(interval=0.5, coalesce_interval=5.0)
    c.changed("a", 0.0)
    assert c.next(0.0)[0] == "a"
    c.end("a", 0.1, ok=True)
    c.changed("a", 0.2, critical=False)
    assert c.next(0.6) == (None, pytest.approx(4.4)), "coalescible: 5 s after the last write"
    c.changed("a", 0.7, critical=True)
    assert c.next(0.7)[0] == "a", "critical: 0.5 s after the last write, due now"


@dataclass
class _Model:
    """The reference plan of one key, written out plainly."""

    dirty: bool = False
    critical: bool = False
    since: float = 0.0
    last_start: float = float("-inf")
    full_at: float = float("-inf")
    retry_at: float = float("-inf")
    failures: int = 0
    flying: bool = False
    taken: tuple[float, bool] = (0.0, False)

    def due(self, now: float) -> bool:
        gap = 0.2 if self.critical else 1.0
        # One write per hot window (twice the interval, 0.4 s) after a burst of two.
        if self.full_at - 0.4 > now + 1e-9:
            return False
        return self.dirty and not self.flying and max(self.last_start + gap,
                                                      self.retry_at) <= now + 1e-9


@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.floats(0, 0.5),
                          st.integers(0, 3)), max_size=100))
@settings(max_examples=200)
def test_the_plan_takes_due_critical_keys_first_then_the_oldest_change(
        steps: list[tuple[int, bool, float, int]]) -> None:
    c: Coalescer[int] = Coalescer(interval=0.2, coalesce_interval=1.0, retry_base=0.1)
    model = {k: _Model() for k in range(6)}
    now = 0.0

    def take() -> None:
        got, _ = c.next(now)
        due = [k for k, m in model.items() if m.due(now)]
        if got is None:
            assert not due, f"{due} are due but nothing was taken"
            return
        assert got in due, "never a key that is in flight, clean or not due"
        rank = {k: (not model[k].critical, model[k].since) for k in due}
        assert rank[got] == min(rank.values()), "critical first, then the oldest change"
        m = model[got]
        m.flying, m.dirty, m.last_start = True, False, now
        m.full_at = max(m.full_at, now) + 0.4
        m.taken, m.critical = (m.since, m.critical), False

    for key, critical, dt, action in steps:
        now += dt
        m = model[key]
        if action == 0 and m.flying:  # the write of ``key`` ends: ok for even keys
            ok = key % 2 == 0
            c.end(key, now, ok)
            m.flying = False
            if ok:
                m.failures, m.retry_at = 0, float("-inf")
            else:
                m.failures += 1
                m.retry_at = now + min(10.0, 0.1 * 2 ** (m.failures - 1))
                m.since = min(m.since, m.taken[0]) if m.dirty else m.taken[0]
                m.critical = m.critical or m.taken[1]
                m.dirty = True
        else:
            c.changed(key, now, critical)
            if not m.dirty:
                m.dirty, m.since = True, now
            m.critical = m.critical or critical
        if action == 3:  # a worker asks: between asks, due keys pile up
            take()
    for k, m in model.items():  # drain: every change is written in the end
        if m.flying:
            c.end(k, now, ok=True)
            m.flying = False
    for _ in range(1000):
        got, wait = c.next(now)
        if got is None:
            if wait is None:
                break
            now += wait
            continue
        c.end(got, now, ok=True)
    assert c.idle()


# --- StatusWriter against a fake API ----------------------------------------------------


class FakeKube:
    def __init__(self, slow: dict[str, float] | None = None, fail_first: int = 0,
                 held: dict[str, threading.Event] | None = None) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        # A task whose requests wait until its event is set (a write in flight for as long
        # as a test needs, whatever the machine's load).
        self.held = held or {}
        self.rv: dict[str, int] = {}
        self.patches: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self.slow = slow or {}
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def request(self, method: str, path: str, **kw: Any) -> Any:
        if kw.get("data") is not None:  # the writer sends PUT bodies encoded already
            kw["body"] = orjson.loads(kw["data"])
        name = path.split("/taskfeedbacks")[1].strip("/").split("/")[0] or \
            kw["body"]["metadata"]["name"]
        with self.lock:
            if self.fail_first:
                self.fail_first -= 1
                raise KubeError(503, "unavailable")
            self.in_flight[name] = self.in_flight.get(name, 0) + 1
            self.max_in_flight[name] = max(self.max_in_flight.get(name, 0),
                                           self.in_flight[name])
        try:
            time.sleep(self.slow.get(name, 0.0))
            if name in self.held:
                assert self.held[name].wait(30), f"{name}'s request held for 30 s"
            with self.lock:
                if method == "POST":
                    if name in self.objects:
                        raise KubeError(409, "exists")
                    self.objects[name] = {}
                    self.rv[name] = self.rv.get(name, 0) + 1
                elif method == "PUT":
                    if name not in self.objects:
                        raise KubeError(404, "not found")
                    if kw["body"]["metadata"]["resourceVersion"] != str(self.rv[name]):
                        raise KubeError(409, "conflict")
                    self.objects[name] = kw["body"]["status"]
                    self.patches[name] = self.patches.get(name, 0) + 1
                    self.rv[name] += 1
                elif method == "GET":
                    if name not in self.objects:
                        raise KubeError(404, "not found")
                    return {"metadata": {"resourceVersion": str(self.rv[name])},
                            "status": self.objects[name]}
                return {"metadata": {"resourceVersion": str(self.rv.get(name, 0))}}
        finally:
            with self.lock:
                self.in_flight[name] -= 1


T = datetime(2026, 1, 1, tzinfo=UTC)


def ev(task: TaskRef, seq: int, payload: Any = None) -> ParsedEvent:
    return ParsedEvent(task=task, sender=PodRef("p", "u-1", task.namespace),
                       payload=payload or LogLink(name=f"l{seq % 3}", url=f"https://x/{seq}"),
                       instance="i1", seq=seq, event_time=T, name=f"{task.name}.{seq}",
                       regarding_kind="TaskFeedback")


def _apply(store: Store, writer: StatusWriter, task: TaskRef, seq: int) -> TaskState:
    state = fold(store.get(task) or new_state(task), ev(task, seq))
    store.put(task, state)
    writer.changed(task)
    return state


def test_burst_of_changes_costs_few_writes_and_the_newest_state_lands() -> None:
    kube = FakeKube(slow={"a": 0.05})
    store = Store()
    w = StatusWriter(kube, store, Metrics(), interval=0.2, workers=4, slow={})  # type: ignore[arg-type]
    w.start()
    a = TaskRef("ns", "a")
    t0 = time.monotonic()
    last = None
    for seq in range(1, 1001):
        last = _apply(store, w, a, seq)
        time.sleep(0.001)
    elapsed = time.monotonic() - t0
    assert w.flush(5)
    assert last is not None
    assert unjudged(kube.objects["a"]) == unjudged(status_body(last))
    assert kube.max_in_flight["a"] == 1
    assert kube.patches["a"] <= elapsed / 0.2 + 2, (kube.patches["a"], elapsed)
    w.stop()


def test_slow_task_does_not_hold_up_another() -> None:
    # a's write is in flight (its request held) until b's newest state has landed: no clock,
    # so a loaded machine proves the same as an idle one; a writer that let a's write hold
    # up b's would never land b's, and fail here.
    release = threading.Event()
    kube = FakeKube(held={"a": release})
    store = Store()
    w = StatusWriter(kube, store, Metrics(), interval=0.0, workers=2,  # type: ignore[arg-type]
                     slow={})
    w.start()
    a, b = TaskRef("ns", "a"), TaskRef("ns", "b")
    last_a = _apply(store, w, a, 1)
    eventually(lambda: kube.in_flight.get("a") == 1, 10, "a's write in flight")
    try:
        for seq in range(1, 20):
            last_b = _apply(store, w, b, seq)
        eventually(lambda: unjudged(kube.objects.get("b")) == unjudged(status_body(last_b)),
                   30, "b's newest state, while a's write is in flight")
        assert kube.in_flight["a"] == 1 and "a" not in kube.objects
    finally:
        release.set()
    assert w.flush(10)
    assert unjudged(kube.objects["a"]) == unjudged(status_body(last_a))
    w.stop()


def test_transient_errors_are_retried_until_written() -> None:
    kube = FakeKube(fail_first=3)
    store = Store()
    m = Metrics()
    w = StatusWriter(kube, store, m, interval=0.0, workers=1, slow={})  # type: ignore[arg-type]
    w.start()
    a = TaskRef("ns", "a")
    last = _apply(store, w, a, 1)
    assert w.flush(10)
    assert unjudged(kube.objects["a"]) == unjudged(status_body(last))
    w.stop()


def test_status_body_and_slow_hook_parsing() -> None:
    t = TaskRef("ns", "t")
    s = fold(new_state(t), ev(t, 1, Progress(fraction=1 / 3)))
    body = status_body(s)
    assert body["phase"] == "Running" and body["progress"] == {
        "percent": 33, "percentText": "33%", "message": ""}
    assert "summary" not in body and body["linkCount"] == 0
    assert None not in status_body(new_state(t)).values()
    assert parse_slow_writes("a:2.5, b:1,bad,c:x") == {"a": 2.5, "b": 1.0}


def test_permanent_refusal_waits_for_the_next_change() -> None:
    class Refusing(FakeKube):
        def request(self, method: str, path: str, **kw: Any) -> Any:
            with self.lock:
                self.patches["calls"] = self.patches.get("calls", 0) + 1
            raise KubeError(422, "invalid name")

    kube = Refusing()
    store = Store()
    m = Metrics()
    w = StatusWriter(kube, store, m, interval=0.0, workers=1, slow={})  # type: ignore[arg-type]
    w.start()
    _apply(store, w, TaskRef("ns", "Bad_Name"), 1)
    assert w.flush(5), "a permanent refusal is not retried forever"
    assert kube.patches["calls"] == 1
    w.stop()


def test_no_write_without_the_lease() -> None:
    kube = FakeKube()
    store = Store()
    asked: list[bool] = []

    def may_write() -> bool:
        asked.append(False)
        return False

    w = StatusWriter(kube, store, Metrics(), interval=0.0, workers=1, slow={},  # type: ignore[arg-type]
                     may_write=may_write)
    w.start()
    _apply(store, w, TaskRef("ns", "a"), 1)
    # Twice: the first attempt has finished (and not written) once the writer asks again.
    eventually(lambda: len(asked) >= 2, 5, "the writer to ask for the lease twice")
    assert kube.objects == {}
    assert not w.idle(), "the state stays dirty for whoever holds the lease"
    w.stop()


def _first_writes(store: Store, w: StatusWriter, tasks: int, timeout: float) -> float:
    """Starts ``w``, changes ``tasks`` new tasks at once; the seconds until all are written."""
    w.start()
    t0 = time.monotonic()
    for i in range(tasks):
        _apply(store, w, TaskRef("ns", f"t{i}"), 1)
    assert w.flush(timeout)
    return time.monotonic() - t0


def test_global_write_budget_bounds_writes_across_tasks() -> None:
    kube = FakeKube()
    store = Store()
    w = StatusWriter(kube, store, Metrics(), interval=0.0, workers=8,  # type: ignore[arg-type]
                     slow={}, max_rate=20)
    elapsed = _first_writes(store, w, 60, timeout=10)
    assert len(kube.objects) == 60
    assert elapsed >= (60 - 20) / 20 * 0.9, f"60 writes in {elapsed:.2f}s exceed 20/s + burst"
    w.stop()


def test_the_cost_budget_bounds_estimated_api_server_time() -> None:
    from tidings.watcher.writer import write_cost

    kube = FakeKube()
    store = Store()
    m = Metrics()
    # 50 ms of API-server CPU per second; 40 first writes (a create and a PUT each) cost
    # ~350 ms in all, so they take several seconds after the one-second burst.
    w = StatusWriter(kube, store, m, interval=0.0, workers=8,  # type: ignore[arg-type]
                     slow={}, budget=0.05)
    elapsed = _first_writes(store, w, 40, timeout=30)
    spent = m.status_write_cost._value.get()
    assert len(kube.objects) == 40
    assert spent >= 40 * (write_cost(0) + write_cost(200)) / 1000
    # Admission lets each worker take one write into debt: allow 8 writes of slack.
    slack = 8 * 2 * write_cost(1000) / 1000
    assert elapsed >= (spent - 0.05 - slack) / 0.05 * 0.9, f"{spent:.3f}s spent in {elapsed:.2f}s"
    w.stop()
