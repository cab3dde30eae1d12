"""Trust and exactness against the real control plane:
real pods, their real pod-bound tokens, the installed admission policy, `tidings watcher run`
and `tidings` as processes. Each test is the attack (or the loss) the issue reports, and the
good events that must still get through."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import TIDINGS, WatcherProc, task_status
from tests.cluster.test_controlplane import bound_token, client_with_token
from tests.cluster.test_deploy import DENIAL
from tests.support import create_kwok_pod, eventually, write_cri_log
from tidings.schemas import (
    ObjectRef,
    PodRef,
    PodSpawned,
    TaskRef,
    TaskState,
    build_event,
)
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.wire.payloads import DeckReady, LogLink, Progress, SpanSummary
from tools.devcluster import REPO_ROOT, ControlPlane

pytestmark = pytest.mark.cluster

TASK_LABEL = "tidings.dev/task"
POLICY = "tidings-sender-identity"
PROOF = "tidings.dev/sender-uid"

# The watcher fixtures of test_watcher.py (a watcher process per test, killed at the end).
crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher
metric = tw.metric


@pytest.fixture(scope="module")
def policy(control_plane: ControlPlane, admin: Any) -> Iterator[None]:
    """deploy/admission-policy.yaml installed for the module (removed after if we made it),
    and the tidings-workload ClusterRole that workloads are bound to."""
    admission = client.AdmissionregistrationV1Api(admin)
    try:
        admission.read_validating_admission_policy(POLICY)
        existed = True
    except ApiException as err:
        assert err.status == 404
        existed = False
    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy/workload-role.yaml"))
    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy/admission-policy.yaml"))
    yield
    if not existed:
        admission.delete_validating_admission_policy_binding(POLICY)
        admission.delete_validating_admission_policy(POLICY)


# --- helpers -------------------------------------------------------------------------------


def workload(cp: ControlPlane, admin: Any, namespace: str, name: str, labels: dict[str, str],
             *, sa: str = "worker", rights_in: str | None = None,
             log_file: Path | None = None) -> tuple[dict[str, str], client.ApiClient, str]:
    """A pod under its own SA bound to tidings-workload (in `rights_in`, default its own
    namespace), and its real pod-bound token as a client and as a token string."""
    core = client.CoreV1Api(admin)
    try:
        core.read_namespaced_service_account(sa, namespace)
    except ApiException:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
        target = rights_in or namespace
        client.RbacAuthorizationV1Api(admin).create_namespaced_role_binding(target, {
            "metadata": {"name": f"{namespace}-{sa}-tidings-workload"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "tidings-workload"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})
    pod = create_kwok_pod(admin, namespace, name, labels=labels, service_account=sa,
                          log_file=log_file)
    token = bound_token(admin, namespace, sa, pod)
    return pod, client_with_token(cp, token), token


def token_kubeconfig(cp: ControlPlane, token: str, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates with a pod's bound token (for `tidings emit`)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "c", "cluster": {"server": cp.server,
                                                "certificate-authority": str(cp.ca_file)}}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "pod",
                                                  "namespace": namespace}}]}))
    return path


def tidings_emit(cfg: Path, pod: dict[str, str], task: str, *args: str,
                 proof: bool = True) -> subprocess.CompletedProcess[str]:
    """`tidings emit ...` as the pod would run it (the pod's token, its downward-API env)."""
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod["name"], "POD_UID": pod["uid"],
           "TIDINGS_TASK": task, "TIDINGS_SENDER_PROOF": "1" if proof else "0"}
    return subprocess.run([TIDINGS, "emit", *args, "--kubeconfig", str(cfg)], env=env,
                          capture_output=True, text=True, timeout=60)


def event(namespace: str, task: str, payload: Any, seq: int, *, pod: dict[str, str],
          pod_namespace: str = "", instance: str = "i-1", proof: bool = False,
          note: dict[str, Any] | None = None, regarding: ObjectRef | None = None,
          when: datetime | None = None) -> dict[str, Any]:
    body = build_event(task=TaskRef(namespace, task),
                       pod=PodRef(pod["name"], pod["uid"], pod_namespace or namespace),
                       payload=payload, instance=instance, seq=seq,
                       time=when or datetime.now(UTC),
                       regarding=regarding, sender_proof=proof)
    if note is not None:  # a hand-made note; the reason follows it, so only the note is bad
        body["note"], body["reason"] = json.dumps(note), note["t"]
    return body


def create(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    client.EventsV1Api(api).create_namespaced_event(namespace, body)


def denied(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> str:
    """The policy's 403 body for this create. The policy compiles asynchronously, so it is
    retried, each time under a fresh name: one admitted before the policy is enforced is a
    name the watcher refuses (bad_name), never a fact."""
    def attempt() -> str | None:
        b = copy.deepcopy(body)
        b["metadata"]["name"] = f"denied.{uuid.uuid4().hex}"
        try:
            create(api, namespace, b)
        except ApiException as err:
            if err.status == 403 and "tidings:" in (err.body or ""):
                return str(err.body)
            raise
        return None

    return eventually(attempt, 60, "the admission policy to deny the event")


def state_of(admin: Any, namespace: str, task: str) -> TaskState | None:
    status = task_status(admin, namespace, task)
    return decode_status(TaskRef(namespace, task), status) if status else None


def finished(state: TaskState | None) -> bool:
    return bool(state is not None and state.finished)


def idle(w: WatcherProc) -> bool:
    return metric(w, "tidings_watcher_queue_depth") == 0 \
        and metric(w, "tidings_watcher_write_queue_depth") == 0 \
        and metric(w, "tidings_watcher_status_writes_in_flight") == 0


@pytest.fixture
def other_namespace(admin: Any) -> Iterator[str]:
    core = client.CoreV1Api(admin)
    name = f"ctrl-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def rejected(w: WatcherProc, reason: str) -> float:
    return metric(w, f'tidings_watcher_events_rejected_total{{reason="{reason}"}}')


# --- trust is keyed by namespace, name and uid -----------------------------------


def test_a_controller_cannot_launder_trust_across_namespaces(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str,
        other_namespace: str, start_watcher: Callable[..., WatcherProc]) -> None:
    """The issue's attack: a controller pod in `ctrl` (tidings-workload bound in `rt`, as
    deploy/README.md tells controllers to do) labels its own pod for task-x, sends a
    PodSpawned about rt/task-x (related ctrl/<pod>), then facts claiming rt/<pod> with its
    own name and uid. None of those facts may reach the task."""
    rt, ctrl = namespace, other_namespace
    w = start_watcher()
    worker, as_worker, _ = workload(control_plane, admin, rt, "task-x-0", {TASK_LABEL: "task-x"})
    ctl, as_ctl, _ = workload(control_plane, admin, ctrl, "ctl-0", {TASK_LABEL: "task-x"},
                              sa="controller", rights_in=rt)
    eventually(lambda: create(as_worker, rt, event(
        rt, "task-x", Progress(fraction=0.5, message="honest"), 1, pod=worker,
        instance="w", proof=True)) is None, 30, "the worker's grant to apply")

    # The lineage record itself is legitimate (it names the real worker pod).
    spawned = event(rt, "task-x", PodSpawned(pod_name=worker["name"], pod_uid=worker["uid"],
                                             app="task-x"), 1, pod=ctl, pod_namespace=ctrl,
                    instance="c", proof=True)
    eventually(lambda: create(as_ctl, rt, spawned) is None, 30, "the controller's grant")
    eventually(lambda: metric(w, "tidings_watcher_events_applied_total") == 2, 30,
               f"the honest progress and the lineage record applied\n{w.tail()}")

    # The laundering events: same name and uid, claimed in the task's namespace.
    forged = [event(rt, "task-x", LogLink(name="wandb", url="https://evil.example/x"), 2,
                    pod=ctl, instance="c", proof=True),
              event(rt, "task-x", Progress(fraction=1.0, message="done", final=True), 3,
                    pod=ctl, instance="c", proof=True)]
    # With its own token the API server refuses them: namespace is part of the identity.
    body = denied(as_ctl, rt, forged[0])
    assert f"tidings: sender pod ctl-0 {DENIAL}" in body and f"caller is {ctrl}/ctl-0" in body
    # Sent with credentials the policy does not cover (no pod-bound token, no proof), the
    # watcher refuses them: rt/ctl-0 is no pod, whatever it saw from ctrl/ctl-0.
    for b in forged:
        b["metadata"]["annotations"].pop(PROOF)
        create(admin, rt, b)
    eventually(lambda: rejected(w, "spoofed_sender") == 2, 30, "both forged events rejected")
    eventually(lambda: idle(w), 10, "the watcher to be idle")
    state = state_of(admin, rt, "task-x")
    assert state is not None and state.links == {} and not finished(state)
    assert state.progress is not None and state.progress.message == "honest"
    assert metric(w, "tidings_watcher_events_applied_total") == 2


# --- a deleted pod's authenticated events are not lost -------------------------


def test_events_of_a_pod_deleted_while_no_watcher_ran_are_applied(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    pod, as_pod, token = workload(control_plane, admin, namespace, "job-0",
                                  {TASK_LABEL: "gone"})
    other, as_other, _ = workload(control_plane, admin, namespace, "job-1",
                                  {TASK_LABEL: "gone"})
    del as_pod  # the pod speaks through `tidings emit` below
    cfg = token_kubeconfig(control_plane, token, namespace, tmp_path / "pod.yaml")
    # The proof is admitted only from the pod it names: not from admin, not from another pod.
    forged = event(namespace, "gone", LogLink(name="x", url="https://evil.example/"), 9,
                   pod=pod, instance="forger", proof=True)
    assert "sender-uid annotation is admitted only from the pod it names" in denied(
        admin, namespace, forged)
    stolen = event(namespace, "gone", LogLink(name="x", url="https://evil.example/"), 9,
                   pod=other, instance="forger", proof=True)
    stolen["metadata"]["annotations"][PROOF] = pod["uid"]  # the other pod's own related
    assert f"(caller is pod {other['uid']})" in denied(as_other, namespace, stolen)

    # No watcher runs: the pod reports through `tidings emit` with its own bound token.
    for args in (["log-link", "--name", "wandb", "--url", "https://wandb.ai/r/1"],
                 ["progress", "1.0", "--final", "-m", "done"]):
        res = eventually(lambda a=args: (r := tidings_emit(cfg, pod, "gone", *a)).returncode
                         == 0 and r, 30, "the pod's grant to apply")
        assert res.stderr == ""
    # An event naming the pod without the proof (admin's credentials) must not ride along.
    create(admin, namespace, event(namespace, "gone", LogLink(name="evil", url="https://e.x/"),
                                   1, pod=pod, instance="admin"))
    stored = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector="reportingController=tidings.dev/bus").items
    assert sorted((e.metadata.annotations or {}).get(PROOF, "") for e in stored) == [
        "", pod["uid"], pod["uid"]]
    client.CoreV1Api(admin).delete_namespaced_pod("job-0", namespace, grace_period_seconds=0)
    eventually(lambda: "job-0" not in {p.metadata.name for p in client.CoreV1Api(
        admin).list_namespaced_pod(namespace).items}, 30, "the pod to be gone")

    w = start_watcher()
    eventually(lambda: finished(state_of(admin, namespace, "gone")), 30,
               f"the deleted pod's events applied\n{w.tail()}")
    state = state_of(admin, namespace, "gone")
    assert state is not None and state.links == {"wandb": "https://wandb.ai/r/1"}
    assert metric(w, 'tidings_watcher_sender_lookups_total{source="proof"}') == 2
    eventually(lambda: rejected(w, "spoofed_sender") == 1, 10, "the proofless event rejected")


# --- pod names longer than reportingInstance's 128 characters --------------------


def test_a_pod_with_a_253_character_name_can_emit(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    name = "long-" + "x" * 242 + "-pod-0"
    assert len(name) == 253
    w = start_watcher()
    pod, as_pod, token = workload(control_plane, admin, namespace, name, {TASK_LABEL: "long"})
    cfg = token_kubeconfig(control_plane, token, namespace, tmp_path / "pod.yaml")
    res = eventually(lambda: (r := tidings_emit(cfg, pod, "long", "progress", "1.0", "--final",
                                                "-m", "long names work")).returncode == 0 and r,
                     30, "the long-named pod to emit")
    assert res.stderr == ""
    eventually(lambda: finished(state_of(admin, namespace, "long")), 30,
               f"the long-named pod's event applied\n{w.tail()}")
    stored = client.EventsV1Api(admin).list_namespaced_event(namespace).items
    assert [(e.related.name, e.reporting_instance) for e in stored] == [(name, name[:128])]
    # The cut is the pod's own name cut, nothing else.
    spoof = event(namespace, "long", Progress(fraction=0.1), 5, pod=pod, instance="x",
                  proof=True)
    spoof["reportingInstance"] = name[:127] + "y"
    assert f"reportingInstance must be {name[:128]}" in denied(as_pod, namespace, spoof)


# --- one task-id rule everywhere --------------------------------------------------


def test_task_ids_that_cannot_be_object_names_are_refused_at_the_first_emit(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    from tidings.emitter import Emitter, EmitterConfig, Identity
    from tidings.emitter.transport import KubeTransport
    from tidings.kube import connect

    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "p-0", labels={TASK_LABEL: "Train_42"})
    cfg = Path(control_plane.kubeconfig("admin"))
    for task in ("Train_42", "train_42", "UPPER", "a" * 64, "-x"):
        res = tidings_emit(cfg, pod, task, "log-link", "--name", "w", "--url", "https://w.ai/",
                           proof=False)
        assert res.returncode == 2, (task, res.stderr)
        assert res.stderr.startswith("error: invalid input: task id ") and \
            res.stderr.count("\n") == 1, res.stderr
    assert client.EventsV1Api(admin).list_namespaced_event(namespace).items == []

    # The library: counted and logged once at the first emit, never raised, nothing sent.
    em = Emitter(EmitterConfig(), identity=Identity(namespace, pod["name"], pod["uid"],
                                                     "Train_42"),
                 transport=KubeTransport(connect(str(cfg))))
    em.log_link("w", "https://w.ai/")
    em.progress(1.0, final=True)
    assert not em.flush(10)  # both dropped: no success reported
    stats = em.stats()
    assert (stats["unaddressable"], stats["delivered"], stats["api_calls"]) == (2, 0, 0)
    em.close(1)

    # The watcher: an event regarding such a name (made by hand) is a counted rejection.
    body = event(namespace, "train-42", LogLink(name="w", url="https://w.ai/"), 1, pod=pod)
    body["regarding"]["name"] = "Train_42"  # the event's own name stays a valid one
    create(admin, namespace, body)
    eventually(lambda: rejected(w, "bad_task_id") == 1, 30, "the bad task id counted")
    # The CLI refuses it with the same rule.
    res = subprocess.run([TIDINGS, "state", "Train_42", "-n", namespace, "--kubeconfig",
                          str(cfg)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "is not a valid task id" in res.stderr
    assert "'_'" not in res.stderr


# --- the CLI's local fold applies the watcher's sender check -------------------


def test_state_from_events_agrees_with_the_watcher_on_a_forged_sender(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "agree-0", labels={TASK_LABEL: "agree"})
    create(admin, namespace, event(namespace, "agree", Progress(fraction=0.9, message="real"),
                                   1, pod=pod))
    # Admin credentials, a pod that does not exist: the API server lets it through.
    ghost = {"name": "agree-ghost", "uid": str(uuid.uuid4())}
    create(admin, namespace, event(namespace, "agree", Progress(fraction=0.95, message="fake"),
                                   2, pod=ghost, instance="ghost"))
    eventually(lambda: rejected(w, "spoofed_sender") == 1, 30, "the watcher's rejection")
    eventually(lambda: idle(w) and state_of(admin, namespace, "agree") is not None, 10, "idle")
    from_watcher = state_of(admin, namespace, "agree")
    assert from_watcher is not None and from_watcher.progress is not None
    assert from_watcher.progress.fraction == 0.9

    res = subprocess.run([TIDINGS, "state", "agree", "--from-events", "-n", namespace, "-o",
                          "json", "--kubeconfig", control_plane.kubeconfig("admin")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["source"] == "events" and data["rejected_events"] == 1
    local = decode_status(TaskRef(namespace, "agree"), data["status"])
    assert local.progress is not None and local.progress.fraction == 0.9
    assert local == from_watcher


# --- lineage authorisation ------------------------------------------------------


def test_lineage_is_taken_only_from_pods_that_confirm_it(
        control_plane: ControlPlane, admin: Any, policy: None, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    """pod_spawned() with its defaults, from a controller pod, is applied (not spoofed_sender);
    a workload that records another pod (backdated) for the app gets neither the watcher nor
    `tidings lineage`/`logs` to take it."""
    from tidings.emitter import Emitter, EmitterConfig, Identity
    from tidings.emitter.transport import KubeTransport
    from tidings.kube import connect

    w = start_watcher()
    ctl, as_ctl, ctl_token = workload(control_plane, admin, namespace, "ctl-0", {},
                                      sa="controller")
    ctl_client = connect(str(token_kubeconfig(control_plane, ctl_token, namespace,
                                              tmp_path / "ctl.yaml")))
    spawned = create_kwok_pod(admin, namespace, "app-x-worker-0", labels={TASK_LABEL: "app-x"},
                              log_file=write_cri_log(tmp_path / "w.log", ["worker line"]))
    em = Emitter(EmitterConfig(), identity=Identity(namespace, ctl["name"], ctl["uid"], ""),
                 transport=KubeTransport(ctl_client, pod_bound=True))
    eventually(lambda: (em.pod_spawned(spawned["name"], spawned["uid"], app="app-x"),
                        em.flush(10), em.stats()["delivered"] >= 1)[-1], 30,
               f"the controller's record delivered: {em.stats()}")
    em.close(1)
    eventually(lambda: metric(w, "tidings_watcher_events_applied_total") == 1, 30,
               f"the default pod_spawned() applied\n{w.tail()}")
    assert rejected(w, "spoofed_sender") == 0

    # An attacker pod with the same rights records a foreign pod (with secrets in its logs).
    intruder, as_intruder, _ = workload(control_plane, admin, namespace, "intruder-0",
                                        {TASK_LABEL: "other"}, sa="intruder")
    secret = create_kwok_pod(admin, namespace, "db-0", labels={TASK_LABEL: "db"},
                             log_file=write_cri_log(tmp_path / "db.log", ["SECRET"]))
    claim = event(namespace, "app-x", PodSpawned(pod_name=secret["name"],
                                                 pod_uid=secret["uid"], app="app-x"),
                  1, pod=intruder, instance="intruder", proof=True,
                  when=datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC))  # backdated
    eventually(lambda: create(as_intruder, namespace, claim) is None, 30, "intruder's grant")
    eventually(lambda: rejected(w, "unverified_lineage") == 1, 30, "the claim rejected")
    assert metric(w, "tidings_watcher_events_applied_total") == 1

    # The same claim about an App (not a TaskFeedback): the CLI reads lineage itself.
    app = ObjectRef("apps.example.dev/v1", "App", "app-x", namespace)
    create(as_ctl, namespace, event(namespace, "app-x", PodSpawned(
        pod_name=spawned["name"], pod_uid=spawned["uid"], app="app-x"), 1, pod=ctl,
        instance="ctl-app", proof=True, regarding=app))
    create(as_intruder, namespace, event(namespace, "app-x", PodSpawned(
        pod_name=secret["name"], pod_uid=secret["uid"], app="app-x"), 2, pod=intruder,
        instance="intruder", proof=True, regarding=app))
    kcfg = control_plane.kubeconfig("admin")
    res = subprocess.run([TIDINGS, "lineage", "app-x", "-n", namespace, "-o", "json",
                          "--kubeconfig", kcfg], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    pods = {p["pod"] for p in json.loads(res.stdout)["pods"]}
    assert pods == {"app-x-worker-0"}
    assert "ignored 1 lineage record(s) naming pods not labelled tidings.dev/task=app-x: db-0" \
        in res.stderr
    from tests.support import pod_phase

    eventually(lambda: pod_phase(admin, namespace, "db-0") == "Running"
               and pod_phase(admin, namespace, "app-x-worker-0") == "Running", 30, "Running")
    res = subprocess.run([TIDINGS, "logs", "app-x", "-n", namespace, "--kubeconfig", kcfg],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["[app-x-worker-0/main] worker line"]
    assert "SECRET" not in res.stdout and "db-0: not labelled" in res.stderr


# --- lookalike names, hostile URIs, impossible spans -----------------------------


def test_hostile_text_uris_and_spans_are_rejected_and_counted_while_good_events_apply(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "text-0", labels={TASK_LABEL: "text"})
    good = [LogLink(name="wandb", url="https://wandb.ai/r/1"),
            DeckReady(name="report", uri="s3://bucket/deck.html"),
            SpanSummary(name="epoch", count=2, total_s=3.0, min_s=1.0, max_s=2.0,
                        first_start=1.7e9, last_end=1.7e9 + 4, errors=1)]
    span = {"v": 1, "t": "SpanSummary", "name": "epoch", "count": 2, "total_s": 3.0,
            "min_s": 1.0, "max_s": 2.0, "first_start": 1.7e9, "last_end": 1.7e9 + 4,
            "errors": 0}
    bad: list[tuple[str, dict[str, Any]]] = [
        ("invisible_text", {"v": 1, "t": "LogLink", "name": "wandb\u200b",
                            "url": "https://evil.example/"}),
        ("invisible_text", {"v": 1, "t": "DeckReady", "name": "report\U000e0041",
                            "uri": "s3://evil/deck.html"}),
        ("invalid_payload", {"v": 1, "t": "DeckReady", "name": "d1", "uri": "file:///etc/passwd"}),
        ("invalid_payload", {"v": 1, "t": "DeckReady", "name": "d2",
                             "uri": "ms-msdt:/id%20PCWDiagnostic"}),
        ("invalid_payload", {"v": 1, "t": "DeckReady", "name": "d3",
                             "uri": "blob:https://evil.example/uuid"}),
        ("inconsistent_span", {**span, "errors": 3}),
        ("inconsistent_span", {**span, "total_s": 1.5}),
        ("inconsistent_span", {**span, "min_s": 2.5, "max_s": 2.0}),
    ]
    for seq, payload in enumerate(good, 1):
        create(admin, namespace, event(namespace, "text", payload, seq, pod=pod))
    for seq, (_, note) in enumerate(bad, 10):
        create(admin, namespace, event(namespace, "text", Progress(fraction=0.0), seq, pod=pod,
                                       note=note))
    want = {r: sum(1 for x, _ in bad if x == r) for r, _ in bad}
    eventually(lambda: all(rejected(w, r) == n for r, n in want.items()), 30,
               f"every bad event rejected under its reason: {want}")
    eventually(lambda: metric(w, "tidings_watcher_events_applied_total") == 3, 10,
               "the good events applied")
    state = eventually(lambda: (s := state_of(admin, namespace, "text")) and s.spans and s,
                       10, "the good events written")
    assert state.links == {"wandb": "https://wandb.ai/r/1"}
    assert state.decks == {"report": "s3://bucket/deck.html"}
    assert list(state.spans) == ["epoch"] and state.spans["epoch"].count == 2
