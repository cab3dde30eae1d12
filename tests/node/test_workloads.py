"""Workloads in real containers, reporting to the watcher the Helm chart installed, with zero
wiring: a Job's pod whose ServiceAccount is bound to tidings-workload and nothing else, its
facts sent with the token the kubelet mounted. Each death is the container runtime's and the
kubelet's own: an OOM kill by the memory limit, an exit 1 the Job retries, a deletion whose
SIGTERM flushes what was queued. `tidings logs -f` streams the containers' real output and
`tidings ui` shows the run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.cluster.test_ui import UiServer
from tests.node.conftest import WatcherInstall
from tests.node.support import (
    conditions,
    job_pods,
    logs,
    run_job,
    run_pod,
    task_status,
    workload_account,
)
from tests.support import eventually
from tools.devcluster import ControlPlane

TIDINGS = Path(sys.executable).parent / "tidings"


def terminated(pod: Any) -> Any:
    (state,) = pod.status.container_statuses
    return state.state.terminated


def test_a_job_reports_with_the_kubelet_s_token_and_completes(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    account = workload_account(admin, namespace)
    # The sample workload the image carries: links, spans, progress, a deck, its final.
    run_job(admin, namespace, "train", "import runpy, sys; sys.argv = ['train.py', '2', "
            "'--final']; runpy.run_path('/app/train.py', run_name='__main__')",
            service_account=account)
    st = eventually(lambda: (s := task_status(admin, namespace, "train")).get("phase")
                    == "Succeeded" and s, 120, "the Job's task to succeed")
    (worker,) = st["workers"]
    (pod,) = job_pods(admin, namespace, "train")
    assert worker["pod"] == pod.metadata.name and worker.get("final")
    assert st["platform"]["kind"] == "Job" and st["platform"]["phase"] == "Succeeded"
    assert any(name.startswith("wandb-") for name in st["links"])
    # Sent as the pod itself: the admission policy let the pod's own token through.
    events = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector="reportingController=tidings.dev/bus").items
    assert events and {e.related.uid for e in events} == {pod.metadata.uid}
    owner = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", "train")["metadata"]
    assert owner["ownerReferences"][0]["kind"] == "Job"


OOM = """
from tidings import emitter as tidings
tidings.progress(0.2, "loading the data")
tidings.flush(15)
print("allocating", flush=True)
hog = []
while True:
    hog.append(b"x" * (16 << 20))
"""


def test_a_container_killed_by_its_memory_limit_fails_its_worker_with_oomkilled(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    account = workload_account(admin, namespace)
    run_job(admin, namespace, "oom", OOM, service_account=account, memory="160Mi")
    pod = eventually(lambda: (p := job_pods(admin, namespace, "oom")) and p[0].status.phase
                     == "Failed" and p[0], 120, "the OOM kill")
    assert (terminated(pod).reason, terminated(pod).exit_code) == ("OOMKilled", 137)
    assert not pod.status.reason  # the kubelet leaves the pod's own reason empty
    st = eventually(lambda: (s := task_status(admin, namespace, "oom")).get("podOutcomes")
                    and s, 60, "the pod's end in the status")
    (outcome,) = st["podOutcomes"]
    assert (outcome["pod"], outcome["phase"], outcome["reason"], outcome["exitCode"]) == (
        pod.metadata.name, "Failed", "OOMKilled", 137)
    (worker,) = st["workers"]
    assert worker["fraction"] == 0.2 and "final" not in worker  # what the process said
    st = eventually(lambda: (s := task_status(admin, namespace, "oom")).get("phase")
                    == "Failed" and s, 60, "the task to follow its failed Job")
    assert conditions(st)["Failed"]["reason"] == "BackoffLimitExceeded"


EXIT_1 = """
import sys
from tidings import emitter as tidings
tidings.progress(0.5, "half way")
sys.exit(1)
"""


def test_a_container_exiting_1_is_retried_by_the_job_and_the_task_follows_the_job(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    account = workload_account(admin, namespace)
    run_job(admin, namespace, "flaky", EXIT_1, service_account=account, backoff_limit=1)
    pods = eventually(lambda: len(p := job_pods(admin, namespace, "flaky")) == 2
                      and all(x.status.phase == "Failed" for x in p) and p, 180,
                      "both attempts to fail")
    assert {terminated(p).exit_code for p in pods} == {1}
    st = eventually(lambda: (s := task_status(admin, namespace, "flaky")).get("phase")
                    == "Failed" and s, 60, "the task to follow its Job")
    failed = conditions(st)["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].startswith("Job flaky failed: BackoffLimitExceeded")
    # Each attempt said its own failed final (sys.exit(1)), beside the kubelet's word.
    assert {w["pod"] for w in st["workers"]} == {p.metadata.name for p in pods}
    assert all(w.get("failed") for w in st["workers"])
    assert {o["exitCode"] for o in st["podOutcomes"]} == {1}


HOLD = """
import time
from tidings import emitter as tidings
tidings.progress(0.3, "first window")
tidings.flush(15)
tidings.progress(0.6, "queued for the next window")
print("holding", flush=True)
time.sleep(3600)
"""


def test_a_pod_deleted_mid_run_flushes_on_sigterm_and_fails_its_worker(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    account = workload_account(admin, namespace)
    # The next window is ten minutes away: only the SIGTERM flush can send the 0.6.
    run_pod(admin, namespace, "held", HOLD, labels={"tidings.dev/task": "held"},
            service_account=account, env={"TIDINGS_EMIT_SPAN_WINDOW_S": "600"})
    eventually(lambda: [w.get("fraction") for w in task_status(admin, namespace, "held")
                        .get("workers", [])] == [0.3], 120, "the first window")
    eventually(lambda: "holding" in logs(admin, namespace, "held"), 30, "the program to hold")
    client.CoreV1Api(admin).delete_namespaced_pod("held", namespace)
    st = eventually(lambda: (s := task_status(admin, namespace, "held")).get("phase")
                    == "Failed" and s, 90, "the deleted pod to fail its worker")
    (worker,) = st["workers"]
    assert worker["fraction"] == 0.6, worker  # flushed by the SIGTERM handler
    assert worker["failed"] and "SIGTERM" in worker["message"], worker
    st = eventually(lambda: (s := task_status(admin, namespace, "held")).get("podOutcomes")
                    and s, 60, "the pod's end beside what the process said")
    (outcome,) = st["podOutcomes"]
    assert outcome["phase"] == "Failed", outcome


CHATTY = """
import time
for i in range(1, 6):
    print(f"step {i} of 5", flush=True)
    time.sleep(0.2)
time.sleep(3600)
"""


def test_logs_follow_streams_exactly_the_containers_output(
        chart_watcher: WatcherInstall, control_plane: ControlPlane, admin: Any,
        namespace: str) -> None:
    expected = [f"step {i} of 5" for i in range(1, 6)]
    run_pod(admin, namespace, "chatty-0", CHATTY, labels={"tidings.dev/task": "chatty"})
    run_pod(admin, namespace, "other", CHATTY, labels={"tidings.dev/task": "other"})
    for name in ("chatty-0", "other"):
        eventually(lambda n=name: logs(admin, namespace, n).splitlines() == expected, 120,
                   f"{name} to print its lines")
    kubeconfig = str(control_plane.kubeconfig("admin"))
    env = {**os.environ, "NO_COLOR": "1"}
    # All of it: exactly the task's container's lines, in order, none of the other task's.
    shown = subprocess.run([str(TIDINGS), "logs", "chatty", "-n", namespace, "--kubeconfig",
                            kubeconfig], capture_output=True, text=True, timeout=60, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [f"[chatty-0/main] {text}" for text in expected]
    # Followed: the same lines stream, and the command keeps following the running pod.
    proc = subprocess.Popen([str(TIDINGS), "logs", "chatty", "-n", namespace, "-f",
                             "--kubeconfig", kubeconfig], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        eventually(lambda: len(lines) >= 5, 60, f"five lines streamed: {lines}")
        assert lines[:5] == [f"[chatty-0/main] {text}" for text in expected]
        assert proc.poll() is None  # still following
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_page_shows_a_run_on_the_real_node(
        chart_watcher: WatcherInstall, control_plane: ControlPlane, admin: Any,
        namespace: str) -> None:
    account = workload_account(admin, namespace)
    run_job(admin, namespace, "shown", OOM, service_account=account, memory="160Mi")
    eventually(lambda: task_status(admin, namespace, "shown").get("podOutcomes"), 120,
               "the OOM kill in the status")
    (pod,) = job_pods(admin, namespace, "shown")
    ui = UiServer(control_plane.kubeconfig("admin"))
    try:
        page = eventually(lambda: "OOMKilled" in (p := ui.ask(f"tasks/{namespace}/shown")[1])
                          and p, 60, "the page to show the OOM kill")
        assert pod.metadata.name in page
    finally:
        ui.stop()
