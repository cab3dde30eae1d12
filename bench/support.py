"""Pieces the cluster benchmarks share: the control plane they measure (a fresh one, or a
running one by its state dir), a process's CPU from /proc, percentiles, one event create that
rides out a busy API server, the watcher as a subprocess (``tidings watcher run`` with its
HTTP port read from stdout), and a training task's status as the watcher writes it."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidings._compat import UTC
from tidings.kube import Client, KubeError
from tidings.schemas import (
    DeckReady,
    LogLink,
    Metric,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    build_event,
    fold_all,
    parse_event,
)
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.contract import events_path

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def add_control_plane_arg(ap: argparse.ArgumentParser) -> None:
    """``--control-plane DIR`` (attach to a running plane) and ``--smoke`` (a few iterations,
    the figures meaningless: the suite runs every bench this way so none can rot)."""
    ap.add_argument("--control-plane", metavar="DIR",
                    help="measure the running local control plane recorded in DIR (the state "
                    "dir of `tidings dev up`) instead of starting a fresh one")
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")


@contextlib.contextmanager
def control_plane(state_dir: str | None, prefix: str = "bench-") -> Iterator[Any]:
    """The plane a bench measures: the one recorded in ``state_dir`` (its process ids are
    what the CPU columns read), else a fresh one in a temporary dir, stopped on exit. Its
    CRD is applied (unless the running plane has it already) and Established."""
    from tidings.cli.dev import devcluster

    ControlPlane = devcluster().ControlPlane  # the checkout's tools/devcluster.py
    if state_dir:
        cp = ControlPlane.load(Path(state_dir))
        owned = False
    else:
        cp = ControlPlane(state_dir=Path(tempfile.mkdtemp(prefix=prefix)) / "cp").start()
        owned = True
    try:
        if owned or not cp.kubectl_run("get", "crd", "taskfeedbacks.tidings.dev",
                                       "--ignore-not-found", "-o", "name").strip():
            cp.kubectl_run("apply", "-f", str(REPO / "deploy" / "crd.yaml"))
        cp.wait_established("taskfeedbacks.tidings.dev")
        yield cp
    finally:
        if owned:
            cp.stop()


def load_average() -> str:
    """The 1-minute load average and the CPU count, for every table's heading."""
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def load_averages() -> str:
    """The 1, 5 and 15-minute load averages, for a bench's before and after lines."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class KeepEvents:
    """An Emitter's transport that keeps every event body it is given (delivered at once):
    a run's events, as the API server would store them."""

    sink = False

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        self.bodies.append(body)
        return True


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def job_pod(job: str, job_uid: str, name: str, image: str, node: str = "kwok-node-0"
            ) -> dict[str, Any]:
    """A pod as the Job controller makes it for Job ``job`` (its labels and controller
    reference), on ``node``: the benches do the Job controller's work themselves."""
    return {"metadata": {"name": name, "labels": {
        "batch.kubernetes.io/job-name": job, "job-name": job,
        "batch.kubernetes.io/controller-uid": job_uid, "controller-uid": job_uid},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                             "uid": job_uid, "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "m", "image": image}]}}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def post_event(kube: Client, ns: str, body: dict[str, Any], pause: float = 0.1) -> bool:
    """Create one bus event, retried while the API server is overloaded (50 tries); an
    AlreadyExists (a retry of a create that landed) counts as created."""
    for _ in range(50):
        try:
            kube.request("POST", events_path(ns), body=body, timeout=(5, 30))
            return True
        except KubeError as e:
            if e.status == 409:
                return True
            time.sleep(pause)
    return False


class Watcher:
    """One watcher for namespace ``ns``, no leader election, logs to ``log`` (``exe``: the
    ``tidings`` of another checkout, for a baseline)."""

    def __init__(self, kubeconfig: str, ns: str, log: Path, flags: list[str] | None = None,
                 exe: Path | None = None) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [str(exe or REPO / ".venv/bin/tidings"), "watcher", "run", "--kubeconfig", kubeconfig,
             "-n", ns, "--no-leader-elect", "--metrics-host", "127.0.0.1", "--metrics-port",
             "0", "--log-level", "WARNING", *(flags or [])],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().strip().rsplit(":", 1)[1])

    def metrics(self) -> dict[str, float]:
        """Samples as {'name{labels}': value}."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read()
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                          timeout=5).status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def training_status(namespace: str, name: str, fraction: float, message: str,
                    t0: datetime) -> dict[str, Any]:
    """A training task's status as the watcher writes it: 2 workers, a link, a deck, 2
    metrics, 2 span names, its facts from ``t0`` on."""
    ref = TaskRef(namespace, name)
    facts = [LogLink(name="dashboard", url=f"https://grafana.example/d/{name}"),
             DeckReady(name="report", uri=f"s3://bucket/{name}/report.html"),
             Metric(name="loss", value=0.5, step=100), Metric(name="lr", value=3e-4, step=100),
             SpanSummary(name="train_step", count=100, total_s=20.0, min_s=0.1, max_s=0.4,
                         first_start=t0.timestamp(), last_end=t0.timestamp() + 60),
             SpanSummary(name="evaluate", count=1, total_s=3.0, min_s=3.0, max_s=3.0,
                         first_start=t0.timestamp() + 30, last_end=t0.timestamp() + 33),
             Progress(fraction=fraction, message=message),
             Progress(fraction=fraction * 0.9, message=message)]
    events = []
    for n, p in enumerate(facts):
        pod = n % 2
        events.append(parse_event(build_event(
            task=ref, pod=PodRef(f"{name}-{pod}", f"uid-{pod}", namespace), payload=p,
            instance=f"i{pod}", seq=n, time=t0 + timedelta(seconds=n), sender_proof=False)))
    out: dict[str, Any] = to_status(fold_all(ref, events))  # type: ignore[arg-type]
    return out


@contextlib.contextmanager
def real_node_plane(state_dir: str | None, prefix: str) -> Iterator[tuple[Any, float | None]]:
    """(plane, seconds its real node took to join) for the real node's benches: the plane
    recorded in ``state_dir`` (it must have a node; None for the time), else a fresh one with
    a node, stopped on exit."""
    from tidings.cli.dev import devcluster

    dc = devcluster()
    if state_dir:
        cp = dc.ControlPlane.load(Path(state_dir))
        if cp.node is None:
            raise SystemExit(f"the plane in {state_dir} has no real node "
                             "(tidings dev up --real-node)")
        yield cp, None
        return
    cp = dc.ControlPlane(state_dir=Path(tempfile.mkdtemp(prefix=prefix)) / "cp").start()
    try:
        began = time.monotonic()
        cp.add_real_node()
        yield cp, time.monotonic() - began
    finally:
        cp.stop()


def workload_namespace(cp: Any, kube: Client, prefix: str) -> str:
    """A fresh namespace whose ServiceAccount ``trainer`` is bound to tidings-workload, with
    what workloads need applied (the CRD, their role, the sender policy)."""
    for manifest in ("crd.yaml", "workload-role.yaml", "admission-policy.yaml"):
        cp.kubectl_run("apply", "-f", str(REPO / "deploy" / manifest))
    cp.wait_established("taskfeedbacks.tidings.dev")
    ns = f"{prefix}-{os.urandom(3).hex()}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                 body={"metadata": {"name": "trainer"}})
    kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                 body={"metadata": {"name": "trainer"}, "roleRef": {
                     "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "tidings-workload"}, "subjects": [
                     {"kind": "ServiceAccount", "name": "trainer", "namespace": ns}]})
    return ns


def delete_namespace(kube: Client, ns: str) -> None:
    """A namespace and its pods: on a plane without the namespace controller they would
    outlive it, running on a real node."""
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods")
    kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def now() -> str:
    """The time now as the API server writes it (whole seconds, RFC 3339)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rss_kib(pid: int) -> int:
    """A process's resident memory (KiB), 0 once it is gone."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def until(probe: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """``probe()``'s first true answer (an API error counts as none), polled every ``every``
    seconds; the bench exits saying what it waited for after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = probe()
        except KubeError:
            found = None
        if found:
            return found
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
