"""deploy/ against the real control plane: every manifest passes a server-side dry run,
the admission policy authenticates senders with real pod-bound tokens, and the RBAC roles
grant exactly what each identity needs (both sides are proven with real calls)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.cluster.test_controlplane import bound_token, client_with_token
from tests.support import create_kwok_pod, eventually, pod_phase, write_cri_log
from tidings.schemas import COUNTER_NAMES, TaskRef, fold_all
from tidings.schemas.status.encoder import to_status
from tools.devcluster import REPO_ROOT, ControlPlane

pytestmark = pytest.mark.cluster

DEPLOY = REPO_ROOT / "deploy"
BUS = "tidings.dev/bus"
GROUP, VERSION, PLURAL = "tidings.dev", "v1alpha1", "taskfeedbacks"
SYSTEM_NS = "tidings-system"
POLICY = "tidings-sender-identity"
DENIAL = "may only emit events about itself"
RECORD = "tidings-watcher-deletions"  # the watcher's record of deleted TaskFeedbacks


def kubectl(cp: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """kubectl as admin with stderr kept (control_plane.kubectl_run drops warnings)."""
    result = subprocess.run([str(cp.kubectl), f"--kubeconfig={cp.kubeconfig('admin')}", *args],
                            capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result


@pytest.fixture(scope="module")
def install(control_plane: ControlPlane, admin: Any) -> Iterator[dict[str, Any]]:
    """Install deploy/ for real, the way an operator would, after a server-side dry run.

    Order: the CRD and the namespace for real (so the CRs and namespaced objects have
    something to validate against), then `apply -k --dry-run=server` of everything, then
    the real `apply -k`. The admission policy changes cluster-wide behaviour for the whole
    shared test session, so it is removed again afterwards if this module created it.
    """
    objects = [d for d in yaml.safe_load_all(
        control_plane.kubectl_run("kustomize", str(DEPLOY))) if d]
    admission = client.AdmissionregistrationV1Api(admin)
    existed = {
        "policy": _exists(lambda: admission.read_validating_admission_policy(POLICY)),
        "binding": _exists(lambda: admission.read_validating_admission_policy_binding(POLICY)),
    }
    kubectl(control_plane, "apply", "-f", str(DEPLOY / "crd.yaml"))
    control_plane.wait_established(f"{PLURAL}.{GROUP}")
    kubectl(control_plane, "apply", "-f", str(DEPLOY / "namespace.yaml"))
    dry = kubectl(control_plane, "apply", "-k", str(DEPLOY), "--dry-run=server")
    applied = kubectl(control_plane, "apply", "-k", str(DEPLOY))
    yield {"objects": objects, "dry_run": dry, "applied": applied}
    if not existed["binding"]:
        admission.delete_validating_admission_policy_binding(POLICY)
    if not existed["policy"]:
        admission.delete_validating_admission_policy(POLICY)


def _exists(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


# ---- helpers ------------------------------------------------------------------------------
def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def bus_event(namespace: str, task: str, *, related: dict[str, str], instance: str,
              reason: str = "LogLink", controller: str = BUS) -> dict[str, Any]:
    """An events.k8s.io/v1 Event shaped like the bus contract (DESIGN.md)."""
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": f"{task}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "eventTime": now(), "reportingController": controller, "reportingInstance": instance,
        "action": "Report", "reason": reason, "type": "Normal",
        "note": json.dumps({"v": 1, "name": "wandb", "url": "https://wandb.ai/x/y"}),
        "regarding": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
                      "namespace": namespace, "name": task},
        "related": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                    "name": related["name"], "uid": related["uid"]},
    }


def forbidden(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    return err.value


def bind(admin: Any, namespace: str, name: str, cluster_role: str, sa: str) -> None:
    client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})


def workload(control_plane: ControlPlane, admin: Any, namespace: str, pod_name: str,
             task: str, *, sa: str = "worker") -> tuple[dict[str, str], client.ApiClient]:
    """A task pod as deploy/examples/workload.yaml makes it: its own SA bound to
    tidings-workload, the task label, and a client holding the pod's bound token."""
    core = client.CoreV1Api(admin)
    if not _exists(lambda: core.read_namespaced_service_account(sa, namespace)):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
        bind(admin, namespace, f"{sa}-tidings-workload", "tidings-workload", sa)
    pod = create_kwok_pod(admin, namespace, pod_name, labels={"tidings.dev/task": task},
                          service_account=sa)
    token = bound_token(admin, namespace, sa, pod)
    return pod, client_with_token(control_plane, token)


def policy_denial(create: Callable[[], object]) -> ApiException | None:
    """One spoofed create: the policy's denial, or None while the policy is not yet
    enforced (it compiles asynchronously) or RBAC has not yet caught up."""
    try:
        create()
    except ApiException as err:
        if DENIAL in (err.body or ""):
            return err
        if err.status != 403:
            raise
    return None


def sa_token_client(control_plane: ControlPlane, admin: Any, namespace: str,
                    sa: str) -> client.ApiClient:
    review = client.CoreV1Api(admin).create_namespaced_service_account_token(
        sa, namespace, {"spec": {}})
    return client_with_token(control_plane, str(review.status.token))


# ---- manifests --------------------------------------------------------------------------
def test_every_manifest_passes_a_server_side_dry_run(install: dict[str, Any]) -> None:
    lines = install["dry_run"].stdout.splitlines()
    for obj in install["objects"]:
        kind, name = obj["kind"].lower(), obj["metadata"]["name"]
        hits = [line for line in lines if line.split("/")[0].split(".")[0] == kind
                and line.split("/", 1)[1].split(" ")[0] == name]
        assert hits and hits[0].endswith("(server dry run)"), (kind, name, lines)
    # The watcher's pod template meets the `restricted` level its namespace enforces.
    assert "PodSecurity" not in install["dry_run"].stderr, install["dry_run"].stderr
    assert "PodSecurity" not in install["applied"].stderr, install["applied"].stderr


def test_re_applying_the_base_changes_nothing(control_plane: ControlPlane,
                                              install: dict[str, Any]) -> None:
    """`kubectl apply -k deploy/` a second time: nothing is written, and kubectl says so for
    every object but one. The PodDisruptionBudget is reported "configured" by every
    client-side apply whatever its manifest says: its spec.selector has the `replace` patch
    strategy, which kubectl's three-way patch always sends (an empty-seeming no-op the server
    does not write, checked below by its resourceVersion). The policy's resourceRules were
    reported too, until the manifest wrote out the `scope` the API server defaults."""

    def versions() -> dict[str, str]:
        listed = json.loads(kubectl(control_plane, "get", "-k", str(DEPLOY), "-o", "json").stdout)
        return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
                for o in listed["items"]}

    before = versions()
    again = kubectl(control_plane, "apply", "-k", str(DEPLOY))
    lines = again.stdout.splitlines()
    assert len(lines) == len(install["objects"]) == len(before)
    pdb = "poddisruptionbudget.policy/tidings-watcher"
    changed = [line for line in lines if not line.endswith(" unchanged")]
    assert changed == [f"{pdb} configured"], lines
    assert versions() == before, "the second apply wrote something"
    diff = kubectl(control_plane, "diff", "-k", str(DEPLOY), check=False)
    assert diff.returncode == 0 and diff.stdout == "", diff.stdout


def test_cluster_scoped_objects_carry_no_namespace(control_plane: ControlPlane,
                                                   install: dict[str, Any]) -> None:
    cluster_kinds = {line.split()[-1] for line in control_plane.kubectl_run(
        "api-resources", "--namespaced=false", "--no-headers").splitlines()}
    assert {"ValidatingAdmissionPolicy", "ClusterRole"} <= cluster_kinds
    scoped = [(o["kind"], o["metadata"]["name"]) for o in install["objects"]
              if o["kind"] in cluster_kinds]
    assert len(scoped) >= 8
    stamped = [(o["kind"], o["metadata"]["name"]) for o in install["objects"]
               if o["kind"] in cluster_kinds and "namespace" in o["metadata"]]
    assert stamped == []
    # ... and every namespaced object still lands in tidings-system.
    assert {o["metadata"].get("namespace") for o in install["objects"]
            if o["kind"] not in cluster_kinds} == {SYSTEM_NS}


def test_the_install_has_what_the_issue_asks_for(install: dict[str, Any]) -> None:
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in install["objects"]:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    deployment = by_kind["Deployment"]["tidings-watcher"]
    assert deployment["metadata"]["namespace"] == SYSTEM_NS
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "tidings-watcher"
    assert container["image"] == "tidings-watcher:dev"
    assert container["command"] == ["tidings", "watcher", "run", "--metrics-port", "8080",
                                    "--lease-namespace", "$(POD_NAMESPACE)"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in container["env"] if "valueFrom" in e}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace",
                   "POD_UID": "metadata.uid"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(container["resources"]) == {"requests", "limits"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    service = by_kind["Service"]["tidings-watcher-metrics"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080,
                                         "targetPort": "metrics", "protocol": "TCP"}]
    assert {"tidings-workload", "tidings-watcher", "tidings-viewer"} <= set(by_kind["ClusterRole"])
    assert by_kind["ServiceAccount"]["tidings-watcher"]["metadata"]["namespace"] == SYSTEM_NS


def test_the_crd_validates_and_prints_the_summary(control_plane: ControlPlane, admin: Any,
                                                  install: dict[str, Any],
                                                  namespace: str) -> None:
    crs = client.CustomObjectsApi(admin)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
            "metadata": {"name": "train-1"}, "spec": {"task": "train-1"}}
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    status = {"schemaVersion": 2, "phase": "Running",
              "progress": {"percent": 33, "percentText": "33%", "message": "epoch 1 of 3"},
              "linkCount": 1,
              "deck": "report", "links": {"wandb": {"url": "https://wandb.ai/x",
                                                    "at": "2026-11-30T03:00:00.000000Z i 1",
                                                    "events": 1}},
              "lastEventTime": now(), "applied": "abc=1-7"}
    crs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "train-1",
                                              {"status": status})
    got = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train-1")
    assert got["status"]["links"]["wandb"]["url"] == "https://wandb.ai/x"
    assert got["status"]["applied"] == "abc=1-7"
    table = control_plane.kubectl_run("get", "tfb", "-n", namespace)
    header, row = table.splitlines()
    assert header.split() == ["NAME", "PHASE", "PROGRESS", "REASON", "LINKS", "DECK", "LAST",
                              "EVENT", "AGE"]
    assert row.split()[:5] == ["train-1", "Running", "33%", "1", "report"]  # (no reason)
    wide = control_plane.kubectl_run("get", "tfb", "-n", namespace, "-o", "wide")
    assert "MESSAGE" in wide and "epoch 1 of 3" in wide
    with pytest.raises(ApiException) as err:
        crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            **body, "metadata": {"name": "no-task"}, "spec": {}})
    assert err.value.status == 422 and "spec.task" in err.value.body


def test_the_status_is_structural_documented_pruned_and_typed(
        control_plane: ControlPlane, admin: Any, install: dict[str, Any],
        namespace: str) -> None:
    """The CRD documents every field the fold writes; the API server prunes unknown fields
    and refuses mistyped ones (the attack from the issue: progres / counters "x" / links 42)."""
    explained = kubectl(control_plane, "explain", "taskfeedback.status").stdout
    st = to_status(fold_all(TaskRef(namespace, "t"), _every_kind_of_event(namespace)))
    st["budgetDropped"] = {"pods": 1}  # what a write over budget adds
    st["compactedBefore"] = now()[:19] + "Z"  # what dedup compaction adds
    from tidings.watcher.store import REFUSAL_REASONS, refused_status

    st["refused"] = refused_status({r.value: 1 for r in REFUSAL_REASONS})  # the watcher adds
    # Every counter the fold keeps, whether or not this fold moved it.
    st["counters"] = {**{_camel(k): 1 for k in COUNTER_NAMES}, **st["counters"]}
    for key in st:
        assert f"  {key}\t" in explained, f"{key} not documented:\n{explained}"
    for path, _value in _leaves(st):
        if path.count(".") >= 1 and path.split(".")[0] in (
                "links", "decks", "metrics", "metricsBeyond", "spans", "spanLanes",
                "unknownTypes"):
            continue  # user-chosen keys: explained through additionalProperties
        field = "taskfeedback.status." + path
        out = kubectl(control_plane, "explain", field, check=False)
        assert out.returncode == 0 and "DESCRIPTION" in out.stdout, f"{field}: {out.stderr}"
        assert "<empty>" not in out.stdout.split("DESCRIPTION")[1][:80], field

    crs = client.CustomObjectsApi(admin)
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
        "metadata": {"name": "typed"}, "spec": {"task": "typed"}})
    # The whole real status is accepted as written, byte for byte.
    crs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "typed",
                                              {"status": st})
    got = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "typed")
    assert got["status"] == st
    # A misspelled field is pruned, silently, as Kubernetes does (the rest is kept).
    crs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "typed", {
        "status": {**st, "progres": {}, "counters": {**st["counters"], "eventsApplid": 3}}})
    got = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "typed")
    assert "progres" not in got["status"] and "eventsApplid" not in got["status"]["counters"]
    assert got["status"] == st
    # A mistyped one is refused (422) and changes nothing.
    for bad, where in ([{"counters": "x"}, "status.counters"], [{"links": 42}, "status.links"],
                       [{"phase": "Done"}, "status.phase"],
                       [{"progress": {"percent": "half"}}, "status.progress.percent"],
                       [{"metricsBeyond": {"w": 1}}, "status.metricsBeyond.w"],
                       [{"workers": "w"}, "status.workers"]):
        with pytest.raises(ApiException) as err:
            crs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL,
                                                      "typed", {"status": {**st, **bad}})
        assert err.value.status == 422 and where in err.value.body, err.value.body
    got = crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "typed")
    assert got["status"] == st


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _every_kind_of_event(namespace: str) -> list[Any]:
    """Parsed events of every payload type, two workers (one failed), so every status field
    the fold can write is present."""
    from tidings.schemas import (
        DeckReady,
        LogLink,
        ParsedEvent,
        PodRef,
        Progress,
        SpanSummary,
        UnknownPayload,
        build_event,
        parse_event,
    )
    t = datetime.now(UTC)
    ref = TaskRef(namespace, "t")
    out = []
    payloads: list[Any] = [
        LogLink(name="wandb", url="https://wandb.ai/x"), DeckReady(name="d", uri="s3://b/d"),
        SpanSummary(name="s", count=1, total_s=1, min_s=1, max_s=1, first_start=1, last_end=2),
        Progress(fraction=0.5, message="half", workers=3),
        Progress(fraction=0.2, message="boom", final=True, failed=True),
        UnknownPayload(type="Future", version=9)]
    for seq, p in enumerate(payloads):
        pod = PodRef(f"w-{seq % 2}", f"u-{seq % 2}")
        ev = parse_event(build_event(task=ref, pod=pod, payload=p, instance="i", seq=seq,
                                     time=t, warning=seq == 4))
        assert isinstance(ev, ParsedEvent)
        out.append(ev)
    return out


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(obj, list):
        yield prefix, obj
        if obj:
            yield from _leaves(obj[0], prefix)
    else:
        yield prefix, obj


def test_the_example_workload_passes_a_server_side_dry_run(control_plane: ControlPlane,
                                                           install: dict[str, Any],
                                                           namespace: str) -> None:
    path = DEPLOY / "examples" / "workload.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    out = kubectl(control_plane, "apply", "-n", namespace, "-f", str(path), "--dry-run=server")
    lines = out.stdout.splitlines()
    assert len(lines) == len(docs) == 3
    assert all(line.endswith("created (server dry run)") for line in lines), lines
    job = next(d for d in docs if d["kind"] == "Job")
    template = job["spec"]["template"]
    (container,) = template["spec"]["containers"]
    task = template["metadata"]["labels"]["tidings.dev/task"]
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in container["env"]}
    assert env == {"TIDINGS_TASK": task, "POD_NAME": "metadata.name",
                   "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid",
                   "TIDINGS_TASK_UID": "metadata.annotations['tidings.dev/task-uid']"}
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == "tidings-workload"
    assert binding["subjects"][0]["name"] == template["spec"]["serviceAccountName"]


# ---- sender authentication (ValidatingAdmissionPolicy) ----------------------------------
def test_a_pod_may_report_only_about_itself(control_plane: ControlPlane, admin: Any,
                                            install: dict[str, Any], namespace: str) -> None:
    me, as_me = workload(control_plane, admin, namespace, "train-0", "train")
    other = create_kwok_pod(admin, namespace, "train-1", labels={"tidings.dev/task": "train"})
    events = client.EventsV1Api(as_me)

    # (2) Naming another pod is denied by the API server, with the policy's message.
    denial = eventually(lambda: policy_denial(lambda: events.create_namespaced_event(
        namespace, bus_event(namespace, "train", related=other, instance=other["name"]))),
        60, "the sender-identity policy to deny a spoofed event")
    assert denial.status == 403
    assert f"tidings: sender pod train-0 {DENIAL}" in denial.body
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in denial.body

    # (1) The same token naming its own pod succeeds, and the event is stored as sent.
    mine = bus_event(namespace, "train", related=me, instance=me["name"])
    events.create_namespaced_event(namespace, mine)
    stored = client.EventsV1Api(admin).read_namespaced_event(mine["metadata"]["name"], namespace)
    assert (stored.related.uid, stored.reporting_instance) == (me["uid"], "train-0")

    # Half a spoof is still a spoof: own uid with another name, or another instance.
    for spoof in ({**me, "name": "train-1"}, {**me, "uid": other["uid"]}):
        err = forbidden(lambda s=spoof: events.create_namespaced_event(
            namespace, bus_event(namespace, "train", related=s, instance=me["name"])))
        assert DENIAL in err.body
    err = forbidden(lambda: events.create_namespaced_event(
        namespace, bus_event(namespace, "train", related=me, instance="train-1")))
    assert "reportingInstance must be train-0" in err.body

    # (3) A non-bus event from the same token is not the policy's business.
    events.create_namespaced_event(namespace, bus_event(
        namespace, "train", related=other, instance="someone-else", controller="example.com/x"))


def test_core_v1_bus_events_are_checked_too(control_plane: ControlPlane, admin: Any,
                                            install: dict[str, Any], namespace: str) -> None:
    me, as_me = workload(control_plane, admin, namespace, "legacy-0", "legacy")
    other = create_kwok_pod(admin, namespace, "legacy-1", labels={"tidings.dev/task": "legacy"})
    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "core-events"},
        "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "worker-core-events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "core-events"},
        "subjects": [{"kind": "ServiceAccount", "name": "worker", "namespace": namespace}]})
    core = client.CoreV1Api(as_me)

    def core_event(related: dict[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"name": f"legacy.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "eventTime": now(), "reportingComponent": BUS, "reportingInstance": "legacy-0",
            "action": "Report", "reason": "LogLink", "type": "Normal", "message": "{}",
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
                               "namespace": namespace, "name": "legacy"},
            "related": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                        "name": related["name"], "uid": related["uid"]},
        }

    denial = eventually(lambda: policy_denial(
        lambda: core.create_namespaced_event(namespace, core_event(other))),
        60, "the policy to deny a spoofed core/v1 event")
    assert denial.status == 403 and f"tidings: sender pod legacy-0 {DENIAL}" in denial.body
    core.create_namespaced_event(namespace, core_event(me))


def test_people_and_unbound_tokens_are_out_of_scope(control_plane: ControlPlane, admin: Any,
                                                    install: dict[str, Any],
                                                    namespace: str) -> None:
    """Only pod-bound tokens carry a pod identity to check; the watcher's label check
    covers the rest. An admin (or a plain SA token) naming any pod is let through."""
    me, as_me = workload(control_plane, admin, namespace, "solo-0", "solo")
    eventually(lambda: policy_denial(lambda: client.EventsV1Api(as_me).create_namespaced_event(
        namespace, bus_event(namespace, "solo", related={"name": "x", "uid": "y"},
                             instance="solo-0"))), 60, "the policy to be enforced")
    client.EventsV1Api(admin).create_namespaced_event(
        namespace, bus_event(namespace, "solo", related=me, instance="controller-x"))
    unbound = sa_token_client(control_plane, admin, namespace, "worker")
    client.EventsV1Api(unbound).create_namespaced_event(
        namespace, bus_event(namespace, "solo", related=me, instance="elsewhere"))


def test_lineage_is_recorded_under_the_same_rule(control_plane: ControlPlane, admin: Any,
                                                 install: dict[str, Any],
                                                 namespace: str) -> None:
    """A controller is the sender of its PodSpawned events: related is its own pod (the
    spawned pod travels in the note), so naming the spawned pod in related is a spoof."""
    me, as_controller = workload(control_plane, admin, namespace, "ctrl-0", "app",
                                 sa="controller")
    spawned = create_kwok_pod(admin, namespace, "app-worker-0", labels={"tidings.dev/task": "app"})
    events = client.EventsV1Api(as_controller)

    def lineage_event(related: dict[str, str]) -> Callable[[], object]:
        return lambda: events.create_namespaced_event(namespace, bus_event(
            namespace, "app", related=related, instance="ctrl-0", reason="PodSpawned"))

    denial = eventually(lambda: policy_denial(lineage_event(spawned)), 60,
                        "PodSpawned naming the spawned pod in related to be denied")
    assert DENIAL in denial.body
    assert _succeeds(lineage_event(me))


def _succeeds(create: Callable[[], object]) -> bool:
    try:
        create()
    except ApiException:
        return False
    return True


# ---- RBAC ---------------------------------------------------------------------------------
def test_a_workload_can_create_events_and_nothing_else(control_plane: ControlPlane, admin: Any,
                                                       install: dict[str, Any],
                                                       namespace: str) -> None:
    me, as_me = workload(control_plane, admin, namespace, "w-0", "w")
    events = client.EventsV1Api(as_me)
    eventually(lambda: events.create_namespaced_event(
        namespace, bus_event(namespace, "w", related=me, instance="w-0")), 30,
        "the workload's grant to take effect")
    forbidden(lambda: events.list_namespaced_event(namespace))
    forbidden(lambda: events.list_namespaced_event(namespace, watch=True, timeout_seconds=1,
                                                   _preload_content=False))
    forbidden(lambda: events.list_event_for_all_namespaces())
    forbidden(lambda: client.CoreV1Api(as_me).list_namespaced_event(namespace))
    crs = client.CustomObjectsApi(as_me)
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}",
                                            "kind": "TaskFeedback", "metadata": {"name": "w"},
                                            "spec": {"task": "w"}})
    forbidden(lambda: crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "w"))
    forbidden(lambda: crs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))
    forbidden(lambda: crs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "w", {"status": {"phase": "Running"}}))
    forbidden(lambda: client.CoreV1Api(as_me).read_namespaced_pod("w-0", namespace))
    # Nor forge the watcher's record of deleted TaskFeedbacks (which hides a run's facts from
    # the next term): it lives in the watcher's namespace, where a workload may write nothing.
    core = client.CoreV1Api(as_me)
    forged = {"metadata": {"name": RECORD},
              "data": {"deletions.json": json.dumps({"version": 1, "deleted": {
                  namespace: {"victim": int(datetime.now(UTC).timestamp())}}})}}
    forbidden(lambda: core.create_namespaced_config_map(SYSTEM_NS, forged))
    forbidden(lambda: core.replace_namespaced_config_map(RECORD, SYSTEM_NS, forged))
    forbidden(lambda: core.patch_namespaced_config_map(RECORD, SYSTEM_NS, forged))
    forbidden(lambda: core.read_namespaced_config_map(RECORD, SYSTEM_NS))


@pytest.fixture
def alice_views(admin: Any) -> Iterator[str]:
    """alice bound to tidings-viewer cluster-wide, under a unique name, removed after."""
    rbac = client.RbacAuthorizationV1Api(admin)
    name = f"tidings-viewer-alice-{uuid.uuid4().hex[:8]}"
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "tidings-viewer"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]})
    yield name
    rbac.delete_cluster_role_binding(name)


def test_the_viewer_reads_but_never_writes(api_client: Callable[[str], Any], admin: Any,
                                           install: dict[str, Any], alice_views: str,
                                           namespace: str, tmp_path: Path) -> None:
    crs_admin = client.CustomObjectsApi(admin)
    crs_admin.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback", "metadata": {"name": "v"},
        "spec": {"task": "v"}})
    log = write_cri_log(tmp_path / "v.log", ["epoch 1", "epoch 2"])
    pod = create_kwok_pod(admin, namespace, "v-0", labels={"tidings.dev/task": "v"}, log_file=log)
    client.EventsV1Api(admin).create_namespaced_event(
        namespace, bus_event(namespace, "v", related=pod, instance="v-0"))
    alice = api_client("alice")
    crs, events, core = (client.CustomObjectsApi(alice), client.EventsV1Api(alice),
                         client.CoreV1Api(alice))

    eventually(lambda: crs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
               30, "alice's viewer grant to take effect")
    assert crs.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "v")["spec"] == {
        "task": "v"}
    assert [i["metadata"]["name"] for i in crs.list_cluster_custom_object(
        GROUP, VERSION, PLURAL)["items"] if i["metadata"]["namespace"]
        == namespace] == ["v"]
    assert len(events.list_namespaced_event(namespace,
                                            field_selector=f"reportingController={BUS}").items) == 1
    # (the raw answer: the official client's model refuses a legacy Event with no eventTime,
    # such as the node lifecycle controller records for a node in default)
    assert events.list_event_for_all_namespaces(limit=1, _preload_content=False).status == 200
    assert [p.metadata.name for p in core.list_namespaced_pod(namespace).items] == ["v-0"]
    eventually(lambda: pod_phase(admin, namespace, "v-0") == "Running", 30, "pod Running")
    text = eventually(lambda: core.read_namespaced_pod_log("v-0", namespace, container="main"),
                      30, "pod logs as the viewer")
    assert text.splitlines() == ["epoch 1", "epoch 2"]

    forbidden(lambda: crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback", "metadata": {"name": "x"},
        "spec": {"task": "x"}}))
    forbidden(lambda: crs.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "v", {"spec": {"task": "w"}}))
    forbidden(lambda: crs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "v", {"status": {"phase": "Running"}}))
    forbidden(lambda: crs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "v"))
    forbidden(lambda: events.create_namespaced_event(
        namespace, bus_event(namespace, "v", related=pod, instance="v-0")))
    forbidden(lambda: events.delete_collection_namespaced_event(namespace))
    forbidden(lambda: core.delete_namespaced_pod("v-0", namespace))
    forbidden(lambda: core.list_namespaced_secret(namespace))
    # bob shares alice's group but not her binding.
    forbidden(lambda: client.CustomObjectsApi(api_client("bob")).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL))


def test_the_watcher_can_do_its_job_and_no_more(control_plane: ControlPlane, admin: Any,
                                                install: dict[str, Any],
                                                namespace: str) -> None:
    pod = create_kwok_pod(admin, namespace, "job-0", labels={"tidings.dev/task": "job"})
    client.EventsV1Api(admin).create_namespaced_event(
        namespace, bus_event(namespace, "job", related=pod, instance="job-0"))
    as_watcher = sa_token_client(control_plane, admin, SYSTEM_NS, "tidings-watcher")
    events, core = client.EventsV1Api(as_watcher), client.CoreV1Api(as_watcher)
    crs, leases = client.CustomObjectsApi(as_watcher), client.CoordinationV1Api(as_watcher)

    # What it needs: bus events and pods across namespaces, list + watch.
    selector = f"reportingController={BUS}"
    listed = events.list_event_for_all_namespaces(field_selector=selector)
    assert namespace in {e.metadata.namespace for e in listed.items}
    seen = [item["object"].metadata.name for item in watch.Watch().stream(
        events.list_event_for_all_namespaces, field_selector=selector,
        resource_version=listed.metadata.resource_version, timeout_seconds=1)]
    assert seen == []  # a clean, empty watch window: allowed, and nothing new
    assert core.read_namespaced_pod("job-0", namespace).metadata.uid == pod["uid"]
    assert "job-0" in {p.metadata.name for p in core.list_pod_for_all_namespaces(
        label_selector="tidings.dev/task=job").items}
    list(watch.Watch().stream(core.list_pod_for_all_namespaces, timeout_seconds=1))

    # TaskFeedback: create, patch, update, and the status subresource.
    crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback", "metadata": {"name": "job"},
        "spec": {"task": "job"}})
    crs.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "job",
                                       {"metadata": {"labels": {"tidings.dev/task": "job"}}})
    crs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "job", {
        "status": {"phase": "Running", "progress": {"percent": 25, "message": ""},
                   "lastEventTime": now()}})
    current = crs.get_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "job")
    current["status"]["phase"] = "Succeeded"
    updated = crs.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL,
                                                          "job", current)
    assert updated["status"]["phase"] == "Succeeded"
    assert updated["status"]["progress"] == {"percent": 25, "message": ""}
    assert crs.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]

    # Its leader-election Lease, in tidings-system only.
    lease_name = f"tidings-watcher-test-{uuid.uuid4().hex[:8]}"
    lease = leases.create_namespaced_lease(SYSTEM_NS, {
        "metadata": {"name": lease_name},
        "spec": {"holderIdentity": "watcher-0", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "watcher-1"
    leases.replace_namespaced_lease(lease_name, SYSTEM_NS, lease)
    assert leases.read_namespaced_lease(lease_name, SYSTEM_NS).spec.holder_identity == "watcher-1"

    # Beside it, its record of deleted TaskFeedbacks: that one ConfigMap, nothing else.
    record = {"metadata": {"name": RECORD}, "data": {"deletions.json": "{}"}}
    if not _exists(lambda: client.CoreV1Api(admin).read_namespaced_config_map(RECORD,
                                                                              SYSTEM_NS)):
        core.create_namespaced_config_map(SYSTEM_NS, record)
    held = core.read_namespaced_config_map(RECORD, SYSTEM_NS)
    held.data = {"deletions.json": '{"version":1,"deleted":{}}'}
    core.replace_namespaced_config_map(RECORD, SYSTEM_NS, held)
    forbidden(lambda: core.read_namespaced_config_map("kube-root-ca.crt", SYSTEM_NS))
    forbidden(lambda: core.list_namespaced_config_map(SYSTEM_NS))
    forbidden(lambda: core.delete_namespaced_config_map(RECORD, SYSTEM_NS))
    forbidden(lambda: core.create_namespaced_config_map(namespace, record))

    # Its read API asks the API server who calls and whether they may read the task.
    reviewed = client.AuthenticationV1Api(as_watcher).create_token_review(
        {"spec": {"token": "not-a-token"}})
    assert reviewed.status.authenticated is not True
    access = client.AuthorizationV1Api(as_watcher).create_subject_access_review({"spec": {
        "user": "nobody", "resourceAttributes": {"namespace": namespace, "verb": "get",
                                                 "group": GROUP, "resource": PLURAL}}})
    assert access.status.allowed is False

    # Its announcements: Events of its own on a TaskFeedback (a transition). (Creating Events
    # is no new power over the bus: it writes every TaskFeedback's status already.)
    announced = events.create_namespaced_event(namespace, {
        "metadata": {"name": "job.transition"}, "eventTime": datetime.now(UTC).isoformat(),
        "reportingController": "tidings.dev/watcher", "reportingInstance": "watcher-0",
        "action": "Transition", "reason": "ImagePullBackOff", "type": "Warning",
        "regarding": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
                      "namespace": namespace, "name": "job"}})
    assert announced.reporting_controller == "tidings.dev/watcher"
    # Which nodes are not Ready: list and watch, nothing else of them.
    assert core.list_node().items is not None
    forbidden(lambda: core.patch_node("kwok-node-0", {"metadata": {"labels": {"x": "y"}}}))

    # And no more.
    forbidden(lambda: crs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                          "job"))
    forbidden(lambda: core.list_namespaced_secret(namespace))
    forbidden(lambda: core.read_namespaced_secret("anything", SYSTEM_NS))
    forbidden(lambda: core.delete_namespaced_pod("job-0", namespace))
    forbidden(lambda: core.patch_namespaced_pod("job-0", namespace,
                                                {"metadata": {"labels": {"x": "y"}}}))
    forbidden(lambda: leases.create_namespaced_lease(namespace, {
        "metadata": {"name": "steal"}, "spec": {"holderIdentity": "watcher-0"}}))
    forbidden(lambda: leases.delete_namespaced_lease(lease_name, SYSTEM_NS))
    client.CoordinationV1Api(admin).delete_namespaced_lease(lease_name, SYSTEM_NS)


# ---- lifecycle RBAC: kubectl for viewers, role aggregation, the TTL's opt-in rights -------
def kubectl_as(cp: ControlPlane, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(cp.kubectl), f"--kubeconfig={cp.kubeconfig(user)}", *args],
                          capture_output=True, text=True, timeout=60)


def test_the_viewer_gets_events_and_describes_tasks_with_kubectl(
        control_plane: ControlPlane, admin: Any, install: dict[str, Any], alice_views: str,
        namespace: str) -> None:
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}",
                                            "kind": "TaskFeedback", "metadata": {"name": "d"},
                                            "spec": {"task": "d"}})
    pod = create_kwok_pod(admin, namespace, "d-0", labels={"tidings.dev/task": "d"})
    event = bus_event(namespace, "d", related=pod, instance="d-0")
    event["regarding"]["uid"] = created["metadata"]["uid"]
    client.EventsV1Api(admin).create_namespaced_event(namespace, event)
    core_events = eventually(lambda: kubectl_as(control_plane, "alice", "get", "events", "-n",
                                                namespace).returncode == 0, 30,
                             "alice's viewer grant to take effect")
    assert core_events
    listed = kubectl_as(control_plane, "alice", "get", "events", "-n", namespace)
    assert "LogLink" in listed.stdout, listed.stdout + listed.stderr
    described = kubectl_as(control_plane, "alice", "describe", "taskfeedback", "d", "-n",
                           namespace)
    assert described.returncode == 0 and not described.stderr, described.stderr
    assert "LogLink" in described.stdout.split("\nEvents:", 1)[1]
    assert client.CoreV1Api(api_client_for(control_plane, "alice")).list_namespaced_event(
        namespace).items
    # bob shares alice's group but not her binding.
    assert kubectl_as(control_plane, "bob", "get", "events", "-n", namespace).returncode != 0


def api_client_for(cp: ControlPlane, user: str) -> client.ApiClient:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cp.kubeconfig(user)))


def test_builtin_view_and_edit_aggregate_the_tidings_roles(
        controller_manager: ControlPlane, api_client: Callable[[str], Any], admin: Any,
        install: dict[str, Any], namespace: str) -> None:
    rbac = client.RbacAuthorizationV1Api(admin)

    def grant(role: str) -> None:
        rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": f"bob-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [{"kind": "User", "name": "bob",
                          "apiGroup": "rbac.authorization.k8s.io"}]})

    bob = api_client("bob")
    crs, events = client.CustomObjectsApi(bob), client.EventsV1Api(bob)
    tfb = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
           "metadata": {"name": "agg"}, "spec": {"task": "agg"}}
    grant("view")
    eventually(lambda: crs.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL),
               60, "the built-in view role to aggregate tidings-viewer")
    assert events.list_namespaced_event(namespace) is not None
    forbidden(lambda: crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, tfb))

    grant("edit")
    eventually(lambda: crs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                           tfb), 60,
               "the built-in edit role to aggregate tidings-editor")
    pod = create_kwok_pod(admin, namespace, "agg-0", labels={"tidings.dev/task": "agg"})
    events.create_namespaced_event(namespace, bus_event(namespace, "agg", related=pod,
                                                        instance="agg-0"))  # tidings-workload
    # The status is the watcher's, never an editor's.
    forbidden(lambda: crs.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "agg", {"status": {"summary": {"progress": 1}}}))


def test_the_ttl_rights_are_opt_in_and_only_deletes(control_plane: ControlPlane, admin: Any,
                                                    install: dict[str, Any],
                                                    namespace: str) -> None:
    as_watcher = sa_token_client(control_plane, admin, SYSTEM_NS, "tidings-watcher")
    crs, events = client.CustomObjectsApi(as_watcher), client.EventsV1Api(as_watcher)
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, {"apiVersion": f"{GROUP}/{VERSION}",
                                            "kind": "TaskFeedback", "metadata": {"name": "old"},
                                            "spec": {"task": "old"}})
    selector = f"reportingController={BUS},regarding.name=old"
    forbidden(lambda: crs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                          "old"))
    kubectl(control_plane, "apply", "-f", str(DEPLOY / "ttl-rbac.yaml"))
    try:
        eventually(lambda: crs.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                               "old"), 30,
                   "the TTL grant to take effect")
        events.delete_collection_namespaced_event(namespace, field_selector=selector)
        forbidden(lambda: client.CoreV1Api(as_watcher).delete_collection_namespaced_pod(
            namespace))
    finally:
        kubectl(control_plane, "delete", "-f", str(DEPLOY / "ttl-rbac.yaml"))
