"""The platform object as ground truth of a task's outcome, and owners as claims until
verified, on the real control plane with kube-controller-manager
running the Job controller and the garbage collector.

A real batch/v1 Job retries a worker that crashed or was OOM-killed and completes: the task
follows it to Succeeded, 100 %, its failed attempt shown as retried. JobSet, TrainJob and
Argo Workflow objects (minimal CRDs: their controllers are not built here) get the status
their controllers write (upstream sources cited in schemas/engine/observed.py). A forged owner uid
is refused; a Job replaced under the same name is a new run with a new TaskFeedback."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.cluster import test_platforms as tp
from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import TIDINGS, WatcherProc, task_status
from tests.cluster.test_pod_truth import cli, column, kubelet, terminated
from tests.support import NODE_NAME, eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport
from tidings.kube import connect
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher
platform_crds = tp.platform_crds

EXIT_FAILED = 6


# --- helpers -------------------------------------------------------------------------------


def job_body(name: str, *, backoff: int = 2, completions: int = 1) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": backoff, "completions": completions,
                     "parallelism": 1, "template": {"spec": {
                         "restartPolicy": "Never", "nodeName": NODE_NAME,
                         "containers": [{"name": "main", "image": "busybox"}]}}}}


def pods_of_job(admin: Any, namespace: str, job: str) -> list[Any]:
    """The Job's pods (the Job controller's), oldest first."""
    pods = client.CoreV1Api(admin).list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items
    return sorted(pods, key=lambda p: (p.metadata.creation_timestamp, p.metadata.name))


def running_pod(admin: Any, namespace: str, job: str, n: int) -> dict[str, str]:
    """The Job's ``n``-th pod (1-based), once kwok runs it."""
    pod = eventually(lambda: len(ps := pods_of_job(admin, namespace, job)) >= n
                     and ps[n - 1].status.pod_ip and ps[n - 1], 60,
                     f"the Job controller's pod {n} of {job} running")
    return {"name": pod.metadata.name, "uid": pod.metadata.uid}


def reporter(cp: ControlPlane, namespace: str, pod: dict[str, str]) -> Emitter:
    """The pod's process, zero wiring: its identity only (no task id), so its facts are
    about its pod and the watcher finds the task by the pod's labels."""
    env = {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"]}
    return Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                   transport=KubeTransport(connect(str(cp.kubeconfig("admin")))))


def report(cp: ControlPlane, namespace: str, pod: dict[str, str], fraction: float, *,
           final: bool = False, failed: str = "", link: str = "") -> None:
    em = reporter(cp, namespace, pod)
    if link:
        em.log_link("run", link)
    if failed:
        em.fail(failed)
    else:
        em.progress(fraction, f"step {fraction}", final=final)
    assert em.flush(15), em.stats()


def status(admin: Any, namespace: str, task: str) -> dict[str, Any]:
    return task_status(admin, namespace, task) or {}


def conditions(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in st.get("conditions", [])}


def job_condition(admin: Any, namespace: str, job: str, ctype: str) -> bool:
    j = client.BatchV1Api(admin).read_namespaced_job(job, namespace)
    return any(c.type == ctype and c.status == "True" for c in j.status.conditions or [])


def watch_code(cp: ControlPlane, namespace: str, task: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TIDINGS), "watch", task, "-n", namespace, "--kubeconfig",
                           str(cp.kubeconfig("admin"))], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "200"})


# --- retries, the task follows its Job ------------------------------------------------


@pytest.mark.parametrize("death", ["failed_final", "oom_killed"])
def test_a_job_that_retries_a_dead_worker_and_completes_is_succeeded_at_100_percent(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc], death: str) -> None:
    cp = controller_manager
    task = f"retry-{death.replace('_', '-')}"
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body(task))
    w = start_watcher()
    first = running_pod(admin, namespace, task, 1)
    report(cp, namespace, first, 0.5)
    eventually(lambda: status(admin, namespace, task).get("progress", {}).get("percent") == 50,
               30, f"running at 50 %\n{w.tail()}")
    if death == "failed_final":
        report(cp, namespace, first, 0.5, failed="CUDA error: an illegal memory access")
        kubelet(cp, namespace, first["name"], {"phase": "Failed",
                                               "containerStatuses": terminated(1, "Error")})
    else:
        kubelet(cp, namespace, first["name"], {
            "phase": "Failed", "containerStatuses": terminated(137, "OOMKilled")})
    second = running_pod(admin, namespace, task, 2)  # the Job controller's retry
    st = eventually(lambda: (s := status(admin, namespace, task)).get("podOutcomes") and s,
                    30, f"the dead attempt seen\n{w.tail()}")
    assert st["phase"] == "Running", st  # an attempt the Job retries is not its failure
    assert st["platform"]["kind"] == "Job" and st["platform"]["phase"] == "Running"
    report(cp, namespace, second, 1.0, final=True)
    kubelet(cp, namespace, second["name"], {"phase": "Succeeded",
                                            "containerStatuses": terminated(0, "Completed")})
    eventually(lambda: job_condition(admin, namespace, task, "Complete"), 60,
               "the Job controller to complete the Job")
    st = eventually(lambda: (s := status(admin, namespace, task)).get("phase") == "Succeeded"
                    and s, 30, f"the task to follow its Job\n{w.tail()}")
    assert st["progress"]["percent"] == 100
    assert st["platform"]["phase"] == "Succeeded" and st["platform"]["reason"]
    assert conditions(st)["Completed"]["message"].startswith(f"Job {task} succeeded")
    assert conditions(st)["Failed"]["status"] == "False"
    assert {wk["pod"] for wk in st["workers"]} == {first["name"], second["name"]}
    shown = cli(cp, "state", task, "-n", namespace)
    assert "retried" in shown.stdout and "Job " + task in shown.stdout, shown.stdout
    ended = " (1 by their pod's end)" if death == "oom_killed" else ""
    assert f"Workers     2 of 2 final, 1 retried{ended}" in shown.stdout, shown.stdout
    assert watch_code(cp, namespace, task).returncode == 0


def test_a_job_that_gives_up_fails_its_task_with_its_reason(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("gives-up", backoff=0))
    w = start_watcher()
    pod = running_pod(admin, namespace, "gives-up", 1)
    report(cp, namespace, pod, 0.3)
    kubelet(cp, namespace, pod["name"], {"phase": "Failed",
                                         "containerStatuses": terminated(137, "OOMKilled")})
    eventually(lambda: job_condition(admin, namespace, "gives-up", "Failed"), 60,
               "the Job controller to fail the Job")
    st = eventually(lambda: (s := status(admin, namespace, "gives-up")).get("phase")
                    == "Failed" and s, 30, f"the task failed by its Job\n{w.tail()}")
    failed = conditions(st)["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("Job gives-up failed: BackoffLimitExceeded")
    assert st["podOutcomes"][0]["reason"] == "OOMKilled"  # the pod's word, beside
    # A Job that gave up retried nothing: its one worker failed, everywhere it is counted.
    shown = cli(cp, "state", "gives-up", "-n", namespace).stdout
    assert "Workers     1 of 1 final, 1 failed (1 by their pod's end)" in shown, shown
    assert "retried" not in shown, shown
    # It keeps the progress its worker reached: the task's, as the worker's own row says.
    assert st["progress"]["percent"] == 30, st["progress"]
    assert "30.0%" in next(line for line in shown.splitlines() if "Progress" in line), shown
    listed = cli(cp, "list", "gives-up", "-n", namespace, "-o", "wide").stdout
    assert column(listed, "WORKERS") == "1/1 1 failed", listed
    assert column(listed, "PROGRESS") == "30%", listed
    assert watch_code(cp, namespace, "gives-up").returncode == EXIT_FAILED


def test_a_restarted_watcher_still_follows_the_job_its_task_follows(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """The Job completes while no watcher runs, and its pod says nothing more: the restarted
    watcher reads the Job its status follows, and the task ends with it."""
    cp = controller_manager
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("restarts"))
    w = start_watcher()
    pod = running_pod(admin, namespace, "restarts", 1)
    report(cp, namespace, pod, 1.0, final=True)
    eventually(lambda: status(admin, namespace, "restarts").get("platform"), 30,
               f"the Job followed\n{w.tail()}")
    assert status(admin, namespace, "restarts")["phase"] == "Running"
    w.kill()
    kubelet(cp, namespace, pod["name"], {"phase": "Succeeded",
                                         "containerStatuses": terminated(0, "Completed")})
    eventually(lambda: job_condition(admin, namespace, "restarts", "Complete"), 60,
               "the Job controller to complete the Job")
    again = start_watcher()
    st = eventually(lambda: (s := status(admin, namespace, "restarts")).get("phase")
                    == "Succeeded" and s, 30, f"the task ended with its Job\n{again.tail()}")
    assert st["platform"]["phase"] == "Succeeded" and st["progress"]["percent"] == 100


# --- JobSet, TrainJob, Workflow, as their controllers write their status ----------

# (the object's plural, its group/version, the status its controller writes, the phase and
# the Failed condition's reason the task must show)
ENDS = {
    # jobset: pkg/controllers/jobset_controller.go sets Completed/Failed conditions.
    "jobset": (tp.make_jobset, {"conditions": [{
        "type": "Failed", "status": "True", "reason": "ReachedMaxRestarts",
        "message": "jobset failed due to reaching max number of restarts",
        "lastTransitionTime": "2026-11-30T03:05:00Z"}], "restarts": 3},
        "Failed", "ReachedMaxRestarts"),
    "trainjob": (tp.make_trainjob, {"conditions": [{
        "type": "Complete", "status": "True", "reason": "JobsCompleted",
        "message": "TrainJob is completed", "lastTransitionTime": "2026-11-30T03:05:00Z"}]},
        "Succeeded", ""),
    "workflow": (tp.make_workflow, {"phase": "Failed", "message": "child 'train' failed",
                                 "startedAt": "2026-11-30T03:00:00Z",
                                 "finishedAt": "2026-11-30T03:05:00Z"},
                 "Failed", "Failed"),
}


RUNNING = {
    "jobset": {"replicatedJobsStatus": [{"name": "workers", "ready": 1, "succeeded": 0,
                                         "failed": 0, "active": 1, "suspended": 0}]},
    "trainjob": {"jobsStatus": [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0,
                                 "active": 1, "suspended": 0}]},
    "workflow": {"phase": "Running", "startedAt": "2026-11-30T03:00:00Z"},
}


@pytest.mark.parametrize("platform", sorted(ENDS))
def test_a_platform_object_s_terminal_status_decides_its_task(
        controller_manager: ControlPlane, admin: Any, platform_crds: None, namespace: str,
        start_watcher: Callable[..., WatcherProc], platform: str) -> None:
    cp = controller_manager
    make, end, phase, reason = ENDS[platform]
    tp.grant_workload(admin, namespace)  # (the pods' ServiceAccount)
    pod, obj, plural = make(admin, namespace)
    task = obj["metadata"]["name"]
    group, version = obj["apiVersion"].split("/")
    objects = client.CustomObjectsApi(admin)
    # Its controller reports it running first (no status at all decides nothing).
    objects.patch_namespaced_custom_object(group, version, namespace, plural, task,
                                           {"status": RUNNING[platform]})
    w = start_watcher()
    report(cp, namespace, pod, 1.0, final=True)  # the worker is done ...
    st = eventually(lambda: (s := status(admin, namespace, task)).get("platform") and s, 30,
                    f"the {obj['kind']} seen\n{w.tail()}")
    assert st["phase"] == "Running"  # ... but its platform decides
    objects.patch_namespaced_custom_object(group, version, namespace, plural, task,
                                           {"status": end})
    st = eventually(lambda: (s := status(admin, namespace, task)).get("phase") == phase
                    and s, 30, f"the task to follow its {obj['kind']}\n{w.tail()}")
    if reason:
        assert conditions(st)["Failed"]["reason"] == reason
    assert st["platform"]["kind"] == obj["kind"]
    assert watch_code(cp, namespace, task).returncode == (EXIT_FAILED if phase == "Failed"
                                                          else 0)


# --- owners are claims until verified -------------------------------------------------


def test_a_forged_controller_uid_is_refused_and_the_real_job_owns_its_task(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    job = client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("victim"))
    real = running_pod(admin, namespace, "victim", 1)
    forged = "0f0f0f0f-0000-4000-8000-000000000000"
    bare = client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": "victim-forged", "labels": {
            "batch.kubernetes.io/job-name": "victim", "job-name": "victim",
            "batch.kubernetes.io/controller-uid": forged, "controller-uid": forged}},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "m", "image": "busybox"}]}})
    w = start_watcher()
    report(cp, namespace, {"name": "victim-forged", "uid": bare.metadata.uid}, 0.9,
           link="https://evil.example/x")
    eventually(lambda: w.metrics().get(
        'tidings_watcher_events_rejected_total{reason="unverified_owner"}', 0) >= 2, 30,
        f"the forged claim refused\n{w.tail()}")
    # It made nothing: the task is the real Job's own (--track), owned by it, without the
    # forged pod's link.
    tf = eventually(lambda: tp.taskfeedback(admin, namespace, "victim"), 30, "the Job's task")
    assert [(o["kind"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
        ("Job", job.metadata.uid)]
    assert "links" not in (tf.get("status") or {})
    report(cp, namespace, real, 0.5, link="https://wandb.example/victim")
    tf = eventually(lambda: tp.taskfeedback(admin, namespace, "victim"), 30,
                    f"the real Job's task\n{w.tail()}")
    assert [(o["kind"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
        ("Job", job.metadata.uid)]
    # The forged pod speaks again: refused and counted in the task's status now.
    report(cp, namespace, {"name": "victim-forged", "uid": bare.metadata.uid}, 1.0,
           final=True)
    st = eventually(lambda: (s := status(admin, namespace, "victim")).get(
        "refused", {}).get("unverifiedOwner") and s, 30, f"counted\n{w.tail()}")
    assert st["links"] == {"run": st["links"]["run"]}
    assert st["links"]["run"]["url"] == "https://wandb.example/victim"
    assert st["phase"] == "Running"


def test_a_job_replaced_under_the_same_name_is_a_new_run_with_a_new_taskfeedback(
        controller_manager: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    batch = client.BatchV1Api(admin)
    first = batch.create_namespaced_job(namespace, job_body("rerun"))
    w = start_watcher()
    pod1 = running_pod(admin, namespace, "rerun", 1)
    report(cp, namespace, pod1, 0.5, link="https://wandb.example/run-1")
    tf1 = eventually(lambda: (t := tp.taskfeedback(admin, namespace, "rerun"))
                     and (t.get("status") or {}).get("links") and t, 30,
                     f"run 1's task\n{w.tail()}")
    assert tf1["metadata"]["ownerReferences"][0]["uid"] == first.metadata.uid
    manifest = tmp_path / "rerun.yaml"
    manifest.write_text(yaml.safe_dump(job_body("rerun")))
    cp.kubectl_run("replace", "--force", "-f", str(manifest), "-n", namespace)
    second = eventually(lambda: (j := batch.read_namespaced_job("rerun", namespace))
                        .metadata.uid != first.metadata.uid and j, 60, "the new Job")
    pod2 = eventually(lambda: next(
        ({"name": p.metadata.name, "uid": p.metadata.uid}
         for p in pods_of_job(admin, namespace, "rerun")
         if p.metadata.labels.get("batch.kubernetes.io/controller-uid") == second.metadata.uid
         and p.status.pod_ip), None), 60, "run 2's pod running")
    report(cp, namespace, pod2, 0.25, link="https://wandb.example/run-2")
    # (its link is critical, written at once; its progress coalescible, a few seconds later)
    tf2 = eventually(lambda: (t := tp.taskfeedback(admin, namespace, "rerun"))
                     and t["metadata"]["uid"] != tf1["metadata"]["uid"]
                     and (t.get("status") or {}).get("workers") and t, 60,
                     f"run 2's own TaskFeedback\n{w.tail()}")
    assert [(o["kind"], o["uid"]) for o in tf2["metadata"]["ownerReferences"]] == [
        ("Job", second.metadata.uid)]
    st = tf2["status"]
    assert st["links"]["run"]["url"] == "https://wandb.example/run-2"  # clean: run 2 only
    assert [wk["pod"] for wk in st["workers"]] == [pod2["name"]]
    # Run 1's pod, if it still speaks, is a deleted Job's: refused, never folded in.
    report(cp, namespace, pod1, 1.0, final=True)
    # (its pod went with its Job: a pod that is gone counts only through its sender proof)
    eventually(lambda: status(admin, namespace, "rerun").get("refused", {}).get(
        "unverifiedOwner") or any(w.metrics().get(
            f'tidings_watcher_events_rejected_total{{reason="{reason}"}}', 0) >= 1
            for reason in ("unverified_owner", "unknown_task", "spoofed_sender")),
        30, f"run 1's late fact refused\n{w.tail()}")
    report(cp, namespace, pod2, 1.0, final=True)
    kubelet(cp, namespace, pod2["name"], {"phase": "Succeeded",
                                          "containerStatuses": terminated(0, "Completed")})
    st = eventually(lambda: (s := status(admin, namespace, "rerun")).get("phase")
                    == "Succeeded" and s, 60, f"run 2 complete\n{w.tail()}")
    assert [wk["pod"] for wk in st["workers"]] == [pod2["name"]]
    again = tp.taskfeedback(admin, namespace, "rerun")
    assert again is not None and again["metadata"]["uid"] == tf2["metadata"]["uid"]
    assert json.dumps(st).count("run-1") == 0
