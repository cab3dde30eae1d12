"""A task exists before any of its pods speaks (watcher/tracking.py), on the real control
plane with kube-controller-manager's Job controller and kwok's pods: a Job whose pod cannot
pull its image is Pending with the kubelet's reason, in the status, the PodsReady condition
and `tidings get`'s row; a Job that fails before any pod spoke fails its task with the
Job's reason; a Job whose pods run quietly is Running; `--track reported-only` keeps the
older rule. The same cases on the real kubelet are tests/node/test_before_speech.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import WatcherProc
from tests.cluster.test_platform_truth import (
    EXIT_FAILED,
    conditions,
    job_body,
    report,
    running_pod,
    status,
    watch_code,
)
from tests.cluster.test_pod_truth import cli, column, kubelet, terminated
from tests.support import eventually, node_reports
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher


def taskfeedback(admin: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", name)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return got


def announced(admin: Any, namespace: str, task: str) -> list[tuple[str, str]]:
    """(type, reason) of the watcher's Events on the TaskFeedback ``task``."""
    got = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"reportingController=tidings.dev/watcher,"
                                  f"regarding.name={task},regarding.kind=TaskFeedback")
    return sorted((e.type, e.reason) for e in got.items)


def test_a_job_whose_pod_cannot_pull_its_image_is_pending_with_the_kubelets_reason(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    w = start_watcher()
    job = client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("pull-missing"))
    pod = running_pod(admin, namespace, "pull-missing", 1)
    # Its pod runs and has said nothing: the task exists, Running, owned by its Job.
    st = eventually(lambda: (s := status(admin, namespace, "pull-missing")).get(
        "runningPods") == 1 and s, 30,
        f"the silent Job's task Running\n{taskfeedback(admin, namespace, 'pull-missing')}\n"
        f"{w.tail()}")
    assert st["phase"] == "Running" and conditions(st)["PodsReady"]["status"] == "True"
    tf = taskfeedback(admin, namespace, "pull-missing")
    assert tf is not None and [(o["kind"], o["uid"]) for o in
                               tf["metadata"]["ownerReferences"]] == [("Job", job.metadata.uid)]
    # The kubelet cannot pull its image (written as the real one writes it).
    kubelet(cp, namespace, pod["name"], {
        "phase": "Pending", "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [{
            "name": "main", "image": "tidings-workload:nope", "imageID": "", "ready": False,
            "restartCount": 0, "started": False, "state": {"waiting": {
                "reason": "ImagePullBackOff",
                "message": 'Back-off pulling image "tidings-workload:nope"'}}}]})
    st = eventually(lambda: (s := status(admin, namespace, "pull-missing")).get(
        "phase") == "Pending" and s, 30, f"the task Pending\n{w.tail()}")
    ready = conditions(st)["PodsReady"]
    assert (ready["status"], ready["reason"]) == ("False", "ImagePullBackOff")
    assert ready["message"].startswith(f"1 pod of the task waits: pod {pod['name']}: ")
    assert 'Back-off pulling image "tidings-workload:nope"' in ready["message"]
    assert st["reason"] == "ImagePullBackOff" and "runningPods" not in st
    row = cli(cp, "get", "pull-missing", "-n", namespace)
    assert row.returncode == 0, row.stderr
    assert column(row.stdout, "PHASE") == "Pending"
    assert column(row.stdout, "REASON") == "ImagePullBackOff"
    shown = cli(cp, "state", "pull-missing", "-n", namespace)
    assert "ImagePullBackOff" in shown.stdout, shown.stdout
    # kubectl's own printer column says the same, and describe shows the watcher's Event,
    # one for the transition however often the status is written.
    table = cp.kubectl_run("get", "taskfeedback", "pull-missing", "-n", namespace)
    assert "ImagePullBackOff" in table and "Pending" in table
    # A controller (or a script) waits on the condition as on any other object's.
    waited = cp.kubectl_run("wait", "taskfeedback/pull-missing", "-n", namespace,
                            "--for=condition=PodsReady=False", "--timeout=30s")
    assert "condition met" in waited, waited
    eventually(lambda: announced(admin, namespace, "pull-missing") == [
        ("Warning", "ImagePullBackOff")], 30, "the transition announced")
    described = cp.kubectl_run("describe", "taskfeedback", "pull-missing", "-n", namespace)
    assert "ImagePullBackOff" in described.split("Events:")[-1]


def test_a_job_that_fails_before_any_pod_spoke_fails_its_task_with_the_jobs_reason(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    w = start_watcher()
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("crash-at-start",
                                                                       backoff=0))
    pod = running_pod(admin, namespace, "crash-at-start", 1)
    kubelet(cp, namespace, pod["name"], {"phase": "Failed",
                                         "containerStatuses": terminated(3, "Error")})
    st = eventually(lambda: (s := status(admin, namespace, "crash-at-start")).get(
        "phase") == "Failed" and s, 60, f"the task Failed\n{w.tail()}")
    failed = conditions(st)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", "BackoffLimitExceeded")
    assert st["reason"] == "BackoffLimitExceeded"
    assert watch_code(cp, namespace, "crash-at-start").returncode == EXIT_FAILED
    eventually(lambda: ("Warning", "BackoffLimitExceeded") in announced(
        admin, namespace, "crash-at-start"), 30, "the failure announced")


def test_reported_only_makes_a_task_from_its_first_fact_alone(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    cp = controller_manager
    w = start_watcher("--track", "reported-only")
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("quiet"))
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("speaks"))
    running_pod(admin, namespace, "quiet", 1)
    report(cp, namespace, running_pod(admin, namespace, "speaks", 1), 0.5)
    # The reporting Job's task is written; by then the quiet one's pod had run for a while.
    eventually(lambda: status(admin, namespace, "speaks").get("progress", {}).get(
        "percent") == 50, 30, f"the reporting task written\n{w.tail()}")
    assert taskfeedback(admin, namespace, "quiet") is None


def test_a_pod_stuck_being_created_is_explained_by_the_kubelets_events_about_it(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """Its own object says only ContainerCreating; the kubelet's Warning Event about it (as
    the real kubelet records a missing ConfigMap volume) says why, read for it alone."""
    cp = controller_manager
    w = start_watcher()
    client.BatchV1Api(admin).create_namespaced_job(namespace, job_body("no-volume"))
    pod = running_pod(admin, namespace, "no-volume", 1)
    scheduled = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kubelet(cp, namespace, pod["name"], {
        "phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
        "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "",
                               "ready": False, "restartCount": 0, "started": False,
                               "state": {"waiting": {"reason": "ContainerCreating"}}}]})
    message = ('MountVolume.SetUp failed for volume "conf" : configmap "does-not-exist" '
               'not found')
    # (as events.k8s.io/v1 with its eventTime: an Event without one breaks the official
    # client's list of every namespace's Events, which another test reads)
    client.EventsV1Api(admin).create_namespaced_event(namespace, {
        "metadata": {"name": f"{pod['name']}.failedmount"},
        "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": "kubelet", "reportingInstance": "kwok-node-0",
        "action": "MountVolume", "reason": "FailedMount", "note": message, "type": "Warning",
        "regarding": {"kind": "Pod", "namespace": namespace, "name": pod["name"],
                      "uid": pod["uid"], "apiVersion": "v1"}})
    st = eventually(lambda: (s := status(admin, namespace, "no-volume")).get(
        "reason") == "FailedMount" and s, 60, f"the kubelet's reason shown\n{w.tail()}")
    assert st["phase"] == "Pending"
    assert 'configmap "does-not-exist" not found' in conditions(st)["PodsReady"]["message"]


def test_a_worker_on_a_node_that_stops_reporting_is_on_a_lost_node_then_evicted(
        controller_manager: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """The node's Ready condition says it (its pod still says Running); then the taint
    eviction controller ends the pod, and its end says who (DeletionByTaintManager). The lost
    node has no kubelet: its status is written as a kubelet writes it, then NotReady."""
    cp = controller_manager
    core = client.CoreV1Api(admin)
    lost = f"lost-{namespace}"

    def reports(ready: bool) -> None:
        node_reports(core, lost, ready, down="container runtime is down")

    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": lost, "labels": {"kubernetes.io/hostname": lost}}})
    try:
        reports(ready=True)
        w = start_watcher()
        pod = core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "long-run-0", "labels": {"tidings.dev/task": "long-run"}},
            "spec": {"nodeName": lost, "containers": [{"name": "main", "image": "busybox"}],
                     "tolerations": [{"key": f"node.kubernetes.io/{key}", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 8}
                                     for key in ("not-ready", "unreachable")]}})
        core.patch_namespaced_pod_status("long-run-0", namespace,
                                         {"status": {"phase": "Running"}})
        report(cp, namespace, {"name": "long-run-0", "uid": pod.metadata.uid}, 0.3)
        eventually(lambda: status(admin, namespace, "long-run").get("phase") == "Running",
                   30, f"the worker running\n{w.tail()}")
        reports(ready=False)
        st = eventually(lambda: (s := status(admin, namespace, "long-run")).get(
            "reason") == "NodeLost" and s, 30, f"the node lost\n{w.tail()}")
        (waiting,) = st["waitingPods"]
        assert waiting["pod"] == "long-run-0"
        assert f"node {lost} not ready (False: KubeletNotReady)" in waiting["message"]
        assert "container runtime is down" in waiting["message"]
        # Then the node's taint evicts it: its end says who.
        st = eventually(lambda: (s := status(admin, namespace, "long-run")).get(
            "podOutcomes") and s, 90, f"the eviction shown\n{w.tail()}")
        (end,) = st["podOutcomes"]
        assert end["reason"] == "DeletionByTaintManager", end
        assert "waitingPods" not in st
    finally:
        core.delete_node(lost)
