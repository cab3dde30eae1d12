"""TaskFeedback as a Kubernetes API, against the real control plane and a real watcher process:
conditions that `kubectl wait` understands, a failure outcome that `tidings watch` reports,
several workers of one task, and event times bounded by the API server's clock."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tests.cluster import test_watcher as _watcher_tests
from tests.cluster.support_cli import TIDINGS
from tests.cluster.support_watcher import task_status
from tests.support import create_kwok_pod, eventually
from tidings.schemas import (
    Limits,
    LogLink,
    PodRef,
    Progress,
    TaskRef,
    build_event,
    format_time,
)
from tidings.schemas.status.encoder import STATUS_BUDGET
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

# The watcher tests' fixtures (a CRD, watcher processes killed at the end), shared by name.
crd = _watcher_tests.crd
kubeconfig = _watcher_tests.kubeconfig
watchers = _watcher_tests.watchers
start_watcher = _watcher_tests.start_watcher

TASK_LABEL = "tidings.dev/task"


class Sender:
    """One labelled kwok pod of a task that creates bus events as itself (admin credentials;
    the watcher's sender check passes because the pod carries the task's label)."""

    def __init__(self, admin: Any, namespace: str, task: str, pod: str) -> None:
        self.admin, self.namespace, self.task = admin, namespace, task
        p = create_kwok_pod(admin, namespace, pod, labels={TASK_LABEL: task})
        self.pod = PodRef(p["name"], p["uid"], namespace)
        self.seq = 0

    def send(self, payload: Any, when: datetime | None = None, warning: bool = False) -> Any:
        body = build_event(task=TaskRef(self.namespace, self.task), pod=self.pod,
                           payload=payload, instance=f"{self.pod.name}-i", seq=self.seq,
                           time=when or datetime.now(UTC), warning=warning)
        self.seq += 1
        return client.EventsV1Api(self.admin).create_namespaced_event(self.namespace, body)


def _status(admin: Any, namespace: str, task: str) -> dict[str, Any]:
    return task_status(admin, namespace, task) or {}


def _conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st.get("conditions", [])}


@pytest.fixture
def history(admin: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """Every status version of every TaskFeedback in the namespace, as the API server
    publishes them (a watch), so a test can check what was ever shown, not just the end."""
    seen: list[dict[str, Any]] = []
    broken: list[Exception] = []
    stopped = threading.Event()
    w = watch.Watch()
    crs = client.CustomObjectsApi(admin)

    def run() -> None:
        try:
            for ev in w.stream(crs.list_namespaced_custom_object, "tidings.dev", "v1alpha1",
                               namespace, "taskfeedbacks", timeout_seconds=120):
                seen.append(ev["object"])
        except Exception as err:  # a stream cut after the test (control plane stopped) is fine
            if not stopped.is_set():
                broken.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield seen
    stopped.set()
    w.stop()
    # A history with a hole would let a test pass on versions it never saw.
    assert not broken, f"the status history watch broke during the test: {broken[0]!r}"


def test_kubectl_wait_for_condition_completed_returns_after_the_final(
        control_plane: ControlPlane, admin: Any, namespace: str, start_watcher: Any) -> None:
    start_watcher()
    worker = Sender(admin, namespace, "solo", "solo-0")
    worker.send(Progress(fraction=0.5, message="half"))
    st = eventually(lambda: (s := _status(admin, namespace, "solo")).get("phase") == "Running"
                    and s, 30, "phase Running")
    assert _conditions(st)["Completed"]["status"] == "False"
    assert st["progress"] == {"percent": 50, "percentText": "50%", "message": "half"}
    waiter = subprocess.Popen(
        [str(control_plane.kubectl), f"--kubeconfig={control_plane.kubeconfig('admin')}",
         "-n", namespace, "wait", "--for=condition=Completed", "taskfeedback/solo",
         "--timeout=60s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    final_at = datetime.now(UTC)
    worker.send(Progress(fraction=1.0, message="done", final=True), when=final_at)
    out, err = waiter.communicate(timeout=90)
    assert waiter.returncode == 0, err
    assert "condition met" in out
    st = _status(admin, namespace, "solo")
    completed = _conditions(st)["Completed"]
    assert st["phase"] == "Succeeded" and st["progress"] == {
        "percent": 100, "percentText": "100%", "message": "done"}
    assert completed["reason"] == "Succeeded"
    # Deterministic: the time of the deciding event, not of the watcher's write.
    assert completed["lastTransitionTime"] == format_time(final_at)[:19] + "Z"
    assert _conditions(st)["Failed"]["status"] == "False"
    table = control_plane.kubectl_run("get", "tfb", "solo", "-n", namespace)
    assert table.splitlines()[1].split()[:3] == ["solo", "Succeeded", "100%"]
    managed = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", "solo")["metadata"]["managedFields"]
    assert {(m["manager"], m.get("subresource", "")) for m in managed} == {
        ("tidings-watcher", ""), ("tidings-watcher", "status")}


def test_a_failed_task_shows_phase_failed_and_watch_exits_non_zero(
        control_plane: ControlPlane, admin: Any, namespace: str, start_watcher: Any,
        tmp_path: Path) -> None:
    start_watcher()
    worker = Sender(admin, namespace, "doomed", "doomed-0")
    worker.send(Progress(fraction=0.3, message="epoch 1"))
    eventually(lambda: _status(admin, namespace, "doomed").get("phase") == "Running", 30,
               "phase Running")
    viewer = subprocess.Popen(
        [TIDINGS, "watch", "doomed", "-n", namespace, "--kubeconfig",
         str(control_plane.kubeconfig("admin"))], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    worker.send(Progress(fraction=0.3, message="CUDA out of memory", final=True, failed=True),
                warning=True)
    out, err = viewer.communicate(timeout=60)
    assert viewer.returncode == 6, (out, err)
    assert "failed" in out and "CUDA out of memory" in out
    st = _status(admin, namespace, "doomed")
    assert st["phase"] == "Failed"
    cond = _conditions(st)
    assert cond["Failed"]["status"] == "True" and cond["Failed"]["message"] == "CUDA out of memory"
    assert cond["Completed"]["status"] == "True" and cond["Completed"]["reason"] == "Failed"
    assert st["counters"]["warnings"] == 1


def test_two_workers_at_100_and_60_never_show_the_task_at_100_until_both_are_final(
        control_plane: ControlPlane, admin: Any, namespace: str, start_watcher: Any,
        history: list[dict[str, Any]]) -> None:
    start_watcher()
    a = Sender(admin, namespace, "pair", "pair-a")
    b = Sender(admin, namespace, "pair", "pair-b")
    # Each worker declares the task's worker count (TIDINGS_EMIT_WORKERS=2 in the emitter).
    a.send(Progress(fraction=1.0, message="a done", final=True, workers=2))
    st = eventually(lambda: (s := _status(admin, namespace, "pair")).get("progress") and s,
                    30, "a's final folded")
    assert st["phase"] == "Running" and st["progress"]["percent"] == 50
    b.send(Progress(fraction=0.6, message="b at 60%", workers=2))
    st = eventually(lambda: (s := _status(admin, namespace, "pair")).get("counters", {})
                    .get("eventsApplied") == 2 and s, 30, "b's progress folded")
    assert st["phase"] == "Running" and st["progress"] == {
        "percent": 80, "percentText": "80%", "message": "b at 60%"}
    assert {w["pod"]: w["fraction"] for w in st["workers"]} == {"pair-a": 1.0, "pair-b": 0.6}
    b.send(Progress(fraction=1.0, message="b done", final=True, workers=2))
    eventually(lambda: _status(admin, namespace, "pair").get("phase") == "Succeeded", 30,
               "the task to succeed")
    eventually(lambda: any((o.get("status") or {}).get("phase") == "Succeeded"
                           for o in history if o["metadata"]["name"] == "pair"), 30,
               "the watch to see the end")
    shown = [o["status"] for o in history if o["metadata"]["name"] == "pair" and o.get("status")]
    percents = [s["progress"]["percent"] for s in shown if "progress" in s]
    assert percents == sorted(percents), percents  # never backwards, whoever spoke
    done = next(i for i, s in enumerate(shown) if s["phase"] == "Succeeded")
    assert all(s["progress"]["percent"] < 100 for s in shown[:done] if "progress" in s)
    assert shown[done]["progress"]["percent"] == 100


def test_a_link_dated_9999_no_longer_pins_the_value_and_last_event_time_stays_sane(
        control_plane: ControlPlane, admin: Any, namespace: str, start_watcher: Any) -> None:
    # The default allowance is 60 s; 2 s keeps the test short and proves the same rule.
    start_watcher("--clock-skew", "2")
    attacker = Sender(admin, namespace, "pinned", "pinned-evil")
    honest = Sender(admin, namespace, "pinned", "pinned-good")
    # (Non-zero microseconds: the Python client re-encodes a whole-second time without them,
    # which the API server's MicroTime parser refuses.)
    far = datetime(9999, 12, 31, 0, 0, 0, 123456, tzinfo=UTC)
    created = attacker.send(LogLink(name="wandb", url="https://evil.example/"), when=far) \
        .metadata.creation_timestamp
    eventually(lambda: "links" in _status(admin, namespace, "pinned"), 30, "the link folded")
    # The honest report comes after the attacker's event time as the server bounds it.
    eventually(lambda: datetime.now(UTC) > created + timedelta(seconds=2.5), 10,
               "the server's clock to pass the attacker's bound")
    honest.send(LogLink(name="wandb", url="https://wandb.ai/team/run-1"))
    st = eventually(lambda: (s := _status(admin, namespace, "pinned"))["links"]["wandb"]["url"]
                    == "https://wandb.ai/team/run-1" and s, 30, "the honest link to win")
    assert st["counters"]["timeClamped"] == 1
    last = datetime.fromisoformat(st["lastEventTime"])
    assert last < datetime.now(UTC) + timedelta(seconds=5), st["lastEventTime"]


BURST = int(os.environ.get("TIDINGS_TEST_BURST", "22000"))


def test_22000_instances_on_one_task_stay_under_the_budget_and_complete(
        control_plane: ControlPlane, admin: Any, namespace: str, start_watcher: Any) -> None:
    """The issue's burst for real: one pod sends BURST events, each from a fresh emitter
    instance (as every process and fork is one), then its final. The object stays under the
    status byte budget, the final state is persisted and completed, and the counters say
    what was compacted; nothing is applied twice."""
    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "burst-0", labels={TASK_LABEL: "burst"})
    sender = PodRef(pod["name"], pod["uid"], namespace)
    ref = TaskRef(namespace, "burst")
    events = client.EventsV1Api(admin)

    def now() -> datetime:
        # The kubernetes client re-serialises eventTime and drops the fraction of a whole
        # second, which the API server's MicroTime refuses (1 in 10^6 per event).
        t = datetime.now(UTC)
        return t if t.microsecond else t.replace(microsecond=1)

    def send(k: int) -> None:
        p = Progress(fraction=k / BURST, message=f"step {k}")
        events.create_namespaced_event(namespace, build_event(
            task=ref, pod=sender, payload=p, instance=f"burst-{k:06d}", seq=0, time=now()))

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(BURST)))
    created_s = time.monotonic() - t0
    events.create_namespaced_event(namespace, build_event(
        task=ref, pod=sender, payload=Progress(fraction=1.0, message="done", final=True),
        instance="burst-final", seq=0, time=now()))
    last: dict[str, Any] = {}

    def persisted() -> bool:
        last.update(_status(admin, namespace, "burst"))
        return last.get("phase") == "Succeeded"

    try:
        eventually(persisted, 300, "the burst's final to be persisted")
    except AssertionError as err:
        raise AssertionError(f"{err}\nphase={last.get('phase')} counters={last.get('counters')}"
                             f"\n{w.tail()}") from None
    st = last
    size = len(json.dumps(st))
    c = st["counters"]
    entries = st.get("applied", "").split()
    kept = len(entries)
    times = [int(e.rsplit("@", 1)[1]) for e in entries]
    print(f"\n{BURST} instances created in {created_s:.1f}s; status {size} B; "
          f"{kept} instances kept; counters {c}")
    assert size <= STATUS_BUDGET
    assert c["eventsApplied"] + c.get("lateSkipped", 0) == BURST + 1  # each exactly once
    # Every applied instance (one event each) is either still in the vector or forgotten.
    assert c["instancesCompacted"] + kept == c["eventsApplied"]
    # Bounded: beyond the cap, only the instances of the newest second are kept.
    assert sum(t < max(times) for t in times) <= Limits().max_instances
    assert any(e.startswith("burst-final=0@") for e in entries)
    assert st["progress"] == {"percent": 100, "percentText": "100%", "message": "done"}


def test_a_status_write_answered_with_metadata_only_still_refuses_a_stale_writer(
        control_plane: ControlPlane, crd: None, namespace: str) -> None:
    """The watcher's write: a PUT of /status at a resourceVersion, answered with the
    object's metadata only (the API server encodes no status back). The new resourceVersion
    is in the answer, and a write at the old one is refused (409): a stale writer never wins."""
    from tidings.kube import JSON, METADATA_ONLY, KubeError, connect
    from tidings.schemas.wire.contract import taskfeedback_body, taskfeedback_path
    from tidings.watcher.writer import FIELD_MANAGER

    kube = connect(str(control_plane.kubeconfig("admin")))
    created = kube.request("POST", taskfeedback_path(namespace), accept=METADATA_ONLY,
                           body=taskfeedback_body(namespace, "meta-1"))
    assert created["kind"] == "PartialObjectMetadata" and "spec" not in created
    rv0 = created["metadata"]["resourceVersion"]

    def put(rv: str, n: int) -> Any:
        body = taskfeedback_body(namespace, "meta-1", resource_version=rv, status={
            "schemaVersion": 2, "phase": "Running", "counters": {"eventsApplied": n}})
        return kube.request("PUT", taskfeedback_path(namespace, "meta-1", "status"),
                            data=json.dumps(body).encode(), content_type=JSON,
                            accept=METADATA_ONLY, query=[("fieldManager", FIELD_MANAGER)])

    answer = put(rv0, 1)
    assert answer["kind"] == "PartialObjectMetadata" and "status" not in answer
    rv1 = answer["metadata"]["resourceVersion"]
    assert rv1 != rv0
    with pytest.raises(KubeError) as stale:
        put(rv0, 2)  # a deposed writer's write, built on the old version
    assert stale.value.conflict
    full = kube.request("GET", taskfeedback_path(namespace, "meta-1"))
    assert full["status"]["counters"] == {"eventsApplied": 1}
    assert full["metadata"]["resourceVersion"] == rv1


def test_a_packed_roster_of_20000_ended_pods_is_stored_and_read_back(
        control_plane: ControlPlane, crd: None, namespace: str) -> None:
    """The CRD takes a status whose roster is packed (no ``marks``), within the whole status
    budget, and what the API server stores reads back into the roster that was written: a
    watcher restarting from it decides as the one that wrote it."""
    from tests.unit.test_status_budget import ended
    from tidings.kube import JSON, METADATA_ONLY, connect
    from tidings.schemas.status.decoder import read_status
    from tidings.schemas.status.encoder import to_status
    from tidings.schemas.wire.contract import taskfeedback_body, taskfeedback_path
    from tidings.watcher.writer import FIELD_MANAGER

    state = ended(20_000)
    written = to_status(state, budget=STATUS_BUDGET)
    assert "packed" in written["roster"] and "marks" not in written["roster"]
    kube = connect(str(control_plane.kubeconfig("admin")))
    created = kube.request("POST", taskfeedback_path(namespace), accept=METADATA_ONLY,
                           body=taskfeedback_body(namespace, "packed-1"))
    body = taskfeedback_body(namespace, "packed-1",
                             resource_version=created["metadata"]["resourceVersion"],
                             status=written)
    data = json.dumps(body).encode()
    assert len(data) <= STATUS_BUDGET + 1024
    kube.request("PUT", taskfeedback_path(namespace, "packed-1", "status"), data=data,
                 content_type=JSON, accept=METADATA_ONLY,
                 query=[("fieldManager", FIELD_MANAGER)])
    stored = kube.request("GET", taskfeedback_path(namespace, "packed-1"))["status"]
    assert stored["roster"] == json.loads(json.dumps(written["roster"]))
    read = read_status(state.task, stored)
    assert not read.unread and read.state.phase == "Failed"
    assert read.state.roster._replace(paces={}) == state.roster._replace(paces={})
