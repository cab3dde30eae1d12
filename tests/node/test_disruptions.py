"""A running worker disrupted on the real node, and what its task says: evicted through the
Eviction API (policy/v1), the worker's end names who (EvictionByEvictionAPI); its node killed
under it (kubelet, kube-proxy, containerd and every container, not the Node object edited),
the task says "node lost" with the node lifecycle controller's word once that controller
gives up on the node, then the taint eviction controller's deletion ends the worker
(DeletionByTaintManager) and the Job that owns the task fails.

The node's death takes every pod on it, the chart's watcher too: that test runs its watcher
off the node (as a cluster's watcher on another node would see it) and brings the node back
before the next test (``RealNode.restart``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import WatcherProc
from tests.node.conftest import NS, WatcherInstall
from tests.node.support import conditions, container, job_pods, task_status, workload_account
from tests.support import eventually
from tools.devcluster import ControlPlane
from tools.devnode import REAL_NODE_NAME, RealNode

crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher

TIDINGS = Path(sys.executable).parent / "tidings"
# kube-controller-manager's --node-monitor-grace-period (its default: the plane sets none).
NODE_MONITOR_GRACE_S = 50
# How long the test's worker tolerates its node's NoExecute taints (a pod's default is 300 s,
# which the DefaultTolerationSeconds admission plugin adds; a workload may say less).
TOLERATION_S = 10

# A worker that says where it is, then works on in silence.
LONG_RUN = """
import time
from tidings import emitter as tidings
tidings.progress(0.3, "epoch 3 of 10")
tidings.flush(15)
print("training", flush=True)
while True:
    time.sleep(1)
"""


def long_run(admin: Any, namespace: str, name: str, account: str) -> Any:
    """A Job of one reporting pod that never ends by itself, no retry, tolerating its node's
    loss for TOLERATION_S; its pod once Running and its 30 % folded."""
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "serviceAccountName": account,
                "terminationGracePeriodSeconds": 5,
                "tolerations": [{"key": f"node.kubernetes.io/{key}", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": TOLERATION_S}
                                for key in ("not-ready", "unreachable")],
                "containers": [container(LONG_RUN)]}}}}
    client.BatchV1Api(admin).create_namespaced_job(namespace, body)
    pod = eventually(lambda: (p := job_pods(admin, namespace, name)) and p[0].status.phase
                     == "Running" and p[0], 120, f"{name}'s pod running")
    eventually(lambda: (s := task_status(admin, namespace, name)).get("phase") == "Running"
               and [w.get("fraction") for w in s.get("workers", [])] == [0.3] and s, 90,
               f"{name}'s 30 % folded, the task Running")
    return pod


def watch_code(plane: ControlPlane, namespace: str, task: str) -> int:
    return subprocess.run([str(TIDINGS), "watch", task, "-n", namespace, "--kubeconfig",
                           str(plane.kubeconfig("admin"))], capture_output=True, text=True,
                          timeout=60).returncode


def test_an_eviction_through_the_eviction_api_ends_the_worker_saying_so(
        chart_watcher: WatcherInstall, control_plane: ControlPlane, admin: Any,
        namespace: str) -> None:
    account = workload_account(admin, namespace)
    pod = long_run(admin, namespace, "evicted", account)
    core = client.CoreV1Api(admin)
    core.create_namespaced_pod_eviction(pod.metadata.name, namespace, {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod.metadata.name, "namespace": namespace}})
    st = eventually(lambda: (s := task_status(admin, namespace, "evicted")).get(
        "podOutcomes") and s, 90, "the eviction shown as the worker's end")
    (end,) = st["podOutcomes"]
    assert (end["pod"], end["reason"]) == (pod.metadata.name, "EvictionByEvictionAPI"), end
    assert "Eviction API" in end["message"], end
    # The Job counts its evicted pod as its one failure: the task follows it.
    st = eventually(lambda: (s := task_status(admin, namespace, "evicted")).get(
        "phase") == "Failed" and s, 90, "the task failed with its Job")
    assert conditions(st)["Failed"]["reason"] == "BackoffLimitExceeded"
    (worker,) = st["workers"]
    # The eviction's SIGTERM reached the process: the emitter's last word says it failed.
    assert (worker["fraction"], worker.get("failed")) == (0.3, True), worker
    assert watch_code(control_plane, namespace, "evicted") != 0


@pytest.fixture
def node_to_kill(real_node: RealNode, control_plane: ControlPlane,
                 watcher_install: WatcherInstall) -> Iterator[RealNode]:
    """The real node, for a test to crash; back and schedulable afterwards, and the chart's
    watcher (if installed) kept off the task while its node dies and running again after."""
    deployment = "deployment/tidings-watcher"
    replicas = ""
    if watcher_install.current:
        replicas = control_plane.kubectl_run("get", deployment, "-n", NS, "-o",
                                             "jsonpath={.spec.replicas}")
        control_plane.kubectl_run("scale", deployment, "-n", NS, "--replicas=0")
        eventually(lambda: not watcher_install.pods(), 120, "the chart's watcher stopped")
    yield real_node
    real_node.restart()
    control_plane.save()  # the node's new processes, for `tidings dev down`

    def schedulable() -> bool:
        taints = control_plane.kubectl_run("get", "node", REAL_NODE_NAME, "-o",
                                           "jsonpath={.spec.taints}")
        return "NoExecute" not in taints and "NoSchedule" not in taints

    eventually(schedulable, 120, f"{REAL_NODE_NAME} schedulable again")
    if replicas:
        control_plane.kubectl_run("scale", deployment, "-n", NS, f"--replicas={replicas}")
        watcher_install.wait_ready()


def test_a_node_killed_under_a_running_worker_is_a_lost_node_then_an_eviction(
        node_to_kill: RealNode, control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    account = workload_account(admin, namespace)
    pod = long_run(admin, namespace, "long-run", account)
    assert pod.spec.node_name == REAL_NODE_NAME
    node_to_kill.crash()
    # Its pod still says Running; the node lifecycle controller gives up on the node after
    # its grace, and the task says so (the deadline is a synchronisation bound, generous for
    # a loaded machine: bench/bench_real_node_waits.py measures the delay).
    st = eventually(lambda: (s := task_status(admin, namespace, "long-run")).get(
        "reason") == "NodeLost" and s, NODE_MONITOR_GRACE_S + 60,
        f"the node lost shown\n{w.tail()}")
    assert st["phase"] != "Failed"
    (waiting,) = st["waitingPods"]
    assert (waiting["pod"], waiting["reason"]) == (pod.metadata.name, "NodeLost")
    assert f"node {REAL_NODE_NAME} not ready (Unknown: NodeStatusUnknown)" in \
        waiting["message"], waiting
    assert "Kubelet stopped posting node status" in waiting["message"], waiting
    ready = conditions(st)["PodsReady"]
    assert (ready["status"], ready["reason"]) == ("False", "NodeLost")
    live = client.CoreV1Api(admin).read_namespaced_pod(pod.metadata.name, namespace)
    assert live.status.phase == "Running"  # the pod's own word, which no kubelet updates
    # Its toleration of the unreachable taint runs out: the taint eviction controller deletes
    # it (no kubelet confirms: it stays Terminating), which is the worker's end.
    st = eventually(lambda: (s := task_status(admin, namespace, "long-run")).get(
        "podOutcomes") and s, TOLERATION_S + 90, f"the eviction shown\n{w.tail()}")
    (end,) = st["podOutcomes"]
    assert (end["pod"], end["reason"]) == (pod.metadata.name, "DeletionByTaintManager"), end
    assert "waitingPods" not in st
    (worker,) = st["workers"]
    assert worker["fraction"] == 0.3 and "final" not in worker
    # The Job counts the deleted pod as its one failure: the task fails with it, while the
    # node is still dead.
    st = eventually(lambda: (s := task_status(admin, namespace, "long-run")).get(
        "phase") == "Failed" and s, 90, f"the task failed with its Job\n{w.tail()}")
    assert conditions(st)["Failed"]["reason"] == "BackoffLimitExceeded", st
    assert watch_code(control_plane, namespace, "long-run") != 0
