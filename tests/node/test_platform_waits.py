"""A JobSet whose pods never start, with the real JobSet controller (v0.8.2, built by
tools/platforms/build.sh), the Job controller, the scheduler and the kubelet of the real
node, and the watcher the Helm chart installed: its task is the JobSet's (the outermost
object, never a TaskFeedback per child Job), Pending with the kubelet's or the scheduler's
word while its pods wait, and Failed with the JobSet's own reason once the JobSet fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.node.conftest import NS, WatcherInstall
from tests.node.support import WORKLOAD_IMAGE, conditions, container, task_status
from tests.support import eventually
from tools.devcluster import ControlPlane
from tools.devnode import RealNode
from tools.devplatforms import Platforms
from tools.devprocess import BinariesMissing

JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


@pytest.fixture(scope="module")
def jobset_controller(real_node: RealNode, control_plane: ControlPlane,
                      watcher_install: WatcherInstall) -> Iterator[None]:
    """The JobSet controller on the node's plane for this module; its webhooks taken away
    after (they would refuse every JobSet with the controller gone). A chart's watcher that
    is running already is restarted: it would pick the new kind up only at its next retry,
    and a task it made before then would stay unowned."""
    platforms = Platforms(control_plane)
    try:
        proc = platforms.start("jobset")
    except BinariesMissing as err:  # a checkout without `make platforms`
        pytest.skip(f"no JobSet controller: {err}")
    if watcher_install.current:
        watcher_install.kubectl("-n", NS, "rollout", "restart", "deployment/tidings-watcher")
        watcher_install.wait_ready()
    yield
    proc.stop()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        control_plane.kubectl_run("delete", "--ignore-not-found", kind,
                                  f"jobset-{kind.removesuffix('webhookconfiguration')}-"
                                  "webhook-configuration")


def jobset(admin: Any, namespace: str, name: str, *, image: str = WORKLOAD_IMAGE,
           cpu: str = "", deadline: int = 0) -> dict[str, Any]:
    """A JobSet of one replicated Job of one pod that prints and ends, no restart of the
    JobSet (its default failure policy), each Job ``deadline`` seconds at most."""
    c = {**container("print('never')"), "image": image}
    if cpu:
        c["resources"] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    job_spec: dict[str, Any] = {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "containers": [c]}}}
    if deadline:
        job_spec["activeDeadlineSeconds"] = deadline
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1,
                                         "template": {"spec": job_spec}}]}}
    return dict(client.CustomObjectsApi(admin).create_namespaced_custom_object(
        *JOBSET[:2], namespace, JOBSET[2], body))


def taskfeedbacks(admin: Any, namespace: str) -> list[str]:
    got = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        "tidings.dev", "v1alpha1", namespace, "taskfeedbacks")
    return sorted(t["metadata"]["name"] for t in got["items"])


def test_a_jobset_whose_pods_never_start_is_pending_with_their_reason_then_failed_with_its_own(
        jobset_controller: None, chart_watcher: WatcherInstall, admin: Any,
        namespace: str) -> None:
    pull = jobset(admin, namespace, "js-pull", image="tidings-workload:nope", deadline=40)
    big = jobset(admin, namespace, "js-big", cpu="64")
    st = eventually(lambda: (s := task_status(admin, namespace, "js-pull")).get(
        "reason") in ("ErrImagePull", "ImagePullBackOff") and s, 120,
        "the JobSet's pull error shown")
    assert st["phase"] == "Pending"
    ready = conditions(st)["PodsReady"]
    assert ready["status"] == "False" and "tidings-workload:nope" in ready["message"]
    st = eventually(lambda: (s := task_status(admin, namespace, "js-big")).get(
        "reason") == "Unschedulable" and s, 120, "the JobSet's unschedulable pod shown")
    assert st["phase"] == "Pending"
    assert "Insufficient cpu" in conditions(st)["PodsReady"]["message"]
    # One task per JobSet, owned by it: none for the Jobs it made (js-pull-workers-0, ...).
    assert taskfeedbacks(admin, namespace) == ["js-big", "js-pull"]
    for name, made in (("js-pull", pull), ("js-big", big)):
        owners = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", name)["metadata"][
            "ownerReferences"]
        assert [(o["kind"], o["uid"]) for o in owners] == [
            ("JobSet", made["metadata"]["uid"])]
    # Its Job's deadline passes: the Job fails, the JobSet with it (no restart), its task
    # with the JobSet's reason.
    st = eventually(lambda: (s := task_status(admin, namespace, "js-pull")).get(
        "phase") == "Failed" and s, 120, "the task failed with its JobSet")
    failed = conditions(st)["Failed"]
    js = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        *JOBSET[:2], namespace, JOBSET[2], "js-pull")
    (js_failed,) = [c for c in js["status"]["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == js_failed["reason"] == st["reason"], (failed, js_failed)
    assert failed["message"].startswith("JobSet js-pull failed"), failed
    assert taskfeedbacks(admin, namespace) == ["js-big", "js-pull"]
