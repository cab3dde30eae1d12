"""The watcher against the real control plane, as real processes: `tidings watcher run` plus
emitter processes. Every test ends by comparing TaskFeedback status with the fold of exactly
the events that were delivered (recorded by the emitters)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.cluster.support_watcher import (
    REPO_ROOT,
    Emitter,
    WatcherProc,
    emitted_events,
    etcd_compact_now,
    expected_status,
    task_status,
    unjudged,
)
from tests.support import create_kwok_pod, eventually, expanded

pytestmark = pytest.mark.cluster

TASK_LABEL = "tidings.dev/task"


@pytest.fixture(scope="module")
def crd(control_plane: Any) -> None:
    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy/crd.yaml"))
    control_plane.wait_established("taskfeedbacks.tidings.dev")


@pytest.fixture
def kubeconfig(control_plane: Any) -> Path:
    return Path(control_plane.kubeconfig("admin"))


@pytest.fixture
def admin_token(control_plane: Any) -> str:
    """The admin's bearer token, for the watcher's authenticated read API."""
    return str(control_plane.tokens["admin"])


@pytest.fixture
def watchers(tmp_path: Path) -> Iterator[list[WatcherProc]]:
    """Watchers started by a test; killed at the end whatever happens."""
    procs: list[WatcherProc] = []
    yield procs
    for w in procs:
        w.kill(signal.SIGKILL)


@pytest.fixture
def start_watcher(crd: None, kubeconfig: Path, namespace: str, tmp_path: Path,
                  watchers: list[WatcherProc]) -> Callable[..., WatcherProc]:
    def start(*extra: str, env: dict[str, str] | None = None, leader: bool = False,
              ready: bool = True) -> WatcherProc:
        w = WatcherProc(kubeconfig, namespace, tmp_path / f"watcher-{len(watchers)}.log", *extra,
                        env=env, leader=leader)
        watchers.append(w)
        if ready:
            eventually(w.ready, 30, f"watcher ready\n{w.tail()}")
        return w

    return start


def pods_for(admin: Any, namespace: str, task: str, n: int) -> list[dict[str, str]]:
    return [create_kwok_pod(admin, namespace, f"{task}-pod-{i}", labels={TASK_LABEL: task})
            for i in range(n)]


def assert_exact(admin: Any, namespace: str, tasks: list[str], files: list[Path],
                 timeout: float = 60, refused: dict[str, int] | None = None) -> None:
    """Eventually every task's status equals the fold of the delivered events, exactly (and
    ``refused``: the watcher's count of the events it refused for the task, by reason)."""
    bodies = emitted_events(files)
    for task in tasks:
        want = expected_status(namespace, task, bodies, admin)
        if refused:
            want["refused"] = refused
        last: list[Any] = [None]

        def probe(task: str = task, want: dict[str, Any] = want,
                  last: list[Any] = last) -> bool:
            last[0] = task_status(admin, namespace, task)
            return unjudged(last[0]) == unjudged(want)

        try:
            eventually(probe, timeout, f"status of {task} == fold of its events")
        except AssertionError:
            got = last[0] or {}
            differ = {k: (unjudged(got).get(k), unjudged(want).get(k))
                      for k in set(got) | set(want) if k != "health"
                      and unjudged(got).get(k) != unjudged(want).get(k)}
            raise AssertionError(
                f"{task}: applied={got.get('applied')} want={want.get('applied')} "
                f"counters={got.get('counters')} want={want.get('counters')}; "
                f"differ (got, want): {differ}") from None


def metric(w: WatcherProc, name: str) -> float:
    return w.metrics().get(name, 0.0)


# --- end to end -------------------------------------------------------------------------


def test_end_to_end_status_is_the_exact_fold(admin: Any, namespace: str, kubeconfig: Path,
                                             tmp_path: Path, start_watcher: Any,
                                             admin_token: str) -> None:
    w = start_watcher()
    tasks = ["alpha", "beta", "gamma"]
    emitters, files = [], []
    for task in tasks:
        for i, pod in enumerate(pods_for(admin, namespace, task, 2)):
            f = tmp_path / f"{task}-{i}.jsonl"
            files.append(f)
            emitters.append(Emitter(kubeconfig, namespace, task, pod, f"{task}-i{i}", f,
                                    count=150, rate=200))
    for e in emitters:
        e.wait()
    assert sum(e.delivered() for e in emitters) == 900
    assert_exact(admin, namespace, tasks, files)
    m = w.metrics()
    assert m["tidings_watcher_events_applied_total"] == 900
    assert m['tidings_watcher_events_rejected_total{reason="spoofed_sender"}'] == 0
    # the read API serves the same state
    code, body = w.get(f"/tasks/{namespace}/alpha", admin_token)
    assert code == 200
    assert unjudged(expanded(orjson.loads(body))) == unjudged(
        task_status(admin, namespace, "alpha"))
    assert w.get(f"/tasks/{namespace}/nope", admin_token)[0] == 404
    assert w.get("/healthz")[0] == 200


def test_idle_tasks_leave_memory_and_resume_exactly(admin: Any, namespace: str,
                                                    kubeconfig: Path, tmp_path: Path,
                                                    start_watcher: Any,
                                                    admin_token: str) -> None:
    """Memory stays bounded by active tasks: an idle, written task is evicted, and its next
    event seeds it again from its status, so nothing is lost or counted twice."""
    w = start_watcher("--evict-after", "1")
    pod = pods_for(admin, namespace, "idle", 1)[0]
    first, second = tmp_path / "idle-1.jsonl", tmp_path / "idle-2.jsonl"
    Emitter(kubeconfig, namespace, "idle", pod, "idle-i1", first, count=40, rate=200).wait()
    assert_exact(admin, namespace, ["idle"], [first])
    eventually(lambda: metric(w, "tidings_watcher_tasks_evicted_total") >= 1, 60,
               "the idle task to be evicted")
    assert w.get(f"/tasks/{namespace}/idle", admin_token)[0] == 404  # no longer in memory
    Emitter(kubeconfig, namespace, "idle", pod, "idle-i2", second, count=40, rate=200).wait()
    assert_exact(admin, namespace, ["idle"], [first, second])
    assert metric(w, "tidings_watcher_events_applied_total") == 80


def test_idle_tasks_are_kept_compact_and_fold_on_exactly(admin: Any, namespace: str,
                                                        kubeconfig: Path, tmp_path: Path,
                                                        start_watcher: Any,
                                                        admin_token: str) -> None:
    """An idle, written task is kept compact; the read API serves it as it was, and its
    next events fold onto it exactly, without a reload."""
    w = start_watcher("--compact-after", "1", "--evict-after", "0")
    pod = pods_for(admin, namespace, "nap", 1)[0]
    first, second = tmp_path / "nap-1.jsonl", tmp_path / "nap-2.jsonl"
    Emitter(kubeconfig, namespace, "nap", pod, "nap-i1", first, count=40, rate=200).wait()
    assert_exact(admin, namespace, ["nap"], [first])
    eventually(lambda: metric(w, "tidings_watcher_tasks_compact") >= 1, 90,
               "the idle task to be kept compact")
    code, body = w.get(f"/tasks/{namespace}/nap", admin_token)
    assert code == 200 and unjudged(expanded(orjson.loads(body))) == unjudged(
        task_status(admin, namespace, "nap"))
    Emitter(kubeconfig, namespace, "nap", pod, "nap-i2", second, count=40, rate=200).wait()
    assert_exact(admin, namespace, ["nap"], [first, second])
    assert metric(w, "tidings_watcher_events_applied_total") == 80
    assert metric(w, "tidings_watcher_tasks_evicted_total") == 0


def test_lineage_events_are_skipped_not_rejected(admin: Any, namespace: str, kubeconfig: Path,
                                                 start_watcher: Any) -> None:
    from kubernetes import client

    from tidings.schemas.wire.event import ObjectRef, PodRef, TaskRef, build_event
    from tidings.schemas.wire.payloads import PodSpawned

    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "app-pod", labels={TASK_LABEL: "app"})
    body = build_event(task=TaskRef(namespace, "app"), pod=PodRef(pod["name"], pod["uid"]),
                       payload=PodSpawned(pod_name=pod["name"], pod_uid=pod["uid"], app="app"),
                       instance="ctl", seq=1, time=datetime.now(UTC),
                       regarding=ObjectRef("apps/v1", "Deployment", "app", namespace),
                       sender_proof=False)
    client.EventsV1Api(admin).create_namespaced_event(namespace, body)
    eventually(lambda: metric(w, 'tidings_watcher_events_skipped_total{cause="not_task"}') == 1,
               20, "lineage event skipped")
    assert metric(w, "tidings_watcher_events_applied_total") == 0
    assert task_status(admin, namespace, "app") is None


# --- a slow key does not hold up another ------------------------------------------------


def test_slow_key_does_not_delay_another(admin: Any, namespace: str, kubeconfig: Path,
                                         tmp_path: Path, start_watcher: Any) -> None:
    w = start_watcher(env={"TIDINGS_TEST_SLOW_WRITE_TASK": "slow-a:6"})
    (pa,) = pods_for(admin, namespace, "slow-a", 1)
    (pb,) = pods_for(admin, namespace, "fast-b", 1)
    fa, fb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    Emitter(kubeconfig, namespace, "slow-a", pa, "ia", fa, count=20).wait()
    eventually(lambda: metric(w, "tidings_watcher_status_writes_in_flight") >= 1, 10,
               "A's first write to be stuck in the 6 s hook")
    t0 = time.monotonic()
    Emitter(kubeconfig, namespace, "fast-b", pb, "ib", fb, count=20).wait()
    emitted_at = time.monotonic()
    want_b = expected_status(namespace, "fast-b", emitted_events([fb]), admin)
    eventually(lambda: unjudged(task_status(admin, namespace, "fast-b")) == unjudged(want_b), 5,
               "task B's exact state while A's writes are slow")
    latency = time.monotonic() - emitted_at
    print(f"\nslow key: B exact {latency:.2f}s after its last event while A's write hangs")
    assert latency < 2.0, f"B waited {latency:.2f}s behind A"
    assert task_status(admin, namespace, "slow-a") in (None, {}), "A's write should still hang"
    assert time.monotonic() - t0 < 6
    assert_exact(admin, namespace, ["slow-a", "fast-b"], [fa, fb], timeout=30)


# --- crash and restart ------------------------------------------------------------------


def _stream(admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path, tasks: list[str],
            count: int, rate: float) -> tuple[list[Emitter], list[Path]]:
    emitters, files = [], []
    for task in tasks:
        (pod,) = pods_for(admin, namespace, task, 1)
        f = tmp_path / f"{task}.jsonl"
        files.append(f)
        emitters.append(Emitter(kubeconfig, namespace, task, pod, f"{task}-i", f, count=count,
                                rate=rate))
    return emitters, files


def test_kill9_mid_stream_then_restart_is_exact(admin: Any, namespace: str, kubeconfig: Path,
                                                tmp_path: Path, start_watcher: Any) -> None:
    w = start_watcher()
    emitters, files = _stream(admin, namespace, kubeconfig, tmp_path, ["k1", "k2"], 300, 60)
    eventually(lambda: metric(w, "tidings_watcher_status_writes_total{result=\"ok\"}") >= 4, 30,
               "some statuses written")
    w.kill(signal.SIGKILL)  # mid-stream: emitters keep going while no watcher runs
    written_before = task_status(admin, namespace, "k1")
    assert written_before and written_before["counters"]["eventsApplied"] < 300
    delivered_at_kill = sum(e.delivered() for e in emitters)
    eventually(lambda: sum(e.delivered() for e in emitters) >= delivered_at_kill + 20, 30,
               "events to land while no watcher runs")
    w2 = start_watcher()
    for e in emitters:
        e.wait()
    assert_exact(admin, namespace, ["k1", "k2"], files)
    # the restarted watcher saw the old events again in its list and skipped them
    assert metric(w2, 'tidings_watcher_events_skipped_total{cause="duplicate"}') > 0


def test_apiserver_restart_mid_stream_is_exact(control_plane: Any, admin: Any, namespace: str,
                                               kubeconfig: Path, tmp_path: Path,
                                               start_watcher: Any) -> None:
    w = start_watcher()
    emitters, files = _stream(admin, namespace, kubeconfig, tmp_path, ["r1", "r2"], 200, 40)
    eventually(lambda: metric(w, "tidings_watcher_events_applied_total") >= 40, 30,
               "stream flowing")
    control_plane.stop_apiserver()
    try:
        eventually(lambda: "refused" in w.tail(400).lower(), 30,
                   "the watcher to find the API server gone")
    finally:
        control_plane.start_apiserver()
    for e in emitters:
        e.wait(180)
    assert_exact(admin, namespace, ["r1", "r2"], files, timeout=90)
    assert w.proc.poll() is None, "the watcher survives an API server restart"


def test_forced_relist_after_compaction_is_exact(control_plane: Any, admin: Any, namespace: str,
                                                 kubeconfig: Path, tmp_path: Path,
                                                 start_watcher: Any) -> None:
    """Events created while the watch is down, then compacted away from etcd's history, can
    only reach the watcher through a relist; the final state must still be exact."""
    w = start_watcher()
    (pod,) = pods_for(admin, namespace, "c1", 1)
    f = tmp_path / "c1.jsonl"
    Emitter(kubeconfig, namespace, "c1", pod, "c1-i", f, count=40, total=100).wait()
    assert_exact(admin, namespace, ["c1"], [f])
    relists = lambda cause: metric(w, f'tidings_watcher_relists_total{{cause="{cause}"}}')  # noqa: E731
    gone_before, stale_before = relists("gone"), relists("short_watch")
    # Break the watch, and freeze the watcher before it can reconnect.
    control_plane.stop_apiserver()
    try:
        w.proc.send_signal(signal.SIGSTOP)
    finally:
        control_plane.start_apiserver()
    try:
        # Invisible to the (dead) watch: the only way in is a list.
        Emitter(kubeconfig, namespace, "c1", pod, "c1-i", f, first=41, count=40, total=100).wait()
        etcd_compact_now(control_plane.etcd_url)  # the watcher's resourceVersion is now too old
    finally:
        w.proc.send_signal(signal.SIGCONT)
    eventually(lambda: relists("gone") + relists("short_watch") > gone_before + stale_before,
               60, f"a relist after compaction\n{w.tail()}")
    Emitter(kubeconfig, namespace, "c1", pod, "c1-i", f, first=81, count=20, total=100).wait()
    assert_exact(admin, namespace, ["c1"], [f])
    assert metric(w, "tidings_watcher_events_applied_total") == 100


# --- spoofing ---------------------------------------------------------------------------


def test_spoofed_senders_are_rejected_and_counted(admin: Any, namespace: str, kubeconfig: Path,
                                                  tmp_path: Path, start_watcher: Any) -> None:
    w = start_watcher()
    (good,) = pods_for(admin, namespace, "victim", 1)
    other = create_kwok_pod(admin, namespace, "other-pod", labels={TASK_LABEL: "other"})
    bare = create_kwok_pod(admin, namespace, "bare-pod")
    forged = {"name": good["name"], "uid": "00000000-0000-0000-0000-000000000000"}
    fg = tmp_path / "good.jsonl"
    Emitter(kubeconfig, namespace, "victim", good, "good", fg, count=10).wait()
    assert_exact(admin, namespace, ["victim"], [fg])
    before = task_status(admin, namespace, "victim")
    for i, pod in enumerate([other, bare, forged]):
        Emitter(kubeconfig, namespace, "victim", pod, f"spoof{i}", tmp_path / f"s{i}.jsonl",
                count=2).wait()
    key = 'tidings_watcher_events_rejected_total{reason="spoofed_sender"}'
    eventually(lambda: metric(w, key) == 6, 20, "6 spoofed events rejected")
    eventually(lambda: metric(w, "tidings_watcher_queue_depth") == 0
               and metric(w, "tidings_watcher_write_queue_depth") == 0
               and metric(w, "tidings_watcher_status_writes_in_flight") == 0, 10,
               "the watcher to be idle")
    # Nothing the spoofers sent changed the status, except the count of what was refused
    # (the task's owner is told, by reason).
    after = eventually(lambda: (s := task_status(admin, namespace, "victim") or {}).get(
        "refused") and s, 20, "the refusals counted in the status")
    assert after.pop("refused") == {"spoofedSender": 6}
    assert unjudged(after) == unjudged(before)
    assert metric(w, "tidings_watcher_events_applied_total") == 10


# --- the read API ------------------------------------------------------------------------


def _viewer_role(control_plane: Any) -> None:
    """The documented read-only ClusterRole, tidings-viewer, exactly as deploy/ ships it."""
    import yaml

    docs = yaml.safe_load_all((REPO_ROOT / "deploy/rbac.yaml").read_text())
    viewer = next(d for d in docs if d and d["metadata"]["name"] == "tidings-viewer"
                  and d["kind"] == "ClusterRole")
    control_plane.kubectl_run("apply", "-f", "-", input_text=orjson.dumps(viewer).decode())


def _bind_viewer(admin: Any, namespace: str, subject: dict[str, str]) -> str:
    from kubernetes import client

    name = f"view-{uuid.uuid4().hex[:8]}"
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "tidings-viewer"},
        "subjects": [subject]})
    return name


def test_task_read_api_grants_exactly_what_rbac_grants_on_the_taskfeedback(
        control_plane: Any, admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,
        start_watcher: Any) -> None:
    """/tasks/<ns>/<name> answers 401 without a valid token and 403 to anyone the API server
    does not let get that TaskFeedback (a workload pod of the same namespace, a viewer of
    another namespace, alice elsewhere); a viewer of the namespace gets the state. /metrics
    and the probes stay open."""
    from kubernetes import client

    from tests.cluster.test_controlplane import bound_token

    _viewer_role(control_plane)
    w = start_watcher()
    (pod,) = pods_for(admin, namespace, "sec", 1)
    f = tmp_path / "sec.jsonl"
    Emitter(kubeconfig, namespace, "sec", pod, "sec-i", f, count=5).wait()
    assert_exact(admin, namespace, ["sec"], [f])
    path = f"/tasks/{namespace}/sec"
    for open_path in ("/metrics", "/healthz", "/readyz"):
        assert w.get(open_path)[0] == 200, open_path

    assert w.get(path)[0] == 401
    assert w.get(path, "not-a-token")[0] == 401
    assert w.get(path, control_plane.tokens["bob"] + "x")[0] == 401
    # The workload pod of this very task and namespace: workloads may not read TaskFeedback.
    assert w.get(path, bound_token(admin, namespace, "default", pod))[0] == 403
    # bob shares alice's group, not her binding; alice is not bound yet either.
    assert w.get(path, control_plane.tokens["bob"])[0] == 403
    assert w.get(path, control_plane.tokens["alice"])[0] == 403

    core = client.CoreV1Api(admin)
    other = f"{namespace}-b"
    core.create_namespace({"metadata": {"name": other}})
    try:
        core.create_namespaced_service_account(other, {"metadata": {"name": "viewer"}})
        _bind_viewer(admin, other, {"kind": "ServiceAccount", "name": "viewer",
                                    "namespace": other})
        other_pod = create_kwok_pod(admin, other, "viewer-0", service_account="viewer")
        assert w.get(path, bound_token(admin, other, "viewer", other_pod))[0] == 403, \
            "a viewer of another namespace"
    finally:
        core.delete_namespace(other)

    # alice becomes a viewer of this namespace (her 403 above expires from the cache).
    binding = _bind_viewer(admin, namespace, {"kind": "User", "name": "alice",
                                              "apiGroup": "rbac.authorization.k8s.io"})
    alice = control_plane.tokens["alice"]
    eventually(lambda: w.get(path, alice)[0] == 200, 30,
               "alice's viewer grant to reach the read API")
    assert unjudged(expanded(orjson.loads(w.get(path, alice)[1]))) == unjudged(
        task_status(admin, namespace, "sec"))
    assert w.get(f"/tasks/{namespace}-elsewhere/sec", alice)[0] == 403, \
        "an allowed decision for one namespace never leaks to another"
    assert w.get(f"/tasks/{namespace}/nope", alice)[0] == 404
    # A revoked grant stops working once the cached decision expires.
    client.RbacAuthorizationV1Api(admin).delete_namespaced_role_binding(binding, namespace)
    eventually(lambda: w.get(path, alice)[0] == 403, 30, "the revoked grant to expire")
    m = w.metrics()
    for reason in ("no_token", "bad_token", "forbidden"):
        assert m[f'tidings_watcher_http_denied_total{{reason="{reason}"}}'] >= 1, reason


# --- HA -----------------------------------------------------------------------------------


def test_leader_handover_within_the_lease(admin: Any, namespace: str, kubeconfig: Path,
                                          tmp_path: Path, start_watcher: Any) -> None:
    lease = ["--lease-namespace", namespace, "--lease-name", "w", "--lease-duration", "4",
             "--renew-deadline", "3", "--retry-period", "0.5"]
    a = start_watcher(*lease, leader=True, ready=False)
    assert a.wait_leading(20), a.tail()
    b = start_watcher(*lease, leader=True, ready=False)
    eventually(b.ready, 20, "the standby reports ready")
    assert not b.wait_leading(1.0), "two leaders at once"
    emitters, files = _stream(admin, namespace, kubeconfig, tmp_path, ["h1", "h2"], 200, 50)
    eventually(lambda: metric(a, "tidings_watcher_events_applied_total") >= 30, 30, "flowing")
    a.kill(signal.SIGKILL)
    t_kill = time.monotonic()
    assert b.wait_leading(15), b.tail()
    takeover = time.monotonic() - t_kill
    print(f"\nhandover: standby leads {takeover:.2f}s after kill -9 (lease 4s, retry 0.5s)")
    # observed-time expiry: lease duration, plus at most one retry period of polling
    assert takeover <= 4 + 0.5 + 0.5, f"takeover took {takeover:.2f}s"
    for e in emitters:
        e.wait()
    assert_exact(admin, namespace, ["h1", "h2"], files)
    assert metric(b, "tidings_watcher_leader") == 1


def test_graceful_stop_hands_the_lease_over_at_once(namespace: str, start_watcher: Any) -> None:
    lease = ["--lease-namespace", namespace, "--lease-name", "g", "--lease-duration", "15",
             "--retry-period", "0.5"]
    a = start_watcher(*lease, leader=True, ready=False)
    assert a.wait_leading(20), a.tail()
    b = start_watcher(*lease, leader=True, ready=False)
    assert not b.wait_leading(1.0)
    a.kill(signal.SIGTERM)
    assert a.proc.returncode == 0, a.tail()
    t0 = time.monotonic()
    assert b.wait_leading(5), b.tail()
    assert time.monotonic() - t0 < 2.0, "a released lease is taken without waiting it out"


def test_config_errors_are_one_line(tmp_path: Path) -> None:
    import subprocess

    from tests.cluster.support_watcher import TIDINGS

    r = subprocess.run([str(TIDINGS), "watcher", "run", "--kubeconfig",
                        str(tmp_path / "missing.yaml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert r.stderr.startswith("error: cannot load Kubernetes configuration")
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _lease_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@contextmanager
def intruder_holds(admin: Any, namespace: str, lease: str) -> Iterator[None]:
    """Someone else takes the lease and renews it until the block ends, then frees it."""
    from kubernetes import client

    leases = client.CoordinationV1Api(admin)

    def take() -> None:
        leases.patch_namespaced_lease(lease, namespace, {"spec": {
            "holderIdentity": "intruder", "renewTime": _lease_now()}})

    done = threading.Event()

    def renew() -> None:
        while not done.wait(0.5):
            take()

    take()
    t = threading.Thread(target=renew, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(5)
        leases.patch_namespaced_lease(lease, namespace, {"spec": {
            "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _lease_now()}})


WRITES_OK = 'tidings_watcher_status_writes_total{result="ok"}'
SHORT_LEASE = ["--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"]


def test_lease_loss_fences_and_the_replica_leads_again_exactly(
        admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,
        start_watcher: Any) -> None:
    """Losing the lease does not end the process: it writes nothing while another holds the
    lease, campaigns as a standby, and leads again later with the exact state."""
    a = start_watcher("--lease-namespace", namespace, "--lease-name", "x", *SHORT_LEASE,
                      leader=True, ready=False)
    assert a.wait_leading(20), a.tail()
    (pod,) = pods_for(admin, namespace, "f1", 1)
    f = tmp_path / "f1.jsonl"
    Emitter(kubeconfig, namespace, "f1", pod, "f1-i", f, count=40, total=100).wait()
    assert_exact(admin, namespace, ["f1"], [f])
    with intruder_holds(admin, namespace, "x"):
        assert a.wait_line("lease lost; standby", 10), a.tail()
        eventually(lambda: metric(a, "tidings_watcher_leader") == 0
                   and metric(a, "tidings_watcher_status_writes_in_flight") == 0, 5,
                   "the deposed leader to be idle")
        writes, status = metric(a, WRITES_OK), task_status(admin, namespace, "f1")
        # Events while someone else leads: the deposed replica must not write them.
        Emitter(kubeconfig, namespace, "f1", pod, "f1-i", f, first=41, count=40, total=100,
                rate=40).wait()
        assert a.proc.poll() is None, f"the replica died on losing its lease\n{a.tail()}"
        assert a.ready(), "a standby is ready (to take over)"
        assert metric(a, WRITES_OK) == writes, "wrote while not leading"
        assert task_status(admin, namespace, "f1") == status
    assert a.wait_leading(10, count=2), f"no second term\n{a.tail()}"
    Emitter(kubeconfig, namespace, "f1", pod, "f1-i", f, first=81, count=20, total=100).wait()
    assert_exact(admin, namespace, ["f1"], [f])
    assert metric(a, "tidings_watcher_leader") == 1
    # The second term reloaded the first term's 40 from the status: nothing counted twice.
    assert metric(a, "tidings_watcher_events_applied_total") == 100


def test_a_lost_lease_is_logged_with_its_cause(admin: Any, namespace: str, crd: None,
                                               tmp_path: Path,
                                               watchers: list[WatcherProc]) -> None:
    """The watcher runs as a ServiceAccount that is then deleted: its token stops working,
    the lease is lost, and the log says why (the API's 401), not just "lost the lease"."""
    import yaml
    from kubernetes import client


    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "watcher"}})
    binding = f"lease-loss-{namespace}"
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "watcher", "namespace": namespace}]})
    try:
        token = core.create_namespaced_service_account_token(
            "watcher", namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        conf = admin.configuration
        kubeconfig = tmp_path / "watcher.yaml"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "w",
            "clusters": [{"name": "c", "cluster": {"server": conf.host,
                                                   "certificate-authority": conf.ssl_ca_cert}}],
            "users": [{"name": "w", "user": {"token": token}}],
            "contexts": [{"name": "w", "context": {"cluster": "c", "user": "w"}}]}))
        w = WatcherProc(kubeconfig, namespace, tmp_path / "watcher.log", "--lease-namespace",
                        namespace, "--lease-name", "sa", *SHORT_LEASE, leader=True)
        watchers.append(w)
        assert w.wait_leading(20), w.tail()
        core.delete_namespaced_service_account("watcher", namespace)

        def lost() -> str:
            return next((line for line in w.log.read_text().splitlines()
                         if "lost the lease" in line), "")

        eventually(lambda: lost() != "", 30, f"the lease to be lost\n{w.tail()}")
        line = lost()
        print(f"\n{line}")
        assert f"lost the lease {namespace}/sa: " in line, line
        assert "HTTP 401" in line and "ServiceAccount or token deleted?" in line, line
    finally:
        rbac.delete_cluster_role_binding(binding)


def test_a_deposed_leaders_delayed_write_cannot_land_over_the_new_leaders(
        admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,
        start_watcher: Any) -> None:
    """A's status write is in flight (held by the slow-write hook) when A is frozen and B
    takes over and writes more; when A's write finally goes out, the resourceVersion
    precondition refuses it, and the status stays B's, exact."""
    lease = ["--lease-namespace", namespace, "--lease-name", "d", *SHORT_LEASE]
    a = start_watcher(*lease, leader=True, ready=False,
                      env={"TIDINGS_TEST_SLOW_WRITE_TASK": "st:3"})
    assert a.wait_leading(20), a.tail()
    b = start_watcher(*lease, leader=True, ready=False)
    eventually(b.ready, 20, "the standby reports ready")
    (pod,) = pods_for(admin, namespace, "st", 1)
    f = tmp_path / "st.jsonl"
    Emitter(kubeconfig, namespace, "st", pod, "st-i", f, count=30, total=60).wait()
    eventually(lambda: metric(a, "tidings_watcher_status_writes_in_flight") >= 1, 10,
               "A's first write to be in flight")
    a.proc.send_signal(signal.SIGSTOP)
    try:
        assert b.wait_leading(15), b.tail()
        Emitter(kubeconfig, namespace, "st", pod, "st-i", f, first=31, count=30,
                total=60).wait()
        assert_exact(admin, namespace, ["st"], [f])  # B wrote all 60
    finally:
        a.proc.send_signal(signal.SIGCONT)
    # A wakes with its old write due at once; it must be refused, not land.
    eventually(lambda: metric(a, "tidings_watcher_status_writes_in_flight") == 0, 15,
               f"A's delayed write to finish\n{a.tail()}")
    got = task_status(admin, namespace, "st") or {}
    assert unjudged(got) == unjudged(expected_status(namespace, "st", emitted_events([f]),
                                                     admin)), \
        f"the stale write landed: applied={got.get('applied')}"
    assert metric(a, 'tidings_watcher_status_writes_total{result="conflict"}') >= 1, a.tail()
    assert metric(a, WRITES_OK) == 0
    assert a.proc.poll() is None and b.proc.poll() is None


def test_apiserver_frozen_for_20s_mid_burst_both_replicas_survive_exactly(
        control_plane: Any, admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,
        start_watcher: Any) -> None:
    """SIGSTOP kube-apiserver for 20 s while two replicas run and events stream in: the
    leader fences itself, neither process exits, one leads afterwards, and the state is
    the exact fold of the delivered events."""
    lease = ["--lease-namespace", namespace, "--lease-name", "z", *SHORT_LEASE]
    a = start_watcher(*lease, leader=True, ready=False)
    assert a.wait_leading(20), a.tail()
    b = start_watcher(*lease, leader=True, ready=False)
    eventually(b.ready, 20, "the standby reports ready")
    emitters, files = _stream(admin, namespace, kubeconfig, tmp_path, ["z1", "z2"], 300, 30)
    eventually(lambda: metric(a, "tidings_watcher_events_applied_total") >= 40, 30,
               "the burst flowing")
    apiserver = control_plane.processes["kube-apiserver"].pid
    os.kill(apiserver, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        eventually(lambda: metric(a, "tidings_watcher_leader") == 0, 15,
                   "the leader to fence itself while the API server is frozen")
        time.sleep(max(0.0, 20 - (time.monotonic() - frozen_at)))  # the fault: a 20 s stall
    finally:
        os.kill(apiserver, signal.SIGCONT)
        eventually(lambda: control_plane.get_raw("/readyz") == b"ok", 60,
                   "kube-apiserver ready again")
    for e in emitters:
        e.wait(180)
    assert_exact(admin, namespace, ["z1", "z2"], files, timeout=120)
    assert a.proc.poll() is None, f"replica a exited\n{a.tail()}"
    assert b.proc.poll() is None, f"replica b exited\n{b.tail()}"
    assert metric(a, "tidings_watcher_leader") + metric(b, "tidings_watcher_leader") == 1
