"""Delivery of facts a pod sends about itself (watcher/delivery.py): a pod the cache does not
know is read by a resolver keyed by pod, whose retries wait on the queue's delay; so a pod
the API cannot answer for (slow, or failing and retried) stalls no other pod's facts."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from tests.support import eventually
from tidings.schemas import LogLink, PodRef, TaskRef
from tidings.schemas.wire.constants import TASK_LABEL
from tidings.schemas.wire.event import ObjectRef, build_event, parse_event
from tidings.watcher.delivery import Delivery
from tidings.watcher.logs import RejectionLog
from tidings.watcher.metrics import Metrics
from tidings.watcher.queue import WorkQueue
from tidings.watcher.senders import SenderLookupError, Senders
from tidings.watcher.store import Store

NS = "team-a"


def _pod_fact(pod: PodRef, seq: int) -> Any:
    raw = build_event(task=TaskRef(NS, pod.name), pod=pod,
                      payload=LogLink(name="w", url="https://x.y/"), instance="i" * 32,
                      seq=seq, time=datetime.now(UTC), sender_proof=False,
                      regarding=ObjectRef("v1", "Pod", pod.name, NS, pod.uid))
    return parse_event(raw)


def _pod(pod: PodRef, task: str) -> dict[str, Any]:
    return {"metadata": {"name": pod.name, "namespace": NS, "uid": pod.uid,
                         "labels": {TASK_LABEL: task}}}


SLOW = PodRef("slow-0", "uid-slow", NS)
FAILING = PodRef("failing-0", "uid-failing", NS)
FINE = PodRef("fine-0", "uid-fine", NS)


def test_a_pod_the_api_cannot_answer_for_stalls_no_other_pods_facts() -> None:
    release = threading.Event()
    asked: list[str] = []

    def get(path: str) -> Any:
        name = path.rsplit("/", 1)[-1]
        asked.append(name)
        if name == SLOW.name:
            release.wait(30)  # a GET that hangs until the test is done
            return _pod(SLOW, "slow")
        if name == FAILING.name:
            raise SenderLookupError("503", retry=True)
        return _pod(FINE, "fine")

    store = Store()
    queue: WorkQueue[TaskRef] = WorkQueue()
    metrics = Metrics()
    # A retry an hour away: a resolver that slept it would hold every pod behind it.
    d = Delivery(store, queue, Senders(get), metrics,
                 RejectionLog(lambda reason: None), retry_after=3600)
    workers = [threading.Thread(target=d.run_resolver, daemon=True) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        facts = [_pod_fact(SLOW, 1), _pod_fact(FAILING, 1), _pod_fact(FINE, 1)]
        d.deliver_many(facts)
        eventually(lambda: store.pending(TaskRef(NS, "fine")), 10,
                   "the known pod's fact to reach its task")
        assert [ev.task for ev in store.pending(TaskRef(NS, "fine"))] == [TaskRef(NS, "fine")]
        assert queue.get(0) == TaskRef(NS, "fine")
        assert asked.count(FAILING.name) == 1, "a failed read waits for its retry time"
        assert d.unresolved() == 2  # the slow one being read, the failing one waiting
        release.set()
        eventually(lambda: store.pending(TaskRef(NS, "slow")), 10, "the slow pod's fact")
    finally:
        release.set()
        d.stop()
        for w in workers:
            w.join(5)


def test_a_pod_that_names_no_task_has_its_facts_refused_not_guessed() -> None:
    refused: list[str] = []
    d = Delivery(Store(), WorkQueue(), Senders(lambda path: None), Metrics(),
                 RejectionLog(refused.append), retry_after=3600)
    worker = threading.Thread(target=d.run_resolver, daemon=True)
    worker.start()
    try:
        d.deliver_many([_pod_fact(FINE, 1), _pod_fact(FINE, 2)])
        eventually(lambda: len(refused) == 2, 10, "both facts of the unknown pod refused")
        assert refused == ["unknown_task", "unknown_task"] and d.unresolved() == 0
    finally:
        d.stop()
        worker.join(5)
