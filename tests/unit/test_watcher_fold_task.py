"""The watcher's fold of a task's pending events (Controller.fold_task): the sender check's
verdict is kept per (sender, proof) within one fold, and the metrics are added once per fold;
neither may change what is applied or how it is counted. Pure: the pods are in the sender
cache, so nothing asks the API server (the controller is built without a client)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tidings.schemas import LogLink, ParsedEvent, PodRef, PodSpawned, Progress, TaskRef
from tidings.schemas.constants import API_VERSION, KIND, TASK_LABEL
from tidings.schemas.platform import PodTask
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
    c.fold_task(TASK)
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
