"""deploy/chart with the helm built from its Go module: `helm lint`, `helm template` against
the kustomize base (the same CRD, policy and RBAC rules), and a real `helm install`, upgrade
and uninstall on a control plane of its own (the shared one has the kustomize install)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.cluster.test_controlplane import client_with_token
from tests.support import eventually
from tools.devcluster import REPO_ROOT, ControlPlane, find_bin_dir

pytestmark = pytest.mark.cluster

CHART = REPO_ROOT / "deploy" / "chart"
DEPLOY = REPO_ROOT / "deploy"
NS = "tidings-system"


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("helm")
    return {**os.environ, "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"), "HELM_DATA_HOME": str(home / "data")}


def helm(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(find_bin_dir() / "helm"), *args], capture_output=True,
                            text=True, timeout=180, env=env)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result


def render(env: dict[str, str], *sets: str, crds: bool = False) -> list[dict[str, Any]]:
    args = ["template", "tidings", str(CHART), "-n", NS, *(a for s in sets for a in ("--set", s))]
    out = helm(env, *args, *(["--include-crds"] if crds else [])).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def base_docs() -> list[dict[str, Any]]:
    out = subprocess.run([str(find_bin_dir() / "kubectl"), "kustomize", str(DEPLOY)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_lint_passes_with_defaults_and_every_feature(helm_env: dict[str, str]) -> None:
    helm(helm_env, "lint", "--strict", str(CHART))
    helm(helm_env, "lint", "--strict", str(CHART), "--set",
         "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,"
         "metrics.grafanaDashboard.enabled=true,watcher.ttlAfterFinished=600,replicas=1")


def test_helm_reads_the_chart_without_a_warning(helm_env: dict[str, str]) -> None:
    # The chart once linked four files to deploy/: one "found symbolic link" line each, on
    # every command (8 on lint, 20 on lint --strict).
    for args in (["lint", "--strict"], ["template", "tidings"], ["show", "values"],
                 ["package", "-d", helm_env["HELM_CACHE_HOME"]]):
        result = helm(helm_env, *args, str(CHART))
        assert "symbolic link" not in result.stdout + result.stderr, args
        assert "WARNING" not in result.stderr, (args, result.stderr)


@pytest.mark.parametrize("level", ["debug", "Info", "WARNING", "error"])
def test_the_log_level_is_taken_in_any_case(helm_env: dict[str, str], level: str) -> None:
    (container,) = by_kind(render(helm_env, f"watcher.logLevel={level}"))[
        ("Deployment", "tidings-watcher")]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--log-level") + 1] == level
    # ... and the watcher takes it as written (its --log-level is case-insensitive).
    result = subprocess.run([str(Path(sys.executable).parent / "tidings"), "watcher", "run",
                             "--log-level", level, "--kubeconfig", "/nonexistent.yaml"],
                            capture_output=True, text=True, timeout=60)
    assert "--log-level" not in result.stderr, result.stderr


def test_defaults_render_the_base_with_a_configurable_image(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, crds=True)
    objs = by_kind(docs)
    deployment = objs[("Deployment", "tidings-watcher")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/tidings-dev/tidings-watcher:0.1.0"  # appVersion
    assert "tidings-watcher:dev" not in json.dumps(docs)
    assert deployment["spec"]["replicas"] == 2 and deployment["metadata"]["namespace"] == NS
    assert "--namespace" not in container["command"]  # all namespaces
    assert "--ttl-after-finished" not in container["command"]
    assert ("PodDisruptionBudget", "tidings-watcher") in objs
    assert ("Service", "tidings-watcher-metrics") in objs
    kinds = {k for k, _ in objs}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert ("ClusterRole", "tidings-watcher-ttl") not in objs

    # One source of truth: the CRD and the policy are the base's files; the roles match.
    base = by_kind(base_docs())
    for key in [("CustomResourceDefinition", "taskfeedbacks.tidings.dev"),
                ("ValidatingAdmissionPolicy", "tidings-sender-identity"),
                ("ValidatingAdmissionPolicyBinding", "tidings-sender-identity")]:
        assert objs[key]["spec"] == base[key]["spec"], key
    roles = [k for k in base if k[0] in ("ClusterRole", "Role")]
    assert len(roles) == 5
    for key in roles:
        assert objs[key]["rules"] == base[key]["rules"], key
        aggregation = {k: v for k, v in base[key]["metadata"].get("labels", {}).items()
                       if k.startswith("rbac.authorization.k8s.io/")}
        assert aggregation.items() <= objs[key]["metadata"]["labels"].items(), key
    for key in [k for k in base if k[0] in ("ClusterRoleBinding", "RoleBinding")]:
        assert objs[key]["roleRef"] == base[key]["roleRef"], key
        assert objs[key]["subjects"] == base[key]["subjects"], key  # base is in tidings-system
    # The pod spec is the base's (the image and the command flags aside).
    base_pod = base[("Deployment", "tidings-watcher")]["spec"]["template"]["spec"]
    pod = deployment["spec"]["template"]["spec"]
    for field in ("securityContext", "serviceAccountName", "volumes"):
        assert pod[field] == base_pod[field], field
    (base_container,) = base_pod["containers"]
    for field in ("env", "ports", "livenessProbe", "readinessProbe", "resources",
                  "securityContext"):
        assert container[field] == base_container[field], field


def test_values_set_image_replicas_namespaces_ttl_and_monitoring(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, "image.repository=registry.example/tw", "image.tag=1.2.3",
                  "replicas=1", "watcher.namespaces={ml,batch}", "watcher.ttlAfterFinished=600",
                  "resources.limits.memory=1Gi", "metrics.serviceMonitor.enabled=true",
                  "metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true")
    objs = by_kind(docs)
    deployment = objs[("Deployment", "tidings-watcher")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/tw:1.2.3"
    assert deployment["spec"]["replicas"] == 1
    cmd = container["command"]
    assert cmd[cmd.index("--namespace") + 1] == "ml,batch"
    assert cmd[cmd.index("--ttl-after-finished") + 1] == "600"
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert ("PodDisruptionBudget", "tidings-watcher") not in objs  # one replica: no PDB
    assert objs[("ClusterRoleBinding", "tidings-watcher-ttl")]["subjects"][0]["namespace"] == NS
    monitor = objs[("ServiceMonitor", "tidings-watcher")]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    service = objs[("Service", "tidings-watcher-metrics")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    rule = objs[("PrometheusRule", "tidings-watcher")]
    assert rule["spec"] == yaml.safe_load((DEPLOY / "monitoring" / "alerts.yaml").read_text())
    dashboard = objs[("ConfigMap", "tidings-watcher-dashboard")]
    assert json.loads(dashboard["data"]["tidings-watcher.json"]) == json.loads(
        (DEPLOY / "monitoring" / "dashboard.json").read_text())


def test_task_label_keys_become_the_watcher_flag(helm_env: dict[str, str]) -> None:
    docs = render(helm_env, "watcher.taskLabelKeys={tidings.dev/task,example.com/run}")
    (container,) = by_kind(docs)[("Deployment", "tidings-watcher")]["spec"]["template"][
        "spec"]["containers"]
    cmd = container["command"]
    assert cmd[cmd.index("--task-label-keys") + 1] == "tidings.dev/task,example.com/run"
    (default,) = by_kind(render(helm_env))[("Deployment", "tidings-watcher")]["spec"][
        "template"]["spec"]["containers"]
    assert "--task-label-keys" not in default["command"]  # the watcher's own default list


def test_health_thresholds_become_the_watchers_flags(helm_env: dict[str, str]) -> None:
    """``watcher.health`` names each threshold as its flag in camelCase (the thresholds are
    schemas/status/health.py's registry: none is listed in the chart); the watcher takes each one
    rendered, and refuses a name it does not know with a one-line error."""
    tidings = str(Path(sys.executable).parent / "tidings")
    docs = render(helm_env, "watcher.health.stallFactor=20", "watcher.health.stallMin=90",
                  "watcher.health.straggleMinWorkers=4")
    (container,) = by_kind(docs)[("Deployment", "tidings-watcher")]["spec"]["template"][
        "spec"]["containers"]
    cmd = container["command"]
    flags = {"--stall-factor": "20", "--stall-min": "90", "--straggle-min-workers": "4"}
    for flag, value in flags.items():
        assert cmd[cmd.index(flag) + 1] == value
    taken = subprocess.run([tidings, "watcher", "run", *(x for kv in flags.items() for x in kv),
                            "--kubeconfig", "/nonexistent.yaml"],
                           capture_output=True, text=True, timeout=60)
    assert taken.returncode != 0 and "--st" not in taken.stderr, taken.stderr
    (default,) = by_kind(render(helm_env))[("Deployment", "tidings-watcher")]["spec"][
        "template"]["spec"]["containers"]
    assert not any(a.startswith(("--stall", "--straggle")) for a in default["command"])
    misspelt = subprocess.run([tidings, "watcher", "run", "--stall-facter", "3"],
                              capture_output=True, text=True, timeout=60)
    assert misspelt.returncode == 2 and "--stall-facter" in misspelt.stderr


@pytest.mark.parametrize(("value", "message"), [
    ("replicas=two", "/replicas"),
    ("watcher.namespaces={Bad_NS}", "/watcher/namespaces/0"),
    ("watcher.ttlAfterFinished=-1", "/watcher/ttlAfterFinished"),
    ("image.repository=", "/image/repository"),
    ("watcher.taskLabelKeys={bad key}", "/watcher/taskLabelKeys/0"),
    ("watcher.logLevel=critical", "/watcher/logLevel"),  # not a level the watcher takes
    ("watcher.wrtieInterval=1", "wrtieInterval"),  # a misspelt key is refused, not ignored
    ("replica=3", "replica"),
    ("watcher.health.stallFactor=-1", "/watcher/health/stallFactor"),
    ("watcher.health.stall_factor=2", "stall_factor"),
])
def test_bad_values_are_refused_by_the_schema(helm_env: dict[str, str], value: str,
                                              message: str) -> None:
    result = helm(helm_env, "template", "tidings", str(CHART), "--set", value, check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr
    if "logLevel" in value:  # the levels, readable, not a regular expression
        assert "'INFO'" in result.stderr and "^(" not in result.stderr, result.stderr


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(state_dir=tmp_path_factory.mktemp("chart-control-plane"))
    with cp:
        yield cp


def test_the_chart_installs_upgrades_and_uninstalls(own_cluster: ControlPlane,
                                                    helm_env: dict[str, str],
                                                    tmp_path: Path) -> None:
    cp = own_cluster
    kube = ["--kubeconfig", str(cp.kubeconfig("admin"))]
    values = ["--set", "image.repository=registry.example/tidings-watcher,image.tag=9.9.9"]
    # Every object passes the API server's own validation before anything is installed.
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(helm(helm_env, "template", "tidings", str(CHART), "-n", NS,
                             "--include-crds", *values).stdout)
    cp.kubectl_run("create", "namespace", NS)
    crd = cp.kubectl_run("apply", "--server-side", "--dry-run=server", "-f", str(rendered))
    assert "taskfeedbacks.tidings.dev serverside-applied (server dry run)" in crd

    installed = helm(helm_env, "install", "tidings", str(CHART), "-n", NS, *values, *kube)
    # The namespace was made without a Pod Security label (as --create-namespace makes it):
    # the NOTES give the command that sets it, and say nothing of it once it is set.
    label = f"kubectl label namespace {NS} pod-security.kubernetes.io/enforce=restricted"
    assert label in installed.stdout, installed.stdout
    cp.kubectl_run("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    admin = config.new_client_from_config(config_file=str(cp.kubeconfig("admin")))
    apps = client.AppsV1Api(admin)
    deployment = apps.read_namespaced_deployment("tidings-watcher", NS)
    assert deployment.spec.template.spec.containers[0].image == \
        "registry.example/tidings-watcher:9.9.9"
    assert deployment.metadata.annotations["meta.helm.sh/release-name"] == "tidings"
    cp.wait_established("taskfeedbacks.tidings.dev")
    assert client.AdmissionregistrationV1Api(admin).read_validating_admission_policy(
        "tidings-sender-identity")
    assert client.PolicyV1Api(admin).read_namespaced_pod_disruption_budget(
        "tidings-watcher", NS).spec.min_available == 1
    status = json.loads(helm(helm_env, "status", "tidings", "-n", NS, "-o", "json",
                             *kube).stdout)
    assert status["info"]["status"] == "deployed"

    # The chart's RBAC works for the watcher's ServiceAccount in the release namespace.
    token = client.CoreV1Api(admin).create_namespaced_service_account_token(
        "tidings-watcher", NS, {"spec": {}}).status.token
    as_watcher = client_with_token(cp, token)
    assert client.EventsV1Api(as_watcher).list_event_for_all_namespaces(limit=1) is not None
    assert client.CustomObjectsApi(as_watcher).list_cluster_custom_object(
        "tidings.dev", "v1alpha1", "taskfeedbacks")["items"] == []
    # Its record of deleted TaskFeedbacks, beside its Lease in the release namespace: that
    # one ConfigMap.
    core = client.CoreV1Api(as_watcher)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "tidings-watcher-deletions"},
                                           "data": {"deletions.json": "{}"}})
    record = core.read_namespaced_config_map("tidings-watcher-deletions", NS)
    core.replace_namespaced_config_map("tidings-watcher-deletions", NS, record)
    with pytest.raises(client.ApiException) as denied:
        core.read_namespaced_config_map("kube-root-ca.crt", NS)
    assert denied.value.status == 403

    upgraded = helm(helm_env, "upgrade", "tidings", str(CHART), "-n", NS, *values, "--set",
                    "replicas=3", "--set", "watcher.ttlAfterFinished=60", *kube)
    assert "tidings" in upgraded.stdout and label not in upgraded.stdout, upgraded.stdout
    eventually(lambda: apps.read_namespaced_deployment("tidings-watcher", NS).spec.replicas
               == 3, 30, "the upgrade to scale the watcher")
    assert client.RbacAuthorizationV1Api(admin).read_cluster_role("tidings-watcher-ttl")

    helm(helm_env, "uninstall", "tidings", "-n", NS, *kube)
    names = cp.kubectl_run("get", "deployments,clusterroles", "-A", "-o", "name")
    assert "tidings-watcher" not in names and "tidings-viewer" not in names
    # Helm keeps CRDs from crds/ on uninstall, so the TaskFeedbacks outlive the release.
    assert "taskfeedbacks.tidings.dev" in cp.kubectl_run("get", "crd", "-o", "name")


def test_make_image_builds_pushes_and_the_chart_and_kustomize_take_the_result(
        helm_env: dict[str, str], tmp_path: Path) -> None:
    """No container engine runs here, so `make image` runs with DOCKER=echo: what is checked
    is the one command line it runs (build from deploy/Dockerfile, then push), and that what
    it prints for the chart and for an overlay of the kustomize base renders that image."""
    image = "registry.example:5000/team/tidings-watcher:0.1.0"
    made = subprocess.run(["make", "--no-print-directory", "image", f"IMAGE={image}",
                           "DOCKER=echo docker"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert f"docker build -f deploy/Dockerfile -t {image} ." in lines
    assert f"docker push {image}" in lines
    (chart,) = [x for x in lines if x.startswith("helm:")]
    sets = chart.split("--set ")[1:]
    (container,) = by_kind(render(helm_env, *(s.strip() for s in sets)))[
        ("Deployment", "tidings-watcher")]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(DEPLOY, overlay)],
        "images": [{"name": "tidings-watcher", "newName": image.rsplit(":", 1)[0],
                    "newTag": image.rsplit(":", 1)[1]}]}))
    out = subprocess.run([str(find_bin_dir() / "kubectl"), "kustomize", str(overlay)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    (deployment,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == image
    # Without IMAGE it says what to set, and runs nothing.
    bare = subprocess.run(["make", "--no-print-directory", "image", "DOCKER=echo docker"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert bare.returncode != 0 and "set IMAGE=" in bare.stderr and "docker" not in bare.stdout
