"""Status-write priority against the real control plane: a critical fact (a new log link) is
written ahead of a backlog of coalescible writes that the write budget holds back."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import REPO_ROOT, WatcherProc, task_status
from tests.support import create_kwok_pod, eventually

pytestmark = pytest.mark.cluster

BULK = 40


@pytest.fixture
def watchers() -> Iterator[list[WatcherProc]]:
    procs: list[WatcherProc] = []
    yield procs
    for w in procs:
        w.kill(signal.SIGKILL)


def _has(admin: Any, namespace: str, task: str, seq: int) -> bool:
    from tidings.schemas.engine.version_vector import VersionVector

    st = task_status(admin, namespace, task) or {}
    return VersionVector.from_text(st.get("applied", "")).contains(f"{task}-i", seq)


def test_a_critical_fact_overtakes_a_backlog_of_coalescible_writes(
        control_plane: Any, admin: Any, namespace: str, tmp_path: Path,
        watchers: list[WatcherProc]) -> None:
    from tidings.kube import connect
    from tidings.schemas.wire.constants import TASK_LABEL
    from tidings.schemas.wire.event import PodRef, TaskRef, build_event
    from tidings.schemas.wire.payloads import LogLink, Progress, SpanSummary

    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy/crd.yaml"))
    control_plane.wait_established("taskfeedbacks.tidings.dev")
    kubeconfig = Path(control_plane.kubeconfig("admin"))
    kube = connect(str(kubeconfig))
    bulk = [f"bulk-{i}" for i in range(BULK)]
    tasks = [*bulk, "urgent"]
    pods = {t: create_kwok_pod(admin, namespace, f"{t}-pod", labels={TASK_LABEL: t})
            for t in tasks}

    def emit(task: str, seq: int, payload: Any) -> None:
        kube.request("POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                     body=build_event(task=TaskRef(namespace, task),
                                      pod=PodRef(pods[task]["name"], pods[task]["uid"]),
                                      payload=payload, instance=f"{task}-i", seq=seq,
                                      time=datetime.now(UTC), sender_proof=False))

    # 1. Every task gets its first status (a phase change, so critical) from a watcher
    #    without a budget; that watcher goes, so the backlog below starts from clean state.
    for t in tasks:
        emit(t, 1, SpanSummary(name="step", count=1, total_s=0.1, min_s=0.1, max_s=0.1,
                               first_start=1000.0, last_end=1000.1))
    first = WatcherProc(kubeconfig, namespace, tmp_path / "w0.log", "--write-budget", "0")
    watchers.append(first)
    eventually(lambda: all(_has(admin, namespace, t, 1) for t in tasks), 60,
               "every task's first status")
    first.kill(signal.SIGTERM)

    # 2. A watcher whose budget allows about two writes a second (10 ms of API-server CPU
    #    per second, a write costing ~5 ms), so coalescible changes of 40 tasks queue up.
    w = WatcherProc(kubeconfig, namespace, tmp_path / "w1.log", "--write-budget", "0.01",
                    "--coalesce-interval", "0")
    watchers.append(w)
    eventually(w.ready, 30, f"watcher ready\n{w.tail()}")
    applied0 = w.metrics().get("tidings_watcher_events_applied_total", 0.0)
    for t in bulk:
        emit(t, 2, Progress(fraction=0.5, message="half way"))
    eventually(lambda: w.metrics().get("tidings_watcher_events_applied_total", 0.0)
               >= applied0 + BULK, 30, "the 40 coalescible facts folded (all waiting to be "
               "written)")
    emit("urgent", 2, LogLink(name="wandb", url="https://wandb.example/run/7"))

    eventually(lambda: _has(admin, namespace, "urgent", 2), 60, "the link in its status")
    waiting = sum(not _has(admin, namespace, t, 2) for t in bulk)
    # FIFO would have written the link after all 40; first in line, it finds most of them
    # still waiting (the budget drains about two a second).
    assert waiting >= BULK // 2, f"only {waiting} of {BULK} coalescible writes were still queued"
    # And the backlog is written in the end: nothing is starved.
    eventually(lambda: all(_has(admin, namespace, t, 2) for t in bulk), 120,
               "every coalescible fact in its status")
    status = task_status(admin, namespace, "urgent") or {}
    assert status["links"]["wandb"]["url"] == "https://wandb.example/run/7"


WINDOWS = 12  # span windows the workload sends, one each WINDOW_S
WINDOW_S = 0.5
COALESCE_S = 4.0


def test_span_windows_are_written_at_the_coalescing_interval_not_per_window(
        control_plane: Any, admin: Any, namespace: str, tmp_path: Path,
        watchers: list[WatcherProc]) -> None:
    """A SpanSummaries note (several span names, what the emitter sends each
    window) is coalescible like any span fact: 6 s of windows cost a status write per
    coalescing interval (4 s here), not one per window (12), which they cost when the
    scheduler took the multi-name note for a critical fact."""
    import time

    from tidings.kube import connect
    from tidings.schemas.wire.constants import TASK_LABEL
    from tidings.schemas.wire.event import PodRef, TaskRef, build_event
    from tidings.schemas.wire.payloads import Progress, SpanSummaries, span_row

    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy/crd.yaml"))
    control_plane.wait_established("taskfeedbacks.tidings.dev")
    kubeconfig = Path(control_plane.kubeconfig("admin"))
    kube = connect(str(kubeconfig))
    task = "windows"
    pod = create_kwok_pod(admin, namespace, f"{task}-pod", labels={TASK_LABEL: task})

    def emit(seq: int, payload: Any) -> None:
        kube.request("POST", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
                     body=build_event(task=TaskRef(namespace, task),
                                      pod=PodRef(pod["name"], pod["uid"]),
                                      payload=payload, instance=f"{task}-i", seq=seq,
                                      time=datetime.now(UTC), sender_proof=False))

    w = WatcherProc(kubeconfig, namespace, tmp_path / "w.log", "--write-budget", "0",
                    "--coalesce-interval", str(COALESCE_S))
    watchers.append(w)
    eventually(w.ready, 30, f"watcher ready\n{w.tail()}")
    emit(1, Progress(fraction=0.1, message="started"))  # the first status: a phase change
    eventually(lambda: _has(admin, namespace, task, 1), 60, "the task's first status")
    ok = 'tidings_watcher_status_writes_total{result="ok"}'
    writes0 = eventually(lambda: w.metrics().get(ok), 10, "the write counter")

    started = time.monotonic()
    for i in range(WINDOWS):  # the emitter's pace: one multi-name window every WINDOW_S
        base = int(time.time() * 1e6)
        emit(2 + i, SpanSummaries(base_us=base, spans=[
            span_row(name, 1, 0.1, 0.1, 0.1, base / 1e6, base / 1e6 + 0.1, 0, base)
            for name in ("forward", "backward", "optimizer")]))
        time.sleep(max(0.0, started + (i + 1) * WINDOW_S - time.monotonic()))
    elapsed = time.monotonic() - started
    eventually(lambda: _has(admin, namespace, task, WINDOWS + 1), 60,
               f"the last window in the status\n{w.tail()}")
    writes = w.metrics()[ok] - writes0
    # One write per coalescing interval over the windows' span, plus the last one that
    # carries what arrived after the previous write; per window would be about 12.
    most = int(elapsed // COALESCE_S) + 2
    assert 1 <= writes <= most, f"{writes:.0f} status writes for {WINDOWS} span windows " \
        f"in {elapsed:.1f}s (at most {most} at a {COALESCE_S:g}s coalescing interval)"
    status = task_status(admin, namespace, task) or {}
    assert status["spans"]["backward"]["count"] == WINDOWS
