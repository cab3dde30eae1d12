"""A restart loses nothing past the instance cap, on the real control plane: a task of 600
kwok pods, one emitter instance each (more than the 512 the fold's dedup keeps), reports
twice with the watcher running; the watcher is stopped; every pod sends its final while no
watcher runs; a new watcher relists (by name, in pages) and must land every final."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.support_watcher import WatcherProc, task_status
from tests.cluster.test_watcher import crd, kubeconfig, metric, start_watcher, watchers  # noqa: F401
from tests.support import create_kwok_pod, eventually
from tidings.schemas import PodRef, Progress, TaskRef, build_event
from tidings.schemas.wire.constants import TASK_LABEL

pytestmark = pytest.mark.cluster

# Above Limits.max_instances (512): compaction runs before the stop. (TIDINGS_RESTART_WORKERS
# runs it larger by hand, e.g. 2000.)
WORKERS = int(os.environ.get("TIDINGS_RESTART_WORKERS", "600"))


def _send_all(admin: Any, namespace: str, bodies: list[dict[str, Any]]) -> None:
    api = client.EventsV1Api(admin)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: api.create_namespaced_event(namespace, b), bodies))


def _applied(admin: Any, namespace: str, task: str) -> int:
    status = task_status(admin, namespace, task) or {}
    return int((status.get("counters") or {}).get("eventsApplied", 0))


def test_a_restart_past_the_instance_cap_lands_every_final_sent_while_down(
        admin: Any, namespace: str, start_watcher: Callable[..., WatcherProc]) -> None:  # noqa: F811
    task = "wide"
    ref = TaskRef(namespace, task)
    with ThreadPoolExecutor(8) as pool:
        pods = list(pool.map(lambda i: create_kwok_pod(
            admin, namespace, f"{task}-{i}", labels={TASK_LABEL: task}), range(WORKERS)))
    instances = [uuid.uuid4().hex for _ in pods]

    def round_of(seq: int, fraction: float, final: bool) -> list[dict[str, Any]]:
        return [build_event(task=ref, pod=PodRef(p["name"], p["uid"], namespace),
                            payload=Progress(fraction=fraction, message=f"round {seq}",
                                             final=final, workers=WORKERS),
                            instance=inst, seq=seq, time=datetime.now(UTC), sender_proof=False)
                for p, inst in zip(pods, instances, strict=True)]

    first = start_watcher()
    for seq, fraction in ((0, 0.3), (1, 0.6)):
        _send_all(admin, namespace, round_of(seq, fraction, False))
        eventually(lambda n=(seq + 1) * WORKERS: _applied(admin, namespace, task) == n,
                   90 + WORKERS / 20,
                   f"round {seq} folded and written\n{first.tail()}")
    before = task_status(admin, namespace, task) or {}
    assert before["counters"].get("instancesCompacted", 0) > 0  # past the cap already
    first.kill(signal.SIGTERM)

    _send_all(admin, namespace, round_of(2, 1.0, True))  # every final, while no watcher runs

    second = start_watcher()
    # Every listed event folded (applied, or skipped as a duplicate or late), then written.
    eventually(lambda: sum(metric(second, name) for name in (
        "tidings_watcher_events_applied_total", *(
            f'tidings_watcher_events_skipped_total{{cause="{c}"}}'
            for c in ("duplicate", "late", "late_relisted")))) >= 3 * WORKERS, 60 + WORKERS / 20,
        f"the relist folded\n{second.tail()}")
    deadline = time.monotonic() + 30
    while True:
        status = task_status(admin, namespace, task) or {}
        if status.get("phase") == "Succeeded" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    counters = status.get("counters") or {}
    print(f"\nrestart at {WORKERS} instances: roster final {status['roster']['final']}, "
          f"eventsApplied {counters.get('eventsApplied')}, "
          f"lateSkipped {counters.get('lateSkipped', 0)}, "
          f"instancesCompacted {counters.get('instancesCompacted', 0)}")
    assert status["roster"]["final"] == WORKERS and status["phase"] == "Succeeded"
    assert counters["eventsApplied"] == 3 * WORKERS
    # What the relist skipped as late is the progress of instances compaction forgot before
    # the stop, listed again (re-deliveries, counted apart); no fact from a watch was late.
    assert metric(second, 'tidings_watcher_events_skipped_total{cause="late"}') == 0
    assert metric(second, 'tidings_watcher_events_skipped_total{cause="late_relisted"}') \
        == counters.get("lateSkipped", 0)
