"""The pod is the ground truth of a worker's death, on the real control
plane: a labelled kwok pod reports 50 %, then its status is patched as a kubelet would write
it (`kubectl patch --subresource=status`), or the pod is deleted. kwok does not write over
it: its pod-ready stage fires only for a Pending pod whose Ready condition is not True (kwok
v0.8.0, kustomize/stage/pod/fast/pod-ready.yaml; a merge patch keeps the Ready condition
kwok set), ours only for a pod with the tidings.dev/run-for annotation
(tools/devcluster_stages.yaml), pod-delete only for a pod being deleted. The watcher must make
the worker final with the kubelet's reason (from the pod watches it already has: no GET, no
new watch), in the TaskFeedback's workers, conditions and phase, in `tidings state`, and
`tidings watch` must return with the outcome's code."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch

from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import TIDINGS, WatcherProc, task_status
from tests.support import NODE_NAME, eventually, expanded
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport
from tidings.kube import connect
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher

EXIT_FAILED = 6


def labelled_pod(admin: Any, namespace: str, name: str, task: str, *,
                 node: str | None = NODE_NAME) -> dict[str, str]:
    """A pod labelled for ``task`` on the kwok node, once kwok made it Running (it has an IP,
    so kwok's stages leave its status to us from then on)."""
    core = client.CoreV1Api(admin)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    created = core.create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": {"tidings.dev/task": task}}, "spec": spec})
    if node:
        eventually(lambda: core.read_namespaced_pod(name, namespace).status.pod_ip, 30,
                   f"kwok to run pod {name}")
    return {"name": name, "uid": created.metadata.uid}


def say(cp: ControlPlane, namespace: str, pod: dict[str, str], task: str, fraction: float,
        *, final: bool = False, workers: int = 0) -> None:
    """The pod's process reports (what a kubelet would give it: its identity in the env)."""
    env = {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"],
           "TIDINGS_TASK": task}
    if workers:
        env["TIDINGS_EMIT_WORKERS"] = str(workers)
    em = Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                 transport=KubeTransport(connect(str(cp.kubeconfig("admin")))))
    em.progress(fraction, f"step {fraction}", final=final)
    assert em.flush(15), em.stats()


def kubelet(cp: ControlPlane, namespace: str, pod: str, status: dict[str, Any]) -> None:
    """Write the pod's status as its kubelet would."""
    cp.kubectl_run("patch", "pod", pod, "-n", namespace, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": status}))


def terminated(code: int, reason: str, **extra: Any) -> list[dict[str, Any]]:
    """A container's end as the real kubelet writes it (tests/node/test_simulation.py): with
    its runtime's id, the pod's own reason left empty."""
    cid = "containerd://" + "c0" * 32
    return [{"name": "main", "image": "busybox", "ready": False, "restartCount": 0,
             "started": False, "containerID": cid,
             "state": {"terminated": {"containerID": cid, "exitCode": code, "reason": reason,
                                      "startedAt": "2026-11-30T03:00:00Z",
                                      "finishedAt": "2026-11-30T03:02:00Z", **extra}}}]


def status(admin: Any, namespace: str, task: str) -> dict[str, Any]:
    return task_status(admin, namespace, task) or {}


def conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st.get("conditions", [])}


def cli(cp: ControlPlane, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIDINGS), *args, "--kubeconfig", str(cp.kubeconfig("admin"))],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def column(table: str, name: str) -> str:
    """The cell under ``name`` in the one row of a `tidings list` table (cells may hold
    spaces: the columns are where the header says)."""
    head, row = table.splitlines()
    start = head.index(name)
    rest = head[start + len(name):]
    end = start + len(name) + len(rest) - len(rest.lstrip()) if rest.strip() else None
    return row[start:end].strip()


def idle(w: WatcherProc) -> bool:
    """Ready (its lists folded), nothing waiting to be folded or written, none in flight."""
    m = w.metrics()
    return m.get("tidings_watcher_ready") == 1 and all(
        m.get(f"tidings_watcher_{gauge}") == 0 for gauge in (
            "queue_depth", "write_queue_depth", "status_writes_in_flight",
            "status_lag_seconds"))


def half_done(cp: ControlPlane, admin: Any, namespace: str, task: str,
              w: WatcherProc) -> dict[str, str]:
    pod = labelled_pod(admin, namespace, f"{task}-0", task)
    say(cp, namespace, pod, task, 0.5)
    eventually(lambda: status(admin, namespace, task).get("progress", {}).get("percent") == 50,
               30, f"the task running at 50 %\n{w.tail()}")
    return pod


# --- ended without a word -----------------------------------------------------------------

KILLS = {
    "oom_killed": ({"phase": "Failed", "containerStatuses": terminated(137, "OOMKilled")},
                   "OOMKilled", 137, "OOMKilled, exit code 137 (SIGKILL)"),
    "sigterm": ({"phase": "Failed", "containerStatuses": terminated(143, "Error")},
                "Error", 143, "exit code 143 (SIGTERM)"),
    "evicted": ({"phase": "Failed", "reason": "Evicted",
                 "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
                 "containerStatuses": terminated(137, "Error")},
                "Evicted", 137, "The node was low on resource: memory."),
    "preempted": ({"phase": "Failed", "containerStatuses": terminated(143, "Error"),
                   "conditions": [{"type": "DisruptionTarget", "status": "True",
                                   "reason": "PreemptionByScheduler",
                                   "message": "Preempted in order to admit critical pod",
                                   "lastTransitionTime": "2026-11-30T03:01:59Z"}]},
                  "PreemptionByScheduler", 143, "Preempted in order to admit critical pod"),
}


@pytest.mark.parametrize("kill", sorted(KILLS))
def test_a_worker_killed_without_a_word_fails_with_the_kubelet_s_reason(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc], kill: str) -> None:
    pod_status, reason, code, said = KILLS[kill]
    task = kill.replace("_", "-")
    w = start_watcher()
    pod = half_done(control_plane, admin, namespace, task, w)
    kubelet(control_plane, namespace, pod["name"], pod_status)
    st = eventually(lambda: (s := status(admin, namespace, task)).get("phase") == "Failed"
                    and s, 30, f"the task failed by its pod\n{w.tail()}")
    (outcome,) = st["podOutcomes"]
    assert (outcome["pod"], outcome["uid"], outcome["phase"], outcome["reason"],
            outcome["exitCode"]) == (pod["name"], pod["uid"], "Failed", reason, code)
    assert said in outcome["message"]
    failed = conditions(st)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "PodFailed")
    assert failed["message"].startswith(f"pod {pod['name']} ended without a final report: "
                                        f"{reason}")
    assert conditions(st)["Completed"]["status"] == "True"
    # What the process said stays beside it: 50 %, not final.
    (worker,) = st["workers"]
    assert worker["fraction"] == 0.5 and "final" not in worker
    shown = cli(control_plane, "state", task, "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "Failed" in shown.stdout and reason in shown.stdout and "failed (pod)" in shown.stdout
    # One count of its one worker: final by its pod's end, failed; in the list too (not 0/1).
    assert (st["roster"]["final"], st["roster"]["podFinal"], st["roster"]["podFailed"]) == (
        0, 1, 1)
    assert "Workers     1 of 1 final, 1 failed (1 by their pod's end)" in shown.stdout
    listed = cli(control_plane, "list", task, "-n", namespace, "-o", "wide")
    assert column(listed.stdout, "WORKERS") == "1/1 1 failed", listed.stdout
    watched = cli(control_plane, "watch", task, "-n", namespace)
    assert watched.returncode == EXIT_FAILED, watched.stdout + watched.stderr
    assert "Traceback" not in w.log.read_text()


def test_a_pod_deleted_mid_run_is_a_failed_worker_and_watch_returns(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = half_done(control_plane, admin, namespace, "deleted", w)
    client.CoreV1Api(admin).delete_namespaced_pod(pod["name"], namespace,
                                                  grace_period_seconds=0)
    st = eventually(lambda: (s := status(admin, namespace, "deleted")).get("phase") == "Failed"
                    and s, 30, f"the task failed by its pod's deletion\n{w.tail()}")
    (outcome,) = st["podOutcomes"]
    assert (outcome["reason"], outcome["explained"]) == ("Deleted", False)
    assert conditions(st)["Failed"]["message"] == (
        f"pod {pod['name']} ended without a final report: Deleted: the pod was deleted")
    watched = cli(control_plane, "watch", "deleted", "-n", namespace)
    assert watched.returncode == EXIT_FAILED, watched.stdout + watched.stderr


def test_a_pod_that_succeeded_without_a_final_completes_its_worker(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = half_done(control_plane, admin, namespace, "quiet", w)
    kubelet(control_plane, namespace, pod["name"], {
        "phase": "Succeeded", "containerStatuses": terminated(0, "Completed")})
    st = eventually(lambda: (s := status(admin, namespace, "quiet")).get("phase")
                    == "Succeeded" and s, 30, f"the task succeeded by its pod\n{w.tail()}")
    assert st["progress"]["percent"] == 100
    assert st["podOutcomes"][0]["phase"] == "Succeeded"
    assert "by their pod's end" in conditions(st)["Completed"]["message"]
    watched = cli(control_plane, "watch", "quiet", "-n", namespace)
    assert watched.returncode == 0, watched.stdout + watched.stderr


def test_a_late_final_of_its_own_decides_over_the_kubelet_and_both_are_kept(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """The order of the kubelet's verdict and the process's own final does not matter: the
    process's final (delivered late here) decides, and the pod's end stays shown beside."""
    w = start_watcher()
    pod = half_done(control_plane, admin, namespace, "late", w)
    kubelet(control_plane, namespace, pod["name"], {
        "phase": "Failed", "containerStatuses": terminated(137, "OOMKilled")})
    eventually(lambda: status(admin, namespace, "late").get("phase") == "Failed", 30,
               f"failed by its pod first\n{w.tail()}")
    say(control_plane, namespace, pod, "late", 1.0, final=True)
    st = eventually(lambda: (s := status(admin, namespace, "late")).get("phase")
                    == "Succeeded" and s, 30, f"its own final to decide\n{w.tail()}")
    assert st["podOutcomes"][0]["reason"] == "OOMKilled"
    assert st["workers"][0]["final"] is True


# --- restarts: nothing lost, nothing counted twice ------------------------------------------


def test_a_pod_deleted_while_no_watcher_watched_is_found_gone_and_a_restart_keeps_the_end(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    killed = half_done(control_plane, admin, namespace, "restart", w)
    kubelet(control_plane, namespace, killed["name"], {
        "phase": "Failed", "containerStatuses": terminated(137, "OOMKilled")})
    eventually(lambda: status(admin, namespace, "restart").get("phase") == "Failed", 30,
               f"failed\n{w.tail()}")
    w.kill()
    before = status(admin, namespace, "restart")
    again = start_watcher()
    # The same end, read again from the same pod, changes nothing (no write at all). That
    # holds only once the new watcher did read it: a pod of another task, ended after the
    # restart, comes on the same pod watch after the first pod's end, so once its task is
    # written and nothing waits to be folded or written, the first task was read (folded,
    # observed) and found unchanged.
    after = half_done(control_plane, admin, namespace, "after", again)
    kubelet(control_plane, namespace, after["name"], {
        "phase": "Failed", "containerStatuses": terminated(137, "OOMKilled")})
    eventually(lambda: status(admin, namespace, "after").get("phase") == "Failed", 30,
               f"the later pod's end written\n{again.tail()}")
    eventually(lambda: idle(again), 30, f"the watcher idle\n{again.tail()}")
    assert status(admin, namespace, "restart") == before
    again.kill()

    w2 = start_watcher()
    gone = half_done(control_plane, admin, namespace, "gone", w2)
    w2.kill()
    client.CoreV1Api(admin).delete_namespaced_pod(gone["name"], namespace,
                                                  grace_period_seconds=0)
    eventually(lambda: not [p for p in client.CoreV1Api(admin).list_namespaced_pod(
        namespace).items if p.metadata.name == gone["name"]], 30, "the pod gone")
    w3 = start_watcher()
    st = eventually(lambda: (s := status(admin, namespace, "gone")).get("phase") == "Failed"
                    and s, 30, f"the gone pod found\n{w3.tail()}")
    assert st["podOutcomes"][0]["message"] == \
        "the pod is gone (deleted while no watcher was watching)"


def test_a_restart_completes_a_task_only_with_all_its_worker_sent_before_its_end(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """Workers send their last span windows and their finals and their pods end while no
    watcher watches: the watcher that starts reads the pods' ends in its pod cache before
    it lists the events. No status it writes may say Succeeded without what the workers sent
    before they ended (`kubectl wait --for=condition=Completed`, then a read, must see it
    all): every version of the TaskFeedbacks is read from a watch, none is missed. Several
    tasks, so the race this guards (a fold of a pod's end before the events' list is in)
    shows on most runs of the unfixed watcher."""
    tasks = [f"ended{i}" for i in range(4)]
    pods = {t: labelled_pod(admin, namespace, f"{t}-0", t) for t in tasks}
    emitters = {}
    w = start_watcher()
    for t in tasks:
        env = {"POD_NAME": pods[t]["name"], "POD_NAMESPACE": namespace,
               "POD_UID": pods[t]["uid"], "TIDINGS_TASK": t}
        em = emitters[t] = Emitter(
            EmitterConfig(retry_initial_s=0.05, span_window_s=3600.0),
            identity=Identity.from_env(env),
            transport=KubeTransport(connect(str(control_plane.kubeconfig("admin")))))
        for i in range(4):
            em.record_span("step", 1000.0 + i, 1000.5 + i)
        em.progress(0.5, "half")
        assert em.flush(15), em.stats()

    def spans(st: dict[str, Any]) -> int:
        return int(st.get("spans", {}).get("step", {}).get("count", 0))

    eventually(lambda: all(spans(status(admin, namespace, t)) == 4 for t in tasks), 30,
               f"the first windows folded\n{w.tail()}")
    w.kill()
    for t, em in emitters.items():
        for i in range(4, 12):
            em.record_span("step", 1000.0 + i, 1000.5 + i)
        em.progress(1.0, "done", final=True)
        assert em.flush(15), em.stats()
        em.close(1)
        kubelet(control_plane, namespace, pods[t]["name"], {
            "phase": "Succeeded", "containerStatuses": terminated(0, "Completed")})
    api = client.CustomObjectsApi(admin)
    rv = api.list_namespaced_custom_object("tidings.dev", "v1alpha1", namespace,
                                           "taskfeedbacks")["metadata"]["resourceVersion"]
    seen: list[tuple[str, dict[str, Any]]] = []

    def follow() -> None:
        with contextlib.suppress(Exception):  # (it ends with the control plane)
            for change in watch.Watch().stream(
                    api.list_namespaced_custom_object, "tidings.dev", "v1alpha1", namespace,
                    "taskfeedbacks", resource_version=rv, timeout_seconds=90):
                obj = change["object"]
                seen.append((obj["metadata"]["name"], expanded(obj.get("status") or {})))

    threading.Thread(target=follow, daemon=True).start()
    again = start_watcher()

    def done() -> bool:
        last = dict(seen)
        return all(last.get(t, {}).get("phase") == "Succeeded" and spans(last[t]) == 12
                   for t in tasks)

    eventually(done, 30, f"every task succeeded with all its spans\n{again.tail()}")
    early = [(t, spans(st), conditions(st)["Completed"]["message"]) for t, st in seen
             if st.get("phase") == "Succeeded" and (spans(st) != 12 or not all(
                 wk.get("final") for wk in st.get("workers", [])))]
    assert not early, early  # a Completed task missing what its worker sent before its end


# --- waiting ---------------------------------------------------------------------------------


def test_pods_stuck_waiting_show_why_in_the_task_s_conditions(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    first = labelled_pod(admin, namespace, "wait-0", "wait")
    say(control_plane, namespace, first, "wait", 0.5, workers=3)
    eventually(lambda: status(admin, namespace, "wait").get("phase") == "Running", 30,
               f"running\n{w.tail()}")
    pulling = labelled_pod(admin, namespace, "wait-1", "wait")
    kubelet(control_plane, namespace, pulling["name"], {
        "phase": "Pending", "containerStatuses": [{
            "name": "main", "image": "nope:1", "ready": False, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                                  "message": 'Back-off pulling image "nope:1"'}}}]})
    # No scheduler runs here: the pod stays unbound, and the condition is the scheduler's.
    labelled_pod(admin, namespace, "wait-2", "wait", node=None)
    kubelet(control_plane, namespace, "wait-2", {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        "lastTransitionTime": "2026-11-30T03:00:00Z"}]})
    st = eventually(lambda: len((s := status(admin, namespace, "wait")).get(
        "waitingPods", [])) == 2 and s, 30, f"both waiting pods shown\n{w.tail()}")
    waiting = conditions(st)["PodsReady"]
    assert waiting["status"] == "False" and waiting["reason"] == "Unschedulable"  # the first
    assert "pod wait-1: container main: ImagePullBackOff" in waiting["message"]
    assert "pod wait-2: 0/1 nodes are available" in waiting["message"]
    assert st["phase"] == "Running"
    shown = cli(control_plane, "state", "wait", "-n", namespace)
    assert "ImagePullBackOff" in shown.stdout and "Unschedulable" in shown.stdout
    # The image arrives: it runs, and says so no more.
    kubelet(control_plane, namespace, pulling["name"], {
        "phase": "Running", "containerStatuses": [{
            "name": "main", "image": "nope:1", "ready": True, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-11-30T03:03:00Z"}}}]})
    eventually(lambda: [p["pod"] for p in status(admin, namespace, "wait").get(
        "waitingPods", [])] == ["wait-2"], 30, f"wait-1 no longer waiting\n{w.tail()}")


# --- hostile statuses ------------------------------------------------------------------------


def test_a_hostile_pod_status_is_sanitised_bounded_and_never_a_crash(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = half_done(control_plane, admin, namespace, "hostile", w)
    escape = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[2J\x1b[31m"
    kubelet(control_plane, namespace, pod["name"], {
        "phase": "Failed", "reason": escape + "R" * 10_000, "message": escape + "m" * 10_000,
        "containerStatuses": terminated(2**31 - 1, escape + "E" * 10_000,
                                        message=escape + "x" * 10_000)})
    st = eventually(lambda: (s := status(admin, namespace, "hostile")).get("phase")
                    == "Failed" and s, 30, f"failed\n{w.tail()}")
    (outcome,) = st["podOutcomes"]
    assert len(outcome["reason"]) <= 64 and outcome["reason"].isalnum()
    assert len(outcome["message"]) <= 256 and outcome["exitCode"] == 2**31 - 1
    text = json.dumps(st)
    assert "\\u001b" not in text and "\\u0007" not in text and "evil" not in text
    shown = cli(control_plane, "state", "hostile", "-n", namespace)
    assert shown.returncode == 0 and "\x1b]" not in shown.stdout and "\x07" not in shown.stdout
    assert "Traceback" not in w.log.read_text()
