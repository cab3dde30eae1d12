"""tidings beside Kubeflow Trainer's TrainJob progress, on one local control plane: the same
real Hugging Face ``Trainer`` run (bench/trainer_peer_run.py) reported once through
``tidings.integrations.transformers`` and once through transformers' ``KubeflowCallback`` to the
Trainer controller's status server (v2.3.0, gate TrainJobStatus), alternating with an idle
window, several rounds, all in one run.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_trainer_peer.py [--rounds 3] [--steps 300]
        [--step-s 0.2] [--logging-steps 10]

Both run on the host, as the integration tests' workloads do: the run under tidings has a
kwok pod's identity (the emitter's env) and the workload ServiceAccount's token; the run under
the peer POSTs to the status server on 127.0.0.1 with the token its pod would have mounted (a
TokenRequest with the TrainJob's audience, bound to a kwok pod of the run) and the CA from the
ConfigMap the controller made for the TrainJob. The API server's first service-account issuer
is its own URL here (with the usual in-cluster one still accepted), so the status server,
outside a pod, can fetch the keys that verify those tokens as it would in a cluster.

Per minute of training, net of the idle window of the same round (medians over rounds):
API server CPU, requests by verb and resource, etcd WAL bytes written, the watcher's and the
Trainer controller's CPU and RSS; and the time from a step's loss being logged to the API
object showing that step's loss (p50, p99 over every logged step of every round).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from support import (  # noqa: E402
    Watcher,
    cpu_seconds,
    load_average,
    pct,
    until,
    workload_namespace,
)

from tidings import kube as tkube  # noqa: E402
from tidings.schemas.status.decoder import expanded  # noqa: E402
from tools import devcluster as dc  # noqa: E402
from tools.devplatforms import Platforms  # noqa: E402

JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"
PEER = "trainer-status"


class PeerPlane(dc.ControlPlane):
    """The local plane whose first service-account issuer is its own URL (discovery and keys
    served at it), so a process on the host can verify its tokens the way the status server
    does from a pod; the in-cluster issuer stays accepted."""

    def apiserver_argv(self) -> list[str]:
        url = f"https://127.0.0.1:{self.ports['apiserver']}"
        argv = [a for a in super().apiserver_argv()
                if not a.startswith("--service-account-issuer")]
        return [*argv, f"--service-account-issuer={url}",
                f"--service-account-issuer={dc.SA_ISSUER}",
                f"--service-account-jwks-uri={url}/openid/v1/jwks"]


def frameworks_python() -> str:
    """The frameworks' venv (make integrations-venv): $TIDINGS_INTEGRATIONS_PYTHON, else the
    checkout's newest complete one."""
    explicit = os.environ.get("TIDINGS_INTEGRATIONS_PYTHON")
    if explicit:
        return explicit
    venvs = sorted((p.parent for p in (REPO / ".cache" / "integrations").glob("*/.complete")),
                   key=lambda d: (d / ".complete").stat().st_mtime, reverse=True)
    if not venvs:
        raise SystemExit("no frameworks' venv in .cache/integrations: make integrations-venv")
    return str(venvs[0] / "bin" / "python")


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def apiserver_requests(kube: Any) -> Counter[tuple[str, str]]:
    """apiserver_request_total by (verb, resource) (subresource appended when there is one)."""
    out: Counter[tuple[str, str]] = Counter()
    for line in kube.open("GET", "/metrics").data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")]
                      .split(",") if "=" in kv)
        verb, res = labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"')
        sub = labels.get("subresource", "").strip('"')
        out[(verb, f"{res}/{sub}" if sub else res)] += int(float(line.rsplit(" ", 1)[1]))
    return out


def etcd_wal_bytes(cp: Any) -> float:
    body = dc._http_get(f"{cp.etcd_url}/metrics").decode()
    for line in body.splitlines():
        if line.startswith("etcd_disk_wal_write_bytes_total"):
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit("etcd exposes no etcd_disk_wal_write_bytes_total")


class Snapshot:
    def __init__(self, cp: Any, kube: Any, pids: dict[str, int]) -> None:
        self.t = time.monotonic()
        self.wall = time.time()
        self.cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        self.rss = {name: proc_rss_mib(pid) for name, pid in pids.items()}
        self.requests = apiserver_requests(kube)
        self.wal = etcd_wal_bytes(cp)


def window(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    minutes = (b.t - a.t) / 60
    reqs = b.requests - a.requests
    return {"minutes": minutes,
            "cpu": {k: (b.cpu[k] - a.cpu[k]) / minutes for k in a.cpu},  # CPU s per minute
            "rss": dict(b.rss),
            "requests": {f"{v} {r}": n / minutes for (v, r), n in reqs.items() if n},
            "wal": (b.wal - a.wal) / minutes}


class Pending:
    """Reports sent and not yet shown, by object: when each was sent and first shown."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.unseen: dict[str, dict[Any, float]] = {}  # object -> report -> when sent
        self.waits: list[float] = []
        self.sent = 0

    def send(self, obj: str, report: Any) -> None:
        with self.lock:
            self.unseen.setdefault(obj, {})[report] = time.time()
            self.sent += 1

    def shown(self, obj: str, covers: Any) -> None:
        """Every unseen report of ``obj`` that ``covers(report)`` says the object shows."""
        now = time.time()
        with self.lock:
            reports = self.unseen.get(obj) or {}
            for report in [r for r in reports if covers(r)]:
                self.waits.append(now - reports.pop(report))

    def done(self, failed: int) -> bool:
        with self.lock:
            return len(self.waits) >= self.sent - failed


class Observer:
    """Watches one object and records when each shown loss step first appeared."""

    def __init__(self, kubeconfig: str, path: str, name: str | None, shown: Any) -> None:
        # A client of its own: a watch closed from another thread must not leave a broken
        # connection in the bench's pool.
        self.kube = tkube.connect(kubeconfig)
        self.path, self.name, self.shown = path, name, shown
        self.seen: list[tuple[float, Any]] = []  # (wall time, what the object showed)
        self.objects: list[tuple[float, dict[str, Any]]] = []
        self.last: dict[str, Any] = {}
        self.stream: Any = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.stopped = False
        self.error = ""
        self.thread.start()

    def run(self) -> None:
        while not self.stopped:
            try:
                query = {"watch": "true", "timeoutSeconds": "600"}
                if self.name is not None:
                    query["fieldSelector"] = f"metadata.name={self.name}"
                self.stream = self.kube.stream(self.path, query)
                buf = b""
                for chunk in self.stream.stream(4096):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        obj = json.loads(line)["object"]
                        self.last = obj
                        self.objects.append((time.time(), obj))
                        self.seen.append((time.time(), self.shown(obj)))
            except (KeyError, TypeError, ValueError) as e:  # a bench bug, not the network
                self.error = repr(e)
                return
            except Exception:
                if self.stopped:
                    return
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopped = True
        if self.stream is not None:
            with contextlib.suppress(Exception):  # already ended: nothing to interrupt
                self.stream.shutdown()
        self.thread.join(10)
        self.kube.close()


def tidings_shown(obj: dict[str, Any]) -> Any:
    # The status keeps its metrics as compact records: read them as every reader does.
    status = expanded(obj.get("status") or {})
    loss = (status.get("metrics") or {}).get("loss") or {}
    return (loss.get("step"), loss.get("value"))


def peer_shown(obj: dict[str, Any]) -> Any:
    ts = (obj.get("status") or {}).get("trainerStatus") or {}
    metrics = {m["name"]: m["value"] for m in ts.get("metrics") or []}
    step = metrics.get("current_step")
    if step is None and ts.get("progressPercentage") == 100:
        step = str(2**31)  # the end-of-training report names no step: every step is shown
    return (int(float(step)) if step is not None else None, metrics.get("loss"))


def latencies(logs: list[dict[str, Any]], seen: list[tuple[float, Any]], peer: bool
              ) -> list[float]:
    """Per logged step L: the first time the object showed L's loss or a later one's. The
    peer's object names no loss step: it is the latest logged step at or before its
    ``current_step`` whose loss equals the loss shown."""
    def loss_step(shown: Any) -> int | None:
        step, value = shown
        if step is None or value is None:
            return None
        if not peer:
            return int(step)
        for rec in reversed(logs):
            if rec["step"] <= step and abs(rec["loss"] - float(value)) < 1e-9:
                return int(rec["step"])
        return None

    shown = [(t, s) for t, s in ((t, loss_step(v)) for t, v in seen) if s is not None]
    out = []
    for rec in logs:
        first = next((t for t, s in shown if s >= rec["step"]), None)
        if first is not None:
            out.append(first - rec["t"])
    return out


class Bench:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-peer-"))
        self.cp = PeerPlane(state_dir=self.tmp / "cp").start()
        self.admin = str(self.cp.kubeconfig("admin"))
        self.kube = tkube.connect(self.admin)
        self.ns = workload_namespace(self.cp, self.kube, "peer")
        self.watcher = Watcher(str(self.cp.kubeconfig("admin")), self.ns, self.tmp / "watcher.log")
        until(self.watcher.ready, 60, "the watcher ready")
        self.recordings: dict[str, Any] = {}  # way -> what its last real run sent
        self.platforms = Platforms(self.cp)
        self.folder = self._install_peer()
        self.status_port = self.platforms.ports[PEER]["status"]
        self.pids = {"kube-apiserver": self.cp.processes["kube-apiserver"].popen.pid,
                     "etcd": self.cp.processes["etcd"].popen.pid,
                     "watcher": self.watcher.proc.pid,
                     "trainer": self.platforms.processes[PEER].popen.pid}
        self.workload_kubeconfig = self.cp.write_kubeconfig(
            self.tmp / "workload.kubeconfig", "trainer", self.cp.kubectl_run(
                "create", "token", "trainer", "-n", self.ns, "--duration=24h").strip())

    def _install_peer(self) -> Path:
        from tools.devplatforms import PLATFORMS
        folder = PLATFORMS[PEER].folder()
        # The JobSet module the build downloaded (its go.mod's), from Go's module cache.
        modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True,
                                  text=True).stdout.strip() or str(Path.home() / "go/pkg/mod")
        crd = next(Path(modcache).glob("sigs.k8s.io/jobset@v0.12.*/config/components/"
                                       f"crd/bases/{JOBSET_CRD}"), None)
        if crd is None:  # the JobSet API the TrainJob controller writes (v0.12, its go.mod's)
            raise SystemExit("JobSet v0.12 CRD not in the Go module cache: "
                             "tools/platforms/build.sh trainer-status")
        self.cp.kubectl_run("apply", "--server-side", "-f", str(crd))
        self.cp.wait_established("jobsets.jobset.x-k8s.io")
        proc = self.platforms.start(PEER)
        self.cp.kubectl_run("apply", "--server-side", "-f", str(
            folder / "manifests" / "base" / "runtimes" / "torch_distributed.yaml"))
        deadline = time.monotonic() + 60
        while "Starting runtime status server" not in proc.log.read_text(errors="replace"):
            if time.monotonic() > deadline or not proc.alive():
                raise SystemExit("the Trainer's status server did not start:\n"
                                 + proc.log.read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        return folder

    def kwok_pod(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        pod: dict[str, Any] = self.kube.request(
            "POST", f"/api/v1/namespaces/{self.ns}/pods", body={
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": dc.NODE_NAME, "serviceAccountName": "trainer",
                         "containers": [{"name": "node", "image": "pytorch"}]}})
        return pod

    # ---- one run each way ------------------------------------------------------------
    def run_child(self, mode: str, env: dict[str, str]) -> tuple[Snapshot, Snapshot, list[Any]]:
        out = self.tmp / f"{mode}-{uuid.uuid4().hex[:6]}.json"
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("TIDINGS_", "POD_", "KUBECONFIG", "KUBEFLOW_"))}
        clean.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                      "TOKENIZERS_PARALLELISM": "false", **env})
        err = self.tmp / f"{mode}.err"
        with open(err, "ab") as errors:
            child = subprocess.Popen(
                [frameworks_python(), str(REPO / "bench" / "trainer_peer_run.py"), mode,
                 "--steps", str(self.a.steps), "--step-s", str(self.a.step_s),
                 "--logging-steps", str(self.a.logging_steps), "--out", str(out),
                 "--workdir", str(self.tmp)],
                env=clean, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=self.tmp)
        assert child.stdout is not None
        begin = end = None
        for line in child.stdout:
            if line.startswith("BEGIN"):
                begin = Snapshot(self.cp, self.kube, self.pids)
            elif line.startswith("END"):
                end = Snapshot(self.cp, self.kube, self.pids)
        if child.wait(600) != 0 or begin is None or end is None:
            raise SystemExit(f"the {mode} run failed: " + err.read_text()[-3000:])
        return begin, end, json.loads(out.read_text())

    def tidings_run(self) -> tuple[dict[str, Any], list[float]]:
        task = f"hf-{uuid.uuid4().hex[:6]}"
        pod = self.kwok_pod(f"{task}-0", {"tidings.dev/task": task})
        obs = Observer(self.admin, f"/apis/tidings.dev/v1alpha1/namespaces/{self.ns}/taskfeedbacks",
                       task, tidings_shown)
        try:
            begin, end, logs = self.run_child("tidings", {
                "POD_NAME": pod["metadata"]["name"], "POD_NAMESPACE": self.ns,
                "POD_UID": pod["metadata"]["uid"], "TIDINGS_TASK": task,
                "KUBECONFIG": str(self.workload_kubeconfig),
                **({"TIDINGS_EMIT_SPAN_WINDOW_S": str(self.a.tidings_window)}
                   if self.a.tidings_window else {})})
            self._settle(obs, logs, peer=False)
        finally:
            obs.stop()
        self.recordings["tidings"] = self._record_events(task, pod, float(begin.wall))
        return window(begin, end), latencies(logs, obs.seen, peer=False)

    def peer_run(self) -> tuple[dict[str, Any], list[float]]:
        name = f"hf-{uuid.uuid4().hex[:6]}"
        self.kube.request("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{self.ns}/"
                          "trainjobs", body={
                              "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                              "metadata": {"name": name},
                              "spec": {"runtimeRef": {"name": "torch-distributed"},
                                       "trainer": {"image": "pytorch", "numNodes": 1}}})
        # The CA the controller copies into the run's pods (a ConfigMap per TrainJob).
        cm_path = f"/api/v1/namespaces/{self.ns}/configmaps/{name}-tls-config"
        ca = self._eventually(lambda: self.kube.get(cm_path)["data"]["ca.crt"], 60,
                              f"the ConfigMap {name}-tls-config")
        pod = self.kwok_pod(f"{name}-node-0-0", {"jobset.sigs.k8s.io/jobset-name": name})
        audience = (f"trainer.kubeflow.org/v1alpha1/namespaces/{self.ns}/trainjobs/{name}"
                    "/status")
        token = self.cp.kubectl_run(
            "create", "token", "trainer", "-n", self.ns, f"--audience={audience}",
            "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}",
            f"--bound-object-uid={pod['metadata']['uid']}", "--duration=1h").strip()
        secrets = self.tmp / name
        secrets.mkdir()
        (secrets / "ca.crt").write_text(ca)
        (secrets / "token").write_text(token)
        obs = Observer(self.admin, f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{self.ns}/"
                       "trainjobs", name, peer_shown)
        try:
            begin, end, logs = self.run_child("kubeflow", {
                "KUBEFLOW_TRAINER_SERVER_URL": f"https://127.0.0.1:{self.status_port}/apis/"
                f"trainer.kubeflow.org/v1alpha1/namespaces/{self.ns}/trainjobs/{name}/status",
                "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(secrets / "ca.crt"),
                "KUBEFLOW_TRAINER_SERVER_TOKEN": str(secrets / "token")})
            self._settle(obs, logs, peer=True)
        finally:
            obs.stop()
        if not any(shown[0] is not None for _, shown in obs.seen):
            raise SystemExit("the TrainJob never showed the run's progress: "
                             f"{json.dumps(obs.last.get('status'))[:2000]}")
        # What the run POSTed, in order: every trainerStatus the object showed (each POST
        # is applied whole), at its offset into the training.
        posted: list[tuple[float, dict[str, Any]]] = []
        for t, obj in obs.objects:
            ts = (obj.get("status") or {}).get("trainerStatus")
            if ts and (not posted or posted[-1][1] != ts):
                posted.append((t - begin.wall, ts))
        self.recordings["peer"] = posted
        return window(begin, end), latencies(logs, obs.seen, peer=True)

    def _settle(self, obs: Observer, logs: list[dict[str, Any]], peer: bool) -> None:
        """Until the object shows the last logged loss (30 s at most: then the latency list
        misses the steps never shown, and the table says how many)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if logs and len(latencies(logs, obs.seen, peer)) == len(logs):
                return
            time.sleep(0.2)

    def _record_events(self, task: str, pod: dict[str, Any], began: float
                       ) -> list[tuple[float, bytes]]:
        """The Events the run sent (as stored), by their eventTime's offset into the training,
        as templates: the task's and its pod's names and uid become placeholders."""
        items, _ = self.kube.list_all(f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events")
        out = []
        for ev in items:
            if not ev["metadata"]["name"].startswith(f"{task}."):
                continue
            meta = ev["metadata"]
            ev["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels", "annotations")
                              if k in meta}
            for k in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount",
                      "deprecatedSource", "series"):
                ev.pop(k, None)
            when = datetime.fromisoformat(ev["eventTime"].replace("Z", "+00:00")).timestamp()
            raw = json.dumps(ev).replace(pod["metadata"]["uid"], "@UID@")
            raw = raw.replace(pod["metadata"]["name"], "@POD@").replace(task, "@TASK@")
            out.append((max(0.0, when - began), raw.encode()))
        return sorted(out, key=lambda x: x[0])

    # ---- N concurrent runs, replayed --------------------------------------------------
    def scale(self, n: int, seconds: float) -> dict[str, Any]:
        """``n`` runs of each way at once on kwok pods, each replaying its way's recording
        (the first ``seconds`` of it), one way after the other, and an idle window."""
        out = {"tidings": self._scale_tidings(n, seconds), "peer": self._scale_peer(n, seconds)}
        out["idle"] = self.idle(seconds)
        return out

    def _replay(self, schedule: list[tuple[float, Any]], send: Any, seconds: float,
                threads: int = 32) -> tuple[Snapshot, int]:
        """Runs ``send(item)`` at each (offset, item) from now on, on ``threads`` threads;
        returns the snapshot taken when the window opened and how many reports were skipped
        because no thread was free for them within 5 s (a run's next report would supersede
        them; the count says when the bench, not the plane, could not keep up)."""
        from concurrent.futures import ThreadPoolExecutor
        schedule = sorted(schedule, key=lambda x: x[0])
        skipped = [0]
        start = Snapshot(self.cp, self.kube, self.pids)
        t0 = time.monotonic()

        def run(due: float, item: Any) -> None:
            if time.monotonic() - due > 5:
                skipped[0] += 1
                return
            send(item)

        with ThreadPoolExecutor(threads) as pool:
            for offset, item in schedule:
                wait = t0 + offset - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                pool.submit(run, t0 + offset, item)
            left = t0 + seconds - time.monotonic()
            if left > 0:
                time.sleep(left)
        return start, skipped[0]

    def _scale_tidings(self, n: int, seconds: float) -> dict[str, Any]:
        import random

        from tidings.schemas.engine.version_vector import VersionVector
        recording = [(t, raw) for t, raw in self.recordings["tidings"] if t < seconds]
        ns = self.ns  # the watcher's
        tasks = [f"s{i:04d}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        pods = self._pods(ns, {t: {"tidings.dev/task": t} for t in tasks})
        pending = Pending()
        failed = [0]

        def shown(obj: dict[str, Any]) -> None:
            applied = (obj.get("status") or {}).get("applied")
            if applied:
                vv = VersionVector.from_text(applied)
                pending.shown(obj["metadata"]["name"], lambda r: vv.contains(r[0], r[1]))

        watch = Observer(self.admin, f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks",
                         None, shown)

        def send(item: tuple[str, bytes]) -> None:
            task, raw = item
            pod = pods[task]
            body = json.loads(raw.replace(b"@UID@", pod["uid"].encode())
                              .replace(b"@POD@", pod["name"].encode())
                              .replace(b"@TASK@", task.encode()))
            body["metadata"]["namespace"] = ns
            for ref in ("regarding", "related"):
                if isinstance(body.get(ref), dict):
                    body[ref]["namespace"] = ns
            body["eventTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            ann = body["metadata"].get("annotations") or {}
            pending.send(task, (ann.get("tidings.dev/instance", ""),
                                int(ann.get("tidings.dev/seq", 0))))
            try:
                self.kube.request("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
                                  body=body, timeout=(5, 30))
            except Exception:
                failed[0] += 1

        # Each run starts somewhere in the recording's first window of coalescing (6 s).
        schedule = [(t + random.uniform(0, 6), (task, raw)) for task in tasks
                    for t, raw in recording]
        start, skipped = self._replay(schedule, send, seconds + 6)
        end = Snapshot(self.cp, self.kube, self.pids)
        self._drain(lambda: pending.done(failed[0]), 60)
        watch.stop()
        return {**window(start, end), "sent": pending.sent, "failed": failed[0],
                "skipped": skipped, "shown": len(pending.waits), "stale": pending.waits}

    def _scale_peer(self, n: int, seconds: float) -> dict[str, Any]:
        import random
        import ssl
        import urllib.request
        recording = [(t, ts) for t, ts in self.recordings["peer"] if t < seconds]
        ns = self._scale_namespace("ps")
        names = [f"s{i:04d}-{uuid.uuid4().hex[:4]}" for i in range(n)]
        from concurrent.futures import ThreadPoolExecutor

        def trainjob(name: str) -> None:
            self.kube.request("POST", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/"
                              "trainjobs", body={
                                  "apiVersion": "trainer.kubeflow.org/v1alpha1",
                                  "kind": "TrainJob", "metadata": {"name": name},
                                  "spec": {"runtimeRef": {"name": "torch-distributed"},
                                           "trainer": {"image": "pytorch", "numNodes": 1}}})
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(trainjob, names))
        pods = self._pods(ns, {f"{nm}-node-0-0": {"jobset.sigs.k8s.io/jobset-name": nm}
                               for nm in names})

        def token(name: str) -> str:
            pod = pods[f"{name}-node-0-0"]
            got = self.kube.request(
                "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/trainer/token", body={
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"audiences": [f"trainer.kubeflow.org/v1alpha1/namespaces/{ns}/"
                                           f"trainjobs/{name}/status"],
                             "expirationSeconds": 3600,
                             "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                                "name": pod["name"], "uid": pod["uid"]}}})
            return str(got["status"]["token"])
        with ThreadPoolExecutor(16) as pool:
            tokens = dict(zip(names, pool.map(token, names), strict=True))
        cm = f"/api/v1/namespaces/{ns}/configmaps"
        self._drain(lambda: sum(1 for c in self.kube.list_all(cm)[0]
                                if c["metadata"]["name"].endswith("-tls-config")) >= n, 600)
        ca = self.kube.get(f"{cm}/{names[0]}-tls-config")["data"]["ca.crt"]
        context = ssl.create_default_context(cadata=ca)
        pending = Pending()
        failed = [0]

        def shown(obj: dict[str, Any]) -> None:
            step = peer_shown(obj)[0]
            if step is not None:
                pending.shown(obj["metadata"]["name"], lambda r: r <= step)

        watch = Observer(self.admin, f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/"
                         "trainjobs", None, shown)

        def send(item: tuple[str, dict[str, Any]]) -> None:
            name, ts = item
            ts = {**ts, "lastUpdatedTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
            step = peer_shown({"status": {"trainerStatus": ts}})[0]
            pending.send(name, step if step is not None else -1)
            req = urllib.request.Request(
                f"https://127.0.0.1:{self.status_port}/apis/trainer.kubeflow.org/v1alpha1/"
                f"namespaces/{ns}/trainjobs/{name}/status",
                data=json.dumps({"trainerStatus": ts}).encode(), method="POST",
                headers={"Authorization": f"Bearer {tokens[name]}",
                         "Content-Type": "application/json"})
            try:  # as the callback posts: one connection per POST, a 5 s timeout
                with urllib.request.urlopen(req, timeout=5, context=context) as resp:
                    if resp.status != 200:
                        failed[0] += 1
            except Exception:
                failed[0] += 1

        schedule = [(t + random.uniform(0, 5), (name, ts)) for name in names
                    for t, ts in recording]
        start, skipped = self._replay(schedule, send, seconds + 5, threads=128)
        end = Snapshot(self.cp, self.kube, self.pids)
        self._drain(lambda: pending.done(failed[0]), 60)
        watch.stop()
        return {**window(start, end), "sent": pending.sent, "failed": failed[0],
                "skipped": skipped, "shown": len(pending.waits), "stale": pending.waits}

    def _scale_namespace(self, prefix: str) -> str:
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        self.kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                          body={"metadata": {"name": "trainer"}})
        return ns

    def _pods(self, ns: str, labels: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        """A kwok pod per key (its name; for tidings the task, whose pod is ``<task>-0``)."""
        from concurrent.futures import ThreadPoolExecutor

        def make(key: str) -> tuple[str, dict[str, str]]:
            name = key if key.endswith("-0-0") else f"{key}-0"
            pod = self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body={
                "metadata": {"name": name, "labels": labels[key]},
                "spec": {"nodeName": dc.NODE_NAME, "serviceAccountName": "trainer",
                         "containers": [{"name": "node", "image": "pytorch"}]}})
            return key, {"name": name, "uid": pod["metadata"]["uid"]}
        with ThreadPoolExecutor(16) as pool:
            return dict(pool.map(make, labels))

    @staticmethod
    def _drain(done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            time.sleep(0.5)

    def idle(self, seconds: float) -> dict[str, Any]:
        a = Snapshot(self.cp, self.kube, self.pids)
        time.sleep(seconds)
        return window(a, Snapshot(self.cp, self.kube, self.pids))

    @staticmethod
    def _eventually(fn: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except Exception:
                if time.monotonic() > deadline:
                    raise SystemExit(f"timed out waiting for {what}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.watcher.stop()
        self.cp.stop()


def net(run: dict[str, Any], idle: dict[str, Any]) -> dict[str, Any]:
    reqs = {k: v - idle["requests"].get(k, 0.0) for k, v in run["requests"].items()}
    return {"cpu": {k: v - idle["cpu"][k] for k, v in run["cpu"].items()},
            "rss": run["rss"], "requests": reqs, "wal": run["wal"] - idle["wal"],
            "minutes": run["minutes"]}


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(rounds: list[dict[str, Any]], lat: dict[str, list[float]], logged: dict[str, int]
           ) -> str:
    ways = ("tidings", "peer")
    lines = [f"tidings vs Kubeflow Trainer v2.3.0 progress, {len(rounds)} rounds, "
             f"{load_average()}", "per minute of training, net of the idle window of the same "
             "round (median over rounds)", f"{'':34}{'tidings':>12}{'peer':>12}{'ratio':>8}"]

    def row(label: str, values: dict[str, float], fmt: str = "{:.3f}") -> None:
        t, p = values["tidings"], values["peer"]
        ratio = f"{t / p:.2f}" if p else "-"
        lines.append(f"{label:34}{fmt.format(t):>12}{fmt.format(p):>12}{ratio:>8}")

    for proc in ("kube-apiserver", "etcd", "watcher", "trainer"):
        row(f"{proc} CPU s/min", {w: med([r[w]["cpu"][proc] for r in rounds]) for w in ways})
    row("etcd WAL KiB/min", {w: med([r[w]["wal"] / 1024 for r in rounds]) for w in ways}, "{:.1f}")
    keys = sorted({k for r in rounds for w in ways for k in r[w]["requests"]})
    total = {w: med([sum(v for v in r[w]["requests"].values()) for r in rounds]) for w in ways}
    row("API requests/min (all)", total, "{:.1f}")
    for k in keys:
        vals = {w: med([r[w]["requests"].get(k, 0.0) for r in rounds]) for w in ways}
        if max(abs(v) for v in vals.values()) >= 0.5:
            row(f"  {k}", vals, "{:.1f}")
    for proc in ("watcher", "trainer"):
        row(f"{proc} RSS MiB (end)", {w: med([r[w]["rss"][proc] for r in rounds]) for w in ways},
            "{:.0f}")
    idle = [r["idle"] for r in rounds]
    lines.append(f"idle plane: kube-apiserver {med([i['cpu']['kube-apiserver'] for i in idle]):.3f}"
                 f" CPU s/min, {med([sum(i['requests'].values()) for i in idle]):.1f} "
                 f"requests/min, etcd WAL {med([i['wal'] / 1024 for i in idle]):.1f} KiB/min")
    for w in ways:
        xs = lat[w]
        lines.append(f"step log -> object shows its loss, {w}: p50 {pct(xs, 50):.2f} s, "
                     f"p99 {pct(xs, 99):.2f} s ({len(xs)} of {logged[w]} logged steps shown)")
    return "\n".join(lines)


def scale_report(levels: dict[int, dict[str, Any]]) -> str:
    lines = ["", "N concurrent runs of each, replaying the real runs' recordings "
             f"({load_average()})",
             f"{'runs':>6} {'way':8}{'apiserver cores':>16}{'etcd cores':>11}"
             f"{'WAL KiB/s':>10}{'req/s':>8}{'writes/s':>9}{'sent':>7}{'failed':>7}"
             f"{'skipped':>8}{'shown p50/p99/max s':>22}"]
    for n, lv in levels.items():
        for way in ("tidings", "peer"):
            w = net(lv[way], lv["idle"])
            writes = sum(v for k, v in w["requests"].items()
                         if k.split()[0] in ("POST", "PUT", "PATCH", "APPLY", "DELETE"))
            st = lv[way]["stale"]
            lines.append(
                f"{n:>6} {way:8}{w['cpu']['kube-apiserver'] / 60:>16.3f}"
                f"{w['cpu']['etcd'] / 60:>11.3f}{w['wal'] / 1024 / 60:>10.1f}"
                f"{sum(w['requests'].values()) / 60:>8.1f}{writes / 60:>9.1f}"
                f"{lv[way]['sent']:>7}{lv[way]['failed']:>7}{lv[way]['skipped']:>8}"
                f"{pct(st, 50):>8.2f}/{pct(st, 99):.2f}/{max(st, default=float('nan')):.2f}"
                f" ({lv[way]['shown']} shown)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--step-s", type=float, default=0.5)
    ap.add_argument("--logging-steps", type=int, default=10)
    ap.add_argument("--json", help="write the raw windows here")
    ap.add_argument("--scale", default="",
                    help="after the rounds, N concurrent runs of each way (comma-separated "
                    "Ns, e.g. 100,1000) on kwok pods, replaying the last round's recordings")
    ap.add_argument("--scale-seconds", type=float, default=60.0)
    ap.add_argument("--tidings-window", type=float, default=0.0,
                    help="the emitter's window of coalescible facts in the tidings run "
                    "(TIDINGS_EMIT_SPAN_WINDOW_S; 0: its default, 6 s)")
    ap.add_argument("--status-qps", type=int, default=0,
                    help="the status server's API client QPS (burst twice it); 0: the "
                    "release's 5 (burst 10)")
    ap.add_argument("--smoke", action="store_true",
                    help="one short round, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.rounds, a.steps, a.step_s, a.logging_steps = 1, 12, 0.1, 4
    if a.status_qps:
        from tools import devplatforms
        devplatforms.TRAINER_STATUS_CLIENT.update(qps=a.status_qps, burst=2 * a.status_qps)
    bench = Bench(a)
    rounds: list[dict[str, Any]] = []
    lat: dict[str, list[float]] = {"tidings": [], "peer": []}
    logged = {"tidings": 0, "peer": 0}
    try:
        for i in range(a.rounds):
            # Alternate which goes first, so neither always follows the other's tail.
            order = ("tidings", "peer") if i % 2 == 0 else ("peer", "tidings")
            r: dict[str, Any] = {}
            for way in order:
                win, xs = bench.tidings_run() if way == "tidings" else bench.peer_run()
                r[way] = win
                lat[way] += xs
                logged[way] += a.steps // a.logging_steps
            r["idle"] = bench.idle(60 * statistics.mean([r[w]["minutes"] for w in order]))
            rounds.append({"idle": r["idle"], **{w: net(r[w], r["idle"]) for w in order}})
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)
        levels: dict[int, dict[str, Any]] = {}
        for n in [int(x) for x in a.scale.split(",") if x]:
            levels[n] = bench.scale(n, a.scale_seconds)
            print(f"scale {n} done", file=sys.stderr, flush=True)
    finally:
        bench.stop()
    if a.json:
        Path(a.json).write_text(json.dumps({"rounds": rounds, "latency": lat,
                                            "scale": levels}))
    print(report(rounds, lat, logged))
    if levels:
        print(scale_report(levels))
    blind = [w for w, xs in lat.items() if not xs]
    if blind:  # a side whose object never showed a logged step measured nothing
        raise SystemExit(f"no logged step was ever shown by: {', '.join(blind)}")


if __name__ == "__main__":
    main()
