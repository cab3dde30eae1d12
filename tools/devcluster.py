"""The local control plane: etcd, kube-apiserver and kwok on 127.0.0.1, for tests, the demo and
hacking. A checkout-only tool (never in the wheel): `tidings dev up` loads it from the checkout.

Real components built from their Go modules (tools/controlplane/build.sh), RBAC on,
service-account tokens issuable, a fake kwok node that runs pods and serves their logs, and
kube-controller-manager with the Job controller, the garbage collector and ClusterRole
aggregation (`tidings dev up` runs it unless told not to; tests start it on demand, by the
tests that need it: it costs CPU the other tests should not pay).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.devnode import NODE_CONTROLLERS, RealNode, unmount_under
from tools.devnode import preflight as node_preflight
from tools.devpki import make_pki, write_kubeconfig
from tools.devprocess import BinariesMissing, ControlPlaneError, Process, wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]
BINARIES = ("etcd", "kube-apiserver", "kwok", "kubectl")
# Built beside them; kube-controller-manager runs in `tidings dev up` and in the tests that need
# Jobs or garbage collection, helm in the Helm chart tests.
EXTRA_BINARIES = ("kube-controller-manager", "helm")
NODE_NAME = "kwok-node-0"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Identities with their own kubeconfig: the admin, and two ordinary users for RBAC tests.
USERS = {"admin": ["system:masters"], "alice": ["tidings:devs"], "bob": ["tidings:devs"]}
# kube-controller-manager signs in as the user the bootstrap RBAC policy already binds.
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# The controllers the local plane can run, and the bootstrap ClusterRole (system:controller:<role>)
# that holds each one's rights. It runs DEFAULT_CONTROLLERS, and a real node adds the rest (its
# pods need a namespace's `default` ServiceAccount and `kube-root-ca.crt`, Deployments make
# pods). The node lifecycle and taint eviction controllers run as in any cluster: a node that
# goes NotReady or silent is tainted NoExecute and its pods are evicted once their toleration
# ends (without them a lost node's pods read Running for ever); the kwok node heartbeats, and a
# kubelet's node is tainted not-ready until the lifecycle controller sees it Ready. The taint
# eviction controller acts with the node controller's role, as kube-controller-manager's own
# code has it. No scheduler runs without a real node: a pod template sets
# `nodeName: kwok-node-0` (NODE_NAME) for its pods to run.
CONTROLLER_ROLES = {"job-controller": "job-controller",
                    "garbage-collector-controller": "generic-garbage-collector",
                    "clusterrole-aggregation-controller": "clusterrole-aggregation-controller",
                    "serviceaccount-controller": "service-account-controller",
                    "root-ca-certificate-publisher-controller": "root-ca-cert-publisher",
                    "deployment-controller": "deployment-controller",
                    "replicaset-controller": "replicaset-controller",
                    "node-lifecycle-controller": "node-controller",
                    "taint-eviction-controller": "node-controller"}
DEFAULT_CONTROLLERS = ("job-controller", "garbage-collector-controller",
                       "clusterrole-aggregation-controller", "node-lifecycle-controller",
                       "taint-eviction-controller")
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
STATE_FILE = "cluster.json"
# Written into every state dir this launcher creates: only such a dir is ever wiped.
OWNER_MARKER = ".tidings-dev-state"
BUILD_HINT = ("build them with tools/controlplane/build.sh from a tidings checkout "
              "(`make binaries`) and set TIDINGS_BIN_DIR to the folder it prints")


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(os.environ.get("TIDINGS_DEV_DIR", str(Path(base) / "tidings" / "dev")))


def find_bin_dir() -> Path:
    """The folder with the built binaries: $TIDINGS_BIN_DIR, else the repo cache (a folder
    with every binary first, then the newest)."""
    explicit = os.environ.get("TIDINGS_BIN_DIR")
    candidates = [Path(explicit)] if explicit else sorted(
        (p.parent for p in (REPO_ROOT / ".cache" / "controlplane").glob("*/.complete")),
        key=lambda d: (all((d / b).is_file() for b in EXTRA_BINARIES),
                       (d / ".complete").stat().st_mtime),
        reverse=True,
    )
    for folder in candidates:
        if all((folder / b).is_file() for b in BINARIES):
            return folder
    raise BinariesMissing(
        f"control-plane binaries not found in {explicit or REPO_ROOT / '.cache/controlplane'}; "
        + BUILD_HINT)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_port_free(port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise ControlPlaneError(
                f"port {port} on 127.0.0.1 is taken (wanted for {what})") from None


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kwok (+ kube-controller-manager running ``controllers``, when
    any, + a real node when ``real_node``), started and stopped as one; usable as a context
    manager."""

    state_dir: Path
    bin_dir: Path = field(default_factory=find_bin_dir)
    apiserver_port: int = 0
    processes: dict[str, Process] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    controllers: tuple[str, ...] = ()
    real_node: bool = False
    node: RealNode | None = None
    # Progress of the long steps (a real node's), one line each: `tidings dev up` prints them.
    say: Callable[[str], None] = field(default=lambda line: None, repr=False)

    # ---- paths and URLs -------------------------------------------------------------
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['etcd']}"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    def kubeconfig(self, user: str = "admin") -> Path:
        return self.state_dir / f"kubeconfig-{user.replace(':', '-')}.yaml"

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    # ---- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> ControlPlane:
        for name in BINARIES:
            self._need_binary(name)
        if self.real_node:
            node_preflight()  # nothing starts on a host that cannot run the node
        if self.apiserver_port:
            ensure_port_free(self.apiserver_port, "kube-apiserver")
        self._claim_state_dir()
        (self.state_dir / "logs").mkdir(parents=True)
        self.ports = {
            "apiserver": self.apiserver_port or free_port(),
            "etcd": free_port(),
            "etcd-peer": free_port(),
            "kwok": free_port(),
        }
        make_pki(self.state_dir / "pki")
        self._write_identities()
        try:
            self._start_etcd(timeout)
            self.start_apiserver(timeout)
            self._start_kwok(timeout)
            if self.controllers:
                self.start_controller_manager(timeout, self.controllers)
            if self.real_node:
                self.add_real_node()
        except BaseException:
            self.stop()
            raise
        self.save()
        return self

    def _need_binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not path.is_file():
            raise BinariesMissing(f"{name} binary missing in {self.bin_dir}; {BUILD_HINT}")
        return path

    def _claim_state_dir(self) -> None:
        """Start from an empty state dir. Only a dir this launcher created (it carries the
        marker) is wiped; anything else must be new or empty, so no user data is lost."""
        folder = self.state_dir
        if folder.exists() and not folder.is_dir():
            raise ControlPlaneError(f"state dir {folder} is not a directory")
        if folder.is_dir() and any(folder.iterdir()):
            if not (folder / OWNER_MARKER).is_file():
                raise ControlPlaneError(
                    f"state dir {folder} is not empty and was not created by tidings; "
                    "pick a new or empty directory (--state-dir)")
            # A real node's containers see host paths through mounts in here: never delete
            # through one.
            unmount_under(folder)
            for child in folder.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / OWNER_MARKER).write_text(
            "created by tidings dev up; this whole directory is wiped on the next start\n")

    def _proc(self, name: str, argv: list[str]) -> Process:
        proc = Process(name, argv, self.state_dir / "logs" / f"{name}.log")
        self.processes[name] = proc
        proc.start()
        return proc

    def _start_etcd(self, timeout: float) -> None:
        url, peer = self.etcd_url, f"http://127.0.0.1:{self.ports['etcd-peer']}"
        proc = self._proc("etcd", [
            str(self.bin_dir / "etcd"), "--name", "default",
            "--data-dir", str(self.state_dir / "etcd"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
            # Test data is disposable; fsync only slows the suite down.
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        wait_for(lambda: b'"health":"true"' in _http_get(f"{url}/health"), timeout, "etcd health",
                 proc)

    def apiserver_argv(self) -> list[str]:
        pki = self.state_dir / "pki"
        return [
            str(self.bin_dir / "kube-apiserver"),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--etcd-servers={self.etcd_url}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={self.state_dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # The kubernetes Service endpoint may not be loopback; nothing here needs it.
            "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            f"--cert-dir={pki / 'generated'}",
            "--v=1",
        ]

    def start_apiserver(self, timeout: float = 90.0) -> None:
        """(Re)start kube-apiserver on its port and wait for /readyz. A restart is saved: who
        attaches to the plane later (`tidings dev down`, a bench's --control-plane reading its
        CPU) must find the process that runs, not the one stopped."""
        proc = self._proc("kube-apiserver", self.apiserver_argv())
        wait_for(lambda: _http_get(f"{self.server}/readyz", self._ssl(), self.tokens["admin"])
                 == b"ok", timeout, "kube-apiserver /readyz", proc)
        if (self.state_dir / STATE_FILE).exists():
            self.save()

    def stop_apiserver(self) -> None:
        self.processes["kube-apiserver"].stop()

    def _start_kwok(self, timeout: float) -> None:
        upstream = self.bin_dir / "kwok-manifests"
        if not upstream.is_dir():
            raise BinariesMissing(f"kwok manifests missing in {upstream}; {BUILD_HINT}")
        for crd in sorted(upstream.glob("kwok.x-k8s.io_*.yaml")):
            self.kubectl_run("apply", "--server-side", "-f", str(crd))
        self.wait_established("logs.kwok.x-k8s.io", "clusterlogs.kwok.x-k8s.io")
        stages = [doc for f in sorted(upstream.glob("*.yaml")) if "_" not in f.name
                  for doc in yaml.safe_load_all(f.read_text()) if doc]
        stages += [d for d in yaml.safe_load_all(
            (Path(__file__).parent / "devcluster_stages.yaml").read_text()) if d]
        config = self.state_dir / "kwok.yaml"
        config.write_text(yaml.safe_dump_all(stages))
        pki, port = self.state_dir / "pki", self.ports["kwok"]
        proc = self._proc("kwok", [
            str(self.bin_dir / "kwok"),
            f"--kubeconfig={self.kubeconfig('admin')}", f"--config={config}",
            # Only its own nodes: a real node (devnode.py) is its kubelet's alone.
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1", f"--node-name={NODE_NAME}",
            f"--node-port={port}", f"--server-address=127.0.0.1:{port}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            "--enable-crds=Logs,ClusterLogs", "--node-lease-duration-seconds=40",
        ])
        # Tainted, so a scheduler (a real node's) never places a pod here that did not ask.
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NODE_NAME, "labels": {"type": "kwok", "kubernetes.io/hostname": NODE_NAME},
            "annotations": {KWOK_NODE_ANNOTATION: "fake"}},
            "spec": {"taints": [{"key": KWOK_NODE_ANNOTATION, "value": "fake",
                                 "effect": "NoSchedule"}]}}
        self.kubectl_run("apply", "-f", "-", input_text=json.dumps(node))
        wait_for(lambda: self._node_ready(), timeout, f"kwok node {NODE_NAME} Ready", proc)

    def _node_ready(self) -> bool:
        out = self.kubectl_run("get", "node", NODE_NAME, "-o",
                               "jsonpath={.status.conditions[?(@.type=='Ready')].status}")
        return out.strip() == "True"

    def start_controller_manager(self, timeout: float = 60.0,
                                 controllers: tuple[str, ...] = DEFAULT_CONTROLLERS) -> None:
        """Run kube-controller-manager with ``controllers`` (DEFAULT_CONTROLLERS by default: the
        Job controller, garbage collection, ClusterRole aggregation, node lifecycle and taint
        eviction) besides those it runs already, as its own user on loopback: no serving port,
        no leader election, no service-account credentials. A manager that lacks one of them
        is restarted with both sets."""
        controllers = tuple(dict.fromkeys(controllers))
        running = self.processes.get("kube-controller-manager")
        if running is not None and running.alive():
            if set(controllers) <= set(self.controllers):
                return
            running.stop()
            controllers = tuple(dict.fromkeys((*self.controllers, *controllers)))
        self.controllers = controllers
        binary = self._need_binary("kube-controller-manager")
        # The bootstrap policy binds system:kube-controller-manager to what the manager itself
        # needs; each controller's own rights come from its bootstrap role.
        bindings = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"tidings-dev:{role}"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": f"system:controller:{role}"},
                     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                   "name": CONTROLLER_MANAGER_USER}]}
                    for role in dict.fromkeys(CONTROLLER_ROLES[c] for c in controllers)]
        self.kubectl_run("apply", "--server-side", "-f", "-", input_text=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": bindings}))
        proc = self._proc("kube-controller-manager", [
            str(binary), f"--kubeconfig={self.kubeconfig(CONTROLLER_MANAGER_USER)}",
            f"--controllers={','.join(controllers)}", "--leader-elect=false",
            "--secure-port=0", "--use-service-account-credentials=false", "--v=2",
            # What the root-ca-certificate-publisher puts in every namespace's kube-root-ca.crt.
            f"--root-ca-file={self.ca_file}",
        ])
        self.save()
        wait_for(lambda: all(f'"Controller starting..." controller="{c}"' in
                             proc.log.read_text(errors="replace") for c in controllers),
                 timeout, "kube-controller-manager to start its controllers", proc)

    def end_pod(self, namespace: str, name: str, exit_code: int = 0,
                reason: str | None = None) -> None:
        """End a pod's containers as a kubelet reports it (kwok runs none): what
        ``kubelet_end_status`` says, so the Job controller counts a completion or a failure
        (and retries it)."""
        pod = json.loads(self.kubectl_run("get", "pod", name, "-n", namespace, "-o", "json"))
        self.kubectl_run("patch", "pod", name, "-n", namespace, "--subresource=status",
                         "-p", json.dumps({"status": kubelet_end_status(pod, exit_code, reason)}))

    def wait_pod(self, namespace: str, name: str, reason: str, message: str,
                 last_exit: int | None = None) -> None:
        """Make a pod's containers wait as a kubelet reports it (``kubelet_waiting_status``:
        an image pull that fails, or with ``last_exit`` a crash loop)."""
        pod = json.loads(self.kubectl_run("get", "pod", name, "-n", namespace, "-o", "json"))
        self.kubectl_run("patch", "pod", name, "-n", namespace, "--subresource=status",
                         "-p", json.dumps({"status": kubelet_waiting_status(
                             pod, reason, message, last_exit)}))

    def add_real_node(self, timeout: float = 120.0) -> RealNode:
        """Join a real node (tools/devnode.py) to this plane, once: a kubelet and containerd
        whose pods run as containers, and a scheduler for the pods that name no node."""
        if self.node is None:
            # Its pods need the plane's controllers (Jobs, garbage collection) and its own.
            self.start_controller_manager(controllers=(*DEFAULT_CONTROLLERS, *NODE_CONTROLLERS))
            self.node = RealNode(plane=self, say=self.say)
            try:
                self.node.start(timeout)
            except BaseException:
                self.node = None
                raise
            self.save()
        return self.node

    def stop(self) -> None:
        if self.node is not None:
            self.node.stop()
            self.node = None
        # Clients of the API server first, etcd last, so nothing logs connection errors.
        # (the platforms' controllers, tools/devplatforms.py, are clients too)
        order = ("kube-controller-manager", "kwok", "kube-apiserver", "etcd")
        for name in (*(n for n in self.processes if n not in order), *order):
            if name in self.processes:
                self.processes[name].stop()
        with contextlib.suppress(OSError):
            (self.state_dir / STATE_FILE).unlink()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- persistence for `tidings dev up` / `down` ------------------------------------
    def save(self) -> None:
        data = {"bin_dir": str(self.bin_dir), "ports": self.ports, "tokens": self.tokens,
                "pids": {n: p.pid for n, p in self.processes.items()},
                "real_node": self.node.to_json() if self.node is not None else None}
        path = self.state_dir / STATE_FILE
        path.write_text(json.dumps(data))
        path.chmod(0o600)

    @classmethod
    def load(cls, state_dir: Path) -> ControlPlane:
        try:
            data = json.loads((state_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            raise ControlPlaneError(f"no local control plane recorded in {state_dir}") from None
        cp = cls(state_dir=state_dir, bin_dir=Path(data["bin_dir"]))
        cp.ports, cp.tokens = data["ports"], data["tokens"]
        for name, pid in data["pids"].items():
            cp.processes[name] = Process(name, [], state_dir / "logs" / f"{name}.log", pid=pid)
        if data.get("real_node"):
            cp.node = RealNode.from_json(cp, data["real_node"])
        return cp

    def running(self) -> bool:
        processes = [*self.processes.values(),
                     *(self.node.processes.values() if self.node is not None else ())]
        return bool(processes) and all(p.alive() for p in processes)

    # ---- identities -------------------------------------------------------------------
    def _write_identities(self) -> None:
        # Tokens are made fresh for every control plane and never leave its state dir.
        users = {**USERS, CONTROLLER_MANAGER_USER: []}
        self.tokens = {user: secrets.token_hex(24) for user in users}
        rows = [f'{self.tokens[u]},{u},{u},"{",".join(groups)}"' for u, groups in users.items()]
        tokens_csv = self.state_dir / "tokens.csv"
        tokens_csv.write_text("\n".join(rows) + "\n")
        tokens_csv.chmod(0o600)
        for user in users:
            self.write_kubeconfig(self.kubeconfig(user), user, self.tokens[user])

    def write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        return write_kubeconfig(path, server=self.server, ca_file=self.ca_file, user=user,
                                credentials={"token": token}, context=f"tidings-dev-{user}",
                                namespace="default")

    def kubectl_run(self, *args: str, user: str = "admin", input_text: str | None = None,
                    check: bool = True) -> str:
        result = subprocess.run(
            [str(self.kubectl), f"--kubeconfig={self.kubeconfig(user)}", *args],
            input=input_text, capture_output=True, text=True, timeout=120,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Wait until each CRD is Established. Not `kubectl wait --for=condition=Established`
        alone: a CRD read before the API server's establishing controller has written its
        status has `conditions: null`, and kubectl then fails at once ("accessor error: <nil>")
        instead of waiting (seen under load), so a failed wait is tried again until the
        deadline."""
        deadline = time.monotonic() + timeout
        for crd in crds:
            while True:
                left = max(1, round(deadline - time.monotonic()))
                try:
                    self.kubectl_run("wait", "--for=condition=Established", f"crd/{crd}",
                                     f"--timeout={left}s")
                    break
                except ControlPlaneError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)

    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def get_raw(self, path: str, user: str = "admin") -> bytes:
        return _http_get(f"{self.server}{path}", self._ssl(), self.tokens[user])

    def env(self) -> dict[str, str]:
        """What `tidings dev up` exports: KUBECONFIG, and a PATH with the built kubectl first
        and this `tidings` (its virtualenv's bin) next."""
        return {"KUBECONFIG": str(self.kubeconfig("admin")),
                "PATH": f"{self.bin_dir}:{Path(sys.executable).parent}:"
                        f"{os.environ.get('PATH', '')}"}


def kubelet_end_status(pod: dict[str, Any], exit_code: int = 0,
                       reason: str | None = None) -> dict[str, Any]:
    """The status a real kubelet (v1.37.2 with containerd, tests/node) writes when every
    container of ``pod`` has exited with ``exit_code``: Succeeded on 0, else Failed; each
    container terminated with its containerd id and ``reason`` (Completed, Error, or OOMKilled
    for a kill by the memory limit); no pod-level reason (a container's end is only said in its
    own state); the sandbox gone (PodReadyToStartContainers False)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ok = exit_code == 0
    why = reason or ("Completed" if ok else "Error")
    status = pod.get("status", {})

    def condition(ctype: str, state: str, cause: str | None = None,
                  message: str | None = None) -> dict[str, Any]:
        c = {"type": ctype, "status": state, "lastTransitionTime": now}
        return {**c, **({"reason": cause} if cause else {}),
                **({"message": message} if message else {})}

    def ended(container: dict[str, Any]) -> dict[str, Any]:
        cid = "containerd://" + secrets.token_hex(32)
        return {"name": container["name"], "image": container["image"], "imageID": "",
                "containerID": cid, "ready": False, "restartCount": 0, "started": False,
                "state": {"terminated": {
                    "containerID": cid, "exitCode": exit_code, "reason": why,
                    "startedAt": status.get("startTime", now), "finishedAt": now}}}

    done = "PodCompleted" if ok else "PodFailed"
    return {"phase": "Succeeded" if ok else "Failed",
            "conditions": [
                condition("PodReadyToStartContainers", "False", "PodSandboxNotReady",
                          "pod sandbox is not ready"),
                condition("Initialized", "True", "PodCompleted" if ok else None),
                condition("Ready", "False", done), condition("ContainersReady", "False", done),
                condition("PodScheduled", "True")],
            "containerStatuses": [ended(c) for c in pod["spec"]["containers"]]}


def kubelet_waiting_status(pod: dict[str, Any], reason: str, message: str,
                           last_exit: int | None = None) -> dict[str, Any]:
    """The status a real kubelet (v1.37.2 with containerd, tests/node) writes while every
    container of ``pod`` waits with ``reason`` and the kubelet's ``message``: an image it
    cannot pull (ErrImagePull, ImagePullBackOff: phase Pending, no container yet), or, with
    ``last_exit``, a container restarted after it exited so (CrashLoopBackOff: phase Running,
    one restart, the last run's end in lastState). The sandbox is up; the pod not Ready."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    names = [c["name"] for c in pod["spec"]["containers"]]
    unready = f"containers with unready status: [{' '.join(names)}]"

    def condition(ctype: str, state: str, cause: str | None = None) -> dict[str, Any]:
        c = {"type": ctype, "status": state, "lastTransitionTime": now}
        return {**c, **({"reason": cause, "message": unready} if cause else {})}

    def waiting(container: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": container["name"], "image": container["image"], "imageID": "",
            "ready": False, "restartCount": 0, "started": False, "lastState": {},
            "state": {"waiting": {"reason": reason, "message": message}}}
        if last_exit is not None:
            cid = "containerd://" + secrets.token_hex(32)
            out.update(containerID=cid, imageID="sha256:" + secrets.token_hex(32),
                       restartCount=1, lastState={"terminated": {
                           "containerID": cid, "exitCode": last_exit,
                           "reason": "Completed" if last_exit == 0 else "Error",
                           "startedAt": now, "finishedAt": now}})
        return out

    return {"phase": "Pending" if last_exit is None else "Running",
            "conditions": [condition("PodReadyToStartContainers", "True"),
                           condition("Initialized", "True"),
                           condition("Ready", "False", "ContainersNotReady"),
                           condition("ContainersReady", "False", "ContainersNotReady"),
                           condition("PodScheduled", "True")],
            "containerStatuses": [waiting(c) for c in pod["spec"]["containers"]]}


def _http_get(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bytes:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as err:
        return bytes(err.read())


@contextlib.contextmanager
def running_control_plane(state_dir: Path) -> Iterator[ControlPlane]:
    cp = ControlPlane(state_dir=state_dir)
    with cp:
        yield cp


@contextlib.contextmanager
def admin_kubeconfig(given: str | None, prefix: str = "tidings-dev-") -> Iterator[str]:
    """The benchmarks' --kubeconfig: ``given`` when set (a cluster of your own), else the
    admin kubeconfig of a fresh control plane in a new temporary state dir, stopped on exit."""
    if given:
        yield given
        return
    cp = ControlPlane(state_dir=Path(tempfile.mkdtemp(prefix=prefix))).start()
    try:
        yield str(cp.kubeconfig("admin"))
    finally:
        cp.stop()
