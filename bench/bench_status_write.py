"""Benchmark the API server's CPU per TaskFeedback status write, for three statuses in one run.

The statuses are what the watcher writes (``status_body`` of a real fold):
  minimal  one worker's progress;
  typical  a training task: 2 workers, 2 links, a deck, 5 span names, ~100 events;
  capped   every cap full with the longest names and URLs, cut to the byte budget.
Each is written N times as the watcher writes it (PUT of ``/status`` with a resourceVersion
precondition, field manager ``tidings-watcher``; ``--method patch``: JSON Patch ``add /status``),
every write a real change (a counter moves). API-server CPU is read
from ``/proc/<kube-apiserver pid>/stat`` (utime + stime) around the writes, minus its idle
rate measured just before, and divided by N. Prints a table and the ratios to minimal
(goal: typical <= 1.5x, capped <= 4x).

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_status_write.py``
Not a test.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tidings.kube import JSON_PATCH, Client, connect
from tidings.schemas import (
    NAME_LIMIT,
    URL_LIMIT,
    DeckReady,
    Limits,
    LogLink,
    ParsedEvent,
    Payload,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    UnknownPayload,
    build_event,
    fold_all,
    parse_event,
)
from tidings.schemas.contract import taskfeedback_path
from tidings.watcher.writer import FIELD_MANAGER, status_body

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
TICK = os.sysconf("SC_CLK_TCK")
METHOD = "patch"


def _events(ref: TaskRef, items: list[tuple[Payload, PodRef, str, int]]) -> list[ParsedEvent]:
    out = []
    for k, (p, pod, inst, seq) in enumerate(items):
        ev = parse_event(orjson.loads(orjson.dumps(build_event(
            task=ref, pod=pod, payload=p, instance=inst, seq=seq,
            time=T0 + timedelta(milliseconds=k)))))
        assert isinstance(ev, ParsedEvent), ev
        out.append(ev)
    return out


def minimal(ref: TaskRef) -> dict[str, Any]:
    pod = PodRef("train-0", "uid-train-0")
    return status_body(fold_all(ref, _events(ref, [
        (Progress(fraction=0.25, message="epoch 1/4"), pod, "0" * 32, 0)])))


def typical(ref: TaskRef) -> dict[str, Any]:
    pods = [PodRef(f"train-{i}", f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd") for i in range(2)]
    items: list[tuple[Payload, PodRef, str, int]] = []
    for w, pod in enumerate(pods):
        inst = f"{w:032x}"
        seq = 0

        def add(p: Payload, pod: PodRef = pod, inst: str = inst) -> None:
            nonlocal seq
            items.append((p, pod, inst, seq))
            seq += 1

        add(LogLink(name=f"wandb-{pod.name}", url=f"https://wandb.ai/team/runs/{pod.name}"))
        for epoch in range(20):
            for name in ("epoch", "batch", "load", "eval", "checkpoint"):
                add(SpanSummary(name=name, count=50, total_s=12.5, min_s=0.1, max_s=0.9,
                                first_start=1.79e9 + epoch, last_end=1.79e9 + epoch + 1))
            add(Progress(fraction=epoch / 20, message=f"epoch {epoch}/20", workers=2))
        if w == 1:
            add(DeckReady(name="report", uri="s3://decks/team/run-7/report.html"))
    return status_body(fold_all(ref, _events(ref, items)))


def capped(ref: TaskRef) -> dict[str, Any]:
    heavy = "é" * NAME_LIMIT
    url = "https://e.example/" + "x" * (URL_LIMIT - len("https://e.example/"))
    lim = Limits()
    items: list[tuple[Payload, PodRef, str, int]] = []
    pod0 = PodRef("p" * 200, "u" * 36)
    for i in range(lim.links):
        items.append((LogLink(name=f"{i:02d}" + heavy, url=url), pod0, "i" * 64, len(items)))
    for i in range(lim.decks):
        items.append((DeckReady(name=f"{i:02d}" + heavy, uri=url), pod0, "i" * 64, len(items)))
    for i in range(lim.spans):
        items.append((SpanSummary(name=f"{i:03d}" + heavy, count=2**40, total_s=9e8,
                                  min_s=1 / 3e9, max_s=9e8, first_start=1e9 / 3, last_end=1e10),
                      pod0, "i" * 64, len(items)))
    for i in range(lim.pods):
        items.append((Progress(fraction=1 / 3, message=heavy * 4),
                      PodRef(f"{i:03d}" + "p" * 200, "u" * 36), f"{i:064x}", 0))
    for i in range(lim.unknown_types):
        items.append((UnknownPayload(type=f"T{i:02d}" + "x" * 100, version=9), pod0, "i" * 64,
                      len(items)))
    for i in range(lim.max_instances - lim.pods):  # the instance cap full as well
        items.append((LogLink(name="00" + heavy, url=url), pod0, f"{i:032x}x", 0))
    return status_body(fold_all(ref, _events(ref, items)))


def apiserver_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Target:
    def __init__(self, kube: Client, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.kube, self.name, self.status = kube, name, status
        self.path = taskfeedback_path(namespace, name)
        self.obj = kube.request(
            "POST", taskfeedback_path(namespace), query=[("fieldManager", FIELD_MANAGER)],
            body={"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
                  "metadata": {"name": name}, "spec": {"task": name}})
        self.n = 0

    def write(self) -> None:
        st = copy.copy(self.status)
        self.n += 1
        st["counters"] = {**st.get("counters", {}), "duplicates": self.n}  # a real change
        query = [("fieldManager", FIELD_MANAGER)]
        if METHOD == "put":  # an update with a resourceVersion precondition
            self.obj["status"] = st
            self.obj = self.kube.request("PUT", f"{self.path}/status", body=self.obj,
                                         query=query)
        else:
            self.kube.request("PATCH", f"{self.path}/status",
                              body=[{"op": "add", "path": "/status", "value": st}],
                              query=query, content_type=JSON_PATCH)


def measure(pid: int, target: Target, writes: int) -> float:
    """API-server CPU milliseconds per write, idle rate subtracted."""
    target.write()  # warm (first write of an object costs more: managedFields appear)
    c0, t0 = apiserver_cpu(pid), time.monotonic()
    time.sleep(1.0)
    idle_rate = (apiserver_cpu(pid) - c0) / (time.monotonic() - t0)
    c0, t0 = apiserver_cpu(pid), time.monotonic()
    for _ in range(writes):
        target.write()
    busy = apiserver_cpu(pid) - c0
    elapsed = time.monotonic() - t0
    return max(0.0, busy - idle_rate * elapsed) / writes * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=300, help="writes per status (capped: 1/3)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported")
    ap.add_argument("--method", choices=["patch", "put"], default="put",
                    help="PUT with a resourceVersion precondition (the watcher's write) or "
                    "JSON Patch add /status")
    args = ap.parse_args()
    global METHOD
    METHOD = args.method
    from tidings.cli.dev import devcluster

    ControlPlane = devcluster().ControlPlane  # the checkout's tools/devcluster.py

    with tempfile.TemporaryDirectory() as tmp:
        cp = ControlPlane(state_dir=Path(tmp) / "cp").start()
        try:
            cp.kubectl_run("apply", "-f", str(REPO / "deploy" / "crd.yaml"))
            cp.kubectl_run("wait", "--for=condition=Established",
                           "crd/taskfeedbacks.tidings.dev", "--timeout=60s")
            kube = connect(str(cp.kubeconfig("admin")), None, maxsize=4)
            pid = cp.processes["kube-apiserver"].pid
            assert pid is not None
            ns = "bench"
            kube.request("POST", "/api/v1/namespaces",
                         body={"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": ns}})
            statuses = {"minimal": minimal, "typical": typical, "capped": capped}
            targets = {k: Target(kube, ns, k, f(TaskRef(ns, k))) for k, f in statuses.items()}
            results: dict[str, list[float]] = {k: [] for k in targets}
            for _ in range(args.rounds):
                for k, t in targets.items():
                    n = args.writes // 3 if k == "capped" else args.writes
                    results[k].append(measure(pid, t, n))
        finally:
            cp.stop()
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    print(f"{'status':<10}{'bytes':>10}{'fields':>8}{'ms CPU/write':>15}{'x minimal':>11}")
    for k, t in targets.items():
        size = len(orjson.dumps(t.status))
        leaves = _leaves(t.status)
        print(f"{k:<10}{size:>10}{leaves:>8}{med[k]:>15.2f}{med[k] / med['minimal']:>11.2f}")
    print(f"(median of {args.rounds} rounds; {args.writes} writes each, capped {args.writes // 3};"
          f" goal: typical <= 1.5x, capped <= 4x minimal)")


def _leaves(o: Any) -> int:
    if isinstance(o, dict):
        return sum(_leaves(v) for v in o.values())
    if isinstance(o, list):
        return sum(_leaves(v) for v in o)
    return 1


if __name__ == "__main__":
    main()
