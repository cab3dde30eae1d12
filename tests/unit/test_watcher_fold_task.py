"""The watcher's fold of a task's pending events (``Folder.fold_task``, watcher/fold.py): the
sender check's verdict is kept per (sender, proof) within one fold, and the metrics are added
once per fold; neither may change what is applied or how it is counted. Pure: the pods are in
the sender cache, so nothing asks the API server (the controller is built without a client)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tidings.schemas import LogLink, ParsedEvent, PodRef, PodSpawned, Progress, TaskRef
from tidings.schemas.wire.constants import API_VERSION, KIND, TASK_LABEL
from tidings.schemas.wire.platform import PodTask
from tidings.watcher.controller import Controller, Settings
from tidings.watcher.metrics import Metrics

TASK = TaskRef("team-a", "train-1")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)


def _event(sender: PodRef, payload: object, seq: int) -> ParsedEvent:
    return ParsedEvent(TASK, sender, payload, "inst-1", seq,  # type: ignore[arg-type]
                       T0 + timedelta(seconds=seq), f"train-1.{seq:016x}", KIND,
                       regarding_api_version=API_VERSION)


def _value(m: Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


def test_a_kept_verdict_never_answers_for_lineage_or_another_namespace() -> None:
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.store.load(TASK, None, exists=False)
    worker = PodRef("train-1-0", "uid-w", "team-a")
    # The same name and uid in another namespace: another pod, which may not speak for TASK.
    twin = PodRef("train-1-0", "uid-w", "team-b")
    c.senders.put(("team-a", "train-1-0", "uid-w"), PodTask("train-1", TASK_LABEL))
    c.senders.put(("team-a", "db-0", "uid-db"), PodTask("db", TASK_LABEL))  # another task's
    events = [
        _event(worker, LogLink(name="w", url="https://x.y/"), 0),
        # Lineage from the trusted worker, naming a pod of another task: judged by that pod.
        _event(worker, PodSpawned(pod_name="db-0", pod_uid="uid-db", app="train-1"), 1),
        _event(worker, Progress(fraction=0.5), 2),
        _event(twin, Progress(fraction=0.9), 3),
        _event(worker, LogLink(name="v", url="https://x.y/v"), 4),
    ]
    c.store.push_many(events)
    c.folder.fold_task(TASK)
    state, _ = c.store.take(TASK)
    assert state.applied.count() == 3  # seqs 0, 2, 4
    assert sorted(state.links) == ["v", "w"]
    assert list(state.workers) == ["train-1-0"]
    assert state.workers["train-1-0"].fraction == 0.5
    m = c.metrics
    assert _value(m, "tidings_watcher_events_applied_total") == 3
    assert _value(m, "tidings_watcher_sender_lookups_total", source="cache") == 3
    assert _value(m, "tidings_watcher_events_rejected_total", reason="unverified_lineage") == 1
    assert _value(m, "tidings_watcher_events_rejected_total", reason="spoofed_sender") == 1


# --- refused names, the object's uid, a TTL-deleted run -----------------------


def _other(name: str, seq: int, *, instance: str = "inst-1", uid: str = "",
           sender: PodRef | None = None) -> ParsedEvent:
    task = TaskRef("team-a", name)
    return ParsedEvent(task, sender or PodRef("resnet-0", "uid-r", "team-a"),
                       Progress(fraction=0.5), instance, seq, T0 + timedelta(seconds=seq),
                       f"{name}.{seq:016x}", KIND, regarding_api_version=API_VERSION,
                       regarding_uid=uid)


def test_a_name_only_refused_events_claim_leaves_nothing_and_asks_nothing() -> None:
    """Item 4: one pod claims 500 task names it is not labelled for. The controller has no
    API client at all (``None``): a TaskFeedback read would raise, so none happens; and no
    entry outlives the fold."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.senders.put(("team-a", "resnet-0", "uid-r"), PodTask("resnet-50", TASK_LABEL))
    names = [f"victim-{i}" for i in range(500)]
    c.store.push_many([_other(n, 1) for n in names])
    assert len(c.store) == 500  # buffered until its fold: the only cost, and a passing one
    for n in names:
        c.folder.fold_task(TaskRef("team-a", n))
    assert len(c.store) == 0
    assert _value(c.metrics, "tidings_watcher_events_rejected_total",
                  reason="spoofed_sender") == 500


def test_an_event_naming_another_objects_uid_is_refused_and_counted() -> None:
    """Item 3: the task's object is uid-2 (a re-run); uid-1 (the deleted run) is stale."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.senders.put(("team-a", "train-1-0", "uid-w"), PodTask("train-1", TASK_LABEL))
    c.store.load(TASK, None, rv="7", uid="uid-2")
    c.store.stale(TASK, {"uid-1"})
    worker = PodRef("train-1-0", "uid-w", "team-a")
    old = _other("train-1", 1, instance="run-1", uid="uid-1", sender=worker)
    new = _other("train-1", 1, instance="run-2", uid="uid-2", sender=worker)
    plain = _other("train-1", 2, instance="run-2", sender=worker)  # no uid: follows the name
    c.store.push_many([old, new, plain])
    c.folder.fold_task(TASK)
    state, _ = c.store.take(TASK)
    assert state.applied.instances == ["run-2"] and state.applied.count() == 2
    assert c.store.refused(TASK) == {"other_object": 1}
    assert _value(c.metrics, "tidings_watcher_events_rejected_total",
                  reason="other_object") == 1
    # A relist delivers the refused event again: the task counts it once.
    c.store.push(old)
    c.folder.fold_task(TASK)
    assert c.store.refused(TASK) == {"other_object": 1}


def test_after_the_ttl_deleted_a_run_its_late_facts_are_refused_and_a_new_run_starts_clean(
        ) -> None:
    """Item 9: the late fact of a buried instance is refused (deleted_task) and noted for the
    next sweep to delete its event; a new instance starts a fresh state."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.senders.put(("team-a", "train-1-0", "uid-w"), PodTask("train-1", TASK_LABEL))
    worker = PodRef("train-1-0", "uid-w", "team-a")
    c.store.load(TASK, None, rv="3", uid="uid-1")
    c.store.push(_other("train-1", 1, instance="run-1", sender=worker))
    c.folder.fold_task(TASK)
    c.store.written(TASK, 1, "4")
    c.store.bury(TASK, "uid-1", frozenset())
    late = _other("train-1", 2, instance="run-1", sender=worker)
    fresh = _other("train-1", 1, instance="run-2", sender=worker)
    c.store.push(late)
    c.folder.fold_task(TASK)
    # Refused, and nothing to write: a refusal count alone never re-creates the object.
    assert c.store.unwritten(TASK) is None and c.store.refused(TASK) == {}
    c.store.push(fresh)
    c.folder.fold_task(TASK)
    state, _ = c.store.take(TASK)
    assert state.applied.instances == ["run-2"]
    assert _value(c.metrics, "tidings_watcher_events_rejected_total",
                  reason="deleted_task") == 1
    assert c.folder.late_after_ttl == {TASK}


# --- a list coming: nothing is folded before it is in -----------------------------------


def _window(sender: PodRef, spans: int, seq: int) -> ParsedEvent:
    from tidings.schemas.wire.payloads import Window, span_row

    base_us = int(1000 * 1e6)
    rows = [span_row("step", spans, 0.25 * spans, 0.25, 0.25, 1000.0, 1000.0 + spans, 0,
                     base_us)]
    return _event(sender, Window(progress=None, metrics=[], base_us=base_us, spans=rows), seq)


def _restarted(c: Controller) -> PodRef:
    """A task whose worker reported 50 % and one window of 4 spans, as the last status of a
    watcher that stopped since: then the worker sent a window of 8 more spans and its final,
    and its pod ended."""
    worker = PodRef("train-1-0", "uid-w", "team-a")
    c.senders.put(("team-a", "train-1-0", "uid-w"), PodTask("train-1", TASK_LABEL))
    c.store.load(TASK, None, exists=False)
    c.store.push_many([_event(worker, Progress(fraction=0.5), 1), _window(worker, 4, 2)])
    c.folder.fold_task(TASK)
    return worker


def _spans(c: Controller) -> int:
    state = c.store.get(TASK)
    assert state is not None
    return sum(a.count for a in state.spans.values())


def test_a_pod_s_end_read_before_the_events_list_completes_nothing_until_the_list_is_in(
        ) -> None:
    """A restart (or a handover) lists the pods before the events: the worker's pod has
    ended, and its last window and final are in the events still coming. Folding the pod's
    end first made the task Succeeded (by its pod's end) without them, and a status written
    then told `kubectl wait --for=condition=Completed` it was over."""
    from tidings.schemas.wire.contract import RUNNING, SUCCEEDED
    from tidings.watcher.delivery import EventSource

    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    worker = _restarted(c)
    assert _spans(c) == 4
    source = EventSource(c.delivery)  # the new term's events source: a list coming
    c.senders.put(("team-a", "train-1-0", "uid-w"), PodTask("train-1", TASK_LABEL),
                  _succeeded("train-1-0", "uid-w"))
    c.folder.fold_task(TASK)  # asked by the pod's change: held
    assert c.store.get(TASK).phase == RUNNING  # type: ignore[union-attr]
    c.delivery.deliver_many([_window(worker, 8, 3),
                             _event(worker, Progress(fraction=1.0, final=True), 4)])
    c.folder.fold_task(TASK)  # asked by the list's first page: held too
    assert c.store.get(TASK).phase == RUNNING  # type: ignore[union-attr]
    source.list_done("42")
    assert c.queue.pending() == 1  # the held task, asked again
    c.folder.fold_task(TASK)
    state = c.store.get(TASK)
    assert state is not None and state.phase == SUCCEEDED
    assert _spans(c) == 12 and state.workers["train-1-0"].final  # its own final decided


def _succeeded(name: str, uid: str) -> object:
    from tidings.schemas.engine.observed import pod_verdict

    return pod_verdict({"metadata": {"name": name, "uid": uid, "namespace": "team-a"},
                        "status": {"phase": "Succeeded"}}, seen=T0 + timedelta(minutes=5))
