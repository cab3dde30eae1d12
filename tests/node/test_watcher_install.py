"""The watcher as users install it, running from its image on the real node: `helm install` of
deploy/chart with only the image values gives two replicas Running and Ready under the
restricted Pod Security level, one holding the Lease; deleting the leader's pod hands over
with nothing lost or counted twice; `kubectl apply -k deploy/` runs the same."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.node.conftest import NS, WatcherInstall
from tests.node.support import run_job, task_status, workload_account
from tests.support import eventually
from tools.devnode import REAL_NODE_NAME


def ready_replicas(install: WatcherInstall) -> list[dict[str, Any]]:
    pods = [p for p in install.pods() if not p["metadata"].get("deletion_timestamp")]
    return [p for p in pods if p["status"]["phase"] == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])]


def lease_holder(admin: Any) -> str:
    lease = client.CoordinationV1Api(admin).read_namespaced_lease("tidings-watcher", NS)
    return str(lease.spec.holder_identity or "")


def assert_runs_as_installed(install: WatcherInstall, admin: Any) -> list[dict[str, Any]]:
    pods = eventually(lambda: len(r := ready_replicas(install)) == 2 and r, 120,
                      "two watcher replicas Running and Ready")
    ns = client.CoreV1Api(admin).read_namespace(NS)
    assert ns.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for pod in pods:
        assert pod["spec"]["node_name"] == REAL_NODE_NAME
        (watcher,) = pod["spec"]["containers"]
        assert watcher["image"] == "tidings-watcher:dev"
        security = watcher["security_context"]
        assert security["read_only_root_filesystem"] and security["run_as_non_root"]
        assert security["capabilities"]["drop"] == ["ALL"]
        assert watcher["liveness_probe"]["http_get"]["path"] == "/healthz"
        assert watcher["readiness_probe"]["http_get"]["path"] == "/readyz"
        (state,) = pod["status"]["container_statuses"]
        assert state["container_id"].startswith("containerd://") and state["ready"]
        assert state["restart_count"] == 0, pod["metadata"]["name"]
    names = {p["metadata"]["name"] for p in pods}
    eventually(lambda: any(lease_holder(admin).startswith(n) for n in names), 60,
               "one replica to hold the Lease")
    return pods


STEPS = """
import time
from tidings import emitter as tidings
for step in range(60):
    with tidings.span("step"):
        time.sleep(0.25)
    tidings.progress((step + 1) / 61, f"step {step + 1}")
tidings.progress(1.0, "done", final=True)
"""


def test_the_chart_runs_two_replicas_under_restricted_and_hands_over_losing_nothing(
        chart_watcher: WatcherInstall, admin: Any, namespace: str) -> None:
    pods = assert_runs_as_installed(chart_watcher, admin)
    names = {p["metadata"]["name"] for p in pods}
    account = workload_account(admin, namespace)
    run_job(admin, namespace, "handover", STEPS, service_account=account,
            env={"TIDINGS_EMIT_SPAN_WINDOW_S": "2"})
    eventually(lambda: task_status(admin, namespace, "handover").get("spans"), 120,
               "the first spans folded")
    leader = next(n for n in names if lease_holder(admin).startswith(n))
    client.CoreV1Api(admin).delete_namespaced_pod(leader, NS)
    eventually(lambda: (h := lease_holder(admin)) and not h.startswith(leader), 90,
               "another replica to take the Lease")
    st = eventually(lambda: (s := task_status(admin, namespace, "handover")).get("phase")
                    == "Succeeded" and s, 180, "the task to finish under the new leader")
    # Nothing lost, nothing counted twice; the Completed condition says what decided it (a
    # pod's end, or the worker's own final).
    assert st["spans"]["step"]["count"] == 60, [
        (c["reason"], c["message"]) for c in st.get("conditions", [])
        if c["type"] == "Completed"]
    assert st["progress"]["percent"] == 100
    eventually(lambda: len(ready_replicas(chart_watcher)) == 2, 120,
               "the Deployment to replace the deleted replica")


def test_kubectl_apply_k_runs_the_same_watcher(
        watcher_install: WatcherInstall, admin: Any, namespace: str) -> None:
    watcher_install.with_kustomize()
    assert_runs_as_installed(watcher_install, admin)
    account = workload_account(admin, namespace)
    run_job(admin, namespace, "kustomized", STEPS.replace("range(60)", "range(4)"),
            service_account=account)
    eventually(lambda: task_status(admin, namespace, "kustomized").get("phase")
               == "Succeeded", 120, "the task folded by the kustomize install's watcher")
