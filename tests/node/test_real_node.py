"""The real node itself: pods that name no node are scheduled onto it and run as containers,
reach the API server exactly as on a cluster (the kubelet-mounted token and CA,
KUBERNETES_SERVICE_HOST from the `kubernetes` Service), and can send nothing anywhere else;
the kwok node stays and never touches the real node's pods."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.node.support import logs, run_pod, wait_phase
from tools.devcluster import NODE_NAME, ControlPlane
from tools.devnode import REAL_NODE_LABEL, REAL_NODE_NAME, RealNode

IN_CLUSTER = """
import json, os, socket
from tidings.kube import connect
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
print("service", os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
print("mounted", sorted(n for n in os.listdir(sa) if not n.startswith("..")))
print("atomic", os.path.islink(sa + "/token") and os.readlink(sa + "/token"))
print("version", connect().get("/version")["gitVersion"])
claims = json.loads(__import__("base64").urlsafe_b64decode(
    open(sa + "/token").read().split(".")[1] + "=="))
print("bound to", claims["kubernetes.io"]["pod"]["name"])
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("198.51.100.1", 443))  # TEST-NET-2: must not be routable from a pod
    print("outside: reached")
except OSError as err:
    print("outside:", err.strerror)
"""


def test_a_pod_naming_no_node_runs_as_a_container_and_reaches_the_api_in_cluster(
        real_node: RealNode, admin: Any, namespace: str) -> None:
    run_pod(admin, namespace, "probe", IN_CLUSTER)
    pod = wait_phase(admin, namespace, "probe", ("Succeeded", "Failed"))
    out = logs(admin, namespace, "probe")
    assert pod.status.phase == "Succeeded", out
    assert pod.spec.node_name == REAL_NODE_NAME  # placed by the scheduler
    (state,) = pod.status.container_statuses
    assert state.container_id.startswith("containerd://")
    assert state.state.terminated.exit_code == 0
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    service = client.CoreV1Api(admin).read_namespaced_service("kubernetes", "default")
    assert lines["service"] == f"{service.spec.cluster_ip} 443"
    assert lines["mounted"] == "['ca.crt', 'namespace', 'token']"
    # The kubelet's atomic writer: a rotated token replaces ..data at once, never half-written.
    assert lines["atomic"] == "..data/token"
    assert lines["version"] == client.VersionApi(admin).get_code().git_version
    assert lines["bound"] == "to probe"
    assert lines["outside:"] == "Network is unreachable"


def test_the_kwok_node_stays_beside_the_real_node_and_leaves_its_pods_alone(
        real_node: RealNode, control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    core = client.CoreV1Api(admin)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    real, kwok = nodes[REAL_NODE_NAME], nodes[NODE_NAME]
    assert real.metadata.labels[REAL_NODE_LABEL] == "true"
    info = real.status.node_info
    assert info.kubelet_version == client.VersionApi(admin).get_code().git_version
    assert info.container_runtime_version.startswith("containerd://2.")
    assert "kwok.x-k8s.io/node" not in (real.metadata.annotations or {})
    ready = {c.type: c.status for c in kwok.status.conditions}
    assert ready["Ready"] == "True"
    # A pod bound to the kwok node by name still "runs" there, without a container.
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "fake"},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "c", "image": "nothing"}]}})
    fake = wait_phase(admin, namespace, "fake", ("Running",))
    assert not (fake.status.container_statuses[0].container_id or "").startswith("containerd")
