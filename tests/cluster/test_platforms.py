"""Zero wiring on the real control plane: a real batch/v1 Job whose pods the real Job
controller makes, and pods labelled and owned exactly as the JobSet controller, Kubeflow
Trainer, Kubeflow's training-operator and Argo Workflows make them (their objects are real,
through minimal CRDs, since their controllers are not built here), each emitting with
nothing but its pod-bound token: no POD_* env, no task id, no worker count. The watcher folds
their facts into the platform's task, owns the TaskFeedback by the platform's object (the
real garbage collector removes it with that object) and takes a Job's completions as its
worker count."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster import test_trust as tt
from tests.cluster.support_watcher import WatcherProc, task_status
from tests.cluster.test_controlplane import bound_token
from tests.support import eventually, expanded
from tools.devcluster import NODE_NAME, ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tt.crd, tt.kubeconfig, tt.watchers, tt.start_watcher
policy, metric, rejected = tt.policy, tt.metric, tt.rejected
GROUP, VERSION, PLURAL = "tidings.dev", "v1alpha1", "taskfeedbacks"

# Minimal CRDs for the platforms' objects: real objects with real uids, which the garbage
# collector can look up (their controllers are not run here).
PLATFORM_CRDS = {
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    ("argoproj.io", "v1alpha1", "Workflow", "workflows"),
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
}


@pytest.fixture(scope="module")
def platform_crds(control_plane: ControlPlane, admin: Any) -> Iterator[None]:
    ext = client.ApiextensionsV1Api(admin)
    for group, version, kind, plural in PLATFORM_CRDS:
        try:
            ext.create_custom_resource_definition({
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {
                                           "type": "object",
                                           "x-kubernetes-preserve-unknown-fields": True}}}]}})
        except ApiException as err:
            if err.status != 409:
                raise
    for group, _, _, plural in PLATFORM_CRDS:
        eventually(lambda n=f"{plural}.{group}": any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(n).status.conditions or []),
            30, f"crd {plural}.{group} established")
    yield


# --- helpers -------------------------------------------------------------------------------


def grant_workload(admin: Any, namespace: str, sa: str = "worker") -> None:
    """The one thing a platform's pods need: their ServiceAccount bound to tidings-workload."""
    core = client.CoreV1Api(admin)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{sa}-tidings-workload"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "tidings-workload"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})


def platform_object(admin: Any, namespace: str, api_version: str, kind: str, plural: str,
                    name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    group, version = api_version.split("/")
    return client.CustomObjectsApi(admin).create_namespaced_custom_object(
        group, version, namespace, plural,
        {"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
         "spec": spec or {}})


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference as the platforms' controllers set it on what they make."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def pod(admin: Any, namespace: str, name: str, labels: dict[str, str],
        owners: list[dict[str, Any]]) -> dict[str, str]:
    created = client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
        "spec": {"nodeName": NODE_NAME, "serviceAccountName": "worker",
                 "containers": [{"name": "main", "image": "busybox"}]}})
    return {"name": created.metadata.name, "uid": created.metadata.uid}


def run_in_pod(cp: ControlPlane, admin: Any, namespace: str, p: dict[str, str], code: str,
               tmp_path: Path) -> str:
    """Python as the pod runs it: its bound token (what the kubelet mounts, here in a
    kubeconfig) and no POD_*, TIDINGS_TASK or TIDINGS_EMIT_WORKERS env at all."""
    token = bound_token(admin, namespace, "worker", p)
    cfg = tt.token_kubeconfig(cp, token, namespace, tmp_path / f"{p['name']}.yaml")
    script = "from tidings import emitter as tidings\n" + textwrap.dedent(code) + \
        "\nprint('flushed', tidings.flush(20))\n"
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(cfg)})
    assert res.returncode == 0, res.stderr
    return res.stdout + res.stderr


def report(cp: ControlPlane, admin: Any, namespace: str, p: dict[str, str], tmp_path: Path,
           *, link: str = "") -> None:
    code = (f"tidings.log_link('run', {link!r})\n" if link else "") + \
        "tidings.progress(1.0, 'done', final=True)"
    out = eventually(lambda: (o := run_in_pod(cp, admin, namespace, p, code, tmp_path))
                     .startswith("flushed True") and o, 30, "the pod's grant to apply")
    assert out == "flushed True\n", out  # nothing said on stderr: nothing was lost


def taskfeedback(admin: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The TaskFeedback with its status's records read into their fields, as
    ``task_status`` reads them; None when there is none."""
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(admin).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    if isinstance(obj.get("status"), dict):
        obj["status"] = expanded(obj["status"])
    return obj


def phase(admin: Any, namespace: str, task: str) -> str:
    return str((task_status(admin, namespace, task) or {}).get("phase", ""))


# --- the Job: a real batch/v1 Job, its controller's four indexed pods, no env --------------


def job_pods(admin: Any, namespace: str, uid: str, count: int) -> list[dict[str, Any]]:
    """The pods the Job controller made for the Job ``uid`` once there are ``count`` of them,
    Running (kwok starts them), as {name, uid, index, labels, owners}, sorted by index then
    age."""
    def running() -> list[Any]:
        pods = client.CoreV1Api(admin).list_namespaced_pod(
            namespace, label_selector=f"batch.kubernetes.io/controller-uid={uid}").items
        return pods if len(pods) == count and all(
            p.status.phase in ("Running", "Succeeded", "Failed") for p in pods) else []

    pods = eventually(running, 60, f"{count} pods of the Job controller running")
    return sorted(({"name": p.metadata.name, "uid": p.metadata.uid,
                    "index": p.metadata.labels.get("batch.kubernetes.io/job-completion-index"),
                    "labels": p.metadata.labels, "phase": p.status.phase,
                    "owners": [(o.kind, o.name, o.uid, o.controller)
                               for o in p.metadata.owner_references or []],
                    "created": p.metadata.creation_timestamp} for p in pods),
                  key=lambda p: (p["index"], p["created"]))


def job_condition(admin: Any, namespace: str, name: str, kind: str) -> bool:
    job = client.BatchV1Api(admin).read_namespaced_job(name, namespace)
    return any(c.type == kind and c.status == "True" for c in job.status.conditions or [])


def test_a_real_indexed_job_s_pods_report_with_their_tokens_alone_and_a_retry_completes_it(
        controller_manager: ControlPlane, admin: Any, policy: None, namespace: str,
        tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    """The Job controller makes the pods (their labels, owners and indexes are its own); one
    fails as a kubelet reports it and the controller retries its index with a new pod."""
    cp = controller_manager
    grant_workload(admin, namespace)
    job = client.BatchV1Api(admin).create_namespaced_job(namespace, {
        "metadata": {"name": "train-7"},
        "spec": {"completions": 4, "parallelism": 4, "completionMode": "Indexed",
                 "backoffLimit": 2,
                 "template": {"spec": {"restartPolicy": "Never", "serviceAccountName": "worker",
                                       "nodeName": NODE_NAME,
                                       "containers": [{"name": "main", "image": "busybox"}]}}}})
    uid = job.metadata.uid
    pods = job_pods(admin, namespace, uid, 4)
    assert [p["index"] for p in pods] == ["0", "1", "2", "3"]
    for p in pods:  # what the Job controller puts on each pod it creates
        assert p["owners"] == [("Job", "train-7", uid, True)]
        assert p["labels"]["batch.kubernetes.io/job-name"] == "train-7"
        assert p["labels"]["batch.kubernetes.io/controller-uid"] == uid
    w = start_watcher()
    for p in pods[:3]:
        report(cp, admin, namespace, p, tmp_path)
    # Three finals of four completions: not done, whatever each pod said.
    eventually(lambda: len((task_status(admin, namespace, "train-7") or {}).get("workers", []))
               == 3, 30, f"three workers folded\n{w.tail()}")
    status = task_status(admin, namespace, "train-7") or {}
    assert status["phase"] == "Running" and status["progress"]["percent"] == 75, status
    for p in pods[:3]:
        cp.end_pod(namespace, p["name"])
    # Index 3's first pod dies before it reports; the controller makes a new pod for it.
    cp.end_pod(namespace, pods[3]["name"], exit_code=1)
    retried = [p for p in job_pods(admin, namespace, uid, 5) if p["index"] == "3"]
    assert [p["phase"] for p in retried] == ["Failed", "Running"], retried
    retry = retried[1]
    assert retry["owners"] == [("Job", "train-7", uid, True)] and retry["name"] != pods[3]["name"]
    report(cp, admin, namespace, retry, tmp_path, link="https://wandb.ai/acme/train-7")
    cp.end_pod(namespace, retry["name"])
    eventually(lambda: job_condition(admin, namespace, "train-7", "Complete"), 60,
               "the Job controller to complete the Job")
    eventually(lambda: phase(admin, namespace, "train-7") == "Succeeded", 30,
               f"the task complete\n{w.tail()}")
    tf = taskfeedback(admin, namespace, "train-7")
    assert tf is not None and tf["status"]["links"]["run"]["url"] == \
        "https://wandb.ai/acme/train-7"
    assert [(o["kind"], o["name"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
        ("Job", "train-7", uid)]
    assert {x["pod"] for x in tf["status"]["workers"]} == {
        p["name"] for p in [*pods[:3], retry]}
    # Each fact is about its pod: `kubectl describe pod` lists it.
    about = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"regarding.kind=Pod,regarding.name={retry['name']}").items
    assert sorted(e.reason for e in about) == ["LogLink", "Progress"]
    assert all(e.regarding.uid == retry["uid"] for e in about)
    assert rejected(w, "spoofed_sender") == rejected(w, "unknown_task") == 0
    # An operator follows the task in the watcher's log, one line when made, one at its end.
    created = f"task {namespace}/train-7 created (owned by Job/train-7)"
    done = f"task {namespace}/train-7 completed: done"
    eventually(lambda: done in w.tail(10_000), 30, f"the end logged\n{w.tail()}")
    assert [w.tail(10_000).count(x) for x in (created, done)] == [1, 1], w.tail()

    client.BatchV1Api(admin).delete_namespaced_job("train-7", namespace,
                                                   propagation_policy="Background")
    eventually(lambda: taskfeedback(admin, namespace, "train-7") is None and not
               client.CoreV1Api(admin).list_namespaced_pod(namespace).items, 60,
               "the garbage collector to delete the Job's pods and TaskFeedback")


# --- the other platforms: their labels and owners, exactly as their controllers set them -----


def jobset_pod(admin: Any, namespace: str, name: str, task: str, extra: dict[str, str]
               ) -> tuple[dict[str, str], dict[str, Any]]:
    """A JobSet's pod: the JobSet's labels, plus its child Job's (the Job owns the pod)."""
    js = platform_object(admin, namespace, "jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets",
                         task)
    child = client.BatchV1Api(admin).create_namespaced_job(namespace, {
        "metadata": {"name": f"{task}-workers-0", "ownerReferences": [owner(js)]},
        # Managed by another controller (as a JobSet's Jobs may be): the Job controller
        # leaves it alone, making no pods beside the hand-made one and deleting none.
        "spec": {"managedBy": "tidings.dev/not-the-job-controller",
                 "template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "m", "image": "busybox"}]}}}})
    juid = child.metadata.uid
    labels = {"jobset.sigs.k8s.io/jobset-name": task,
              "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
              "jobset.sigs.k8s.io/replicatedjob-name": "workers",
              "jobset.sigs.k8s.io/job-index": "0",
              "batch.kubernetes.io/job-name": f"{task}-workers-0",
              "batch.kubernetes.io/controller-uid": juid, **extra}
    p = pod(admin, namespace, name, labels, [{
        "apiVersion": "batch/v1", "kind": "Job", "name": f"{task}-workers-0", "uid": juid,
        "controller": True, "blockOwnerDeletion": True}])
    return p, js


def make_jobset(admin: Any, namespace: str) -> tuple[dict[str, str], dict[str, Any], str]:
    p, js = jobset_pod(admin, namespace, "llm-workers-0-0-abcde", "llm", {})
    return p, js, "jobsets"


def make_trainjob(admin: Any, namespace: str) -> tuple[dict[str, str], dict[str, Any], str]:
    # Kubeflow Trainer v2: the TrainJob owns a JobSet of its name, whose pods carry both.
    tj = platform_object(admin, namespace, "trainer.kubeflow.org/v1alpha1", "TrainJob",
                         "trainjobs", "bert")
    p, _ = jobset_pod(admin, namespace, "bert-node-0-0-abcde", "bert",
                      {"trainer.kubeflow.org/trainjob-name": "bert"})
    client.CustomObjectsApi(admin).patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "bert",
        {"metadata": {"ownerReferences": [owner(tj)]}})
    return p, tj, "trainjobs"


def make_pytorchjob(admin: Any, namespace: str) -> tuple[dict[str, str], dict[str, Any], str]:
    # Kubeflow training-operator v1: the PyTorchJob owns its pods directly.
    ptj = platform_object(admin, namespace, "kubeflow.org/v1", "PyTorchJob", "pytorchjobs",
                          "resnet")
    p = pod(admin, namespace, "resnet-master-0", {
        "training.kubeflow.org/job-name": "resnet",
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": "master",
        "training.kubeflow.org/replica-index": "0"}, [owner(ptj)])
    return p, ptj, "pytorchjobs"


def make_workflow(admin: Any, namespace: str) -> tuple[dict[str, str], dict[str, Any], str]:
    # Argo Workflows: the Workflow owns its step pods, labelled with its name.
    wf = platform_object(admin, namespace, "argoproj.io/v1alpha1", "Workflow", "workflows",
                         "etl-x2k9")
    p = pod(admin, namespace, "etl-x2k9-train-1234567890", {
        "workflows.argoproj.io/workflow": "etl-x2k9",
        "workflows.argoproj.io/completed": "false"}, [owner(wf)])
    return p, wf, "workflows"


@pytest.mark.parametrize("make", [make_jobset, make_trainjob, make_pytorchjob, make_workflow],
                         ids=["jobset", "trainjob", "pytorchjob", "workflow"])
def test_a_platform_pod_reports_with_its_token_alone_into_its_owned_task(
        controller_manager: ControlPlane, admin: Any, policy: None, platform_crds: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc],
        make: Callable[[Any, str], tuple[dict[str, str], dict[str, Any], str]]) -> None:
    cp = controller_manager
    grant_workload(admin, namespace)
    p, obj, plural = make(admin, namespace)
    task = obj["metadata"]["name"]
    w = start_watcher()
    report(cp, admin, namespace, p, tmp_path, link=f"https://wandb.ai/acme/{task}")
    eventually(lambda: phase(admin, namespace, task) == "Succeeded", 30,
               f"the {obj['kind']}'s task complete\n{w.tail()}")
    tf = taskfeedback(admin, namespace, task)
    assert tf is not None and tf["status"]["links"]["run"]["url"].endswith(task)
    # Owned by the task's object itself, the outermost (a TrainJob, not the JobSet it owns).
    (ref,) = tf["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"]) == (obj["kind"], task)
    # No task of the child Job's name: a JobSet's pod speaks for the JobSet.
    assert taskfeedback(admin, namespace, f"{task}-workers-0") is None
    group, version = obj["apiVersion"].split("/")
    client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        group, version, namespace, plural, task, propagation_policy="Background")
    eventually(lambda: taskfeedback(admin, namespace, task) is None, 60,
               f"the garbage collector to delete the TaskFeedback with its {obj['kind']}")


# --- bad input -----------------------------------------------------------------------------


def test_a_pod_whose_labels_name_no_valid_task_is_refused_and_counted(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    grant_workload(admin, namespace)
    bad = pod(admin, namespace, "bad-0", {"workflows.argoproj.io/workflow": "Not_A_Task"}, [])
    none = pod(admin, namespace, "plain-0", {"app": "x"}, [])
    w = start_watcher()
    for p in (bad, none):
        run_in_pod(control_plane, admin, namespace, p,
                   "tidings.progress(1.0, 'done', final=True)", tmp_path)
    eventually(lambda: rejected(w, "bad_task_id") == 1 and rejected(w, "unknown_task") == 1,
               30, f"both refused\n{w.tail()}")
    tfs = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"]
    assert tfs == []
    log = w.tail()
    assert "label workflows.argoproj.io/workflow: task id 'Not_A_Task' is not valid" in log
    assert "pod plain-0 carries none of the task keys" in log


def test_a_pod_never_seen_whose_task_cannot_be_known_is_counted_not_guessed(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    grant_workload(admin, namespace)
    p = pod(admin, namespace, "train-9-0-abc", {"batch.kubernetes.io/job-name": "train-9"}, [])
    # No watcher runs: the pod reports (with its sender proof) and is deleted.
    out = run_in_pod(control_plane, admin, namespace, p,
                     "tidings.progress(1.0, 'done', final=True)", tmp_path)
    assert out == "flushed True\n"
    stored = client.EventsV1Api(admin).list_namespaced_event(namespace).items
    assert [e.metadata.annotations.get("tidings.dev/sender-uid") for e in stored] == [p["uid"]]
    client.CoreV1Api(admin).delete_namespaced_pod(p["name"], namespace, grace_period_seconds=0)
    eventually(lambda: not client.CoreV1Api(admin).list_namespaced_pod(namespace).items, 30,
               "the pod gone")
    w = start_watcher()
    eventually(lambda: rejected(w, "unknown_task") == 1, 30, f"counted\n{w.tail()}")
    assert taskfeedback(admin, namespace, "train-9") is None
    assert "was never seen and is gone: its task cannot be known" in w.tail()


def test_the_policy_admits_a_fact_about_the_sender_s_own_pod_and_no_other(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str) -> None:
    from tidings.schemas import ObjectRef, PodRef, TaskRef, build_event
    from tidings.schemas.wire.payloads import LogLink

    grant_workload(admin, namespace)
    me = pod(admin, namespace, "me-0", {"batch.kubernetes.io/job-name": "j"}, [])
    other = pod(admin, namespace, "other-0", {"batch.kubernetes.io/job-name": "j"}, [])
    as_me = tt.client_with_token(control_plane, bound_token(admin, namespace, "worker", me))

    def about(subject: dict[str, str], sender: dict[str, str], seq: int) -> dict[str, Any]:
        from datetime import UTC, datetime

        return build_event(
            task=TaskRef(namespace, subject["name"]),
            pod=PodRef(sender["name"], sender["uid"], namespace),
            payload=LogLink(name="x", url="https://x.example/"), instance="i-1", seq=seq,
            time=datetime.now(UTC), sender_proof=True,
            regarding=ObjectRef("v1", "Pod", subject["name"], namespace, subject["uid"]))

    eventually(lambda: tt.create(as_me, namespace, about(me, me, 1)) is None, 30,
               "a fact about its own pod admitted")
    # Speaking as another pod is refused by the policy, whatever the event is about.
    assert "may only emit events about itself" in tt.denied(as_me, namespace,
                                                            about(other, other, 2))


def test_tidings_emit_from_a_job_pod_needs_nothing_but_its_token(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    from tests.cluster.support_watcher import TIDINGS

    grant_workload(admin, namespace)
    p = pod(admin, namespace, "shell-1-0-abcde", {"batch.kubernetes.io/job-name": "shell-1"},
            [])
    cfg = tt.token_kubeconfig(control_plane, bound_token(admin, namespace, "worker", p),
                              namespace, tmp_path / "pod.yaml")
    w = start_watcher()

    def emit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TIDINGS), "emit", *args], capture_output=True, text=True,
                              timeout=60, env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(cfg)})

    res = eventually(lambda: (r := emit("log-link", "--name", "logs", "--url",
                                        "https://logs.example/shell-1")).returncode == 0 and r,
                     30, "the pod's grant to apply")
    assert res.stderr == ""
    res = emit("progress", "1.0", "--final", "-m", "done")
    assert (res.returncode, res.stderr) == (0, "")
    eventually(lambda: phase(admin, namespace, "shell-1") == "Succeeded", 30,
               f"the shell workload's task complete\n{w.tail()}")
    # Acting for a pod with other credentials still needs the task named.
    admin_cfg = control_plane.kubeconfig("admin")
    res = subprocess.run([str(TIDINGS), "emit", "progress", "0.5", "--kubeconfig",
                          str(admin_cfg), "--pod-name", p["name"], "--pod-uid", p["uid"],
                          "-n", namespace], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert res.returncode == 2 and "--task" in res.stderr, res.stderr


def test_the_ttl_deletes_a_platform_task_with_its_pods_facts(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """An unowned platform task (its pod shows no owner uid) expires like any other: its
    pods' facts about themselves go with it, so a restarted watcher cannot fold them back."""
    grant_workload(admin, namespace)
    p = pod(admin, namespace, "wf-ttl-step-1", {"workflows.argoproj.io/workflow": "wf-ttl"},
            [])
    w = start_watcher("--ttl-after-finished", "1")
    report(control_plane, admin, namespace, p, tmp_path)
    # The TTL deletes only a finished task: its delete is the condition (a poll of the 1 s
    # between the status saying Succeeded and the delete can miss it on a loaded machine).
    eventually(lambda: w.metrics().get("tidings_watcher_ttl_deleted_total") == 1, 60,
               f"the task complete, then deleted by the ttl\n{w.tail()}")
    assert taskfeedback(admin, namespace, "wf-ttl") is None
    # The sweep deletes the facts before the object (watcher/ttl.py), so none are left now.
    facts = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"regarding.kind=Pod,regarding.name={p['name']}").items
    assert facts == []
    w.kill()
    again = start_watcher()  # ready: its initial list is folded
    assert again.ready() and taskfeedback(admin, namespace, "wf-ttl") is None


def test_state_from_events_folds_a_platform_pod_s_facts_as_the_watcher_does(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str,
        tmp_path: Path) -> None:
    from tests.cluster.support_watcher import TIDINGS

    grant_workload(admin, namespace)
    p = pod(admin, namespace, "wf-ev-step-1", {"workflows.argoproj.io/workflow": "wf-ev"}, [])
    other = pod(admin, namespace, "wf-other-1", {"workflows.argoproj.io/workflow": "other"},
                [])
    report(control_plane, admin, namespace, p, tmp_path, link="https://wandb.ai/acme/wf-ev")
    report(control_plane, admin, namespace, other, tmp_path, link="https://evil.example/")
    res = subprocess.run([str(TIDINGS), "state", "wf-ev", "-n", namespace, "--from-events",
                          "-o", "json", "--kubeconfig", str(control_plane.kubeconfig("admin"))],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    import json

    data = json.loads(res.stdout)
    assert data["source"] == "events" and data["status"]["phase"] == "Succeeded"
    assert data["status"]["links"]["run"]["url"] == "https://wandb.ai/acme/wf-ev"


# --- a workload without its RoleBinding, and an API server that does not answer ------------


def _as_pod(cfg: Path, code: str) -> subprocess.CompletedProcess[str]:
    script = "from tidings import emitter as tidings\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=90, env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(cfg),
                                           "TIDINGS_EMIT_EXIT_FLUSH_S": "3"})


def test_a_workload_without_its_rolebinding_is_told_the_exact_command_that_fixes_it(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str,
        tmp_path: Path) -> None:
    client.CoreV1Api(admin).create_namespaced_service_account(
        namespace, {"metadata": {"name": "worker"}})  # no RoleBinding
    p = pod(admin, namespace, "shy-0", {"batch.kubernetes.io/job-name": "shy"}, [])
    cfg = tt.token_kubeconfig(control_plane, bound_token(admin, namespace, "worker", p),
                              namespace, tmp_path / "pod.yaml")
    code = "tidings.progress(1.0, 'done', final=True)\nprint('flushed', tidings.flush(10))\n"
    res = _as_pod(cfg, code)
    fix = (f"kubectl -n {namespace} create rolebinding worker-tidings-workload "
           f"--clusterrole=tidings-workload --serviceaccount={namespace}:worker")
    warnings = [line for line in res.stderr.splitlines() if "event refused" in line]
    assert len(warnings) == 1 and fix in warnings[0], res.stderr
    # The exit summary says first that nothing got through, and why.
    (summary,) = [line for line in res.stderr.splitlines() if "tidings emitter" in line]
    assert "nothing was delivered (" in summary and "forbidden" in summary, summary
    # The command works as printed: the same pod then delivers.
    subprocess.run([str(control_plane.kubectl), f"--kubeconfig={control_plane.kubeconfig()}",
                    *fix.split()[1:]], check=True, capture_output=True)
    out = eventually(lambda: (r := _as_pod(cfg, code)).stdout == "flushed True\n" and r, 30,
                     "the binding to apply")
    assert "event refused" not in out.stderr and "nothing was delivered" not in out.stderr


def test_an_api_server_that_does_not_answer_is_named_with_its_address(
        control_plane: ControlPlane, tmp_path: Path) -> None:
    from tools.devcluster import free_port

    server = f"https://127.0.0.1:{free_port()}"  # nothing listens there
    cfg = tmp_path / "gone.yaml"
    control_plane.write_kubeconfig(cfg, "nobody", "token")
    cfg.write_text(cfg.read_text().replace(control_plane.server, server))
    res = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from tidings import emitter as tidings
        tidings.log_link("run", "https://example.com/run")
        print("flushed", tidings.flush(3))
        """)], capture_output=True, text=True, timeout=90,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(cfg), "TIDINGS_EMIT_EXIT_FLUSH_S": "1",
             "POD_NAME": "p-0", "POD_NAMESPACE": "ml", "POD_UID": "u-1", "TIDINGS_TASK": "t-1"})
    assert res.stdout == "flushed False\n", res.stdout + res.stderr
    said = [line for line in res.stderr.splitlines() if "does not answer" in line]
    assert len(said) == 1 and f"the API server {server} does not answer (" in said[0], \
        res.stderr
    assert "nothing was delivered (" in res.stderr, res.stderr
