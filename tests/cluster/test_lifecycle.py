"""The TaskFeedback lifecycle on the real control plane: pre-created by a controller (owned by
its object, garbage collected with it by a real kube-controller-manager), `kubectl describe`
listing the bus events by regarding.uid, and the watcher's TTL for finished, unowned tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.support_watcher import REPO_ROOT, task_status
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import NODE_NAME, eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.task import (
    TASK_UID_ANNOTATION,
    TaskFeedbackError,
    create_task_feedback,
    pod_task_uid,
)
from tidings.emitter.transport import KubeTransport
from tidings.kube import connect
from tidings.schemas.wire.constants import BUS_CONTROLLER
from tidings.schemas.wire.contract import taskfeedback_path
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "tidings.dev", "v1alpha1", "taskfeedbacks"
TIDINGS = str(Path(sys.executable).parent / "tidings")


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return Path(control_plane.kubeconfig("admin"))


def owner_configmap(admin: Any, namespace: str, name: str) -> dict[str, Any]:
    """The controller's own object (a ConfigMap stands in for a Job or a custom resource)."""
    cm = client.CoreV1Api(admin).create_namespaced_config_map(namespace, {
        "metadata": {"name": name}, "data": {"role": "controller"}})
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "uid": cm.metadata.uid}}


def task_pod(admin: Any, namespace: str, name: str, task: str, uid: str) -> Any:
    """A task pod as a controller makes it from `pod_task_uid`: annotation plus env."""
    wiring = pod_task_uid(uid)
    return client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": {"tidings.dev/task": task},
                     "annotations": wiring["annotations"]},
        "spec": {"nodeName": NODE_NAME, "containers": [
            {"name": "main", "image": "busybox", "env": wiring["env"]}]}})


def downward_env(pod: Any, task: str) -> dict[str, str]:
    """The environment the kubelet would give the container (kwok runs no containers): every
    env entry of the pod spec resolved against the pod object, as the downward API does."""
    resolved = {"POD_NAME": pod.metadata.name, "POD_NAMESPACE": pod.metadata.namespace,
                "POD_UID": pod.metadata.uid, "TIDINGS_TASK": task}
    for env in pod.spec.containers[0].env or []:
        path = env.value_from.field_ref.field_path
        key = path.removeprefix("metadata.annotations['").removesuffix("']")
        resolved[env.name] = pod.metadata.annotations[key]
    return resolved


def emit_final(control_plane: ControlPlane, env: dict[str, str]) -> Emitter:
    em = Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                 transport=KubeTransport(connect(str(control_plane.kubeconfig("admin")))))
    em.log_link("wandb", "https://wandb.ai/acme/runs/1")
    em.progress(1.0, "done", final=True)
    assert em.flush(15), em.stats()
    return em


def finished(status: dict[str, Any] | None) -> bool:
    """The status says the task is over (either status shape: `completed`, or a phase)."""
    status = status or {}
    return bool(status.get("completed") or status.get("phase") in ("Succeeded", "Failed"))


def describe(control_plane: ControlPlane, namespace: str, name: str, user: str = "admin") -> str:
    result = subprocess.run([str(control_plane.kubectl), f"--kubeconfig="
                             f"{control_plane.kubeconfig(user)}", "describe", "taskfeedback",
                             name, "-n", namespace], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def events_section(text: str) -> str:
    return text.split("\nEvents:", 1)[1]


def test_describe_lists_the_bus_events_of_a_precreated_task(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: None,  # noqa: F811
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    owner_configmap(admin, namespace, "trainer")
    made = subprocess.run([TIDINGS, "task", "create", "train-1", "--owner", "configmap/trainer",
                           "-n", namespace, "-o", "json",
                           "--kubeconfig", str(control_plane.kubeconfig("admin"))],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert created["created"] is True
    pod = task_pod(admin, namespace, "train-1-0", "train-1", created["uid"])
    env = downward_env(pod, "train-1")
    assert env["TIDINGS_TASK_UID"] == created["uid"]
    start_watcher()
    emit_final(control_plane, env)
    # A task nobody pre-created still works as before, and describe has nothing to show.
    plain = client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": "plain-0", "labels": {"tidings.dev/task": "plain"}},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "main", "image": "busybox"}]}})
    emit_final(control_plane, downward_env(plain, "plain"))

    eventually(lambda: finished(task_status(admin, namespace, "train-1")), 30,
               "the pre-created task folded and completed")
    eventually(lambda: finished(task_status(admin, namespace, "plain")), 30,
               "the plain task folded and completed")
    obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "train-1")
    assert obj["metadata"]["uid"] == created["uid"]  # the watcher wrote into it, never anew
    assert [o["name"] for o in obj["metadata"]["ownerReferences"]] == ["trainer"]

    shown = events_section(describe(control_plane, namespace, "train-1"))
    assert "LogLink" in shown and "Progress" in shown, shown
    assert "tidings.dev/bus" in shown  # the From column: the reporting controller
    assert events_section(describe(control_plane, namespace, "plain")).strip() == "<none>"

    raw = orjson.loads(client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"reportingController={BUS_CONTROLLER},regarding.name=train-1",
        _preload_content=False).data)["items"]
    assert len(raw) == 2 and {e["regarding"].get("uid") for e in raw} == {created["uid"]}
    assert {f["manager"] for e in raw for f in e["metadata"]["managedFields"]} == {
        "tidings-emitter"}


def test_create_is_idempotent_adopts_unowned_and_refuses_foreign_owners(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: None) -> None:  # noqa: F811
    api = connect(str(control_plane.kubeconfig("admin")))
    mine, other = (owner_configmap(admin, namespace, n) for n in ("mine", "other"))
    first = create_task_feedback("t", namespace=namespace, owner=mine, client=api)
    again = create_task_feedback("t", namespace=namespace, owner=mine, client=api)
    assert (first.created, again.created, again.uid) == (True, False, first.uid)
    with pytest.raises(TaskFeedbackError) as err:
        create_task_feedback("t", namespace=namespace, owner=other, client=api)
    assert err.value.status == 409 and "owned by ConfigMap/mine" in err.value.message

    # The watcher made this one from facts that came first: the controller adopts it.
    crs = client.CustomObjectsApi(admin)
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
        "metadata": {"name": "early"}, "spec": {"task": "early"}})
    adopted = create_task_feedback("early", namespace=namespace, owner=other, client=api)
    assert not adopted.created
    owners = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                              "early")["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["controller"]) for o in owners] == [
        ("ConfigMap", "other", True)]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["t", "--owner", "configmap"], 2, "use RESOURCE/NAME"),
    (["t", "--owner", "nosuchkind/x"], 5, "does not have a resource type 'nosuchkind'"),
    (["t", "--owner", "configmap/absent"], 5, "ConfigMap 'absent'"),
    (["bad,name", "--owner", "configmap/x"], 2, "not a valid name"),
])
def test_task_create_errors_are_one_line(control_plane: ControlPlane, namespace: str,
                                         crd: None, args: list[str], code: int,  # noqa: F811
                                         message: str) -> None:
    result = subprocess.run([TIDINGS, "task", "create", *args, "-n", namespace, "--kubeconfig",
                             str(control_plane.kubeconfig("admin"))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == code, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_task_create_as_alice_without_rights_is_forbidden(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: None) -> None:  # noqa: F811
    owner_configmap(admin, namespace, "job")
    result = subprocess.run([TIDINGS, "task", "create", "t", "--owner", "configmap/job", "-n",
                             namespace, "--kubeconfig", str(control_plane.kubeconfig("alice"))],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 4, result.stderr
    assert result.stderr == f"error: forbidden: cannot get configmaps in namespace {namespace}\n"


def test_garbage_collection_removes_the_taskfeedback_with_its_owner(
        controller_manager: ControlPlane, admin: Any, namespace: str, crd: None) -> None:  # noqa: F811
    api = connect(str(controller_manager.kubeconfig("admin")))
    owned = create_task_feedback("owned", namespace=namespace,
                                 owner=owner_configmap(admin, namespace, "app"), client=api)
    crs = client.CustomObjectsApi(admin)
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
        "metadata": {"name": "unowned"}, "spec": {"task": "unowned"}})
    client.CoreV1Api(admin).delete_namespaced_config_map("app", namespace)

    def gone() -> bool:
        try:
            crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "owned")
        except ApiException as err:
            return err.status == 404
        return False

    eventually(gone, 60, f"the garbage collector to delete taskfeedback {owned.uid}")
    assert crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "unowned")


def test_ttl_deletes_finished_unowned_tasks_and_their_events_only(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        crd: None, start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    api = connect(str(kubeconfig))
    core = client.CoreV1Api(admin)
    owned = create_task_feedback("owned", namespace=namespace,
                                 owner=owner_configmap(admin, namespace, "ctl"), client=api)
    pods = {t: core.create_namespaced_pod(namespace, {
        "metadata": {"name": f"{t}-0", "labels": {"tidings.dev/task": t}},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "main", "image": "busybox"}]}})
        for t in ("done", "owned", "running")}
    w = start_watcher("--ttl-after-finished", "2")
    emit_final(control_plane, downward_env(pods["done"], "done"))
    emit_final(control_plane, {**downward_env(pods["owned"], "owned"),
                               "TIDINGS_TASK_UID": owned.uid})
    running = Emitter(EmitterConfig(), identity=Identity.from_env(
        downward_env(pods["running"], "running")), transport=KubeTransport(api))
    running.progress(0.5, "half")
    assert running.flush(15)
    for task in ("done", "owned", "running"):
        eventually(lambda t=task: task_status(admin, namespace, t), 30, f"{task} written")

    crs = client.CustomObjectsApi(admin)

    def names() -> set[str]:
        return {i["metadata"]["name"] for i in crs.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL)["items"]}

    eventually(lambda: names() == {"owned", "running"}, 30, "the TTL to delete 'done' only")
    events = client.EventsV1Api(admin)

    def bus(task: str) -> int:
        return len(events.list_namespaced_event(
            namespace, field_selector=f"reportingController={BUS_CONTROLLER},"
            f"regarding.name={task}").items)

    assert (bus("done"), bus("owned"), bus("running")) == (0, 2, 1)
    assert eventually(lambda: w.metrics().get("tidings_watcher_ttl_deleted_total"), 10,
                      "the deletion counted") == 1
    # A restarted watcher relists (ready = its initial list is folded): the other tasks' events
    # are known from their statuses, and none of 'done' is left to fold it back to life.
    w.kill()
    m = start_watcher().metrics()
    assert (m["tidings_watcher_events_seen_total"], m["tidings_watcher_events_applied_total"]) \
        == (3, 0)
    assert names() == {"owned", "running"}


def test_a_ttl_delete_cut_short_never_leaves_a_task_s_facts_without_its_object(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        crd: None, start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """A watcher that stops in the middle of a TTL delete (after its first DELETE request)
    leaves the finished TaskFeedback for the next sweep, never the task's bus events without
    it: a restarted watcher would fold those into a new TaskFeedback."""
    from tidings.watcher.ttl import TtlSweeper

    pod = client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": "cut-0", "labels": {"tidings.dev/task": "cut"}},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "main", "image": "busybox"}]}})
    w = start_watcher()
    emit_final(control_plane, downward_env(pod, "cut"))
    eventually(lambda: finished(task_status(admin, namespace, "cut")), 30,
               f"the task written finished\n{w.tail()}")
    w.kill()
    crs = client.CustomObjectsApi(admin)
    uid = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                           "cut")["metadata"]["uid"]

    class Stopped(Exception):
        pass

    kube = connect(str(kubeconfig))
    request, deletes = kube.request, []

    def stops_after_one_delete(method: str, path: str, **kw: Any) -> Any:
        if method == "DELETE" and deletes:
            raise Stopped(path)
        answer = request(method, path, **kw)
        if method == "DELETE":
            deletes.append(path)
        return answer

    kube.request = stops_after_one_delete  # type: ignore[method-assign]
    sweeper = TtlSweeper(kube, [taskfeedback_path(namespace)], 0.0,
                         on_deleted=lambda *_: None)
    with pytest.raises(Stopped):
        sweeper.sweep()
    bus = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"reportingController={BUS_CONTROLLER}").items
    names = {i["metadata"]["name"] for i in crs.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"]}
    assert names == {"cut"} and bus == [], (deletes, names, len(bus))
    # A restarted watcher finds the object as it was (nothing to fold back), and the next
    # sweep deletes it.
    m = start_watcher().metrics()
    assert m["tidings_watcher_events_seen_total"] == 0
    assert crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                            "cut")["metadata"]["uid"] == uid
    kube.request = request  # type: ignore[method-assign]
    assert sweeper.sweep() == 1


def test_a_negative_ttl_is_a_config_error(tmp_path: Path) -> None:
    result = subprocess.run([TIDINGS, "watcher", "run", "--ttl-after-finished", "-1"],
                            capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_a_taskfeedback_that_changed_since_the_sweep_read_it_survives(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: None) -> None:  # noqa: F811
    """The race the preconditions close: the sweep lists a finished, unowned task, then a
    controller adopts it (or a late fact lands) before the delete."""
    from tidings.watcher.ttl import TtlSweeper

    kube = connect(str(control_plane.kubeconfig("admin")))
    forgotten: list[Any] = []
    sweeper = TtlSweeper(kube, [taskfeedback_path(namespace)], 1.0,
                         on_deleted=lambda task, _uid, _state: forgotten.append(task))
    crs = client.CustomObjectsApi(admin)
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
        "metadata": {"name": "race"}, "spec": {"task": "race"}})
    (stale,) = list(sweeper._items())
    crs.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "race",
                                       {"metadata": {"labels": {"adopted": "yes"}}})
    assert sweeper._delete(stale) is False and forgotten == []
    assert crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "race")
    (fresh,) = list(sweeper._items())
    assert sweeper._delete(fresh) is True and [t.name for t in forgotten] == ["race"]


def test_the_documented_job_flow_is_accepted_by_the_api_server(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: None) -> None:  # noqa: F811
    """deploy/examples/workload.yaml's comment: a suspended Job, `tidings task create --owner
    job/...`, then one patch that sets the annotation and resumes it (no job controller runs
    here, so this checks what the API server accepts, not the pods)."""
    import yaml

    docs = yaml.safe_load_all((REPO_ROOT / "deploy/examples/workload.yaml").read_text())
    job = next(d for d in docs if d and d["kind"] == "Job")
    job["spec"]["suspend"] = True
    client.BatchV1Api(admin).create_namespaced_job(namespace, job)
    kube = ["-n", namespace, "--kubeconfig", str(control_plane.kubeconfig("admin"))]
    made = subprocess.run([TIDINGS, "task", "create", "train-mnist-42", "--owner",
                           "job/train-mnist-42", "-o", "uid", *kube],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    uid = made.stdout.strip()
    patch = {"spec": {"suspend": False, "template": {"metadata": {"annotations": {
        TASK_UID_ANNOTATION: uid}}}}}
    control_plane.kubectl_run("patch", "job", "train-mnist-42", "--type=merge", "-p",
                              json.dumps(patch), *kube[:2])
    resumed = client.BatchV1Api(admin).read_namespaced_job("train-mnist-42", namespace)
    assert not resumed.spec.suspend
    assert resumed.spec.template.metadata.annotations[TASK_UID_ANNOTATION] == uid
    owner = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "train-mnist-42")["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "train-mnist-42",
                                                            resumed.metadata.uid)
