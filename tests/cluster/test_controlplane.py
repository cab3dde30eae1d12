"""The local control plane behaves like a real cluster where tidings depends on it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.support import (
    create_kwok_pod,
    eventually,
    node_reports,
    pod_phase,
    raw_event,
    write_cri_log,
)
from tools.devcluster import NODE_NAME, REPO_ROOT, ControlPlane, ControlPlaneError


def _versions() -> dict[str, str]:
    env = (REPO_ROOT / "tools/controlplane/versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in env if line and not line.startswith("#"))


def test_version_reports_the_built_release(control_plane: ControlPlane) -> None:
    info = json.loads(control_plane.get_raw("/version"))
    assert info["gitVersion"] == _versions()["KUBERNETES_VERSION"]
    assert info["gitTreeState"] == "clean"
    out = control_plane.kubectl_run("version", "--client", "-o", "json")
    assert json.loads(out)["clientVersion"]["gitVersion"] == _versions()["KUBERNETES_VERSION"]


def test_note_limit_counts_bytes_not_characters(admin: Any, namespace: str) -> None:
    events = client.EventsV1Api(admin)
    two_byte = "é" * 512  # 512 characters, 1024 UTF-8 bytes
    assert len(two_byte.encode()) == 1024
    events.create_namespaced_event(namespace, raw_event(namespace, "fits", controller="x/y",
                                                        note=two_byte))
    with pytest.raises(ApiException) as err:
        events.create_namespaced_event(namespace, raw_event(namespace, "too-big", controller="x/y",
                                                            note=two_byte + "a"))
    assert err.value.status == 422
    # The server counts bytes but words its message in characters (and names the internal
    # field "message").
    assert "at most 1024 characters" in err.value.body


def test_field_selected_watch_delivers_only_that_controller(admin: Any, namespace: str) -> None:
    events = client.EventsV1Api(admin)
    selector = "reportingController=tidings.dev/test-x"
    rv = events.list_namespaced_event(namespace, field_selector=selector).metadata.resource_version
    for name, controller in [("y1", "other/y"), ("x1", "tidings.dev/test-x"),
                             ("y2", "other/y"), ("x2", "tidings.dev/test-x")]:
        events.create_namespaced_event(namespace, raw_event(namespace, name, controller=controller))
    seen: list[tuple[str, str]] = []
    for item in watch.Watch().stream(events.list_namespaced_event, namespace,
                                     field_selector=selector, resource_version=rv,
                                     timeout_seconds=30):
        obj = item["object"]
        seen.append((obj.metadata.name, obj.reporting_controller))
        if obj.metadata.name == "x2":
            break
    assert seen == [("x1", "tidings.dev/test-x"), ("x2", "tidings.dev/test-x")]


def test_rbac_denies_then_allows_a_non_admin(api_client: Any, admin: Any, namespace: str) -> None:
    alice = client.EventsV1Api(api_client("alice"))
    with pytest.raises(ApiException) as err:
        alice.list_namespaced_event(namespace)
    assert err.value.status == 403
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "event-reader"},
        "rules": [{"apiGroups": ["events.k8s.io"], "resources": ["events"],
                   "verbs": ["list", "watch"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-reads-events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "event-reader"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})
    eventually(lambda: alice.list_namespaced_event(namespace) is not None, 10,
               "alice's grant to take effect")
    # bob shares alice's group but not her binding.
    with pytest.raises(ApiException) as err:
        client.EventsV1Api(api_client("bob")).list_namespaced_event(namespace)
    assert err.value.status == 403


def bound_token(admin: Any, namespace: str, service_account: str, pod: dict[str, str]) -> str:
    review = client.CoreV1Api(admin).create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"boundObjectRef": {
            "kind": "Pod", "apiVersion": "v1", "name": pod["name"], "uid": pod["uid"]}}})
    return str(review.status.token)


def client_with_token(control_plane: ControlPlane, token: str) -> client.ApiClient:
    conf = client.Configuration()
    conf.host = control_plane.server
    conf.ssl_ca_cert = str(control_plane.ca_file)
    conf.api_key = {"authorization": token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(conf)


def test_a_restarted_apiserver_is_the_one_the_saved_plane_names(
        control_plane: ControlPlane) -> None:
    # Benches attach to a running plane by its state dir and read kube-apiserver's CPU from
    # its pid: after a restart (as test_cli_lineage does) that pid must be the live one.
    control_plane.stop_apiserver()
    control_plane.start_apiserver()
    running = control_plane.processes["kube-apiserver"].pid
    saved = ControlPlane.load(control_plane.state_dir).processes["kube-apiserver"]
    assert saved.pid == running and saved.alive()


def test_pod_bound_token_carries_pod_identity(control_plane: ControlPlane, admin: Any,
                                              namespace: str) -> None:
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    pod = create_kwok_pod(admin, namespace, "worker-0", service_account="worker")
    token = bound_token(admin, namespace, "worker", pod)
    review = client.AuthenticationV1Api(client_with_token(control_plane, token)) \
        .create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                     "kind": "SelfSubjectReview"})
    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{namespace}:worker"
    assert user.extra["authentication.kubernetes.io/pod-name"] == ["worker-0"]
    assert user.extra["authentication.kubernetes.io/pod-uid"] == [pod["uid"]]


def test_kwok_runs_pods_and_serves_their_logs(admin: Any, namespace: str, tmp_path: Path) -> None:
    log = write_cri_log(tmp_path / "runner.log", ["line one", "line two"])
    create_kwok_pod(admin, namespace, "runner", log_file=log)
    eventually(lambda: pod_phase(admin, namespace, "runner") == "Running", 30, "pod Running")
    text = eventually(lambda: client.CoreV1Api(admin).read_namespaced_pod_log(
        "runner", namespace, container="main"), 30, "pod logs")
    assert text.splitlines() == ["line one", "line two"]


def test_kwok_completes_pods_that_ask_to_finish(admin: Any, namespace: str) -> None:
    create_kwok_pod(admin, namespace, "short", run_for="500ms")
    phases: list[str] = []

    def reached_succeeded() -> bool:
        phase = pod_phase(admin, namespace, "short")
        if not phases or phases[-1] != phase:
            phases.append(phase)
        return phase == "Succeeded"

    eventually(reached_succeeded, 30, "pod Succeeded")
    assert "Running" in phases or phases == ["Succeeded"]


def test_a_node_that_goes_not_ready_has_its_pods_evicted(
        controller_manager: ControlPlane, admin: Any, namespace: str) -> None:
    """Node loss as a cluster handles it: the node lifecycle controller taints a NotReady node
    NoExecute and the taint eviction controller deletes the pods that do not tolerate it (each
    after its toleration: 1 s here, the 300 s the admission gives by default is the same path,
    longer). The lost node has no kubelet: its status is written as a kubelet writes it, Ready
    and then NotReady. The kwok node, Ready, keeps its pods."""
    core = client.CoreV1Api(admin)
    lost = f"lost-{namespace}"

    def kubelet_reports(ready: bool) -> None:
        node_reports(core, lost, ready)

    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": lost, "labels": {"kubernetes.io/hostname": lost}}})
    try:
        kubelet_reports(ready=True)
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-lost"},
            "spec": {"nodeName": lost, "containers": [{"name": "main", "image": "busybox"}],
                     "tolerations": [{"key": f"node.kubernetes.io/{key}", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 1}
                                     for key in ("not-ready", "unreachable")]}})
        core.patch_namespaced_pod_status("on-lost", namespace, {"status": {"phase": "Running"}})
        create_kwok_pod(admin, namespace, "on-kwok")
        eventually(lambda: pod_phase(admin, namespace, "on-kwok") == "Running", 30,
                   "the kwok pod Running")
        kubelet_reports(ready=False)

        def evicted() -> bool:
            pod = core.read_namespaced_pod("on-lost", namespace)
            return pod.metadata.deletion_timestamp is not None and any(
                c.type == "DisruptionTarget" and c.reason == "DeletionByTaintManager"
                for c in pod.status.conditions or [])

        eventually(evicted, 90, "the pod on the NotReady node evicted")
        taints = core.read_node(lost).spec.taints or []
        assert any(t.key == "node.kubernetes.io/not-ready" and t.effect == "NoExecute"
                   for t in taints), taints
        kept = core.read_namespaced_pod("on-kwok", namespace)
        assert kept.status.phase == "Running" and kept.metadata.deletion_timestamp is None
        assert not [t for t in core.read_node(NODE_NAME).spec.taints or []
                    if t.effect == "NoExecute"]
    finally:
        core.delete_namespaced_pod("on-lost", namespace, grace_period_seconds=0)
        core.delete_node(lost)


def test_missing_binaries_give_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ControlPlaneError) as err:
        ControlPlane(state_dir=tmp_path / "cp", bin_dir=tmp_path).start()
    assert "binary missing" in str(err.value)
    assert "\n" not in str(err.value)


def test_dev_up_without_binaries_names_the_next_step(tmp_path: Path) -> None:
    """As after a pip install: no repo cache, TIDINGS_BIN_DIR points nowhere useful."""
    tidings = str(Path(sys.executable).parent / "tidings")
    empty = tmp_path / "bin"
    empty.mkdir()
    up = subprocess.run([tidings, "dev", "up", "--state-dir", str(tmp_path / "state")],
                        env={**os.environ, "TIDINGS_BIN_DIR": str(empty)},
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 5, up.stderr
    (line,) = [x for x in up.stderr.splitlines() if not x.startswith("#")]
    assert line.startswith("error: ") and str(empty) in line
    assert "tools/controlplane/build.sh" in line and "TIDINGS_BIN_DIR" in line
    assert not (tmp_path / "state").exists()


def test_dev_up_never_wipes_a_directory_it_did_not_create(control_plane: ControlPlane,
                                                          tmp_path: Path) -> None:
    tidings = str(Path(sys.executable).parent / "tidings")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    up = subprocess.run([tidings, "dev", "up", "--state-dir", str(mine)],
                        env={**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir)},
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 1 and "was not created by tidings" in up.stderr, up.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"


PY313 = Path("/root/.pyenv/versions/3.13.0/bin/python")


@pytest.mark.skipif(not PY313.is_file(), reason=f"Python 3.13 not installed at {PY313}")
def test_python_313_strict_verification_accepts_the_dev_ca(control_plane: ControlPlane) -> None:
    """3.13's default context sets VERIFY_X509_STRICT: a CA without keyUsage, or a leaf
    without an authority key identifier, fails the handshake."""
    script = textwrap.dedent("""
        import ssl, sys, urllib.request
        ca, url, token = sys.argv[1:]
        ctx = ssl.create_default_context(cafile=ca)
        assert ctx.verify_flags & ssl.VERIFY_X509_STRICT, "not strict"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        print(urllib.request.urlopen(req, context=ctx, timeout=10).read().decode())
    """)
    run = subprocess.run([str(PY313), "-c", script, str(control_plane.ca_file),
                          f"{control_plane.server}/readyz", control_plane.tokens["admin"]],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok"


def test_taken_port_gives_one_clear_line(control_plane: ControlPlane, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ControlPlaneError, match=f"port {port} on 127.0.0.1 is taken"):
            ControlPlane(state_dir=tmp_path / "cp", bin_dir=control_plane.bin_dir,
                         apiserver_port=port).start()


def test_teardown_leaves_no_process_even_when_the_body_fails(control_plane: ControlPlane,
                                                             tmp_path: Path) -> None:
    cp = ControlPlane(state_dir=tmp_path / "second", bin_dir=control_plane.bin_dir)
    with pytest.raises(RuntimeError, match="boom"), cp:
        assert cp.running()
        raise RuntimeError("boom")
    assert cp.processes
    assert not any(p.alive() for p in cp.processes.values())


def test_dev_up_and_down_commands(control_plane: ControlPlane, tmp_path: Path) -> None:
    tidings = str(Path(sys.executable).parent / "tidings")
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir)}
    state = str(tmp_path / "dev")
    up = subprocess.run([tidings, "dev", "up", "--state-dir", state], env=env,
                        capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        exports = dict(line.removeprefix("export ").split("=", 1)
                       for line in up.stdout.splitlines())
        assert set(exports) == {"KUBECONFIG", "PATH"}
        shell = subprocess.run(["bash", "-c", f"{up.stdout}\nkubectl get --raw /version"],
                               capture_output=True, text=True, timeout=60)
        assert json.loads(shell.stdout)["gitVersion"] == _versions()["KUBERNETES_VERSION"]
        assert subprocess.run([tidings, "dev", "status", "--state-dir", state],
                              capture_output=True).returncode == 0
        dev = ControlPlane.load(Path(state))
        pids = dev.processes
        assert "kube-controller-manager" in pids
        _a_job_runs_to_completion_and_its_pods_go_with_it(dev)
    finally:
        down = subprocess.run([tidings, "dev", "down", "--state-dir", state],
                              capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert not any(p.alive() for p in pids.values())
    status = subprocess.run([tidings, "dev", "status", "--state-dir", state],
                            capture_output=True, text=True)
    assert status.returncode == 1 and status.stderr.startswith("error: ")


def _a_job_runs_to_completion_and_its_pods_go_with_it(cp: ControlPlane) -> None:
    """What `tidings dev up` promises a newcomer: the Job controller makes a Job's pods (kwok
    runs them), counts them as they end, and the garbage collector removes them with it."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hello"},
           "spec": {"completions": 2, "parallelism": 2, "template": {"spec": {
               "restartPolicy": "Never", "nodeName": NODE_NAME,
               "containers": [{"name": "main", "image": "busybox"}]}}}}
    cp.kubectl_run("create", "serviceaccount", "default")
    cp.kubectl_run("apply", "-f", "-", input_text=json.dumps(job))

    def pods() -> list[Any]:
        return list(json.loads(cp.kubectl_run(
            "get", "pods", "-l", "batch.kubernetes.io/job-name=hello", "-o", "json"))["items"])

    eventually(lambda: len(pods()) == 2 and all(p["status"].get("phase") == "Running"
                                                 for p in pods()), 60, "the Job's pods running")
    for p in pods():
        cp.end_pod("default", p["metadata"]["name"])
    cp.kubectl_run("wait", "--for=condition=Complete", "job/hello", "--timeout=60s")
    cp.kubectl_run("delete", "job", "hello", "--cascade=background")
    eventually(lambda: pods() == [], 60, "the garbage collector to delete the Job's pods")
