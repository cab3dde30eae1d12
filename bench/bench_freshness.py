"""Benchmark status freshness at 1,000 active tasks: the watcher's write policy against the real
API server, next to the old policy (one FIFO, 20 writes/s over all tasks) in the same run.

Load (per policy, one namespace, one pod and one emitter instance per task): every task sends
a coalescible fact (a SpanSummary or non-final Progress) every ``--period`` s, staggered (1,000
tasks every 5 s: 200 events/s), while critical facts (new LogLinks and DeckReadys) arrive at
``--critical-rate``/s on random tasks. Before the load every task gets its first status
(priming, not measured). A TaskFeedback watch in this process notes when each fact first shows
in its task's status (the version vector), so:

  critical emit->status  p50/p99/max over the critical facts (goal p99 <= 2 s);
  staleness              per task, the longest any of its coalescible facts waited to be in the
                         status (the status was that far behind it); max and median over tasks
                         (goal max <= 15 s);
  CPU                    kube-apiserver, etcd and the watcher from /proc over the load window,
                         in cores, with the same load and no watcher as the floor (goal: the
                         API server's share for status writes <= 0.25 cores).

``--shape real``: every task is a real training task (bench/training_run.py: a Hugging Face
Trainer run of two pods, 300 steps, its 13 metrics with their curves, span lanes per pod): its
two pods and the run's 65 events, sent as the pods sent them, before priming (so each status
has that shape and size), and every third coalescible fact is a Metrics note of the training
logs (loss, grad_norm, learning_rate at the next step), so the curves move under the load.

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_freshness.py``
(``--tasks 200 --seconds 30`` for a quick look). Not a test.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import urllib3
from support import (  # bench/support.py
    Watcher,
    add_control_plane_arg,
    control_plane,
    cpu_seconds,
    pct,
    post_event,
)
from training_run import HF_METRICS, Run, hf_run_bodies  # bench/training_run.py

from tidings.kube import Client, KubeError, connect
from tidings.schemas.engine.version_vector import VersionVector
from tidings.schemas.wire.constants import TASK_LABEL
from tidings.schemas.wire.event import PodRef, TaskRef, build_event
from tidings.schemas.wire.payloads import (
    DeckReady,
    LogLink,
    Metric,
    Metrics,
    Payload,
    Progress,
    SpanSummary,
)

POLICIES = {
    # name: (label, watcher flags)
    "priority": ("critical first, cost budget (default flags)", []),
    "fifo": ("old: one FIFO, 20 writes/s", ["--write-policy", "fifo", "--write-budget", "0",
                                            "--max-write-rate", "20"]),
}


class Tasks:
    """One namespace of tasks with one pod each; sends facts and notes when each is seen."""

    def __init__(self, kube: Client, n: int, threads: int, shape: str = "small") -> None:
        self.kube, self.n, self.shape = kube, n, shape
        self.ns = f"fresh-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.ns}})
        kube.request("POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts",
                     body={"metadata": {"name": "default"}})
        self.names = [f"t{i:04d}" for i in range(n)]
        # A real task's two pods are its run's ("<task>-worker-<i>"); the load's facts come
        # from the first.
        pod_names = [f"{t}-worker-{i}" for t in self.names for i in range(2)] \
            if shape == "real" else [f"{t}-pod" for t in self.names]
        with ThreadPoolExecutor(threads) as pool:
            made = dict(zip(pod_names, pool.map(self._pod, pod_names), strict=True))
        self.uids = {name: ref.uid for name, ref in made.items()}
        self.pods = {t: made[f"{t}-worker-0" if shape == "real" else f"{t}-pod"]
                     for t in self.names}
        self.shaped: set[str] = set()  # tasks whose status holds the real run's metrics
        self.lock = threading.Lock()
        self.seq = dict.fromkeys(self.names, 0)
        self.links = dict.fromkeys(self.names, 0)
        self.sent: dict[tuple[str, int], tuple[float, str]] = {}  # -> (monotonic, kind)
        self.seen: dict[tuple[str, int], float] = {}
        self.unseen: dict[str, set[int]] = {t: set() for t in self.names}
        self.failed = 0
        self._stop = False
        threading.Thread(target=self._watch, daemon=True).start()

    def _pod(self, name: str) -> PodRef:
        task = name.split("-", 1)[0]
        p = self.kube.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body={
            "metadata": {"name": name, "labels": {TASK_LABEL: task}},
            "spec": {"nodeName": "kwok-node-0",
                     "containers": [{"name": "main", "image": "busybox"}]}})
        return PodRef(p["metadata"]["name"], p["metadata"]["uid"])

    def send(self, task: str, kind: str) -> None:
        with self.lock:
            seq = self.seq[task] = self.seq[task] + 1
            if kind == "critical":
                self.links[task] += 1
        payload: Payload
        if kind == "critical":
            k = self.links[task]
            payload = (DeckReady(name=f"deck-{k}", uri=f"s3://decks/{task}/{k}.html") if k % 4 == 0
                       else LogLink(name=f"link-{k}", url=f"https://logs.example/{task}/{k}"))
        elif self.shape == "real" and seq % 3 == 0:
            step = 300 + seq
            payload = Metrics(metrics=(
                Metric(name="loss", value=2.0 / (1 + step / 100), step=step),
                Metric(name="grad_norm", value=1.0 + (seq % 7) / 10, step=step),
                Metric(name="learning_rate", value=5e-5 * (1 - step / 10_000), step=step)))
        elif seq % 2:
            payload = SpanSummary(name=f"step-{seq % 5}", count=10, total_s=1.0, min_s=0.05,
                                  max_s=0.2, first_start=1.79e9 + seq, last_end=1.79e9 + seq + 1)
        else:
            payload = Progress(fraction=min(0.99, seq / 1000), message=f"step {seq}")
        body = build_event(task=TaskRef(self.ns, task), pod=self.pods[task], payload=payload,
                           instance=f"{task}-i", seq=seq, time=datetime.now(UTC),
                           sender_proof=False)
        with self.lock:
            self.sent[(task, seq)] = (time.monotonic(), kind)
            self.unseen[task].add(seq)
        if not post_event(self.kube, self.ns, body):
            self.failed += 1

    def _watch(self) -> None:
        path = f"/apis/tidings.dev/v1alpha1/namespaces/{self.ns}/taskfeedbacks"
        rv = str(self.kube.request("GET", path, query=[("limit", "1")])
                 ["metadata"]["resourceVersion"])
        while not self._stop:
            try:
                for line in self.kube.stream(path, query=[
                        ("watch", "true"), ("resourceVersion", rv), ("timeoutSeconds", "600"),
                        ("allowWatchBookmarks", "true")], timeout=(5, 700)):
                    now = time.monotonic()
                    msg = orjson.loads(line)
                    obj = msg["object"]
                    if msg["type"] == "ERROR":  # too old: start again from now
                        rv = str(self.kube.request("GET", path, query=[("limit", "1")])
                                 ["metadata"]["resourceVersion"])
                        break
                    rv = obj["metadata"].get("resourceVersion", rv)
                    task = obj["metadata"].get("name", "")
                    status = obj.get("status") or {}
                    applied = status.get("applied")
                    if len(status.get("metrics") or ()) >= len(HF_METRICS):
                        self.shaped.add(task)
                    if msg["type"] != "MODIFIED" or not applied or task not in self.unseen:
                        continue
                    vv = VersionVector.from_text(applied)
                    inst = f"{task}-i"
                    with self.lock:
                        got = [s for s in self.unseen[task] if vv.contains(inst, s)]
                        for s in got:
                            self.unseen[task].discard(s)
                            self.seen[(task, s)] = now
            except (KubeError, urllib3.exceptions.HTTPError):  # (a stream cut as the plane stops)
                time.sleep(0.2)

    def send_runs(self, pool: ThreadPoolExecutor) -> None:
        """Every task's real training run: the events its two pods sent (a template run's,
        its names, pods and uids made the task's)."""
        template = "tmplrun"
        bodies = [orjson.dumps(body) for body in hf_run_bodies(self.ns, template, Run())]
        uids = [f"{i:08x}-5b1e-4c6f-9a7e-0123456789ab".encode() for i in range(2)]

        def send(task: str) -> None:
            for raw in bodies:
                for i, uid in enumerate(uids):
                    raw = raw.replace(uid, self.uids[f"{task}-worker-{i}"].encode())
                if not post_event(self.kube, self.ns, orjson.loads(
                        raw.replace(template.encode(), task.encode()))):
                    self.failed += 1

        list(pool.map(send, self.names))

    def all_seen(self) -> bool:
        with self.lock:
            return not any(self.unseen.values())

    def stop(self) -> None:
        self._stop = True


def wait(cond: Callable[[], bool], timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(what)
        time.sleep(0.1)
    return time.monotonic() - t0


def load(tasks: Tasks, a: argparse.Namespace, pool: ThreadPoolExecutor) -> float:
    """Send the load for ``a.seconds``; returns the achieved events/s."""
    rng = random.Random(7)
    t0 = time.monotonic()
    due: list[tuple[float, int, str, str]] = []
    for i, t in enumerate(tasks.names):
        heapq.heappush(due, (t0 + i * a.period / tasks.n, i, t, "coalescible"))
    crit_at = t0 + rng.expovariate(a.critical_rate)
    sent = 0
    futures = []
    while True:
        now = time.monotonic()
        if now - t0 >= a.seconds:
            break
        if due[0][0] <= crit_at:
            at, i, task, kind = heapq.heappop(due)
            heapq.heappush(due, (at + a.period, i, task, kind))
        else:
            at, task, kind = crit_at, rng.choice(tasks.names), "critical"
            crit_at += rng.expovariate(a.critical_rate)
        if at > now:
            time.sleep(at - now)
        futures.append(pool.submit(tasks.send, task, kind))
        sent += 1
    for f in futures:
        f.result()
    return sent / (time.monotonic() - t0)


def run_policy(name: str, flags: list[str], cp: Any, kubeconfig: str, kube: Client,
               a: argparse.Namespace, tmp: Path) -> dict[str, str]:
    pids = {"kube-apiserver": cp.processes["kube-apiserver"].pid, "etcd": cp.processes["etcd"].pid}
    tasks = Tasks(kube, a.tasks, a.threads, a.shape)
    pool = ThreadPoolExecutor(a.threads)
    w = Watcher(kubeconfig, tasks.ns, tmp / f"watcher-{name}.log", flags)
    pids["watcher"] = w.proc.pid
    wait(w.ready, 60, "watcher ready")
    # Priming: every task's first status (a phase change; a real task's run) before
    # anything is measured.
    p0 = time.monotonic()
    if a.shape == "real":
        tasks.send_runs(pool)
    list(pool.map(lambda t: tasks.send(t, "coalescible"), tasks.names))
    wait(tasks.all_seen, 900, "priming")
    if a.shape == "real":
        wait(lambda: len(tasks.shaped) == tasks.n, 900, "every task's run in its status")
    prime = time.monotonic() - p0
    with tasks.lock:
        tasks.sent.clear()
        tasks.seen.clear()
    m0 = w.metrics()
    c0 = {k: cpu_seconds(p) for k, p in pids.items()}
    me0 = time.process_time()
    t0 = time.monotonic()
    rate = load(tasks, a, pool)
    elapsed = time.monotonic() - t0
    cpu = {k: (cpu_seconds(p) - c0[k]) / elapsed for k, p in pids.items()}
    cpu["bench (emitters)"] = (time.process_time() - me0) / elapsed
    m1 = w.metrics()
    try:
        drain = wait(tasks.all_seen, a.drain, "drain")
    except TimeoutError:
        drain = float("nan")
    end = time.monotonic()
    w.stop()
    tasks.stop()
    pool.shutdown()

    crit, stale = [], dict.fromkeys(tasks.names, 0.0)
    unseen = 0
    for (task, seq), (sent_at, kind) in tasks.sent.items():
        seen = tasks.seen.get((task, seq))
        if seen is None:
            unseen += 1
            seen = end
        if kind == "critical":
            crit.append(seen - sent_at)
        else:
            stale[task] = max(stale[task], seen - sent_at)
    stales = list(stale.values())
    ok = 'tidings_watcher_status_writes_total{result="ok"}'
    writes = (m1.get(ok, 0) - m0.get(ok, 0)) / elapsed
    cost = (m1.get("tidings_watcher_status_write_cost_seconds_total", 0)
            - m0.get("tidings_watcher_status_write_cost_seconds_total", 0)) / elapsed
    return {
        "load (events/s sent)": f"{rate:,.0f} ({tasks.failed} failed)",
        "priming (first status of every task)": f"{prime:.1f} s",
        "critical emit->status p50 / p99 / max": f"{pct(crit, 50):.2f} / {pct(crit, 99):.2f} / "
                                                 f"{max(crit, default=float('nan')):.2f} s "
                                                 f"(n={len(crit)})",
        "staleness per task: median / max": f"{pct(stales, 50):.1f} / {max(stales):.1f} s",
        "status writes/s (ok)": f"{writes:.1f}",
        "estimated API-server CPU of writes": f"{cost:.2f} cores",
        **{f"CPU {k}": f"{v:.2f} cores" for k, v in cpu.items()},
        "drain after the load": f"{drain:.1f} s ({unseen} facts never seen)",
    }


def floor(cp: Any, kube: Client, a: argparse.Namespace) -> dict[str, str]:
    """The same load with no watcher: what the creates alone cost the API server and etcd."""
    pids = {"kube-apiserver": cp.processes["kube-apiserver"].pid, "etcd": cp.processes["etcd"].pid}
    tasks = Tasks(kube, a.tasks, a.threads, a.shape)
    pool = ThreadPoolExecutor(a.threads)
    c0 = {k: cpu_seconds(p) for k, p in pids.items()}
    me0 = time.process_time()
    t0 = time.monotonic()
    short = argparse.Namespace(**{**vars(a), "seconds": min(a.seconds, 30.0)})
    rate = load(tasks, short, pool)
    elapsed = time.monotonic() - t0
    pool.shutdown()
    tasks.stop()
    out = {"load (events/s sent)": f"{rate:,.0f} ({tasks.failed} failed)"}
    out.update({f"CPU {k}": f"{(cpu_seconds(p) - c0[k]) / elapsed:.2f} cores"
                for k, p in pids.items()})
    out["CPU bench (emitters)"] = f"{(time.process_time() - me0) / elapsed:.2f} cores"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--period", type=float, default=5.0,
                    help="seconds between coalescible facts of one task")
    ap.add_argument("--critical-rate", type=float, default=10.0, help="critical facts/s in all")
    ap.add_argument("--seconds", type=float, default=90.0, help="load duration per policy")
    ap.add_argument("--drain", type=float, default=180.0)
    ap.add_argument("--threads", type=int, default=48,
                    help="sender threads (enough that a slow answer never caps the load)")
    ap.add_argument("--policies", default="priority,fifo")
    ap.add_argument("--shape", choices=("small", "real"), default="small",
                    help="each task's status: small (progress, spans, links) or a real "
                    "training task's (a Hugging Face run's metrics, curves, lanes)")
    ap.add_argument("--write-budget", type=float, default=None,
                    help="the priority policy's --write-budget (API-server cores for the "
                    "status writes; default: the watcher's)")
    add_control_plane_arg(ap)
    a = ap.parse_args()
    if a.smoke:
        a.tasks, a.period, a.critical_rate, a.seconds, a.threads = 6, 1.0, 2.0, 3.0, 4

    tmp = Path(tempfile.mkdtemp(prefix="bench-freshness-"))
    load0 = os.getloadavg()
    columns: dict[str, dict[str, str]] = {}
    with control_plane(a.control_plane, "bench-freshness-") as cp:
        kubeconfig = str(cp.kubeconfig("admin"))
        kube = connect(kubeconfig, maxsize=a.threads * 2)
        columns["no watcher"] = floor(cp, kube, a)
        for name in a.policies.split(","):
            flags = POLICIES[name][1]
            if name == "priority" and a.write_budget is not None:
                flags = [*flags, "--write-budget", str(a.write_budget)]
                POLICIES[name] = (POLICIES[name][0], flags)
            columns[name] = run_policy(name, flags, cp, kubeconfig, kube, a, tmp)
    load1 = os.getloadavg()

    rows = list(dict.fromkeys(k for col in columns.values() for k in col))
    heads = list(columns)
    width = max(len(r) for r in rows)
    colw = [max(len(h), *(len(columns[h].get(r, "")) for r in rows)) for h in heads]
    print(f"\n{a.tasks} tasks ({a.shape} status shape), a coalescible fact each every "
          f"{a.period:g} s "
          f"({a.tasks / a.period:,.0f}/s), critical facts {a.critical_rate:g}/s, "
          f"{a.seconds:g} s per policy; load average {load0[0]:.1f} before, "
          f"{load1[0]:.1f} after")
    for h in heads[1:]:
        print(f"  {h}: {POLICIES[h][0]}; flags {' '.join(POLICIES[h][1]) or '(none)'}")
    print(f"\n{'measure'.ljust(width)}  " + "  ".join(h.ljust(w) for h, w in zip(heads, colw,
                                                                                  strict=True)))
    print(f"{'-' * width}  " + "  ".join("-" * w for w in colw))
    for r in rows:
        print(f"{r.ljust(width)}  " + "  ".join(columns[h].get(r, "").ljust(w)
                                                for h, w in zip(heads, colw, strict=True)))
    print("\ngoals: critical p99 <= 2 s; staleness max <= 15 s; the status writes "
          "within 0.25 API-server cores (its CPU minus the no-watcher floor); with "
          "--shape real: critical p99 <= 2 s, staleness max <= 30 s within --write-budget 0.25"
          f"\n(watcher logs in {tmp})")


if __name__ == "__main__":
    main()
