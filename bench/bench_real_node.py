"""Benchmark the real node: how long joining it to the local plane takes,
how fast a pod starts on it with its image present, and how soon an OOM kill by a container's
memory limit reaches the TaskFeedback; kwok's pods, on the same plane in the same run, are the
baseline of a pod's start.

  node start   `ControlPlane.add_real_node()`: network namespace, certificates, containerd,
               the images imported, kube-proxy, kubelet, scheduler, until the node is Ready
               and schedulable (a fresh plane only; --control-plane reuses a running node);
  pod start    from the create to phase Running as the API server says it (the scheduler
               places the real node's pods; kwok's are bound to its node by name), one pod
               at a time, --pods of each;
  OOM seen     a pod of the workload image reports 20 % through the emitter with its
               kubelet-mounted token, then allocates past its 96Mi limit; until the watcher
               (this checkout's, as a process) has the pod's end in the status: from the
               pod's phase Failed (OOMKilled, exit 137) as the bench first reads it (every
               20 ms), and from the container's finishedAt (whole seconds); --ooms times,
               one at a time.

Prints medians and maxima, the ratio of the real node's pod start to kwok's, and the load
average before and after. Needs root, `make node images` and the control plane's binaries.

Run: ``TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_real_node.py``. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import (  # bench/support.py
    Watcher,
    add_control_plane_arg,
    delete_namespace,
    load_averages,
    real_node_plane,
    until,
    workload_namespace,
)

from tidings.kube import Client, connect
from tidings.schemas.wire.contract import taskfeedback_path

# tests/node runs this bench's --smoke on the suite's real node (tests/cluster skips it).
NEEDS_REAL_NODE = True
OOM = """
from tidings import emitter as tidings
tidings.progress(0.2, "loading")
tidings.flush(15)
hog = []
while True:
    hog.append(b"x" * (16 << 20))
"""



def pod_body(name: str, command: list[str], *, node: str | None = None,
             memory: str = "64Mi", account: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "serviceAccountName": account,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "tidings-workload:dev",
                        "imagePullPolicy": "IfNotPresent", "command": command,
                        "resources": {"limits": {"memory": memory}}}]}
    if node:
        spec["nodeName"] = node
        spec["tolerations"] = [{"operator": "Exists"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def phase(kube: Client, ns: str, name: str) -> str:
    return str(kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").get("status", {})
               .get("phase", ""))


def pod_starts(kube: Client, ns: str, count: int, node: str | None) -> list[float]:
    took = []
    for i in range(count):
        name = f"{'kwok' if node else 'real'}-{i}"
        start = time.monotonic()
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod_body(
            name, ["python3", "-c", "import time; time.sleep(600)"], node=node))
        until(lambda n=name: phase(kube, ns, n) == "Running", 120, f"pod {name} Running",
              every=0.02)
        took.append(time.monotonic() - start)
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}",
                     body={"gracePeriodSeconds": 0})
    return took


def oom_latencies(kube: Client, ns: str, count: int) -> tuple[list[float], list[float]]:
    """(from the pod's Failed as first read, from the container's finishedAt) until the
    TaskFeedback has the pod's end; finishedAt has whole seconds only."""
    seen, died = [], []
    for i in range(count):
        name = f"oom-{i}"
        body = pod_body(name, ["python3", "-c", OOM], memory="96Mi", account="trainer")
        body["metadata"]["labels"] = {"tidings.dev/task": name}
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body=body)
        until(lambda n=name: phase(kube, ns, n) == "Failed", 120, f"{name} OOM-killed",
              every=0.02)
        failed = time.monotonic()
        until(lambda n=name: kube.get(taskfeedback_path(ns, n)).get("status", {})
              .get("podOutcomes"), 60, f"{name}'s end in its TaskFeedback", every=0.02)
        seen.append(time.monotonic() - failed)
        shown = time.time()
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (ended["reason"], ended["exitCode"]) == ("OOMKilled", 137), ended
        finished = datetime.strptime(ended["finishedAt"], "%Y-%m-%dT%H:%M:%SZ")
        died.append(shown - finished.replace(tzinfo=UTC).timestamp())
    return seen, died


def row(name: str, xs: list[float], unit: str = "s") -> str:
    return (f"{name:<34} {statistics.median(xs):>8.2f} {max(xs):>8.2f} {unit:>4} "
            f"{len(xs):>4}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_control_plane_arg(ap)
    ap.add_argument("--pods", type=int, default=10)
    ap.add_argument("--ooms", type=int, default=5)
    a = ap.parse_args()
    if a.smoke:
        a.pods, a.ooms = 1, 1
    from tidings.cli.dev import devcluster

    before = load_averages()
    tmp = Path(tempfile.mkdtemp(prefix="bench-node-run-"))
    watcher: Watcher | None = None
    with real_node_plane(a.control_plane, "bench-node-") as (cp, joined):
        try:
            kube = connect(str(cp.kubeconfig("admin")))
            ns = workload_namespace(cp, kube, "bench-node")
            until(lambda: kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 60,
                  "the namespace's default ServiceAccount")
            # This checkout's watcher, as a process (not the image's Deployment).
            watcher = Watcher(str(cp.kubeconfig("admin")), ns, tmp / "watcher.log")
            until(watcher.ready, 60, "the watcher ready")
            real = pod_starts(kube, ns, a.pods, None)
            kwok = pod_starts(kube, ns, a.pods, devcluster().NODE_NAME)
            oom, since_death = oom_latencies(kube, ns, a.ooms)
            delete_namespace(kube, ns)
        finally:
            if watcher is not None:
                watcher.stop()
    print(f"# the real node: load before {before}, after {load_averages()}")
    print(f"{'measure':<34} {'median':>8} {'max':>8} {'unit':>4} {'n':>4}")
    if joined is not None:
        print(row("node start (join until Ready)", [joined]))
    print(row("pod start, real node", real))
    print(row("pod start, kwok (baseline)", kwok))
    print(f"{'  ratio real / kwok (medians)':<34} "
          f"{statistics.median(real) / statistics.median(kwok):>8.2f}")
    print(row("OOM: pod Failed read -> TaskFeedback", oom))
    print(row("OOM: container death -> TaskFeedback", since_death, "s*"))
    print("(* from the container's finishedAt, which has whole seconds: up to 1 s more)")


if __name__ == "__main__":
    main()
