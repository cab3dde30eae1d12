"""Benchmark what reading the pods' ends and the platform objects costs the watcher:
its CPU per event and the watches it holds per namespace, this checkout's watcher against a
baseline watcher (``--baseline``: the ``tidings`` of another checkout, e.g. main's), on one
local control plane, in the same run.

Per run, a fresh namespace and one watcher for it; the workload is what a cluster of Jobs
does: ``--tasks`` Jobs (the objects, their status written as the Job controller would:
started, then complete), each with ``--pods`` pods as the Job controller makes them (its
labels and ownerReference, no tidings wiring) that kwok runs, each pod sending ``--events``
facts about itself (progress, the last a final but for one pod per task, which is
OOM-killed instead), then its end written as its kubelet would (Succeeded, or Failed
OOMKilled) and the pod deleted. The minimal CRDs of JobSet, Workflow and TrainJob are
installed, so the watcher watches every platform kind it knows. Measured:

  cpu/event   the watcher's CPU (user + system, /proc) from the first create to the last
              status write, over the bus events it applied (the pods' and Jobs' watch events
              are the extra work; their count per bus event is printed);
  watches/ns  the WATCH requests the API server holds for the namespace while the watcher
              idles (apiserver_longrunning_requests, scope namespace), by resource;
  pod end     for this checkout: from an OOM kill written to the pod's status until the
              TaskFeedback shows it (median and max over the tasks; the baseline never does).

Runs alternate baseline and this checkout ``--repeats`` times; the table gives medians and
the ratio to the baseline, and the load average before and after.

Run: ``TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_pod_truth.py --baseline
/path/to/main/.venv/bin/tidings``. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import Watcher, cpu_seconds, job_pod, load_averages, post_event  # bench/support.py

from tidings.kube import Client, KubeError, connect
from tidings.schemas.wire.event import ObjectRef, PodRef, TaskRef, build_event
from tidings.schemas.wire.payloads import Progress

NODE = "kwok-node-0"
# Minimal CRDs of the platform kinds the watcher watches besides Jobs (their controllers are
# not needed: only their watches are measured).
PLATFORM_CRDS = (("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
                 ("argoproj.io", "v1alpha1", "Workflow", "workflows"),
                 ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def patch_status(kube: Client, path: str, status: dict[str, Any]) -> None:
    kube.request("PATCH", f"{path}/status", body={"status": status},
                 content_type="application/merge-patch+json")


def watches(kube: Client, ns_count_before: dict[str, float]) -> dict[str, float]:
    """WATCH requests per resource the API server holds in namespace scope, less ``before``."""
    text = kube.open("GET", "/metrics").data.decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_longrunning_requests{") or 'verb="WATCH"' not in line \
                or 'scope="namespace"' not in line:
            continue
        labels, value = line.rsplit(" ", 1)
        resource = labels.split('resource="', 1)[1].split('"', 1)[0]
        out[resource] = out.get(resource, 0.0) + float(value)
    return {r: v - ns_count_before.get(r, 0.0) for r, v in out.items()
            if v - ns_count_before.get(r, 0.0) > 0}


class Run:
    """One watcher over one namespace through the workload."""

    def __init__(self, kube: Client, kubeconfig: str, exe: Path | None, a: argparse.Namespace,
                 tmp: Path, label: str) -> None:
        self.kube, self.a = kube, a
        self.ns = f"bench-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.ns}})
        kube.request("POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                     body={"metadata": {"name": "default"}})
        idle = watches(kube, {})
        self.w = Watcher(kubeconfig, self.ns, tmp / f"watcher-{label}-{self.ns}.log",
                         ["--write-interval", "0.2"], exe=exe)
        while not self.w.ready():
            time.sleep(0.1)
        time.sleep(1.0)
        self.watches = watches(kube, idle)
        self.ended_at: dict[str, float] = {}
        self.ended: list[PodRef] = []

    def pods_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.ns}/pods" + (f"/{name}" if name else "")

    def job_path(self, name: str = "") -> str:
        return f"/apis/batch/v1/namespaces/{self.ns}/jobs" + (f"/{name}" if name else "")

    def task(self, i: int) -> int:
        """One Job and its pods; returns the bus events sent."""
        a, kube, name = self.a, self.kube, f"job-{i}"
        job = kube.request("POST", self.job_path(), body={
            "metadata": {"name": name}, "spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "m", "image": "busybox"}]}}}})
        juid = job["metadata"]["uid"]
        patch_status(kube, self.job_path(name), {"startTime": now(), "active": a.pods})
        pods = []
        for k in range(a.pods):
            p = kube.request("POST", self.pods_path(),
                             body=job_pod(name, juid, f"{name}-{k}", "busybox", NODE))
            pods.append(PodRef(p["metadata"]["name"], p["metadata"]["uid"]))
        sent = 0
        for k, pod in enumerate(pods):
            killed = k == 0
            for seq in range(1, a.events + 1):
                final = seq == a.events and not killed
                body = build_event(task=TaskRef(self.ns, pod.name), pod=pod, payload=Progress(
                    fraction=seq / a.events, final=final), instance=f"{pod.name}-i", seq=seq,
                    time=datetime.now(UTC), sender_proof=False,
                    regarding=ObjectRef("v1", "Pod", pod.name, self.ns, pod.uid))
                sent += post_event(kube, self.ns, body)
            t = {"exitCode": 137 if killed else 0, "reason": "OOMKilled" if killed
                 else "Completed", "startedAt": now(), "finishedAt": now()}
            patch_status(kube, self.pods_path(pod.name), {
                "phase": "Failed" if killed else "Succeeded",
                "containerStatuses": [{"name": "m", "image": "busybox", "ready": False,
                                       "restartCount": 0, "state": {"terminated": t}}]})
            if killed:
                self.ended_at[name] = time.monotonic()
        patch_status(kube, self.job_path(name), {"active": 0, "failed": 1,
                                                 "succeeded": a.pods - 1, "conditions": [
            {"type": t, "status": "True", "reason": "CompletionsReached",
             "lastTransitionTime": now(), "lastProbeTime": now()}
            for t in ("SuccessCriteriaMet", "Complete")], "completionTime": now()})
        # Deleted once their facts are folded (``workload``): a pod that is gone counts only
        # through its sender proof, which these events (no admission policy here) lack.
        self.ended.extend(pods)
        return sent

    def workload(self) -> tuple[float, float, dict[str, float], float]:
        """(watcher CPU seconds, bus events applied, pod-end latency per task, status
        writes)."""
        a = self.a
        seen: dict[str, float] = {}
        stop = threading.Event()
        threading.Thread(target=self._follow, args=(seen, stop), daemon=True).start()
        cpu0 = cpu_seconds(self.w.proc.pid)
        ok = 'tidings_watcher_status_writes_total{result="ok"}'
        writes0 = self.w.metrics().get(ok, 0.0)
        with ThreadPoolExecutor(a.threads) as pool:
            sent = sum(pool.map(self.task, range(a.tasks)))
        applied_name = "tidings_watcher_events_applied_total"
        deadline = time.monotonic() + 300
        while self.w.metrics().get(applied_name, 0) < sent:
            if time.monotonic() > deadline:
                raise TimeoutError(f"applied {self.w.metrics().get(applied_name)} < {sent}")
            time.sleep(0.1)
        with ThreadPoolExecutor(a.threads) as pool:
            list(pool.map(lambda p: self.kube.request("DELETE", self.pods_path(p.name), body={
                "gracePeriodSeconds": 0}), self.ended))
        while self.w.metrics().get("tidings_watcher_write_queue_depth", 1) > 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the status writes never drained")
            time.sleep(0.1)
        time.sleep(1.0)  # the last coalesced writes
        cpu = cpu_seconds(self.w.proc.pid) - cpu0
        stop.set()
        lat = {t: seen[t] - self.ended_at[t] for t in self.ended_at if t in seen}
        return cpu, float(sent), lat, self.w.metrics().get(ok, 0.0) - writes0

    def _follow(self, seen: dict[str, float], stop: threading.Event) -> None:
        """When each task's status first shows its killed pod's end."""
        path = f"/apis/tidings.dev/v1alpha1/namespaces/{self.ns}/taskfeedbacks"
        while not stop.is_set():
            try:
                for item in self.kube.request("GET", path).get("items") or []:
                    name = item["metadata"]["name"]
                    if name not in seen and (item.get("status") or {}).get("podOutcomes"):
                        seen[name] = time.monotonic()
            except KubeError:
                pass
            time.sleep(0.05)

    def stop(self) -> None:
        self.w.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    ap.add_argument("--baseline", type=Path, help="the tidings executable of the baseline")
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--pods", type=int, default=2)
    ap.add_argument("--events", type=int, default=25)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.tasks, a.pods, a.events, a.threads, a.repeats = 2, 1, 3, 2, 1
    from tidings.cli.dev import devcluster  # the checkout's tools/devcluster.py

    tmp = Path(tempfile.mkdtemp(prefix="bench-pod-truth-"))
    with devcluster().admin_kubeconfig(a.kubeconfig, "bench-pod-truth-cp-") as kubeconfig:
        run(a, kubeconfig, tmp)


def run(a: argparse.Namespace, kubeconfig: str, tmp: Path) -> None:
    import subprocess

    from tidings.cli.dev import devcluster

    kubectl = str(devcluster().find_bin_dir() / "kubectl")
    subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "apply", "-f",
                    str(Path(__file__).parents[1] / "deploy/crd.yaml")], check=True,
                   capture_output=True)
    # kubectl wait fails at once on a CRD whose conditions are not written yet: try again.
    for attempt in range(5):
        waited = subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "wait",
                                 "--for=condition=Established", "crd/taskfeedbacks.tidings.dev",
                                 "--timeout=60s"], capture_output=True)
        if waited.returncode == 0:
            break
        if attempt == 4:
            waited.check_returncode()
        time.sleep(1)
    kube = connect(kubeconfig, maxsize=a.threads * 4)
    for group, version, kind, plural in PLATFORM_CRDS:
        body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {
                                           "type": "object",
                                           "x-kubernetes-preserve-unknown-fields": True}}}]}}
        try:
            kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                         body=body)
        except KubeError as e:
            if not e.conflict:
                raise
        subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "wait",
                        "--for=condition=Established", f"crd/{plural}.{group}",
                        "--timeout=60s"], check=True, capture_output=True)
    load_before = load_averages()
    sides = [("baseline", a.baseline), ("this", None)] if a.baseline else [("this", None)]
    results: dict[str, list[tuple[float, dict[str, float], dict[str, float], float]]] = {
        s: [] for s, _ in sides}
    for _ in range(a.repeats):
        for label, exe in sides:
            r = Run(kube, kubeconfig, exe, a, tmp, label)
            try:
                cpu, sent, lat, writes = r.workload()
            finally:
                r.stop()
            results[label].append((cpu / sent * 1e3, r.watches, lat, writes))
    extra = a.tasks * (a.pods * 5 + 3)  # pod watch events (add, run, end, delete x2), Job's
    print(f"\nworkload: {a.tasks} Jobs x {a.pods} pods x {a.events} bus events, "
          f"~{extra / (a.tasks * a.pods * a.events):.2f} pod/Job watch events per bus event; "
          f"{a.repeats} runs each, medians")
    print(f"load average before: {load_before}, after: {load_averages()}\n")
    base = statistics.median(x[0] for x in results["baseline"]) if a.baseline else None
    print(f"{'watcher':<10} {'cpu ms/event':>13} {'ratio':>7} {'writes':>7} {'watches/ns':>11}"
          "  by resource")
    for label, _ in sides:
        ms = statistics.median(x[0] for x in results[label])
        writes = statistics.median(x[3] for x in results[label])
        w = results[label][-1][1]
        ratio = f"{ms / base:.2f}x" if base else "-"
        print(f"{label:<10} {ms:>13.3f} {ratio:>7} {writes:>7.0f} {sum(w.values()):>11.0f}  "
              + ", ".join(f"{k} {v:.0f}" for k, v in sorted(w.items())))
    lat = [v for x in results["this"] for v in x[2].values()]
    if lat:
        print(f"\npod end (OOM kill written -> status shows it), this: median "
              f"{statistics.median(lat):.2f} s, max {max(lat):.2f} s over {len(lat)} tasks")
    if a.baseline:
        shown = sum(len(x[2]) for x in results["baseline"])
        print(f"pod end, baseline: shown for {shown} of {a.tasks * a.repeats} tasks")
    print(f"\n(watcher logs in {tmp})")


if __name__ == "__main__":
    main()
