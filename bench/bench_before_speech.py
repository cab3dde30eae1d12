"""Benchmark what tracking tasks before they speak costs (`--track platform`): Jobs whose one
pod never reports and cannot pull its image, created with no watcher and then with one, in
the same run on the local plane (kwok's node; the Job controller's work done by the bench,
as bench_pod_truth.py does). Per phase, a fresh namespace:

  apiserver cpu   kube-apiserver's CPU (user + system, /proc) from the first create to the
                  last TaskFeedback showing ImagePullBackOff (with no watcher: to the last
                  create), per Job, and its ratio to the phase without a watcher
  requests        the API requests the watcher added, by verb and resource (the API server's
                  apiserver_request_total, the phase's minus the baseline's)
  shown after     the time from a pod's ImagePullBackOff written (as the kubelet writes it) to
                  its TaskFeedback's reason saying so: median and p99 (goal: 5 s)
  watcher RSS     its resident memory growth over the phase, per tracked pod (goal: 1 KiB)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support import (
    Watcher,
    add_control_plane_arg,
    control_plane,
    cpu_seconds,
    job_pod,
    load_average,
    now,
    pct,
    rss_kib,
)

from tidings.kube import Client, connect

NODE = "kwok-node-0"


def requests(kube: Client) -> Counter[tuple[str, str]]:
    """apiserver_request_total by (verb, resource)."""
    text = kube.open("GET", "/metrics").data.decode()
    out: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")]
                      .split(",") if "=" in kv)
        verb, res = labels.get("verb", "").strip('"'), labels.get("resource", "").strip('"')
        out[(verb, res)] += int(float(line.rsplit(" ", 1)[1]))
    return out


class Phase:
    """One namespace of ``jobs`` Jobs, each with one pod that cannot pull its image."""

    def __init__(self, kube: Client, jobs: int, threads: int) -> None:
        self.kube, self.jobs, self.threads = kube, jobs, threads
        self.ns = f"bench-speech-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.ns}})
        kube.request("POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                     body={"metadata": {"name": "default"}})
        self.pulled: dict[str, float] = {}  # job -> when its pod's pull error was written

    def job(self, i: int) -> None:
        kube, ns, name = self.kube, self.ns, f"job-{i}"
        job = kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body={
            "metadata": {"name": name}, "spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "m", "image": "nope"}]}}}})
        juid = job["metadata"]["uid"]
        kube.request("PATCH", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                     body={"status": {"startTime": now(), "active": 1}},
                     content_type="application/merge-patch+json")
        pod = kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                           body=job_pod(name, juid, f"{name}-0", "nope", NODE))
        # As the kubelet writes a pull that fails (kwok's stages leave a pod with an IP alone).
        for _ in range(100):
            got = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
            if (got.get("status") or {}).get("podIP"):
                break
            time.sleep(0.1)
        kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}-0/status", body={"status": {
            "phase": "Pending", "containerStatuses": [{
                "name": "m", "image": "nope", "imageID": "", "ready": False, "restartCount": 0,
                "started": False, "state": {"waiting": {
                    "reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "nope"'}}}]}},
            content_type="application/merge-patch+json")
        self.pulled[name] = time.monotonic()

    def run(self) -> None:
        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(self.job, range(self.jobs)))


def follow(kube: Client, ns: str, want: int, shown: dict[str, float],
           stop: threading.Event) -> None:
    """Record when each TaskFeedback of ``ns`` first says ImagePullBackOff."""
    while not stop.is_set() and len(shown) < want:
        listed = kube.request("GET", f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks")
        t = time.monotonic()
        for obj in listed.get("items") or []:
            if (obj.get("status") or {}).get("reason") == "ImagePullBackOff":
                shown.setdefault(obj["metadata"]["name"], t)
        stop.wait(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_control_plane_arg(ap)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=8)
    a = ap.parse_args()
    if a.smoke:
        a.jobs, a.threads = 3, 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-before-speech-"))
    with control_plane(a.control_plane, "bench-before-speech-") as cp:
        kube = connect(str(cp.kubeconfig("admin")), maxsize=a.threads * 2)
        api = cp.processes["kube-apiserver"].pid
        load_before = load_average()
        # No watcher: what the workload itself costs the API server.
        base = Phase(kube, a.jobs, a.threads)
        r0, c0, t0 = requests(kube), cpu_seconds(api), time.monotonic()
        base.run()
        base_cpu, base_s = cpu_seconds(api) - c0, time.monotonic() - t0
        base_req = requests(kube) - r0
        # The same with a watcher tracking the namespace.
        tracked = Phase(kube, a.jobs, a.threads)
        w = Watcher(str(cp.kubeconfig("admin")), tracked.ns, tmp / "watcher.log",
                    ["--write-interval", "0.2"])
        try:
            while not w.ready():
                time.sleep(0.1)
            rss0 = rss_kib(w.proc.pid)
            shown: dict[str, float] = {}
            stop = threading.Event()
            reader = threading.Thread(target=follow, args=(kube, tracked.ns, a.jobs, shown,
                                                           stop), daemon=True)
            r1, c1, t1 = requests(kube), cpu_seconds(api), time.monotonic()
            wc1 = cpu_seconds(w.proc.pid)
            reader.start()
            tracked.run()
            deadline = time.monotonic() + 120 + a.jobs * 0.05
            while len(shown) < a.jobs and time.monotonic() < deadline:
                time.sleep(0.2)
            stop.set()
            reader.join()
            cpu, wall = cpu_seconds(api) - c1, time.monotonic() - t1
            watcher_cpu = cpu_seconds(w.proc.pid) - wc1
            added = requests(kube) - r1
            rss = rss_kib(w.proc.pid) - rss0
        finally:
            w.stop()
    lat = [shown[j] - tracked.pulled[j] for j in shown if j in tracked.pulled]
    # The follower's own lists are not the watcher's: left out of the requests it added.
    for key in list(added):
        added[key] -= base_req.get(key, 0)
    added.pop(("LIST", "taskfeedbacks"), None)
    print(f"\n{a.jobs} Jobs, one pod each that cannot pull its image; {load_before}, after: "
          f"{load_average()}\n")
    print(f"{'phase':<12} {'apiserver cpu ms/Job':>21} {'ratio':>7} {'wall s':>8} "
          f"{'shown':>7} {'shown after p50/p99 s':>22} {'watcher RSS/pod':>16}")
    print(f"{'no watcher':<12} {base_cpu / a.jobs * 1e3:>21.2f} {'1.00x':>7} {base_s:>8.1f} "
          f"{'-':>7} {'-':>22} {'-':>16}")
    p50 = statistics.median(lat) if lat else float("nan")
    print(f"{'tracked':<12} {cpu / a.jobs * 1e3:>21.2f} {cpu / max(base_cpu, 1e-9):>6.2f}x "
          f"{wall:>8.1f} {len(shown):>7} {p50:>10.2f}/{pct(lat, 99):<11.2f} "
          f"{rss * 1024 / a.jobs:>13.0f} B")
    print(f"\nwatcher CPU {watcher_cpu / a.jobs * 1e3:.2f} ms/Job; requests it added "
          "(verb resource: count):")
    for (verb, res), n in sorted(added.items(), key=lambda kv: -kv[1]):
        if n > 0:
            print(f"  {verb:<7} {res:<16} {n:>7}  ({n / a.jobs:.2f}/Job)")
    if len(shown) < a.jobs:
        print(f"\nonly {len(shown)} of {a.jobs} tasks showed their pull error in time")
        raise SystemExit(1)
    print(f"\n(watcher log in {tmp})")


if __name__ == "__main__":
    main()
