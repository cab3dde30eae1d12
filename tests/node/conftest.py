"""Fixtures of the tests on the real node: the shared control plane with a kubelet and
containerd joined to it (tools/devnode.py), and the watcher installed as users install it (the
Helm chart, or `kubectl apply -k deploy/`), from the image `make images` built.

These tests run last (tests/node comes after tests/cluster): the node's kubelet, containerd,
kube-proxy and scheduler then cost the other tests nothing."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import eventually
from tools.devcluster import REPO_ROOT, ControlPlane
from tools.devnode import RealNode, find_images, find_node_bin_dir
from tools.devprocess import BinariesMissing

NS = "tidings-system"
CHART = REPO_ROOT / "deploy" / "chart"
# What the chart needs on this plane besides its defaults: the image built here.
IMAGE_VALUES = ("image.repository=tidings-watcher", "image.tag=dev")


@pytest.fixture(scope="session")
def real_node(control_plane: ControlPlane) -> RealNode:
    """The real node, joined to the shared plane by the first test that needs it."""
    try:
        find_node_bin_dir()
        find_images()
    except BinariesMissing as err:  # a checkout without `make node images`
        pytest.skip(f"no real node: {err}")
    return control_plane.add_real_node()


class WatcherInstall:
    """The watcher installed on the real node one way at a time: `helm install` of the chart
    with only the image values, or `kubectl apply -k deploy/`. Switching takes the other away
    (both make the same objects)."""

    def __init__(self, plane: ControlPlane, helm_home: Path) -> None:
        self.plane = plane
        self.current = ""
        self.env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig("admin")),
                    "HELM_CACHE_HOME": str(helm_home / "cache"),
                    "HELM_CONFIG_HOME": str(helm_home / "config"),
                    "HELM_DATA_HOME": str(helm_home / "data")}

    def run(self, *argv: str, check: bool = True,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                                env=self.env, input=input_text)
        if check:
            assert result.returncode == 0, f"{' '.join(argv)}: {result.stdout}{result.stderr}"
        return result

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.plane.kubectl), *args, check=check)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.plane.bin_dir / "helm"), *args, check=check)

    def _namespace(self) -> None:
        # The Pod Security level the README tells users to give tidings-system.
        self.kubectl("create", "namespace", NS, check=False)
        self.kubectl("label", "--overwrite", "namespace", NS,
                     "pod-security.kubernetes.io/enforce=restricted")

    def with_chart(self) -> None:
        if self.current == "chart":
            return
        self.remove()
        self._namespace()
        self.helm("install", "tidings", str(CHART), "-n", NS, "--wait", "--timeout", "240s",
                  *(a for v in IMAGE_VALUES for a in ("--set", v)))
        self.current = "chart"
        self.wait_ready()

    def with_kustomize(self) -> None:
        if self.current == "kustomize":
            return
        self.remove()
        self.kubectl("apply", "-f", str(REPO_ROOT / "deploy" / "crd.yaml"))
        self.plane.wait_established("taskfeedbacks.tidings.dev")
        self.kubectl("apply", "-k", str(REPO_ROOT / "deploy"))
        self.current = "kustomize"
        self.wait_ready()

    def wait_ready(self) -> None:
        self.kubectl("-n", NS, "rollout", "status", "deployment/tidings-watcher",
                     "--timeout=240s")

    def remove(self) -> None:
        if self.current == "chart":
            self.helm("uninstall", "tidings", "-n", NS, "--wait", "--timeout", "120s")
        else:  # the base's objects, whoever applied them (a bench, a test, apply -k)
            # All but the namespace: no namespace controller runs here to finalise its
            # deletion, and the chart installs into it again.
            base = self.kubectl("kustomize", str(REPO_ROOT / "deploy")).stdout
            kept = [d for d in yaml.safe_load_all(base) if d and d["kind"] != "Namespace"]
            self.run(str(self.plane.kubectl), "delete", "--ignore-not-found", "-f", "-",
                     input_text=yaml.safe_dump_all(kept))
        eventually(lambda: not self.pods(), 120, "the watcher's pods gone")
        self.current = ""

    def pods(self) -> list[dict[str, Any]]:
        from kubernetes import client

        core = client.CoreV1Api(self.plane_admin)
        return [p.to_dict() for p in core.list_namespaced_pod(
            NS, label_selector="app.kubernetes.io/name=tidings-watcher").items]

    @property
    def plane_admin(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.plane.kubeconfig("admin")))


@pytest.fixture(scope="session")
def watcher_install(real_node: RealNode, control_plane: ControlPlane,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatcherInstall]:
    install = WatcherInstall(control_plane, tmp_path_factory.mktemp("helm"))
    yield install
    install.remove()


@pytest.fixture
def chart_watcher(watcher_install: WatcherInstall) -> WatcherInstall:
    """The watcher as `helm install` of deploy/chart made it, Ready on the real node."""
    watcher_install.with_chart()
    return watcher_install


@pytest.fixture
def namespace(control_plane: ControlPlane, admin: Any) -> Iterator[str]:
    """The suite's fresh namespace, whose pods are deleted at the end: no namespace controller
    runs to do it, and a real node's containers would otherwise go on running."""
    from kubernetes import client

    from tests.conftest import new_namespace

    name = new_namespace(admin)
    yield name
    client.CoreV1Api(admin).delete_collection_namespaced_pod(name, grace_period_seconds=0)
    client.CoreV1Api(admin).delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def node_diagnostics(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[None]:
    """What a failed test leaves to read: every pod and where it runs, the watcher's and the
    node's logs (the kubelet's word on what it did)."""
    yield
    report = getattr(request.node, "report_call", None)
    if report is None or not report.failed:
        return
    run = control_plane.kubectl_run
    sections = {
        "pods": run("get", "pods", "-A", "-o", "wide", check=False),
        "events": run("get", "events", "-A", "--sort-by=.lastTimestamp", check=False)[-4000:],
        "watcher": run("logs", "-n", NS, "-l", "app.kubernetes.io/name=tidings-watcher",
                       "--tail=40", "--prefix", check=False),
    }
    for name in ("kubelet", "containerd", "kube-proxy"):
        log = control_plane.state_dir / "logs" / f"{name}.log"
        if log.is_file():
            sections[name] = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    for title, text in sections.items():
        report.sections.append((f"real node: {title}", text))
