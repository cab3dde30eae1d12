"""Zero wiring on the pods the platforms' real controllers make: the JobSet controller,
Kubeflow Trainer's controller manager and Argo Workflows' workflow-controller, each built from
its pinned module (tools/platforms/) and installed from its release's manifests, run on a
control plane of this module's own with the Job controller and the garbage collector
(tools/devplatforms.py). Their CRDs and cluster-wide webhooks must not meet the hand-made
platform objects of test_platforms.py, hence the separate plane.

Each test lets the controller make the pods, checks what it put on them (labels, owner
chain, counts), lets every pod report with nothing but its pod-bound token, ends the pods as
a kubelet would (kwok runs no containers), and checks what the task's TaskFeedback says
about those pods; then deletes the platform's object and sees the garbage collector take
the pods and the TaskFeedback with it. To extend one: add assertions on ``Run.status()``
after the pods end (the task's outcome from the platform object, its workers' deaths).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.cluster import test_trust as tt
from tests.cluster.support_watcher import WatcherProc, task_status
from tests.cluster.test_platforms import grant_workload, report, taskfeedback
from tests.support import eventually
from tools.devcluster import DEFAULT_CONTROLLERS, NODE_NAME, ControlPlane
from tools.devplatforms import PLATFORMS, Platforms

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tt.crd, tt.kubeconfig, tt.watchers, tt.start_watcher
policy = tt.policy


# --- a control plane of this module's own, with the platforms' controllers ----------------


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(state_dir=tmp_path_factory.mktemp("platform-plane"),
                      controllers=DEFAULT_CONTROLLERS)
    with cp:
        yield cp


@pytest.fixture(scope="module")
def platforms(control_plane: ControlPlane) -> Platforms:
    return Platforms(control_plane)


@pytest.fixture(scope="module")
def admin(control_plane: ControlPlane) -> Any:
    """(conftest's namespace fixture then makes its namespaces on this plane too)"""
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig("admin")))


# --- what every test does with the pods a controller made ---------------------------------


@dataclass
class Run:
    """One platform object, its pods as its controller made them, and the task they report to."""

    cp: ControlPlane
    admin: Any
    namespace: str
    task: str

    def pods(self, selector: str) -> list[Any]:
        return list(client.CoreV1Api(self.admin).list_namespaced_pod(
            self.namespace, label_selector=selector).items)

    def running_pods(self, selector: str, count: int, timeout: float = 120) -> list[Any]:
        """The ``count`` pods ``selector`` finds, once kwok runs all of them (sorted by name)."""
        def ready() -> list[Any]:
            pods = self.pods(selector)
            return pods if len(pods) == count and all(
                p.status.phase == "Running" for p in pods) else []

        return sorted(eventually(ready, timeout, f"{count} pods {selector} running"),
                      key=lambda p: p.metadata.name)

    def report(self, pod: Any, tmp_path: Path, link: str = "") -> None:
        report(self.cp, self.admin, self.namespace,
               {"name": pod.metadata.name, "uid": pod.metadata.uid}, tmp_path, link=link)

    def end(self, pod: Any, exit_code: int = 0) -> None:
        self.cp.end_pod(self.namespace, pod.metadata.name, exit_code)

    def status(self) -> dict[str, Any]:
        return task_status(self.admin, self.namespace, self.task) or {}

    def owner_chain(self, pod: Any) -> list[tuple[str, str]]:
        """(kind, name) of the pod's controller, its controller's, ... up to the top."""
        meta = client.ApiClient().sanitize_for_serialization(pod)["metadata"]
        chain: list[tuple[str, str]] = []
        while True:
            ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")),
                       None)
            if ref is None:
                return chain
            chain.append((ref["kind"], ref["name"]))
            meta = self.get(ref["apiVersion"], ref["kind"], ref["name"])["metadata"]

    def get(self, api_version: str, kind: str, name: str) -> dict[str, Any]:
        if api_version == "batch/v1":
            job = client.BatchV1Api(self.admin).read_namespaced_job(name, self.namespace)
            return dict(client.ApiClient().sanitize_for_serialization(job))
        group, version = api_version.split("/")
        plural = {"JobSet": "jobsets", "TrainJob": "trainjobs", "Workflow": "workflows"}[kind]
        return dict(client.CustomObjectsApi(self.admin).get_namespaced_custom_object(
            group, version, self.namespace, plural, name))

    def gone_with(self, delete: Callable[[], object], selector: str) -> None:
        """Delete the platform's object; the garbage collector takes its pods and the task's
        TaskFeedback."""
        delete()
        eventually(lambda: not self.pods(selector)
                   and taskfeedback(self.admin, self.namespace, self.task) is None, 120,
                   f"the pods and taskfeedback/{self.task} deleted with their owner")


def custom(admin: Any, namespace: str, body: dict[str, Any], plural: str) -> dict[str, Any]:
    group, version = body["apiVersion"].split("/")
    return dict(client.CustomObjectsApi(admin).create_namespaced_custom_object(
        group, version, namespace, plural, body))


def delete_custom(admin: Any, namespace: str, api_version: str, plural: str,
                  name: str) -> Callable[[], object]:
    group, version = api_version.split("/")
    return lambda: client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        group, version, namespace, plural, name, propagation_policy="Background")


def pod_template(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """What every platform's pods run here: kwok's node (no scheduler runs), the ServiceAccount
    bound to tidings-workload, one container that kwok pretends to run."""
    return {"metadata": {"labels": labels or {}},
            "spec": {"restartPolicy": "Never", "serviceAccountName": "worker",
                     "nodeName": NODE_NAME,
                     "containers": [{"name": "main", "image": "example.com/train:1"}]}}


# --- JobSet v0.8.2: the real JobSet controller, its Jobs made into pods by the Job controller --


def test_a_real_jobset_s_pods_report_with_their_tokens_alone(
        platforms: Platforms, control_plane: ControlPlane, admin: Any, policy: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    platforms.start("jobset")
    grant_workload(admin, namespace)
    js = custom(admin, namespace, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "llm"},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
            "completions": 2, "parallelism": 2, "backoffLimit": 0,
            "template": pod_template()}}}]}}, "jobsets")
    run = Run(control_plane, admin, namespace, "llm")
    selector = "jobset.sigs.k8s.io/jobset-name=llm"
    pods = run.running_pods(selector, 4)
    # What the JobSet controller puts on its Jobs' pods (sigs.k8s.io/jobset v0.8.2,
    # pkg/controllers/jobset_controller.go, labelAndAnnotateObject), and the owner chain
    # pod -> Job (the Job controller) -> JobSet.
    for p in pods:
        labels = p.metadata.labels
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "llm"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
        assert labels["batch.kubernetes.io/job-name"] == \
            f"llm-workers-{labels['jobset.sigs.k8s.io/job-index']}"
        assert run.owner_chain(p) == [
            ("Job", labels["batch.kubernetes.io/job-name"]), ("JobSet", "llm")]
    w = start_watcher()
    for p in pods:
        run.report(p, tmp_path, link="https://wandb.ai/acme/llm")
    eventually(lambda: len(run.status().get("workers", [])) == 4, 60,
               f"the four pods folded into taskfeedback/llm\n{w.tail()}")
    status = run.status()
    assert {x["pod"] for x in status["workers"]} == {p.metadata.name for p in pods}
    assert {x["name"] for x in status["pods"]} == {p.metadata.name for p in pods}
    assert status["links"]["run"]["url"] == "https://wandb.ai/acme/llm"
    # One task for the JobSet, none for its child Jobs.
    for i in (0, 1):
        assert taskfeedback(admin, namespace, f"llm-workers-{i}") is None
    assert js["metadata"]["uid"]
    for p in pods:
        run.end(p)
    eventually(lambda: any(c["type"] == "Completed" and c["status"] == "True" for c in (
        run.get("jobset.x-k8s.io/v1alpha2", "JobSet", "llm").get("status") or {}).get(
        "conditions", [])), 120, "the JobSet controller to complete the JobSet")
    eventually(lambda: run.status().get("phase") == "Succeeded", 60,
               f"taskfeedback/llm Succeeded\n{w.tail()}")
    tf = taskfeedback(admin, namespace, "llm") or {}
    assert [(o["kind"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
        ("JobSet", js["metadata"]["uid"])]
    run.gone_with(delete_custom(admin, namespace, "jobset.x-k8s.io/v1alpha2", "jobsets",
                                "llm"), selector)


def test_a_real_jobset_owns_its_task_without_its_uid_label(
        platforms: Platforms, control_plane: ControlPlane, admin: Any, policy: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    """JobSet v0.8.2, the release Trainer v2.0.0 installs, labels no jobset-uid on its pods
    (v0.10 does): the owner is read through the pod's Job's controller reference, each link
    verified against the watcher's watches of Jobs and JobSets."""
    platforms.start("jobset")
    grant_workload(admin, namespace)
    js = custom(admin, namespace, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "one"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "template": pod_template()}}}]}}, "jobsets")
    run = Run(control_plane, admin, namespace, "one")
    selector = "jobset.sigs.k8s.io/jobset-name=one"
    (pod,) = run.running_pods(selector, 1)
    assert "jobset.sigs.k8s.io/jobset-uid" not in pod.metadata.labels
    w = start_watcher()
    run.report(pod, tmp_path)
    tf = eventually(lambda: taskfeedback(admin, namespace, "one"), 60,
                    f"taskfeedback/one\n{w.tail()}")
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in
            tf["metadata"].get("ownerReferences", [])] == [
        ("JobSet", "one", js["metadata"]["uid"], True)]
    # Owned, the JobSet decides: its worker's final is not its end.
    eventually(lambda: run.status().get("platform", {}).get("kind") == "JobSet", 60,
               f"the JobSet followed\n{w.tail()}")
    assert run.status()["phase"] == "Running"
    run.end(pod)
    eventually(lambda: run.status().get("phase") == "Succeeded", 120,
               f"taskfeedback/one Succeeded with its JobSet\n{w.tail()}")
    run.gone_with(delete_custom(admin, namespace, "jobset.x-k8s.io/v1alpha2", "jobsets",
                                "one"), selector)


def held_pod(admin: Any, namespace: str, name: str, labels: dict[str, str],
             job: dict[str, str]) -> dict[str, str]:
    """A bare pod (no node: kwok leaves it alone) whose controller reference names ``job``
    (name, uid). The garbage collector deletes a pod whose owner is gone, so a finalizer
    holds it: its labels stay readable for as long as the test needs them."""
    p = client.CoreV1Api(admin).create_namespaced_pod(namespace, {
        "metadata": {"name": name, "labels": labels, "finalizers": [HOLD],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "controller": True, **job}]},
        "spec": {"serviceAccountName": "worker",
                 "containers": [{"name": "main", "image": "example.com/evil:1"}]}})
    return {"name": p.metadata.name, "uid": p.metadata.uid}


HOLD = "tidings.dev/test-hold"


def speak_as(admin: Any, namespace: str, task: str, pod: dict[str, str], seq: int) -> None:
    """A fact about ``task`` whose related pod is ``pod``, sent by someone who may create
    events in the namespace (no sender proof: the pod is live, its labels are its word)."""
    from datetime import UTC, datetime

    from tidings.schemas import LogLink, PodRef, TaskRef, build_event

    client.EventsV1Api(admin).create_namespaced_event(namespace, build_event(
        task=TaskRef(namespace, task), pod=PodRef(pod["name"], pod["uid"], namespace),
        payload=LogLink(name="run", url=f"https://evil.example/{pod['name']}"),
        instance=f"attacker-{pod['name']}", seq=seq, time=datetime.now(UTC),
        sender_proof=False))


def test_a_bare_pod_claiming_a_real_jobset_through_a_fake_job_chain_is_refused(
        platforms: Platforms, control_plane: ControlPlane, admin: Any, policy: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    """The attacker may create pods, Jobs and events in the namespace: two bare pods labelled
    for the real JobSet ``victim`` claim it through a Job, one naming the JobSet's real Job
    with a forged uid, one through a live Job of the attacker's whose controller reference
    forges the JobSet's uid. Both are refused (``unverified_owner``) and own nothing; the real
    pod's task is owned by the real JobSet."""
    platforms.start("jobset")
    grant_workload(admin, namespace)
    js = custom(admin, namespace, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "victim"},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
            "template": pod_template()}}}]}}, "jobsets")
    run = Run(control_plane, admin, namespace, "victim")
    (real,) = run.running_pods("jobset.sigs.k8s.io/jobset-name=victim", 1)
    forged = "0f0f0f0f-0000-4000-8000-000000000000"
    labels = {"jobset.sigs.k8s.io/jobset-name": "victim",
              "jobset.sigs.k8s.io/replicatedjob-name": "w"}
    # 1. the real Job's name, a forged uid
    first = held_pod(admin, namespace, "victim-w-0-forged", {
        **labels, "batch.kubernetes.io/job-name": "victim-w-0"},
        {"name": "victim-w-0", "uid": forged})
    # 2. a live Job of the attacker's (inert: managed by no controller here; labelled as the
    # JobSet controller's own, which lists it among the JobSet's Jobs), claiming the JobSet
    fake = client.BatchV1Api(admin).create_namespaced_job(namespace, {
        "metadata": {"name": "victim-fake", "finalizers": [HOLD],
                     "labels": {"jobset.sigs.k8s.io/restart-attempt": "0"},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                          "kind": "JobSet", "name": "victim", "uid": forged,
                                          "controller": True}]},
        "spec": {"managedBy": "tidings.dev/not-the-job-controller",
                 "template": pod_template()}})
    second = held_pod(admin, namespace, "victim-fake-0", {
        **labels, "batch.kubernetes.io/job-name": "victim-fake"},
        {"name": "victim-fake", "uid": fake.metadata.uid})
    try:
        w = start_watcher()
        for p in (first, second):
            speak_as(admin, namespace, "victim", p, 1)
        eventually(lambda: tt.rejected(w, "unverified_owner") >= 2, 60,
                   f"both chains refused\n{w.tail()}")
        # They made nothing: the task is the real JobSet's own (--track), without their facts.
        made = eventually(lambda: taskfeedback(admin, namespace, "victim"), 60,
                          "the JobSet's own task")
        assert "links" not in (made.get("status") or {})
        run.report(real, tmp_path, link="https://wandb.ai/acme/victim")
        tf = eventually(lambda: taskfeedback(admin, namespace, "victim"), 60,
                        f"the real pod's task\n{w.tail()}")
        assert [(o["kind"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
            ("JobSet", js["metadata"]["uid"])]
        # They speak again: refused, and counted in the task's status now.
        for p in (first, second):
            speak_as(admin, namespace, "victim", p, 2)
        st = eventually(lambda: (s := run.status()).get("refused", {}).get(
            "unverifiedOwner", 0) >= 2 and s, 60, f"counted\n{w.tail()}")
        assert st["links"]["run"]["url"] == "https://wandb.ai/acme/victim"
        assert "evil" not in str(st["links"])
    finally:
        for name in (first["name"], second["name"]):
            client.CoreV1Api(admin).patch_namespaced_pod(
                name, namespace, {"metadata": {"finalizers": None}})
        client.BatchV1Api(admin).patch_namespaced_job(
            "victim-fake", namespace, {"metadata": {"finalizers": None}})


# --- Kubeflow Trainer v2.0.0: TrainJob -> JobSet (Trainer) -> Jobs (JobSet) -> pods (Job) ----


def torch_runtime(folder: Path, name: str) -> dict[str, Any]:
    """The release's own torch-distributed ClusterTrainingRuntime, renamed, with its pods put
    on the kwok node under the ServiceAccount bound to tidings-workload."""
    runtime = yaml.safe_load((folder / "manifests/base/runtimes/torch_distributed.yaml")
                             .read_text())
    runtime = copy.deepcopy(runtime)
    runtime["metadata"] = {"name": name}
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]["template"]["spec"]
        spec.update({"nodeName": NODE_NAME, "serviceAccountName": "worker",
                     "restartPolicy": spec.get("restartPolicy", "Never")})
    return runtime


def test_a_real_trainjob_s_pods_report_into_the_trainjob_s_task(
        platforms: Platforms, control_plane: ControlPlane, admin: Any, policy: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    platforms.start("jobset")
    platforms.start("trainer")
    grant_workload(admin, namespace)
    runtime = f"torch-kwok-{namespace}"
    body = torch_runtime(PLATFORMS["trainer"].folder(), runtime)
    client.CustomObjectsApi(admin).create_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", body)
    tj = custom(admin, namespace, {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "bert"},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": {"numNodes": 2}}}, "trainjobs")
    run = Run(control_plane, admin, namespace, "bert")
    selector = "jobset.sigs.k8s.io/jobset-name=bert"
    pods = run.running_pods(selector, 2)
    for p in pods:
        assert run.owner_chain(p) == [
            ("Job", p.metadata.labels["batch.kubernetes.io/job-name"]), ("JobSet", "bert"),
            ("TrainJob", "bert")]
        # Trainer v2.0.0 names its JobSet after the TrainJob and labels no pod with the
        # TrainJob's name (pkg/constants/constants.go): the task is found through the
        # JobSet's label, which carries it.
        assert p.metadata.labels["jobset.sigs.k8s.io/jobset-name"] == "bert"
        assert "trainer.kubeflow.org/trainjob-name" not in p.metadata.labels
    w = start_watcher()
    for p in pods:
        run.report(p, tmp_path)
    eventually(lambda: len(run.status().get("workers", [])) == 2, 60,
               f"the two nodes folded into taskfeedback/bert\n{w.tail()}")
    assert {x["pod"] for x in run.status()["workers"]} == {p.metadata.name for p in pods}
    assert taskfeedback(admin, namespace, "bert-node-0") is None
    for p in pods:
        run.end(p)
    eventually(lambda: run.status().get("phase") == "Succeeded", 60,
               f"taskfeedback/bert Succeeded\n{w.tail()}")
    # Owned by the TrainJob itself, the outermost object (made before its pods spoke):
    # deleting the TrainJob takes the JobSet, the Jobs, the pods and the TaskFeedback.
    tf = taskfeedback(admin, namespace, "bert") or {}
    (owner,) = tf["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("TrainJob", "bert")
    assert run.get("trainer.kubeflow.org/v1alpha1", "TrainJob", "bert")["metadata"][
        "uid"] == owner["uid"]
    run.gone_with(delete_custom(admin, namespace, "trainer.kubeflow.org/v1alpha1", "trainjobs",
                                "bert"), selector)
    assert tj["metadata"]["uid"]


# --- Argo Workflows v4.0.5: the workflow-controller's step pods, one retried ----------------


def test_a_real_workflow_s_step_pods_report_and_a_failed_step_is_retried(
        platforms: Platforms, control_plane: ControlPlane, admin: Any, policy: None,
        namespace: str, tmp_path: Path, start_watcher: Callable[..., WatcherProc]) -> None:
    platforms.start("argo")
    grant_workload(admin, namespace)
    step = {"container": {"image": "example.com/etl:1", "command": ["etl"]},
            "retryStrategy": {"limit": "1", "retryPolicy": "Always"}}
    wf = custom(admin, namespace, {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "etl"},
        "spec": {"entrypoint": "main", "serviceAccountName": "worker",
                 "podSpecPatch": yaml.safe_dump({"nodeName": NODE_NAME}),
                 "templates": [
                     {"name": "main", "steps": [[{"name": "a", "template": "shard"},
                                                 {"name": "b", "template": "shard"}]]},
                     {"name": "shard", **step}]}}, "workflows")
    run = Run(control_plane, admin, namespace, "etl")
    selector = "workflows.argoproj.io/workflow=etl"
    pods = run.running_pods(selector, 2)
    for p in pods:
        assert run.owner_chain(p) == [("Workflow", "etl")]
    w = start_watcher()
    first, second = pods
    run.report(first, tmp_path)
    run.end(first)
    # The second step's pod fails before it reports: the controller retries it with a new pod.
    run.end(second, exit_code=1)
    retried = eventually(lambda: [p for p in run.pods(selector) if p.metadata.name not in
                                  {first.metadata.name, second.metadata.name}
                                  and p.status.phase == "Running"], 120,
                         "the failed step retried\n"
                         + control_plane.processes["platform-argo"].tail(5))
    (retry,) = retried
    assert run.owner_chain(retry) == [("Workflow", "etl")]
    run.report(retry, tmp_path, link="https://wandb.ai/acme/etl")
    eventually(lambda: {x["pod"] for x in run.status().get("workers", [])} == {
        first.metadata.name, retry.metadata.name}, 60, f"both steps folded\n{w.tail()}")
    run.end(retry)
    tf = taskfeedback(admin, namespace, "etl")
    assert tf is not None
    assert [(o["kind"], o["name"], o["uid"]) for o in tf["metadata"]["ownerReferences"]] == [
        ("Workflow", "etl", wf["metadata"]["uid"])]
    run.gone_with(delete_custom(admin, namespace, "argoproj.io/v1alpha1", "workflows", "etl"),
                  selector)


def test_a_platform_s_install_is_its_release_s_and_refuses_what_its_webhook_refuses(
        platforms: Platforms, admin: Any, namespace: str) -> None:
    """The JobSet webhook runs on 127.0.0.1 through clientConfig.url and answers for real: an
    invalid JobSet (no replicated jobs) is refused by it, not by the schema alone."""
    platforms.start("jobset")
    hooks = client.AdmissionregistrationV1Api(admin).list_validating_webhook_configuration()
    urls = [h.client_config.url for c in hooks.items for h in c.webhooks
            if "jobset" in c.metadata.name]
    assert urls and all(u.startswith("https://127.0.0.1:") for u in urls), urls
    with pytest.raises(ApiException) as err:
        custom(admin, namespace, {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "bad"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "template": pod_template()}}}],
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["nope"]}}},
            "jobsets")
    # The API server relays a webhook's refusal as 403, naming the webhook and its reason.
    body = str(err.value.body)
    assert err.value.status == 403 and "vjobset.kb.io" in body, body
    assert "denied the request" in body and "'nope' does not appear" in body, body
