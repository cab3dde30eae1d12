"""One admission rule: the watcher and `tidings state --from-events` (the CLI's local fold)
admit the same facts of a task, given the same pods and the same TaskFeedback. Pure: the
watcher is built without a client (its pod cache holds the pods) and the CLI reads a fake
API that serves the same pods and events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tidings.schemas import LogLink, PodRef, PodSpawned, Progress, TaskRef
from tidings.schemas.constants import KIND, TASK_LABEL
from tidings.schemas.event import ObjectRef, build_event, parse_event
from tidings.schemas.platform import DEFAULT_TASK_KEYS, pod_task
from tidings.watcher.controller import Controller, Settings
from tidings.watcher.metrics import Metrics

NS = "team-a"
TASK = TaskRef(NS, "train-1")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
WORKER = PodRef("train-1-0", "uid-w", NS)
SPAWNED = PodRef("train-1-1", "uid-s", NS)


def _pod(ref: PodRef, task: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid,
                         "labels": {TASK_LABEL: task}},
            "status": {"phase": "Running"}}


PODS = [_pod(WORKER, TASK.name), _pod(SPAWNED, TASK.name)]


def _raw(payload: Any, seq: int, *, regarding: ObjectRef | None = None, task_uid: str = ""
         ) -> dict[str, Any]:
    raw = build_event(task=TASK, pod=WORKER, payload=payload, instance="run-1", seq=seq,
                      time=T0 + timedelta(seconds=seq), regarding=regarding,
                      task_uid=task_uid, sender_proof=False)
    raw["metadata"]["resourceVersion"] = str(seq)
    return raw


@dataclass
class FakeKube:
    """What the CLI's local fold reads, served from memory: the events by field selector
    (their regarding kind), the pods by path and by label; no TaskFeedback, no policy."""

    events: list[dict[str, Any]]
    namespace: str = NS
    client: Any = None

    def list_events(self, namespace: str | None, selector: str
                    ) -> tuple[list[dict[str, Any]], str]:
        kind = "Pod" if "regarding.kind=Pod" in selector else KIND
        return [e for e in self.events if e["regarding"]["kind"] == kind], "100"

    def list_pods(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        key, _, value = selector.partition("=")
        return [p for p in PODS if p["metadata"]["labels"].get(key) == value], "100"

    def get_json(self, path: str, query: Any = None, *, action: Any = None) -> Any:
        return next((p for p in PODS if path.endswith(f"/pods/{p['metadata']['name']}")),
                    None)


def watcher_admits(raws: list[dict[str, Any]], uid: str | None, stale: set[str]
                   ) -> set[tuple[str, int]]:
    """The (instance, seq) the watcher folds into TASK, its object ``uid`` (None: none)."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    for pod in PODS:
        meta = pod["metadata"]
        c.senders.put((meta["namespace"], meta["name"], meta["uid"]),
                      pod_task(meta, DEFAULT_TASK_KEYS))
    c.store.load(TASK, None, rv="7" if uid else None, uid=uid, exists=uid is not None)
    c.store.stale(TASK, stale)
    c.delivery.deliver_many([parse_event(r) for r in raws], raws)
    c.folder.fold_task(TASK)
    state = c.store.get(TASK)
    assert state is not None
    return {(ev.instance, ev.seq) for r in raws
            if state.applied.contains((ev := parse_event(r)).instance, ev.seq)}  # type: ignore[union-attr]


def cli_admits(raws: list[dict[str, Any]], uid: str | None) -> set[tuple[str, int]]:
    """The (instance, seq) `tidings state --from-events` folds for TASK ("" : no object)."""
    from tidings.cli import taskview

    snap = taskview.from_events(FakeKube(raws), TASK, None, uid or "")  # type: ignore[arg-type]
    return {(ev.instance, ev.seq) for r in raws
            if snap.state.applied.contains((ev := parse_event(r)).instance, ev.seq)}  # type: ignore[union-attr]


OTHER_GROUP = ObjectRef("evil.example/v1", KIND, TASK.name, NS)
OWN_POD = ObjectRef("v1", "Pod", WORKER.name, NS, WORKER.uid)
DRIFT = ("the CLI's own copy of the admission rule (taskview.refusal) takes lineage "
         "regarding another API group's TaskFeedback, or the sender's pod, as a task fact; "
         "the watcher does not")

CASES = [
    pytest.param([_raw(LogLink(name="w", url="https://x.y/"), 1)], None, set(), id="a-fact"),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1)], None, set(), id="lineage"),
    pytest.param([_raw(Progress(fraction=0.5), 1, task_uid="uid-old"),
                  _raw(Progress(fraction=0.6), 2, task_uid="uid-now")], "uid-now", {"uid-old"},
                 id="a-stale-uid"),
    pytest.param([_raw(Progress(fraction=0.5), 1, task_uid="uid-old")], None, {"uid-old"},
                 id="a-uid-with-no-object"),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1, regarding=OTHER_GROUP)], None, set(), id="lineage-of-another-group",
                 marks=pytest.mark.xfail(strict=True, reason=DRIFT)),
    pytest.param([_raw(PodSpawned(pod_name=SPAWNED.name, pod_uid=SPAWNED.uid, app=TASK.name),
                       1, regarding=OWN_POD)], None, set(), id="lineage-about-its-own-pod",
                 marks=pytest.mark.xfail(strict=True, reason=DRIFT)),
]


@pytest.mark.parametrize(("raws", "uid", "stale"), CASES)
def test_the_watcher_and_the_local_fold_admit_the_same_facts(
        raws: list[dict[str, Any]], uid: str | None, stale: set[str]) -> None:
    assert cli_admits(raws, uid) == watcher_admits(raws, uid, stale)
