"""What happens before a pod can speak, on the real scheduler, kubelet and container runtime
with the watcher the Helm chart installed: Jobs whose pods never report read right in the
TaskFeedback, `tidings get` and `kubectl wait`, each in the words of the component that knows
(the scheduler's Unschedulable, the kubelet's ImagePullBackOff and CrashLoopBackOff with the
last exit, an init container's failure, the Job controller's DeadlineExceeded and
BackoffLimitExceeded, a container's last words from its termination message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.node.conftest import WatcherInstall
from tests.node.support import WORKLOAD_IMAGE, conditions, container, task_status
from tests.support import eventually
from tools.devcluster import ControlPlane

TIDINGS = Path(sys.executable).parent / "tidings"


def job(admin: Any, namespace: str, name: str, program: str, *, backoff: int = 0,
        restart: str = "Never", image: str = WORKLOAD_IMAGE, spec: dict[str, Any] | None = None,
        pod: dict[str, Any] | None = None, cpu: str = "",
        mounts: list[dict[str, str]] | None = None) -> None:
    """A Job of one pod running ``program``: zero wiring, its pod never reports."""
    c = {**container(program), "image": image,
         "terminationMessagePolicy": "FallbackToLogsOnError"}
    if mounts:
        c["volumeMounts"] = mounts
    if cpu:
        c["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": backoff, **(spec or {}), "template": {"spec": {
                "restartPolicy": restart, "containers": [c], **(pod or {})}}}}
    client.BatchV1Api(admin).create_namespaced_job(namespace, body)


def reads(admin: Any, namespace: str, task: str, phase: str, reason: str,
          timeout: float = 90) -> dict[str, Any]:
    """The task's status once its phase and status.reason read so."""
    return eventually(lambda: ((s := task_status(admin, namespace, task)).get("phase"),
                               s.get("reason")) == (phase, reason) and s, timeout,
                      f"task {task} {phase} with reason {reason}")


def get_row(plane: ControlPlane, namespace: str, task: str) -> list[str]:
    out = subprocess.run([str(TIDINGS), "get", task, "-n", namespace, "--kubeconfig",
                          str(plane.kubeconfig("admin"))], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return out.splitlines()[1].split()


def test_a_missing_image_is_pending_with_the_kubelets_pull_error(
        chart_watcher: WatcherInstall, control_plane: ControlPlane, admin: Any,
        namespace: str) -> None:
    job(admin, namespace, "pull-missing", "print('never')", image="tidings-workload:nope")
    st = eventually(lambda: (s := task_status(admin, namespace, "pull-missing")).get(
        "reason") in ("ErrImagePull", "ImagePullBackOff") and s, 120, "the pull error shown")
    assert st["phase"] == "Pending"
    ready = conditions(st)["PodsReady"]
    assert ready["status"] == "False" and "tidings-workload:nope" in ready["message"]
    row = get_row(control_plane, namespace, "pull-missing")
    assert row[:2] == ["pull-missing", "Pending"] and row[3] in ("ErrImagePull",
                                                               "ImagePullBackOff")
    # What a controller waits on: the condition, through kubectl's own wait.
    control_plane.kubectl_run("wait", "taskfeedback/pull-missing", "-n", namespace,
                              "--for=condition=PodsReady=false", "--timeout=30s")


def test_a_pod_no_node_can_take_is_pending_with_the_schedulers_message(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    job(admin, namespace, "too-big", "print('never')", cpu="64")
    st = reads(admin, namespace, "too-big", "Pending", "Unschedulable")
    ready = conditions(st)["PodsReady"]
    assert ready["status"] == "False" and "Insufficient cpu" in ready["message"]


def test_a_missing_volume_is_pending_while_the_pod_is_created(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    # (a volume no container mounts is not waited for: the kubelet starts the pod)
    job(admin, namespace, "no-volume", "print('never')", pod={"volumes": [
        {"name": "conf", "configMap": {"name": "does-not-exist"}}]},
        mounts=[{"name": "conf", "mountPath": "/etc/app"}])
    # Its pod says only ContainerCreating; the kubelet's Events about it say why.
    st = reads(admin, namespace, "no-volume", "Pending", "FailedMount", 120)
    ready = conditions(st)["PodsReady"]
    assert ready["status"] == "False" and 'configmap "does-not-exist" not found' in \
        ready["message"]


def test_a_crash_at_start_is_a_crash_loop_then_the_jobs_backoff_limit(
        chart_watcher: WatcherInstall, control_plane: ControlPlane, admin: Any,
        namespace: str) -> None:
    job(admin, namespace, "crash-at-start",
        "import sys; print('config file /etc/app.yaml not found', file=sys.stderr); sys.exit(3)",
        restart="OnFailure", backoff=2)
    st = reads(admin, namespace, "crash-at-start", "Pending", "CrashLoopBackOff")
    (waiting,) = st["waitingPods"]
    assert waiting["exitCode"] == 3 and "exit code 3" in waiting["message"]
    st = reads(admin, namespace, "crash-at-start", "Failed", "BackoffLimitExceeded", 240)
    failed = conditions(st)["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "BackoffLimitExceeded"
    wait = subprocess.run([str(TIDINGS), "watch", "crash-at-start", "-n", namespace,
                           "--kubeconfig", str(control_plane.kubeconfig("admin"))],
                          capture_output=True, text=True, timeout=60)
    assert wait.returncode != 0


def test_an_init_container_that_fails_fails_the_task_with_its_last_words(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    init = {**container("import sys; print('schema migration failed: no such table', "
                        "file=sys.stderr); sys.exit(1)"), "name": "migrate",
            "terminationMessagePolicy": "FallbackToLogsOnError"}
    job(admin, namespace, "init-fails", "print('never')", pod={"initContainers": [init]})
    st = reads(admin, namespace, "init-fails", "Failed", "BackoffLimitExceeded", 120)
    (outcome,) = st["podOutcomes"]
    assert "container migrate" in outcome["message"]
    assert "schema migration failed: no such table" in outcome["message"]  # its last words


def test_a_job_past_its_deadline_fails_its_task_with_deadline_exceeded(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    job(admin, namespace, "deadline", "import time; time.sleep(600)",
        spec={"activeDeadlineSeconds": 5})
    reads(admin, namespace, "deadline", "Failed", "DeadlineExceeded", 120)
