"""The record of deleted TaskFeedbacks: which listed events are a deleted run's (the pure rule
and record, schemas/engine/deletions.py), the watcher's side (watcher/deletions.py: the metadata
watch that sees deletions, the ConfigMap it keeps them in, delivery's drop)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.kube import KubeError
from tidings.schemas import LogLink, PodRef, TaskRef
from tidings.schemas.engine.deletions import Deletions, keep_for, of_deleted_run
from tidings.schemas.wire.event import ParsedEvent, build_event, parse_event
from tidings.schemas.wire.times import epoch
from tidings.watcher.deletions import KEY, DeletionRecord
from tidings.watcher.delivery import Delivery
from tidings.watcher.logs import RejectionLog
from tidings.watcher.metrics import Metrics
from tidings.watcher.queue import WorkQueue
from tidings.watcher.senders import Senders
from tidings.watcher.store import Store

NS = "team-a"
T0 = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)
TASK = TaskRef(NS, "train")


# --- the rule ---------------------------------------------------------------------------
def test_an_event_created_up_to_the_deletions_second_is_the_deleted_runs() -> None:
    at = epoch(T0)
    assert of_deleted_run(T0 - timedelta(minutes=5), "", at)
    # Creation times have whole seconds: the deletion's own second is the deleted run's.
    assert of_deleted_run(T0, "", at)
    assert not of_deleted_run(T0 + timedelta(seconds=1), "", at)  # a new run
    assert not of_deleted_run(T0 - timedelta(minutes=5), "", None)  # no deletion recorded
    assert not of_deleted_run(None, "", at)  # no creation time: nothing says it is old
    # An event naming a TaskFeedback uid is judged by that object (admission), not here.
    assert not of_deleted_run(T0 - timedelta(minutes=5), "uid-1", at)


def test_a_deletion_is_kept_for_the_event_ttl_and_the_clocks_allowance() -> None:
    d = Deletions.of([(TASK, T0)])
    keep = keep_for(3600, 2)
    assert keep > 3600
    assert d.prune(T0 + timedelta(seconds=keep), keep) == 0 and d.deleted(TASK) == epoch(T0)
    assert d.prune(T0 + timedelta(seconds=keep + 1), keep) == 1 and d.deleted(TASK) is None


def test_a_later_deletion_replaces_an_earlier_one_and_merging_keeps_the_later() -> None:
    d = Deletions()
    assert d.record(TASK, T0)
    assert not d.record(TASK, T0 - timedelta(seconds=3))  # (an older sighting says nothing)
    assert d.record(TASK, T0 + timedelta(seconds=9))
    other = Deletions.of([(TASK, T0), (TaskRef(NS, "b"), T0)])
    assert d.merge(other) and d.deleted(TASK) == epoch(T0) + 9
    assert not d.merge(other)


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=40)
records = st.dictionaries(st.builds(TaskRef, names, names),
                          st.integers(min_value=0, max_value=2**40 - 1), max_size=60)


@settings(max_examples=200, deadline=None)
@given(records)
def test_the_durable_form_reads_back_equal(at: dict[TaskRef, int]) -> None:
    d = Deletions(at)
    text, left_out = d.encode()
    assert left_out == 0 and Deletions.decode(text) == d


@settings(max_examples=200, deadline=None)
@given(records, st.integers(min_value=30, max_value=2000))
def test_the_durable_form_keeps_the_newest_within_its_byte_budget(
        at: dict[TaskRef, int], budget: int) -> None:
    d = Deletions(at)
    text, left_out = d.encode(budget)
    back = Deletions.decode(text)
    assert len(text.encode()) <= max(budget, len('{"version":1,"deleted":{}}'))
    assert len(back) + left_out == len(d)
    kept = back.items()
    assert all(d.deleted(t) == s for t, s in kept)
    if kept and left_out:  # nothing left out is newer than what was kept
        assert min(s for _, s in kept) >= max(s for t, s in d.items() if back.deleted(t) is None)


@given(st.one_of(st.none(), st.text(), st.binary().map(lambda b: b.decode("latin-1")),
                 st.recursive(st.one_of(st.none(), st.integers(), st.text()),
                              lambda kids: st.dictionaries(st.text(), kids), max_leaves=8)
                 .map(lambda x: json.dumps({"version": 1, "deleted": x}))))
def test_a_damaged_record_reads_as_what_it_holds_that_reads(text: Any) -> None:
    d = Deletions.decode(text)
    assert all(isinstance(s, int) for _, s in d.items())


def test_another_version_reads_as_empty() -> None:
    text, _ = Deletions.of([(TASK, T0)]).encode()
    assert Deletions.decode(text.replace('"version":1', '"version":2')) == Deletions()


# --- delivery ---------------------------------------------------------------------------
def _fact(created: datetime, seq: int, task_uid: str = "") -> ParsedEvent:
    raw = build_event(task=TASK, pod=PodRef("train-0", "uid-pod", NS),
                      payload=LogLink(name="w", url="https://x.y/"), instance="i" * 32,
                      seq=seq, time=created, sender_proof=False, task_uid=task_uid)
    ev = parse_event(raw)
    assert isinstance(ev, ParsedEvent)
    return replace(ev, created=created)


def _delivery(deletions: Deletions) -> tuple[Delivery, Store, Metrics]:
    store, metrics = Store(), Metrics()
    return Delivery(store, WorkQueue(), Senders(lambda path: None), metrics,
                    RejectionLog(lambda reason: None), retry_after=3600,
                    deletions=deletions), store, metrics


def _skipped(m: Metrics) -> float:
    return m.events_skipped.labels("deleted_run")._value.get()  # type: ignore[attr-defined]


def test_a_list_brings_a_deleted_runs_events_again_and_they_are_dropped_counted() -> None:
    d, store, metrics = _delivery(Deletions.of([(TASK, T0)]))
    old, new = _fact(T0 - timedelta(seconds=30), 1), _fact(T0 + timedelta(seconds=2), 2)
    named = _fact(T0 - timedelta(seconds=30), 3, task_uid="0d6e8f1a-0000-4000-8000-000000000001")
    d.deliver_many([old, new, named], listed=True)
    assert [ev.seq for ev in store.pending(TASK)] == [2, 3]
    assert _skipped(metrics) == 1


def test_a_watch_brings_events_as_they_are_created_and_this_term_folds_them() -> None:
    d, store, metrics = _delivery(Deletions.of([(TASK, T0)]))
    d.deliver_many([_fact(T0, 1)])
    assert [ev.seq for ev in store.pending(TASK)] == [1] and _skipped(metrics) == 0


def test_no_deletion_recorded_drops_nothing() -> None:
    d, store, metrics = _delivery(Deletions())
    d.deliver_many([_fact(T0, 1)], listed=True)
    assert len(store.pending(TASK)) == 1 and _skipped(metrics) == 0


# --- seeing deletions -------------------------------------------------------------------
def _line(kind: str, name: str) -> bytes:
    return orjson.dumps({"type": kind, "object": {
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                     "resourceVersion": "7"}}})


def _obj(name: str) -> Any:
    return orjson.loads(_line("ADDED", name))["object"]


def test_a_deletion_is_seen_from_the_watch_and_from_a_relist_that_misses_an_object() -> None:
    record = DeletionRecord(None, None, 3600, Metrics(), clock=lambda: T0)
    src = record.source()
    src.list_begin()
    src.list_page([_obj("a"), _obj("b"), _obj("c")])
    src.list_done("5")
    assert not record.deletions
    assert src.watch_line(_line("DELETED", "a")).type == "DELETED"
    assert record.deleted_at(TaskRef(NS, "a")) == epoch(T0)
    src.watch_line(_line("MODIFIED", "b"))
    # The watch was down while c went: the relist does not list it.
    src.list_begin()
    src.list_page([_obj("b")])
    src.list_done("9")
    assert record.deleted_at(TaskRef(NS, "c")) == epoch(T0)
    assert record.deleted_at(TaskRef(NS, "b")) is None


# --- the durable record -----------------------------------------------------------------
class FakeKube:
    """One ConfigMap behind GET/POST/PUT with resourceVersion preconditions."""

    def __init__(self, deny: bool = False) -> None:
        self.cm: dict[str, Any] | None = None
        self.rv = 0
        self.deny = deny
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def request(self, method: str, path: str, *, body: Any = None, **kw: Any) -> Any:
        with self.lock:
            self.calls.append(method)
            if self.deny:
                raise KubeError(403, "forbidden", reason="Forbidden")
            if method == "GET":
                if self.cm is None:
                    raise KubeError(404, "not found", reason="NotFound")
                return json.loads(json.dumps(self.cm))
            if method == "POST":
                if self.cm is not None:
                    raise KubeError(409, "exists", reason="AlreadyExists")
            elif method == "PUT":
                if self.cm is None:
                    raise KubeError(404, "not found", reason="NotFound")
                if body["metadata"].get("resourceVersion") != str(self.rv):
                    raise KubeError(409, "changed", reason="Conflict")
            self.rv += 1
            self.cm = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
            return self.cm

    def held(self) -> Deletions:
        assert self.cm is not None
        return Deletions.decode(self.cm["data"][KEY])


def _record(kube: Any, now: datetime = T0, may_write: Any = lambda: True) -> DeletionRecord:
    return DeletionRecord(kube, ("tidings-system", "tidings-watcher-deletions"),
                          keep_for(3600, 2), Metrics(), may_write=may_write,
                          clock=lambda: now)


def test_a_deletion_survives_a_restart_and_a_handover() -> None:
    kube = FakeKube()
    one = _record(kube)
    one.load()
    one.seen_deleted(TASK)
    assert one.flush() and kube.held() == Deletions.of([(TASK, T0)])
    two = _record(kube, T0 + timedelta(minutes=5))  # the next term, on another replica
    two.load()
    assert two.deleted_at(TASK) == epoch(T0)
    # An older term that wrote after this one read merges in, never overwrites.
    one.seen_deleted(TaskRef(NS, "b"))
    assert one.flush()
    two.seen_deleted(TaskRef(NS, "c"))
    assert two.flush()
    assert {t.name for t, _ in kube.held().items()} == {"train", "b", "c"}


def test_a_deletion_older_than_the_event_ttl_is_forgotten() -> None:
    kube = FakeKube()
    one = _record(kube)
    one.seen_deleted(TASK)
    assert one.flush()
    late = _record(kube, T0 + timedelta(seconds=keep_for(3600, 2) + 5))
    late.load()
    assert not late.deletions


def test_a_fenced_replica_writes_nothing_and_keeps_the_change_for_later() -> None:
    kube = FakeKube()
    leading = [False]
    r = _record(kube, may_write=lambda: leading[0])
    r.seen_deleted(TASK)
    assert not r.flush() and kube.calls == []
    leading[0] = True
    assert r.flush() and kube.held().deleted(TASK) == epoch(T0)


def test_without_the_right_the_watcher_runs_and_remembers_in_memory() -> None:
    kube = FakeKube(deny=True)
    metrics = Metrics()
    r = DeletionRecord(kube, ("tidings-system", "x"), 3600, metrics, clock=lambda: T0)
    r.load()  # logged, not raised: the term starts
    r.seen_deleted(TASK)
    assert not r.flush() and r.deleted_at(TASK) == epoch(T0)
    assert metrics.deletion_record_writes.labels("error")._value.get() == 1  # type: ignore[attr-defined]


def test_a_record_that_cannot_be_read_for_now_holds_the_term_back() -> None:
    class Down(FakeKube):
        def request(self, method: str, path: str, **kw: Any) -> Any:
            raise KubeError(503, "unavailable", reason="ServiceUnavailable")

    try:
        _record(Down()).load()
    except KubeError as e:
        assert e.status == 503
    else:
        raise AssertionError("a term must not list the bus without the record")


@pytest.mark.parametrize("record", [("tidings-system", "tidings-watcher-deletions"), None])
def test_a_start_that_fails_on_a_read_and_is_tried_again_leaves_no_hold(
        record: tuple[str, str] | None) -> None:
    """``app`` tries a start that failed (the API server unreachable) again on the same
    controller: a hold of the event lists left by the failed start would never be released,
    and no task of that term would ever be folded."""
    from tidings.watcher.controller import Controller
    from tidings.watcher.settings import Settings

    class Down:
        def request(self, method: str, path: str, **kw: Any) -> Any:
            raise KubeError(503, "unavailable", reason="ServiceUnavailable")

    c = Controller(Down(), Settings(), Metrics(), deletions_at=record)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(KubeError):
            c.start()
    assert not c.store._listing
