"""Benchmark what tracking every platform object costs the watcher at scale (`--track
platform`, the default): ``--nodes`` kwok nodes (1,000), then ``--jobs`` Jobs (1,000) whose
``--pods`` pods (20,000, spread over the nodes) kwok runs and that never report. The Job
controller's work is done by the bench (as bench_before_speech.py does); kwok heartbeats the
nodes and runs the pods. Per step:

  watcher RSS     its resident memory growth, net of the step before (the watcher ready with
                  nothing), per node and per tracked pod (goal: 1 KiB a pod); the tasks'
                  states are in the pods' figure (20 pods a task), once more after the idle
                  tasks went compact (``--compact-after``, 60 s: the steady state)
  structures      the same objects, listed from the API server and put through the watcher's
                  own pod, node and platform caches in this process, measured with tracemalloc
                  (what the caches keep, without the allocator's slack)
  requests        the API requests the watcher made, by verb and resource, counted in the
                  watcher's own client (kwok's and the bench's requests to the same API
                  server are not the watcher's); goal: list+watch only, plus the
                  TaskFeedback writes and the bounded Event lookups
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from support import (
    Watcher,
    control_plane,
    cpu_seconds,
    job_pod,
    load_average,
    now,
    rss_kib,
)

from tidings.kube import Client, KubeError, connect, paginate

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def verb_resource(method: str, path: str, query: Any) -> tuple[str, str]:
    """The API server's name for a request: (LIST/WATCH/GET/POST/..., resource[/sub])."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # (group and version)
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    q = dict(query or ())
    if method == "GET":
        method = "WATCH" if str(q.get("watch", "")) in ("1", "true") else \
            "LIST" if len(parts) == 1 else "GET"
    return method, "/".join(parts[:1] + parts[2:3])


def counted_watcher(counts: str, argv: list[str]) -> None:
    """Run the tidings CLI (``argv``) with every request its client sends counted by verb
    and resource, written to ``counts`` (JSON) twice a second."""
    from tidings.kube import client

    seen: Counter[str] = Counter()
    lock = threading.Lock()
    plain = client.Client.open

    def open_counted(self: Any, method: str, path: str, **kw: Any) -> Any:
        verb, res = verb_resource(method, path, kw.get("query"))
        with lock:
            seen[f"{verb} {res}"] += 1
        return plain(self, method, path, **kw)

    def dump() -> None:
        while True:
            time.sleep(0.5)
            with lock:
                text = json.dumps(seen)
            Path(counts + ".tmp").write_text(text)
            os.replace(counts + ".tmp", counts)

    client.Client.open = open_counted  # type: ignore[method-assign]
    threading.Thread(target=dump, daemon=True).start()
    sys.argv = ["tidings", *argv]
    from tidings.__main__ import main as tidings_main

    tidings_main()


def read_counts(path: Path) -> Counter[str]:
    try:
        return Counter(json.loads(path.read_text()))
    except (OSError, ValueError):
        return Counter()


def settle(w: Watcher, done: Callable[[], bool], timeout: float) -> float:
    """Wait until ``done()`` and the watcher is idle (its queues empty, under 5 % of a CPU
    over a second); the seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        c0 = cpu_seconds(w.proc.pid)
        time.sleep(1.0)
        m = w.metrics()
        if cpu_seconds(w.proc.pid) - c0 < 0.05 and not m.get("tidings_watcher_queue_depth") \
                and not m.get("tidings_watcher_write_queue_depth") and done():
            return time.monotonic() - t0
    raise SystemExit(f"the watcher did not settle in {timeout:.0f}s")


def listed(kube: Client, path: str, selector: str = "") -> Iterator[list[dict[str, Any]]]:
    """The pages of a list (``selector``: its label selector), 500 objects each."""
    def get(q: list[tuple[str, Any]]) -> Any:
        return kube.request("GET", path, query=[*q, *([("labelSelector", selector)]
                                                       if selector else [])],
                            timeout=(5, 120))

    for data in paginate(get, None, 500):
        yield list(data.get("items") or [])


def structures(kube: Client, ns: str, node_label: str) -> tuple[int, int, int, int]:
    """(bytes per node, bytes per pod, nodes, pods) that the watcher's caches keep of the
    objects listed now, measured in this process with tracemalloc."""
    from tidings.watcher.nodes import Nodes
    from tidings.watcher.platform import PlatformTasks
    from tidings.watcher.senders import Senders
    from tidings.watcher.settings import Settings
    from tidings.watcher.tracking import Tracking

    tracking = Tracking.of(Settings(), "tidings")
    gc.collect()
    tracemalloc.start()
    nodes = Nodes()
    src = nodes.source()
    base = tracemalloc.get_traced_memory()[0]
    n_nodes = 0
    src.list_begin()
    for page in listed(kube, "/api/v1/nodes", node_label):
        src.list_page(page)  # type: ignore[arg-type]
        n_nodes += len(page)
        del page
    src.list_done("")
    gc.collect()
    after_nodes = tracemalloc.get_traced_memory()[0]
    senders = Senders(None, tracking=tracking)
    platform = PlatformTasks(None, tracking=tracking)
    mid = tracemalloc.get_traced_memory()[0]
    n_pods = 0
    for source in senders.sources():
        source.list_begin()
        for page in listed(kube, f"/api/v1/namespaces/{ns}/pods",
                                source.key):
            source.list_page(page)  # type: ignore[arg-type]
            n_pods += len(page) if source.key == "batch.kubernetes.io/job-name" else 0
            del page
        source.list_done("")
    for osrc in platform.sources()[:1]:  # (Jobs only: the other kinds are not served here)
        osrc.list_begin()
        for page in listed(kube, osrc.kind.path(ns)):
            osrc.list_page(page)  # type: ignore[arg-type]
            del page
        osrc.list_done("")
    gc.collect()
    end = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del nodes, src, senders, platform
    return ((after_nodes - base) // max(n_nodes, 1), (end - mid) // max(n_pods, 1),
            n_nodes, n_pods)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Always a plane of its own (no --control-plane): the watcher's memory per node and every
    # request it makes are the figures, and another plane's nodes and objects would count in
    # them (on the suite's shared plane its watcher never settled).
    ap.add_argument("--smoke", action="store_true",
                    help="a few nodes and pods, to check that the bench runs (no figures)")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=8)
    a = ap.parse_args()
    if a.smoke:
        a.nodes, a.jobs, a.pods, a.threads = 4, 2, 8, 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-tracking-scale-"))
    run = uuid.uuid4().hex[:6]
    node_label = f"tidings.dev/bench-scale={run}"
    with control_plane(None, "bench-tracking-scale-") as cp:
        kube = connect(str(cp.kubeconfig("admin")), maxsize=a.threads * 2)
        load_before = load_average()
        ns = f"bench-scale-{run}"
        kube.request("POST", "/api/v1/namespaces",
            body={"metadata": {"name": ns}})
        kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
            body={"metadata": {"name": "default"}})
        counts = tmp / "requests.json"
        exe = tmp / "tidings-counted"
        exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "
                       f"--counted-watcher {counts} \"$@\"\n")
        exe.chmod(0o755)

        def create(path: str, body: dict[str, Any]) -> Any:
            for attempt in range(20):  # (a busy API server: its 429s and 5xx ride out)
                try:
                    return kube.request("POST", path, body=body)
                except KubeError as e:
                    if e.status == 409 or attempt == 19:
                        raise
                    time.sleep(0.2)
            return None

        w = Watcher(str(cp.kubeconfig("admin")), ns, tmp / "watcher.log",
                    ["--write-interval", "0.5"], exe=exe)
        names = [f"bench-{run}-{i:04d}" for i in range(a.nodes)]
        jobs = [f"job-{i:04d}" for i in range(a.jobs)]
        try:
            while not w.ready():
                time.sleep(0.1)
            settle(w, lambda: True, 120)
            rss0, wcpu0 = rss_kib(w.proc.pid), cpu_seconds(w.proc.pid)

            # 1. The nodes (kwok's: it makes them Ready and heartbeats them).
            time.sleep(0.6)
            r0 = read_counts(counts)

            def node(name: str) -> None:
                create("/api/v1/nodes", body={"metadata": {
                    "name": name, "labels": {"type": "kwok",
                                             "tidings.dev/bench-scale": run},
                    "annotations": {KWOK_ANNOTATION: "fake"}},
                    "spec": {"taints": [{"key": KWOK_ANNOTATION, "value": "fake",
                                         "effect": "NoSchedule"}]}})

            def all_ready() -> bool:
                ready = 0
                for page in listed(kube, "/api/v1/nodes", node_label):
                    for n in page:
                        ready += any(c.get("type") == "Ready" and c.get("status") == "True"
                                     for c in (n.get("status") or {}).get("conditions") or [])
                return ready >= a.nodes

            t = time.monotonic()
            with ThreadPoolExecutor(a.threads) as pool:
                list(pool.map(node, names))
            settle(w, all_ready, 600)
            nodes_s = time.monotonic() - t
            rss1 = rss_kib(w.proc.pid)
            time.sleep(0.6)
            r1 = read_counts(counts)

            # 2. The Jobs and their pods, kwok running them on the nodes.
            per_job = max(1, a.pods // a.jobs)

            def job(i: int) -> None:
                name = jobs[i]
                got = create(f"/apis/batch/v1/namespaces/{ns}/jobs",
                          body={"metadata": {"name": name}, "spec": {
                              "completions": per_job, "parallelism": per_job,
                              "completionMode": "Indexed", "template": {"spec": {
                                  "restartPolicy": "Never",
                                  "containers": [{"name": "m", "image": "train"}]}}}})
                juid = got["metadata"]["uid"]
                kube.request("PATCH", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}/status",
                    body={"status": {"startTime": now(), "active": per_job}},
                    content_type="application/merge-patch+json")
                for k in range(per_job):
                    body = job_pod(name, juid, f"{name}-{k}", "train",
                                   names[(i * per_job + k) % a.nodes])
                    body["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = \
                        str(k)
                    body["spec"]["tolerations"] = [{"key": KWOK_ANNOTATION,
                                                    "operator": "Exists"}]
                    create(f"/api/v1/namespaces/{ns}/pods", body=body)

            def all_running() -> bool:
                tfs = kube.request("GET",
                          f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks")
                items = tfs.get("items") or []
                running = sum(int((o.get("status") or {}).get("runningPods") or 0)
                              for o in items)
                return len(items) >= a.jobs and running >= per_job * a.jobs

            t = time.monotonic()
            with ThreadPoolExecutor(a.threads) as pool:
                list(pool.map(job, range(a.jobs)))
            settle(w, all_running, 1800)
            pods_s = time.monotonic() - t
            rss2 = rss_kib(w.proc.pid)
            # Idle tasks go compact after --compact-after (60 s): the steady state.
            deadline = time.monotonic() + (0 if a.smoke else 180)
            while time.monotonic() < deadline and w.metrics().get(
                    "tidings_watcher_tasks_compact", 0) < a.jobs:
                time.sleep(2)
            compact = int(w.metrics().get("tidings_watcher_tasks_compact", 0))
            rss3 = rss_kib(w.proc.pid)
            time.sleep(0.6)
            r2 = read_counts(counts)
            wcpu = cpu_seconds(w.proc.pid) - wcpu0
            per_node, per_pod, n_nodes, n_pods = structures(kube, ns, node_label)
        finally:
            w.stop()
            for name in names:  # (a shared plane's other users never see these nodes)
                with contextlib.suppress(KubeError):
                    kube.request("DELETE", f"/api/v1/nodes/{name}")
            with contextlib.suppress(KubeError):
                kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods")
                kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    pods = per_job * a.jobs
    print(f"\n{a.nodes} kwok nodes, then {a.jobs} Jobs of {per_job} pods ({pods} pods, "
          f"running, never reporting); {load_before}, after: {load_average()}\n")
    print(f"{'step':<8} {'objects':>8} {'wall s':>8} {'watcher RSS':>12} {'RSS/object':>11} "
          f"{'structures/object':>18}")
    print(f"{'nodes':<8} {a.nodes:>8} {nodes_s:>8.1f} {rss1 - rss0:>8} KiB "
          f"{(rss1 - rss0) * 1024 / a.nodes:>9.0f} B {per_node:>16} B")
    print(f"{'pods':<8} {pods:>8} {pods_s:>8.1f} {rss2 - rss1:>8} KiB "
          f"{(rss2 - rss1) * 1024 / pods:>9.0f} B {per_pod:>16} B")
    print(f"{'compact':<8} {compact:>8} {'':>8} {rss3 - rss1:>8} KiB "
          f"{(rss3 - rss1) * 1024 / pods:>9.0f} B {'':>16}   (pods, once their tasks "
          "went compact)")
    print(f"\n(structures: {n_nodes} nodes and {n_pods} pods listed back; watcher ready with "
          f"nothing: {rss0} KiB; watcher CPU over both steps {wcpu:.1f} s)")
    for step, before, after, per in (("nodes", r0, r1, a.nodes), ("pods", r1, r2, pods)):
        print(f"\nrequests the watcher made in the {step} step (verb resource: count):")
        for what, n in sorted((after - before).items(), key=lambda kv: -kv[1]):
            verb, res = what.split(" ", 1)
            print(f"  {verb:<7} {res:<24} {n:>7}  ({n / per:.3f}/{step[:-1]})")
    print(f"\n(watcher log in {tmp})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--counted-watcher"]:
        counted_watcher(sys.argv[2], sys.argv[3:])
    else:
        main()
