"""The platforms' real controllers on a local control plane, for tests only (never shipped, never
in `tidings dev up`): the JobSet controller, Kubeflow Trainer's controller manager and Argo
Workflows' workflow-controller, built from their pinned Go modules by tools/platforms/build.sh.

Each is installed from its release's own manifests (CRDs, RBAC, webhook configurations, as
its kustomizations render them with the built kubectl), runs as its own ServiceAccount's
token, and serves its webhooks on 127.0.0.1 through ``clientConfig.url``.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tools.devcluster import (
    REPO_ROOT,
    ControlPlane,
    _http_get,
    free_port,
)
from tools.devpki import openssl
from tools.devprocess import BinariesMissing, Process, wait_for

PLATFORMS_DIR = REPO_ROOT / "tools" / "platforms"
# What an install keeps of a release's manifests: what the controller needs to run here (no
# Deployment, Service or Secret: the controller runs as a process on loopback).
INSTALLED_KINDS = frozenset({
    "Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
    "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration"})
NAMESPACED_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding", "ConfigMap"})
BUILD_HINT = "build it with tools/platforms/build.sh {name} (`make platforms`)"


@dataclass(frozen=True)
class Platform:
    """How one platform's release is installed and its controller run."""

    name: str
    module: str  # its Go module (pinned in tools/platforms/<name>/go.mod)
    namespace: str  # where its release installs its controller
    service_account: str  # the controller's identity, as its release names it
    kustomizations: tuple[str, ...]  # folders of its manifests, rendered with kubectl kustomize
    argv: Callable[[Path, dict[str, int], Path], list[str]]  # (binary, ports, workdir) -> argv
    env: Callable[[dict[str, int], Path], dict[str, str]]
    ready: str  # "healthz" (its probe port answers /readyz ok) or a line of its log
    # Data set in the release's ConfigMaps (name -> data), e.g. to turn a fixed port off.
    config: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """The pinned release: its require line in its tool module's go.mod."""
        gomod = (PLATFORMS_DIR / self.name / "go.mod").read_text()
        found = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)} (v\S+)(\s*//.*)?$",
                          gomod, re.MULTILINE)
        if found is None:
            raise BinariesMissing(f"{self.name}: no require of {self.module} in its go.mod")
        return found.group(1)

    def folder(self) -> Path:
        cache = Path(os.environ.get("TIDINGS_PLATFORM_CACHE",
                                    str(REPO_ROOT / ".cache" / "platforms")))
        out = cache / f"{self.name}-{self.version}"
        if not (out / ".complete").is_file():
            raise BinariesMissing(f"the {self.name} {self.version} controller is not built in "
                                  f"{out}; " + BUILD_HINT.format(name=self.name))
        return out


def _jobset_argv(binary: Path, ports: dict[str, int], work: Path) -> list[str]:
    # Its Configuration file: webhooks on 127.0.0.1 with the control plane's serving
    # certificate (internal cert management off), no metrics port, no leader election.
    config = {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
              "leaderElection": {"leaderElect": False},
              "internalCertManagement": {"enable": False},
              "webhook": {"host": "127.0.0.1", "port": ports["webhook"],
                          "certDir": str(work / "certs")},
              "metrics": {"bindAddress": "0"},
              "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    return [str(binary), f"--config={work / 'config.yaml'}", "--zap-log-level=info"]


def _trainer_argv(binary: Path, ports: dict[str, int], work: Path) -> list[str]:
    # Trainer v2.0.0 takes no webhook host (it listens on every interface of the port given)
    # and reads its certificate from a fixed folder (TRAINER_CERT_DIR), which its cert
    # rotator checks against its Secret (Platforms.start fills both).
    return [str(binary), f"--webhook-server-port={ports['webhook']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
            "--metrics-bind-address=0", "--leader-elect=false"]


# The status server's own API client limits (the release's defaults); a bench may raise them.
TRAINER_STATUS_CLIENT = {"qps": 5, "burst": 10}


def _trainer_status_argv(binary: Path, ports: dict[str, int], work: Path) -> list[str]:
    # Trainer v2.2+ reads a Configuration file, the status server's port among its fields.
    # It reads two fixed paths a pod has and a host process lacks: its serving certificate
    # folder (as v2.0.0) and the in-cluster token, whose issuer names where it fetches the
    # keys that verify the runs' tokens. Both are given to it alone, in a mount namespace of
    # its own (no other process, another plane's trainer included, sees them): its folder
    # bound over the certificate folder, and a token in a private /run (/var/run's target).
    config = {"apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
              "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}",
                         "readinessEndpointName": "readyz", "livenessEndpointName": "healthz"},
              "metrics": {"bindAddress": "0"},
              "webhook": {"port": ports["webhook"], "host": "127.0.0.1"},
              "leaderElection": {"leaderElect": False},
              "certManagement": {"enable": True, "webhookServiceName": TRAINER_SERVICE,
                                 "webhookSecretName": TRAINER_SECRET},
              "clientConnection": {"qps": 50, "burst": 100},
              "statusServer": {"port": ports["status"], **TRAINER_STATUS_CLIENT},
              "featureGates": {"TrainJobStatus": True}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    script = ('mount --bind "$1" "$2" && mount -t tmpfs tidings-run /run && '
              'mkdir -p /run/secrets/kubernetes.io/serviceaccount && '
              'cp "$3"/token "$3"/namespace /run/secrets/kubernetes.io/serviceaccount/ && '
              'shift 3 && exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(work / "certs"), str(TRAINER_CERT_DIR), str(work / "serviceaccount"),
            str(binary), f"--config={work / 'config.yaml'}", "--zap-log-level=info"]


def _argo_argv(binary: Path, ports: dict[str, int], work: Path) -> list[str]:
    return [str(binary), "--loglevel=info", "--namespace=argo"]


PLATFORMS: dict[str, Platform] = {p.name: p for p in (
    Platform("jobset", "sigs.k8s.io/jobset", "jobset-system", "jobset-controller-manager",
             ("default",), _jobset_argv, lambda ports, work: {}, "healthz"),
    Platform("trainer", "github.com/kubeflow/trainer/v2", "kubeflow-system",
             "kubeflow-trainer-controller-manager",
             ("base/crds", "base/rbac", "base/webhook"), _trainer_argv,
             lambda ports, work: {}, "healthz"),
    # The same controller at a release with the TrainJob status server (gate TrainJobStatus),
    # for the peer benchmark: the suite's tests keep the pinned trainer above.
    Platform("trainer-status", "github.com/kubeflow/trainer/v2", "kubeflow-system",
             "kubeflow-trainer-controller-manager",
             ("base/crds", "base/rbac", "base/webhook"), _trainer_status_argv,
             lambda ports, work: {}, "healthz"),
    # No webhook; its health port (6060) is fixed, so readiness is read from its log, and its
    # metrics server (0.0.0.0:9090 by default) is turned off.
    Platform("argo", "github.com/argoproj/argo-workflows/v4", "argo", "argo",
             ("cluster-install",), _argo_argv,
             lambda ports, work: {"LEADER_ELECTION_DISABLE": "true"},
             "Starting Workflow Controller",
             {"workflow-controller-configmap": {"metricsConfig": "enabled: false\n",
                                                "telemetryConfig": "enabled: false\n"}}),
)}

# Trainer's webhook Secret and Service names (its defaults), and its CA's name: its cert
# rotator keeps a Secret whose CA verifies for this name and whose serving certificate
# verifies for <service>.<namespace>.svc, so one made here (with 127.0.0.1 as well) is kept.
TRAINER_SECRET = "kubeflow-trainer-webhook-cert"
TRAINER_SERVICE = "kubeflow-trainer-controller-manager"
TRAINER_CA_NAME = "kubeflow-trainer-ca"
# Where Trainer v2.0.0 reads its webhook certificate (fixed in pkg/util/cert/cert.go; in a
# cluster the kubelet mounts the Secret there). One per machine: two control planes running
# Trainer at once would share it, so its tests run on one plane per session.
TRAINER_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


class Platforms:
    """The platforms' controllers started on one control plane (its kube-controller-manager
    should run the Job controller and the garbage collector: JobSets are made of Jobs)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.processes: dict[str, Process] = {}
        self.ports: dict[str, dict[str, int]] = {}  # platform -> its ports by role

    def start(self, name: str, timeout: float = 120.0) -> Process:
        if name in self.processes and self.processes[name].alive():
            return self.processes[name]
        platform = PLATFORMS[name]
        folder = platform.folder()
        work = self.cp.state_dir / "platforms" / name
        (work / "certs").mkdir(parents=True, exist_ok=True)
        ports = {"webhook": free_port(), "health": free_port(), "status": free_port()}
        self.ports[name] = ports
        ca_file = self.cp.ca_file
        if name == "jobset":  # serves with the control plane's own certificate (127.0.0.1)
            for src, dst in (("serving.crt", "tls.crt"), ("serving.key", "tls.key")):
                (work / "certs" / dst).write_bytes(
                    (self.cp.state_dir / "pki" / src).read_bytes())
        trainer = name in ("trainer", "trainer-status")
        if trainer:
            webhook_pki(work / "certs", TRAINER_CA_NAME,
                        f"{TRAINER_SERVICE}.{platform.namespace}.svc")
            ca_file = work / "certs" / "ca.crt"
        self._install(platform, folder, ports["webhook"], ca_file)
        if trainer:
            self._trainer_secret(work / "certs", platform.namespace)
            TRAINER_CERT_DIR.mkdir(parents=True, exist_ok=True)
        if name == "trainer":
            for key in ("tls.crt", "tls.key"):  # as the kubelet mounts the Secret
                (TRAINER_CERT_DIR / key).write_bytes((work / "certs" / key).read_bytes())
        kubeconfig = self._controller_kubeconfig(platform, work)
        if name == "trainer-status":  # the in-cluster token its status server reads
            sa = work / "serviceaccount"
            sa.mkdir(exist_ok=True)
            (sa / "token").write_text(self.cp.kubectl_run(
                "create", "token", platform.service_account, "-n", platform.namespace,
                "--duration=24h").strip())
            (sa / "namespace").write_text(platform.namespace)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), **platform.env(ports, work)}
        proc = Process(f"platform-{name}", platform.argv(folder / "controller", ports, work),
                       self.cp.state_dir / "logs" / f"platform-{name}.log", env=env)
        proc.start()
        self.processes[name] = proc
        self.cp.processes[proc.name] = proc  # stopped with the control plane
        if platform.ready == "healthz":
            wait_for(lambda: _http_get(f"http://127.0.0.1:{ports['health']}/readyz") == b"ok",
                     timeout, f"the {name} controller ready", proc)
        else:
            wait_for(lambda: platform.ready in proc.log.read_text(errors="replace"), timeout,
                     f"the {name} controller started", proc)
        return proc

    # ---- install ----------------------------------------------------------------------
    def manifests(self, platform: Platform, folder: Path) -> list[dict[str, Any]]:
        """The release's objects this install applies, in its namespace."""
        docs: list[dict[str, Any]] = []
        for path in platform.kustomizations:
            rendered = self.cp.kubectl_run("kustomize", str(folder / "manifests" / path))
            docs += [d for d in yaml.safe_load_all(rendered) if d]
        kept = [d for d in docs if d.get("kind") in INSTALLED_KINDS]
        for doc in kept:
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] in platform.config:
                doc["data"] = {**(doc.get("data") or {}),
                               **platform.config[doc["metadata"]["name"]]}
            if doc["kind"] in NAMESPACED_KINDS:
                doc["metadata"]["namespace"] = platform.namespace
            for subject in doc.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = platform.namespace
        return kept

    def _install(self, platform: Platform, folder: Path, webhook_port: int,
                 ca_file: Path) -> None:
        ca = base64.b64encode(ca_file.read_bytes()).decode()
        docs = self.manifests(platform, folder)
        objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": platform.namespace}}]
        for doc in docs:
            if doc["kind"] == "Namespace":
                continue
            for hook in doc.get("webhooks") or []:
                path = hook["clientConfig"].get("service", {}).get("path", "/")
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook_port}{path}",
                                        "caBundle": ca}
            objects.append(doc)
        self.cp.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input_text=json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": objects}))
        self.cp.wait_established(*(d["metadata"]["name"] for d in objects
                                   if d["kind"] == "CustomResourceDefinition"))

    def _controller_kubeconfig(self, platform: Platform, work: Path) -> Path:
        token = self.cp.kubectl_run("create", "token", platform.service_account, "-n",
                                    platform.namespace, "--duration=24h").strip()
        path = work / "kubeconfig.yaml"
        self.cp.write_kubeconfig(path, f"{platform.name}-controller", token)
        config = yaml.safe_load(path.read_text())
        config["contexts"][0]["context"]["namespace"] = platform.namespace
        path.write_text(yaml.safe_dump(config))
        return path

    def _trainer_secret(self, certs: Path, namespace: str) -> None:
        """Trainer's cert rotator keeps a valid Secret and writes it to its cert folder; this
        one's serving certificate also names 127.0.0.1, which the webhook URLs use."""
        secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": TRAINER_SECRET,
                               "namespace": namespace},
                  "data": {key: base64.b64encode((certs / key).read_bytes()).decode()
                           for key in ("ca.crt", "ca.key", "tls.crt", "tls.key")}}
        self.cp.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-",
                            input_text=json.dumps(secret))


def webhook_pki(folder: Path, ca_name: str, dns: str) -> None:
    """A CA whose certificate names ``ca_name`` and a serving certificate for ``dns`` and
    127.0.0.1, valid for ten years (cert rotators replace anything that expires within their
    look-ahead of months), as ca.crt/ca.key/tls.crt/tls.key. RSA keys in PKCS#1, the only
    form cert-controller's rotator parses."""
    for key in ("ca.key", "tls.key"):
        openssl("genrsa", "-traditional", "-out", str(folder / key), "2048")
    ca_ext = ["basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign",
              "subjectKeyIdentifier=hash", f"subjectAltName=DNS:{ca_name}"]
    openssl("req", "-x509", "-key", str(folder / "ca.key"), "-out", str(folder / "ca.crt"),
             "-days", "3650", "-subj", f"/CN={ca_name}", "-config", os.devnull,
             *[a for e in ca_ext for a in ("-addext", e)])
    openssl("req", "-new", "-key", str(folder / "tls.key"), "-out", str(folder / "tls.csr"),
             "-subj", f"/CN={dns}", "-config", os.devnull)
    ext = folder / "tls.ext"
    ext.write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,"
                   "keyEncipherment\nextendedKeyUsage=serverAuth\n"
                   f"subjectAltName=DNS:{dns},IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(folder / "tls.csr"), "-CA", str(folder / "ca.crt"),
             "-CAkey", str(folder / "ca.key"), "-CAcreateserial", "-out",
             str(folder / "tls.crt"), "-days", "3650", "-extfile", str(ext))
