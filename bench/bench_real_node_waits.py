"""Benchmark how soon a TaskFeedback says why a task's pod does not run on the real node, after
the component that knows has said it (goal: 5 s; a lost node: the node controller's grace
plus 10 s). The watcher is this checkout's, as a process off the node. Per case, --reps
times, all the cases of a repetition at once (the load: their pods, and the machine's):

  unschedulable   a pod requesting 64 CPUs: the scheduler's PodScheduled=False Unschedulable
  image pull      an image no registry has: the kubelet's ErrImagePull / ImagePullBackOff
  crash loop      a container exiting 3, restartPolicy Always: the kubelet's CrashLoopBackOff
  failed mount    a ConfigMap volume that does not exist: the kubelet's FailedMount Event (the
                  watcher reads a pod's Events once it has been creating for 3 s, then
                  again after 5 s, 10 s, ... while none explains it)
  node lost       a Job's pod running, then the node's processes killed (RealNode.crash):
                  the node lifecycle controller's Ready=Unknown; --node-losses times, one at
                  a time, the node restarted after each (none in --smoke: it would kill the
                  suite's node under the other tests)

Two delays per case: from the word as the bench first reads it (the pod, its Events or the
Node, read every 0.1 s) to the TaskFeedback's reason saying it (read at the same rate), and
from the word's own time stamp (a condition's lastTransitionTime, an Event's time: whole
seconds, so up to 1 s more) where it has one. For the node lost, also from the kill.
Prints medians, p99 and maxima, and the load average before and after. Needs root, `make
node images` and the control plane's binaries.

Run: ``PYTHONPATH=$PWD TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_real_node_waits.py``.
Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import (  # bench/support.py
    Watcher,
    add_control_plane_arg,
    delete_namespace,
    load_averages,
    pct,
    real_node_plane,
    until,
    workload_namespace,
)

from tidings.kube import Client, KubeError, connect

# tests/node runs this bench's --smoke on the suite's real node (tests/cluster skips it).
NEEDS_REAL_NODE = True
TASK_LABEL = "tidings.dev/task"
IMAGE = "tidings-workload:dev"
TICK = 0.1
NODE_MONITOR_GRACE_S = 50  # kube-controller-manager's default: the plane sets none


def stamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=UTC).timestamp()


def waiting_reasons(pod: dict[str, Any]) -> set[str]:
    return {((c.get("state") or {}).get("waiting") or {}).get("reason", "")
            for c in (pod.get("status") or {}).get("containerStatuses") or []}


def unschedulable(pod: dict[str, Any], events: list[dict[str, Any]]) -> float | bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return stamp(c.get("lastTransitionTime")) or True
    return False


def pull_failed(pod: dict[str, Any], events: list[dict[str, Any]]) -> float | bool:
    return bool(waiting_reasons(pod) & {"ErrImagePull", "ImagePullBackOff"})


def crash_loop(pod: dict[str, Any], events: list[dict[str, Any]]) -> float | bool:
    return "CrashLoopBackOff" in waiting_reasons(pod)


def failed_mount(pod: dict[str, Any], events: list[dict[str, Any]]) -> float | bool:
    name = pod["metadata"]["name"]
    times = [stamp(e.get("firstTimestamp")) or stamp(e.get("eventTime")) for e in events
             if e.get("reason") == "FailedMount"
             and (e.get("involvedObject") or {}).get("name") == name]
    return (min((t for t in times if t is not None), default=None) or True) if times else False


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", "import time; time.sleep(3600)"],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                          "limits": {"memory": "64Mi"}}, **extra}


# case -> (what the pod's spec changes, the word, the reasons the TaskFeedback shows)
CASES: dict[str, tuple[dict[str, Any], Callable[..., float | bool], tuple[str, ...]]] = {
    "unschedulable": ({"containers": [container(resources={"requests": {"cpu": "64"}})]},
                      unschedulable, ("Unschedulable",)),
    "image pull": ({"containers": [container(image="tidings-workload:nope")]},
                   pull_failed, ("ErrImagePull", "ImagePullBackOff")),
    "crash loop": ({"restartPolicy": "Always", "containers": [container(
        command=["python3", "-c", "raise SystemExit(3)"])]}, crash_loop,
        ("CrashLoopBackOff",)),
    "failed mount": ({"containers": [container(volumeMounts=[
        {"name": "conf", "mountPath": "/etc/app"}])],
        "volumes": [{"name": "conf", "configMap": {"name": "does-not-exist"}}]},
        failed_mount, ("FailedMount",)),
}


@dataclass
class Case:
    name: str
    pod: str
    word: Callable[..., float | bool]
    reasons: tuple[str, ...]
    read_at: float | None = None  # wall time the bench first read the word
    stamped: float | None = None  # the word's own time stamp
    shown_at: float | None = None
    delays: dict[str, float] = field(default_factory=dict)


def pod_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {TASK_LABEL: name}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, **spec}}


def items(kube: Client, path: str) -> list[dict[str, Any]]:
    try:
        return list(kube.get(path).get("items") or [])
    except KubeError:
        return []


def reasons_shown(kube: Client, ns: str) -> dict[str, str]:
    return {t["metadata"]["name"]: str((t.get("status") or {}).get("reason") or "")
            for t in items(kube, f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks")}


def one_round(kube: Client, ns: str, rep: int, timeout: float = 180) -> list[Case]:
    """Every waiting case at once; each case's delays once its TaskFeedback says it."""
    cases = [Case(name, f"{name.replace(' ', '-')}-{rep}", word, reasons)
             for name, (spec, word, reasons) in CASES.items()]
    for c in cases:
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods",
                     body=pod_body(c.pod, CASES[c.name][0]))
    deadline = time.monotonic() + timeout
    while any(c.shown_at is None for c in cases):
        if time.monotonic() > deadline:
            late = [c.name for c in cases if c.shown_at is None]
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {late} shown")
        now = time.time()
        pods = {p["metadata"]["name"]: p for p in items(kube, f"/api/v1/namespaces/{ns}/pods")}
        events = items(kube, f"/api/v1/namespaces/{ns}/events") if any(
            c.read_at is None and c.name == "failed mount" for c in cases) else []
        shown = reasons_shown(kube, ns)
        for c in cases:
            if c.read_at is None and c.pod in pods and (said := c.word(pods[c.pod], events)):
                c.read_at = now
                c.stamped = said if isinstance(said, float) else None
            if c.shown_at is None and shown.get(c.pod) in c.reasons:
                c.shown_at = now
        time.sleep(TICK)
    for c in cases:
        assert c.shown_at is not None
        # A word the TaskFeedback showed in the same read is read no later than it.
        read = min(c.read_at or c.shown_at, c.shown_at)
        c.delays["read"] = c.shown_at - read
        if c.stamped is not None:
            c.delays["stamp"] = c.shown_at - c.stamped
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{c.pod}",
                     body={"gracePeriodSeconds": 0})
    return cases


def node_ready(kube: Client, node: str) -> dict[str, Any]:
    got = kube.get(f"/api/v1/nodes/{node}")
    return next((c for c in got.get("status", {}).get("conditions", [])
                 if c.get("type") == "Ready"), {})



def node_loss(cp: Any, kube: Client, ns: str, rep: int) -> Case:
    """A Job's pod running, the node killed under it: the delays to NodeLost shown, and from
    the kill (in ``delays["kill"]``); the node restarted after."""
    node = cp.node
    name = f"lost-{rep}"
    kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body={
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [container()]}}}})
    until(lambda: any(p.get("status", {}).get("phase") == "Running" for p in items(
        kube, f"/api/v1/namespaces/{ns}/pods?labelSelector=batch.kubernetes.io/job-name%3D"
        f"{name}")), 120, f"{name}'s pod running")
    until(lambda: (kube.get(f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks/"
                            f"{name}").get("status") or {}).get("phase") == "Running", 60,
          f"{name}'s task Running")
    case = Case("node lost", name, lambda *_: False, ("NodeLost",))
    killed = time.time()
    node.crash()
    try:
        while case.shown_at is None:
            if time.time() - killed > NODE_MONITOR_GRACE_S + 120:
                raise SystemExit("timed out waiting for NodeLost shown")
            now = time.time()
            ready = node_ready(kube, node.name)
            if case.read_at is None and ready.get("status") != "True":
                case.read_at, case.stamped = now, stamp(ready.get("lastTransitionTime"))
            if reasons_shown(kube, ns).get(name) == "NodeLost":
                case.shown_at = now
            time.sleep(TICK)
    finally:
        node.restart()
        cp.save()
    case.delays = {"read": case.shown_at - min(case.read_at or case.shown_at, case.shown_at),
                   "kill": case.shown_at - killed}
    if case.stamped is not None:
        case.delays["stamp"] = case.shown_at - case.stamped
    until(lambda: not any(t.get("effect") in ("NoExecute", "NoSchedule") for t in
                          kube.get(f"/api/v1/nodes/{node.name}").get("spec", {}).get(
                              "taints", [])), 180, "the node schedulable again")
    return case


def row(name: str, xs: list[float]) -> str:
    if not xs:
        return f"{name:<34} {'-':>8} {'-':>8} {'-':>8} {0:>4}"
    return (f"{name:<34} {statistics.median(xs):>8.2f} {pct(xs, 99):>8.2f} {max(xs):>8.2f} "
            f"{len(xs):>4}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_control_plane_arg(ap)
    ap.add_argument("--reps", type=int, default=5, help="rounds of the waiting cases")
    ap.add_argument("--node-losses", type=int, default=3)
    a = ap.parse_args()
    if a.smoke:
        a.reps, a.node_losses = 1, 0
    before = load_averages()
    tmp = Path(tempfile.mkdtemp(prefix="bench-node-waits-"))
    watcher: Watcher | None = None
    rounds: list[list[Case]] = []
    losses: list[Case] = []
    with real_node_plane(a.control_plane, "bench-node-waits-") as (cp, _):
        try:
            kube = connect(str(cp.kubeconfig("admin")))
            ns = workload_namespace(cp, kube, "bench-waits")
            until(lambda: kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 60,
                  "the namespace's default ServiceAccount")
            watcher = Watcher(str(cp.kubeconfig("admin")), ns, tmp / "watcher.log")
            until(watcher.ready, 60, "the watcher ready")
            for rep in range(a.reps):
                rounds.append(one_round(kube, ns, rep))
            for rep in range(a.node_losses):
                losses.append(node_loss(cp, kube, ns, rep))
            delete_namespace(kube, ns)
        finally:
            if watcher is not None:
                watcher.stop()
    print(f"# the real node: {len(CASES)} waiting pods at once per round, {a.reps} rounds, "
          f"{a.node_losses} node losses; load before {before}, after {load_averages()}")
    print(f"{'word -> TaskFeedback says it':<34} {'median':>8} {'p99':>8} {'max':>8} {'n':>4}")
    for name in CASES:
        cases = [c for r in rounds for c in r if c.name == name]
        print(row(f"{name} (from read)", [c.delays["read"] for c in cases]))
        stamped = [c.delays["stamp"] for c in cases if "stamp" in c.delays]
        if stamped:
            print(row(f"{name} (from its stamp*)", stamped))
    if losses:
        print(row("node lost (from Ready read)", [c.delays["read"] for c in losses]))
        print(row("node lost (from its stamp*)", [c.delays["stamp"] for c in losses
                                                  if "stamp" in c.delays]))
        print(row(f"node lost (from the kill; grace {NODE_MONITOR_GRACE_S}s)",
                  [c.delays["kill"] for c in losses]))
    print("(from read: 0.00 is the TaskFeedback saying it in the same read round as the "
          f"word, under the {TICK} s read interval)")
    print("(* whole seconds: up to 1 s more; failed mount includes the watcher's grace (3 s) "
          "before it reads a creating pod's Events)")


if __name__ == "__main__":
    main()
