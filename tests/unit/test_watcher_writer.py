"""Coalesced status writes: the pure bookkeeping, then the writer against a fake API."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime
from typing import Any

from tests.support import eventually
from tidings._compat import UTC
from tidings.schemas.event import ParsedEvent, PodRef, TaskRef
from tidings.schemas.payloads import LogLink, Progress
from tidings.schemas.state import TaskState, fold, new_state
from tidings.watcher.coalesce import Coalescer
from tidings.watcher.kube import KubeError
from tidings.watcher.metrics import Metrics
from tidings.watcher.store import Store
from tidings.watcher.writer import StatusWriter, parse_slow_writes, status_body

# --- Coalescer (pure) ------------------------------------------------------------------


def test_first_change_schedules_immediately_then_collapses() -> None:
    c: Coalescer[str] = Coalescer(interval=1.0)
    assert c.changed("a", 0.0) == 0.0
    assert c.changed("a", 0.1) is None  # already scheduled
    assert c.begin("a", 0.2)
    assert c.changed("a", 0.3) is None  # in flight: remembered, not scheduled twice
    assert c.changed("a", 0.4) is None
    # the write ends; the newer state goes next, one interval after the last start
    assert c.end("a", 0.5, ok=True) == 0.7
    assert c.begin("a", 1.2)
    assert c.end("a", 1.3, ok=True) is None
    assert c.idle()


def test_writes_are_spaced_by_the_interval() -> None:
    c: Coalescer[str] = Coalescer(interval=0.5)
    starts = []
    now, due = 0.0, None
    # 1000 changes/s for 5 s: a start happens only when the scheduled time is due
    for i in range(5000):
        now = i / 1000
        d = c.changed("k", now)
        if d is not None:
            due = now + d
        if due is not None and now >= due:
            assert c.begin("k", now)
            starts.append(now)
            due = None
            d = c.end("k", now + 0.01, ok=True)
            if d is not None:
                due = now + 0.01 + d
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) <= 5 / 0.5 + 1
    assert min(gaps) >= 0.5 - 1e-9


def test_failure_keeps_the_state_dirty_and_backs_off() -> None:
    c: Coalescer[str] = Coalescer(interval=0.0, retry_base=0.5, retry_cap=2.0)
    assert c.changed("a", 0.0) == 0.0
    assert c.begin("a", 0.0)
    assert c.end("a", 0.1, ok=False) == 0.5
    assert c.begin("a", 0.6)
    assert c.end("a", 0.7, ok=False) == 1.0
    assert c.begin("a", 1.7)
    assert c.end("a", 1.8, ok=False) == 2.0  # capped
    assert c.begin("a", 3.8)
    assert c.end("a", 3.9, ok=True) is None
    assert c.idle()


def test_begin_without_a_change_writes_nothing() -> None:
    c: Coalescer[str] = Coalescer(interval=0.0)
    assert not c.begin("a", 0.0)
    assert c.changed("a", 0.0) == 0.0
    assert c.begin("a", 0.0)
    assert not c.begin("a", 0.0), "never two writes of one key in flight"


def test_keys_are_independent() -> None:
    c: Coalescer[str] = Coalescer(interval=10.0)
    assert c.changed("a", 0.0) == 0.0
    assert c.begin("a", 0.0)
    assert c.changed("b", 0.1) == 0.0  # b is not held back by a's write or interval


# --- StatusWriter against a fake API ----------------------------------------------------


class FakeKube:
    def __init__(self, slow: dict[str, float] | None = None, fail_first: int = 0) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv: dict[str, int] = {}
        self.patches: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.max_in_flight: dict[str, int] = {}
        self.slow = slow or {}
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def request(self, method: str, path: str, **kw: Any) -> Any:
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
    assert kube.objects["a"] == status_body(last)
    assert kube.max_in_flight["a"] == 1
    assert kube.patches["a"] <= elapsed / 0.2 + 2, (kube.patches["a"], elapsed)
    w.stop()


def test_slow_task_does_not_hold_up_another() -> None:
    kube = FakeKube()
    store = Store()
    w = StatusWriter(kube, store, Metrics(), interval=0.0, workers=2,  # type: ignore[arg-type]
                     slow={"a": 2.0})
    w.start()
    a, b = TaskRef("ns", "a"), TaskRef("ns", "b")
    _apply(store, w, a, 1)
    eventually(lambda: w.queue.is_processing(a), 5, "a's write to sit in the slow hook")
    t0 = time.monotonic()
    for seq in range(1, 20):
        last_b = _apply(store, w, b, seq)
        time.sleep(0.005)
    eventually(lambda: kube.objects.get("b") == status_body(last_b), 1.0,
               "b's newest state, while a's write sleeps")
    assert time.monotonic() - t0 < 1.0
    assert "a" not in kube.objects or not kube.objects["a"]
    assert w.flush(5)
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
    assert kube.objects["a"] == status_body(last)
    w.stop()


def test_status_body_and_slow_hook_parsing() -> None:
    t = TaskRef("ns", "t")
    s = fold(new_state(t), ev(t, 1, Progress(fraction=1 / 3)))
    body = status_body(s)
    assert body["phase"] == "Running" and body["progress"] == {"percent": 33, "message": ""}
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


def test_global_write_budget_bounds_writes_across_tasks() -> None:
    kube = FakeKube()
    store = Store()
    w = StatusWriter(kube, store, Metrics(), interval=0.0, workers=8,  # type: ignore[arg-type]
                     slow={}, max_rate=20)
    w.start()
    t0 = time.monotonic()
    for i in range(60):
        _apply(store, w, TaskRef("ns", f"t{i}"), 1)
    assert w.flush(10)
    elapsed = time.monotonic() - t0
    assert len(kube.objects) == 60
    assert elapsed >= (60 - 20) / 20 * 0.9, f"60 writes in {elapsed:.2f}s exceed 20/s + burst"
    w.stop()
