"""The local plane's real node: a kubelet and containerd whose pods run as real containers, in a
network namespace the plane makes itself (`tidings dev up --real-node`, the tests' real_node).

Layout (one node; N is a free index, so two planes' nodes never share an address):

    root namespace                         node namespace tidings-<id>
    kube-apiserver 127.0.0.1:P             kubelet (10.201.N.2:10250), containerd, kube-proxy
    socat 10.201.N.1:P -> 127.0.0.1:P <--veth--> eth0 10.201.N.2, bridge cni0 10.244.N.1/24
    kube-scheduler, route 10.244.N.0/24            pods 10.244.N.x (their own namespaces)

A pod reaches the API server as on any cluster: KUBERNETES_SERVICE_HOST is the `kubernetes`
Service's ClusterIP, which kube-proxy (iptables, inside the node namespace) sends to the
EndpointSlice this module writes (10.201.N.1:P: EndpointSlices refuse loopback), where socat
hands it to the API server on loopback. The node namespace has no default route: nothing a pod
sends can leave the two namespaces. Every process of the node (and every container) lives under
one cgroup, /tidings-<id>, which is how stopping finds and kills them all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from tools.devpki import sign_certificate, write_kubeconfig
from tools.devprocess import BinariesMissing, ControlPlaneError, Process, wait_for

REPO_ROOT = Path(__file__).resolve().parents[1]

REAL_NODE_NAME = "real-node-0"
REAL_NODE_LABEL = "tidings.dev/real-node"
NODE_BINARIES = ("kubelet", "kube-proxy", "kube-scheduler", "containerd",
                 "containerd-shim-runc-v2", "ctr")
# What the node takes from Debian (tools/node/debs.sh installs them).
HOST_TOOLS = ("ip", "nsenter", "iptables", "socat", "runc", "umount")
CNI_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
SERVICE_IP = "10.96.0.1"  # the first address of the API server's --service-cluster-ip-range
CGROUP_FS = Path("/sys/fs/cgroup")
# The controllers a real node's pods need besides the plane's (its plane runs them before the
# node starts): a namespace's `default` ServiceAccount and `kube-root-ca.crt` (both mounted
# into every pod), Deployments, and the node lifecycle controller (the kubelet registers its
# node tainted not-ready; only that controller lifts the taint).
NODE_CONTROLLERS = ("serviceaccount-controller", "root-ca-certificate-publisher-controller",
                    "deployment-controller", "replicaset-controller",
                    "node-lifecycle-controller")
NODE_BUILD_HINT = ("build them with tools/node/build.sh from a tidings checkout (`make node`) and "
                   "set TIDINGS_NODE_BIN_DIR to the folder it prints")


def find_node_bin_dir() -> Path:
    """The folder with the node's built binaries: $TIDINGS_NODE_BIN_DIR, else the newest
    complete folder of the repo cache."""
    explicit = os.environ.get("TIDINGS_NODE_BIN_DIR")
    candidates = [Path(explicit)] if explicit else sorted(
        (p.parent for p in (REPO_ROOT / ".cache" / "node").glob("*/.complete")),
        key=lambda d: (d / ".complete").stat().st_mtime, reverse=True)
    for folder in candidates:
        if all((folder / b).is_file() for b in NODE_BINARIES):
            return folder
    raise BinariesMissing(
        f"real-node binaries not found in {explicit or REPO_ROOT / '.cache/node'}; "
        + NODE_BUILD_HINT)


def find_images() -> Path:
    """The folder of the images the node imports (images.tar, and the pause image's name in
    sandbox-image): $TIDINGS_IMAGES_DIR, else the newest complete folder of `make images`."""
    explicit = os.environ.get("TIDINGS_IMAGES_DIR")
    candidates = [Path(explicit)] if explicit else sorted(
        (p.parent for p in (REPO_ROOT / ".cache" / "images").glob("*/.complete")),
        key=lambda d: (d / ".complete").stat().st_mtime, reverse=True)
    for folder in candidates:
        if (folder / "images.tar").is_file() and (folder / "sandbox-image").is_file():
            return folder
    raise BinariesMissing(
        f"no images in {explicit or REPO_ROOT / '.cache/images'}; build them with "
        "tools/images/build.sh from a tidings checkout (`make images`)")


def _run(*argv: str, input_text: str | None = None, check: bool = True) -> str:
    result = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)}: {result.stderr.strip() or result.stdout}")
    return result.stdout


def _free_index() -> int:
    """The first N whose 10.201.N.0/30 link and 10.244.N.0/24 pods no address or route of
    this host uses yet."""
    used = _run("ip", "-4", "-o", "addr", "show") + _run("ip", "-4", "route", "show")
    taken = {int(m) for m in re.findall(r"10\.(?:201|244)\.(\d+)\.", used)}
    for index in range(256):
        if index not in taken:
            return index
    raise ControlPlaneError("no free 10.201.N.0/30 for a real node's link (256 in use)")


def preflight() -> None:
    """Whether this host can run a real node, before anything starts: root, and the tools and
    CNI plugins it takes from Debian; raises ControlPlaneError saying what is missing."""
    if os.geteuid() != 0:
        raise ControlPlaneError(
            "a real node needs root (network namespaces, cgroups, mounts); run as root")
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    missing += [f"{CNI_DIR}/{p}" for p in CNI_PLUGINS if not (CNI_DIR / p).is_file()]
    if missing:
        raise ControlPlaneError(
            f"a real node needs {', '.join(missing)}: `make node-debs` installs them")
    find_node_bin_dir()
    find_images()


def unmount_under(folder: Path) -> None:
    """Detach every mount under ``folder`` (a node's container roots, volumes and network
    namespaces' bind mounts), deepest first."""
    prefix = str(folder.resolve()) + "/"
    for _ in range(5):
        points = sorted({line.split()[4] for line in
                         Path("/proc/self/mountinfo").read_text().splitlines()
                         if line.split()[4].startswith(prefix)}, key=len, reverse=True)
        if not points:
            return
        for point in points:
            _run("umount", "-l", point, check=False)


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies: each v1 controller's, or the one v2 tree."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()
                  and (p / "cgroup.procs").exists())


class Plane(Protocol):
    """What a node needs of its control plane (tools/devcluster.py's ControlPlane)."""

    state_dir: Path
    ports: dict[str, int]

    @property
    def ca_file(self) -> Path: ...

    def kubectl_run(self, *args: str, user: str = "admin", input_text: str | None = None,
                    check: bool = True) -> str: ...



@dataclass
class RealNode:
    """A kubelet, containerd, kube-proxy and kube-scheduler joined to ``plane``, started and
    stopped as one. Its state is JSON (``to_json``) so `tidings dev down` can stop it."""

    plane: Plane
    bin_dir: Path = field(default_factory=find_node_bin_dir)
    images: Path = field(default_factory=find_images)
    index: int = -1
    processes: dict[str, Process] = field(default_factory=dict)
    say: Callable[[str], None] = field(default=lambda line: None, repr=False)

    # ---- names and addresses --------------------------------------------------------
    name = REAL_NODE_NAME

    def image_names(self) -> list[str]:
        return (self.images / "names").read_text().split()

    @property
    def ident(self) -> str:
        return hashlib.sha256(str(self.plane.state_dir.resolve()).encode()).hexdigest()[:6]

    @property
    def netns(self) -> str:
        return f"tidings-{self.ident}"

    @property
    def netns_path(self) -> Path:
        return Path("/var/run/netns") / self.netns

    @property
    def host_link(self) -> str:
        return f"tdn{self.ident}"

    @property
    def host_ip(self) -> str:
        return f"10.201.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"10.201.{self.index}.2"

    @property
    def pod_subnet(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def cgroup(self) -> str:
        return f"tidings-{self.ident}"

    @property
    def root(self) -> Path:
        return self.plane.state_dir / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    # ---- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> RealNode:
        preflight()
        self.stop()  # what a node of this state dir left behind if its launcher was killed
        self.index = _free_index()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.say(f"real node: network namespace {self.netns}, {self.node_ip}")
            self._make_cgroup()
            self._make_network()
            self._make_credentials()
            self._publish_api_endpoint()
            self._start_proxy_to_apiserver(timeout)
            self._start_containerd(timeout)
            size = (self.images / "images.tar").stat().st_size / 2**20
            self.say(f"real node: importing {', '.join(self.image_names())} ({size:.0f} MiB)")
            self._import_images()
            self._start_kube_proxy()
            self._start_kubelet()
            self._start_scheduler()
            self.say(f"real node: waiting for {REAL_NODE_NAME} to be Ready")
            wait_for(self._ready, timeout, f"node {REAL_NODE_NAME} Ready",
                     self.processes["kubelet"])
        except BaseException:
            self.stop()
            raise
        return self

    def _make_cgroup(self) -> None:
        for hierarchy in _cgroup_hierarchies():
            (hierarchy / self.cgroup / "runtime").mkdir(parents=True, exist_ok=True)
            if (hierarchy / "cpuset.cpus").exists():
                # A new cpuset cgroup starts with no CPUs and no memory nodes: nothing could
                # join it until they are copied down from the parent.
                for leaf in (hierarchy / self.cgroup, hierarchy / self.cgroup / "runtime"):
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (leaf / knob).write_text((hierarchy / knob).read_text())

    def _runtime_cgroup_procs(self) -> list[Path]:
        return [h / self.cgroup / "runtime" / "cgroup.procs" for h in _cgroup_hierarchies()]

    def _make_network(self) -> None:
        ns, link = self.netns, self.host_link
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", link)
        _run("ip", "link", "set", link, "up")
        _run("ip", "-n", ns, "addr", "add", f"{self.node_ip}/30", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        # The API server (and a test) reach pods directly; replies to pods go back the same way.
        _run("ip", "route", "add", self.pod_subnet, "via", self.node_ip, "dev", link)
        # Inside the node's namespace only: pods' packets are routed (forwarding), and bridged
        # ones pass kube-proxy's rules.
        self._in_netns("sysctl", "-qw", "net.ipv4.ip_forward=1")
        self._in_netns("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1", check=False)

    def _in_netns(self, *argv: str, check: bool = True) -> str:
        return _run("nsenter", f"--net={self.netns_path}", "--", *argv, check=check)

    def _make_credentials(self) -> None:
        """Certificates from the plane's CA: the kubelet's serving one (for its node IP, which
        the API server checks against --kubelet-certificate-authority), and client ones for the
        kubelet, kube-proxy and the scheduler, whose names the bootstrap RBAC policy knows
        (system:node:<name> is bound below: the Node authorizer does not run here)."""
        pki = self.root / "pki"
        pki.mkdir(exist_ok=True)
        sign_certificate(self.plane.state_dir / "pki", pki / "kubelet-serving",
                         f"/CN={REAL_NODE_NAME}",
                         ("extendedKeyUsage=serverAuth",
                          f"subjectAltName=IP:{self.node_ip},DNS:{REAL_NODE_NAME}"))
        for user, subject in (("kubelet", f"/O=system:nodes/CN=system:node:{REAL_NODE_NAME}"),
                              ("kube-proxy", "/CN=system:kube-proxy"),
                              ("kube-scheduler", "/CN=system:kube-scheduler")):
            sign_certificate(self.plane.state_dir / "pki", pki / user, subject,
                             ("extendedKeyUsage=clientAuth",))
            self._write_kubeconfig(user, inside=user != "kube-scheduler")
        self.plane.kubectl_run("apply", "--server-side", "-f", "-", input_text=json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"tidings-dev:node:{REAL_NODE_NAME}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": f"system:node:{REAL_NODE_NAME}"}]}))

    def kubeconfig(self, user: str) -> Path:
        return self.root / f"kubeconfig-{user}.yaml"

    def _write_kubeconfig(self, user: str, inside: bool) -> None:
        """A kubeconfig with ``user``'s certificate. From inside the node's namespace the API
        server is at the host end of the link (its certificate names it
        kubernetes.default.svc, not that address)."""
        port, pki = self.plane.ports["apiserver"], self.root / "pki"
        write_kubeconfig(
            self.kubeconfig(user), server=f"https://{self.host_ip if inside else '127.0.0.1'}:"
            f"{port}", ca_file=self.plane.ca_file, user=user, context=user,
            credentials={"client-certificate": str(pki / f"{user}.crt"),
                         "client-key": str(pki / f"{user}.key")},
            tls_server_name="kubernetes.default.svc" if inside else None)

    def _publish_api_endpoint(self) -> None:
        """The `kubernetes` Service's endpoint, as the API server's own reconciler would write
        it if its address were not loopback (--endpoint-reconciler-type=none)."""
        self.plane.kubectl_run("apply", "--server-side", "--force-conflicts", "-f", "-",
                               input_text=json.dumps({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "tidings.dev-devnode"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.host_ip], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self.plane.ports["apiserver"],
                       "protocol": "TCP"}]}))

    def _proc(self, name: str, argv: list[str], inside: bool) -> Process:
        prefix = ["nsenter", f"--net={self.netns_path}", "--"] if inside else []
        proc = Process(name, prefix + argv, self.plane.state_dir / "logs" / f"{name}.log",
                       cgroup_procs=self._runtime_cgroup_procs())
        self.processes[name] = proc
        proc.start()
        return proc

    def _start_proxy_to_apiserver(self, timeout: float) -> None:
        port = self.plane.ports["apiserver"]
        proc = self._proc("apiserver-link", [
            "socat", f"TCP-LISTEN:{port},bind={self.host_ip},fork,reuseaddr",
            f"TCP:127.0.0.1:{port}"], inside=False)
        wait_for(lambda: f"{self.host_ip}:{port}" in _run("ss", "-Hltn"), timeout,
                 "the API server's link into the node namespace", proc)

    def _start_containerd(self, timeout: float) -> None:
        base = self.root / "containerd"
        cni = self.root / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-tidings.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "tidings", "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                 "hairpinMode": True, "ipam": {"type": "host-local", "ranges": [[{
                     "subnet": self.pod_subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}))
        config = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        config.write_text(CONTAINERD_CONFIG.format(
            root=base / "root", state=base / "state", socket=self.containerd_socket,
            shim=self.bin_dir / "containerd-shim-runc-v2", runc=shutil.which("runc"),
            cni_bin=CNI_DIR, cni_conf=cni,
            sandbox=(self.images / "sandbox-image").read_text().strip()))
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '')}"}
        proc = self._proc("containerd", [str(self.bin_dir / "containerd"), "--config",
                                         str(config), "--log-level", "warn"], inside=True)
        proc.env = env
        wait_for(lambda: bool(self.ctr("version")), timeout, "containerd", proc)

    def ctr(self, *args: str, check: bool = True) -> str:
        return _run(str(self.bin_dir / "ctr"), "--address", str(self.containerd_socket),
                    "--namespace", "k8s.io", *args, check=check)

    def _import_images(self) -> None:
        self.ctr("images", "import", str(self.images / "images.tar"))

    def _start_kube_proxy(self) -> None:
        config = self.root / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig("kube-proxy"))},
            "hostnameOverride": REAL_NODE_NAME, "mode": "iptables",
            "clusterCIDR": self.pod_subnet, "detectLocalMode": "ClusterCIDR",
            # Both on the node namespace's own loopback.
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            # Leave the kernel's conntrack table as it is (raising it needs CAP_SYS_RESOURCE).
            "conntrack": {"maxPerCore": 0, "min": 0},
            "iptables": {"minSyncPeriod": "0s"},
        }))
        self._proc("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={config}",
                                  "--v=1"], inside=True)

    def _start_kubelet(self) -> None:
        pki = self.root / "pki"
        resolv = self.root / "resolv.conf"
        # No name server: nothing in a pod looks a name up outside the plane.
        resolv.write_text("# tidings real node: no name server\n")
        config = self.root / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This machine's cgroups are v1, which the kubelet refuses unless told.
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.node_ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.plane.ca_file)}},
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            "podLogsDir": str(self.root / "pod-logs"),
            "failSwapOn": False, "shutdownGracePeriod": "0s",
            # The images are imported, never pulled: none may be collected, and a busy disk
            # must not evict the tests' pods.
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "serializeImagePulls": False, "syncFrequency": "10s",
        }))
        self._proc("kubelet", [
            str(self.bin_dir / "kubelet"), f"--config={config}",
            f"--kubeconfig={self.kubeconfig('kubelet')}", f"--root-dir={self.root / 'kubelet'}",
            f"--hostname-override={REAL_NODE_NAME}", f"--node-ip={self.node_ip}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            # Lowering a score needs CAP_SYS_RESOURCE, which this machine does not give root.
            "--oom-score-adj=0", "--v=1"], inside=True)

    def _start_scheduler(self) -> None:
        config = self.root / "kube-scheduler.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig("kube-scheduler"))},
            "leaderElection": {"leaderElect": False}}))
        self._proc("kube-scheduler", [str(self.bin_dir / "kube-scheduler"),
                                      f"--config={config}", "--secure-port=0", "--v=1"],
                   inside=False)

    def _ready(self) -> bool:
        """Ready, and schedulable: the node lifecycle controller lifted the not-ready taint
        the kubelet registered it with."""
        out = self.plane.kubectl_run("get", "node", REAL_NODE_NAME, "-o", "json", check=False)
        node = json.loads(out or "{}")
        ready = [c.get("status") for c in node.get("status", {}).get("conditions", [])
                 if c.get("type") == "Ready"]
        tainted = [t for t in node.get("spec", {}).get("taints", [])
                   if t.get("key") == "node.kubernetes.io/not-ready"]
        return ready == ["True"] and not tainted

    # ---- a node's death, and its return ---------------------------------------------------
    def crash(self) -> None:
        """The node dies as a machine does: its kubelet, kube-proxy, containerd and every
        container (all in its cgroup) killed at once, with no word to the API server. The
        scheduler and the API server's link stay: they are the plane's, not the node's (a
        connection the node had open through the link dies with it). ``restart`` brings it
        back."""
        keep = {p.pid for name, p in self.processes.items()
                if name in ("kube-scheduler", "apiserver-link")}
        deadline = time.monotonic() + 20
        while (pids := self._cgroup_pids() - keep) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for name in ("kubelet", "kube-proxy", "containerd"):
            popen = self.processes[name].popen
            if popen is not None:
                with contextlib.suppress(Exception):
                    popen.wait(timeout=5)

    def restart(self, timeout: float = 180.0) -> RealNode:
        """A crashed node started again under its name: the API server's Node object is the
        old one, which its kubelet takes back (its NoExecute taints lifted once Ready)."""
        self.stop()
        return self.start(timeout)

    # ---- stop -------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop everything the node started and leave nothing behind: its processes and every
        container (all in its cgroup), their mounts, its namespace and link, its cgroup."""
        for name in ("kube-scheduler", "kubelet", "kube-proxy"):
            if name in self.processes:
                self.processes[name].stop()
        self._kill_cgroup()
        for proc in self.processes.values():
            proc.stop(timeout=5)
        unmount_under(self.root)
        _run("ip", "netns", "del", self.netns, check=False)
        _run("ip", "link", "del", self.host_link, check=False)
        self._remove_cgroup()

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for hierarchy in _cgroup_hierarchies():
            top = hierarchy / self.cgroup
            if top.is_dir():
                for procs in top.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _kill_cgroup(self) -> None:
        """SIGKILL every process under the node's cgroup, again until none is left (a shim
        may fork while being killed)."""
        deadline = time.monotonic() + 20
        while (pids := self._cgroup_pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for proc in self.processes.values():
            if proc.popen is not None:
                with contextlib.suppress(Exception):
                    proc.popen.wait(timeout=5)

    def _remove_cgroup(self) -> None:
        for hierarchy in _cgroup_hierarchies():
            top = hierarchy / self.cgroup
            if top.is_dir():
                for folder in sorted((p for p in top.rglob("*") if p.is_dir()),
                                     key=lambda p: len(p.parts), reverse=True):
                    with contextlib.suppress(OSError):
                        folder.rmdir()
                with contextlib.suppress(OSError):
                    top.rmdir()

    # ---- persistence ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"bin_dir": str(self.bin_dir), "images": str(self.images), "index": self.index,
                "pids": {n: p.pid for n, p in self.processes.items()}}

    @classmethod
    def from_json(cls, plane: Plane, data: dict[str, Any]) -> RealNode:
        node = cls(plane=plane, bin_dir=Path(data["bin_dir"]), images=Path(data["images"]),
                   index=data["index"])
        for name, pid in data["pids"].items():
            node.processes[name] = Process(name, [], plane.state_dir / "logs" / f"{name}.log",
                                           pid=pid)
        return node


# containerd's CRI on a socket and folders of the node's own (config version 3, containerd 2.x).
CONTAINERD_CONFIG = """\
version = 3
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # This machine refuses to lower oom_score_adj (no CAP_SYS_RESOURCE): without this every
  # sandbox fails in runc ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Pods' network namespaces under the node's folder, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "{shim}"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni_conf}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
