"""Benchmark the watcher process against the real API server (a local control plane).

Measures, in one run:
  1. backlog: events/s folded from the initial list (events created while no watcher ran);
  2. live: sustained events/s folded while creators push as fast as they can;
  3. latency at a fixed rate: emit -> status (TaskFeedback watch) p50/p99, next to the raw
     API server create -> watch latency of the same events (an events watch in this process);
  4. coalescing: status writes/s for one task receiving ~1,000 events/s (bounded by one
     write per 2 x --write-interval after a burst of two: a hot task is paced, coalesce.py).

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_watcher.py``
(``--kubeconfig`` uses an existing cluster instead of starting one). Not a test.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from support import post_event  # bench/support.py

from tidings.kube import Client, KubeError, connect
from tidings.schemas.engine.version_vector import VersionVector
from tidings.schemas.wire.constants import BUS_CONTROLLER, TASK_LABEL
from tidings.schemas.wire.event import PodRef, TaskRef, build_event
from tidings.schemas.wire.payloads import LogLink, Progress, SpanSummary

REPO = Path(__file__).resolve().parents[1]


# --- set-up -------------------------------------------------------------------------------


def payload(seq: int) -> Any:
    k = seq % 3
    if k == 0:
        return LogLink(name=f"l{seq % 16}", url=f"https://logs.example/{seq}")
    if k == 1:
        return SpanSummary(name=f"s{seq % 8}", count=1, total_s=0.1, min_s=0.1, max_s=0.1,
                           first_start=1000.0, last_end=1000.1)
    return Progress(fraction=(seq % 1000) / 1000)


class Creator:
    """Creates bus events from a thread pool; one emitter instance per (task, pod)."""

    def __init__(self, kube: Client, ns: str, pods: dict[str, dict[str, str]],
                 instance: str = "") -> None:
        self.kube, self.ns, self.pods, self.instance = kube, ns, pods, instance
        self.seqs: dict[str, int] = {}
        self.lock = threading.Lock()
        self.sent_at: dict[tuple[str, int], float] = {}  # (instance, seq) -> monotonic
        self.names: dict[str, tuple[str, int]] = {}  # event name -> (instance, seq)

    def one(self, task: str) -> None:
        inst = self.instance or f"{task}-i"
        with self.lock:
            seq = self.seqs[inst] = self.seqs.get(inst, 0) + 1
        pod = self.pods[task]
        body = build_event(task=TaskRef(self.ns, task), pod=PodRef(pod["name"], pod["uid"]),
                           payload=payload(seq), instance=inst, seq=seq,
                           time=datetime.now(UTC), sender_proof=False)
        t = time.monotonic()
        with self.lock:
            self.sent_at[(inst, seq)] = t
            self.names[body["metadata"]["name"]] = (inst, seq)
        post_event(self.kube, self.ns, body, pause=0.05)

    def run(self, tasks: list[str], total: int | None = None, seconds: float | None = None,
            rate: float | None = None, threads: int = 16) -> tuple[int, float]:
        """Create events round-robin over tasks; returns (created, elapsed seconds)."""
        created = 0
        t0 = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            futures: list[Any] = []
            i = 0
            while True:
                if total is not None and i >= total:
                    break
                now = time.monotonic()
                if seconds is not None and now - t0 >= seconds:
                    break
                if rate:
                    due = t0 + i / rate
                    if due > now:
                        time.sleep(due - now)
                elif len(futures) - created > threads * 4:
                    futures[created].result()
                    created += 1
                    continue
                futures.append(pool.submit(self.one, tasks[i % len(tasks)]))
                i += 1
            for f in futures[created:]:
                f.result()
        return len(futures), time.monotonic() - t0


def _hot_worker(kubeconfig: str, ns: str, task: str, pod: dict[str, str], inst: str,
                rate: float, seconds: float, threads: int, out: Any) -> None:
    """One creator process with its own emitter instance (the GIL caps one process well
    below 1,000 creates/s on a small machine)."""
    c = Creator(connect(kubeconfig, maxsize=threads * 2), ns, {task: pod},
                instance=inst)
    n, _ = c.run([task], seconds=seconds, rate=rate, threads=threads)
    out.put(n)


def hot_run(kubeconfig: str, ns: str, task: str, pod: dict[str, str], rate: float,
            seconds: float, procs: int) -> tuple[int, float]:
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    ps = [ctx.Process(target=_hot_worker, args=(kubeconfig, ns, task, pod, f"hot-p{i}",
                                               rate / procs, seconds, 8, q))
          for i in range(procs)]
    t0 = time.monotonic()
    for p in ps:
        p.start()
    total = sum(q.get(timeout=seconds + 120) for _ in ps)
    for p in ps:
        p.join(30)
    return total, time.monotonic() - t0


class Watcher:
    def __init__(self, kubeconfig: str, ns: str, interval: float, max_rate: float,
                 log: Path) -> None:
        self.log = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(REPO / ".venv/bin/tidings"), "watcher", "run", "--kubeconfig", kubeconfig,
             "-n", ns, "--no-leader-elect", "--metrics-host", "127.0.0.1", "--metrics-port",
             "0", "--write-interval", str(interval), "--max-write-rate", str(max_rate),
             "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().strip().rsplit(":", 1)[1])

    def metric(self, name: str) -> float:
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read()
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return 0.0

    def wait_applied(self, n: float, timeout: float = 300) -> float:
        t0 = time.monotonic()
        while self.metric("tidings_watcher_events_applied_total") < n:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"applied {self.metric('tidings_watcher_events_applied_total')}"
                                   f" < {n}")
            time.sleep(0.02)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


class StreamTimer:
    """A raw watch in this process: first-seen time of each event, and of each applied (instance,
    seq) in TaskFeedback statuses."""

    def __init__(self, kube: Client, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.event_seen: dict[str, float] = {}
        self.applied_seen: dict[tuple[str, int], float] = {}
        self.writes: dict[str, int] = {}
        self._stop = False
        for target in (self._events, self._statuses):
            threading.Thread(target=target, daemon=True).start()

    def _rv(self, path: str, query: list[tuple[str, str]]) -> str:
        return str(self.kube.request("GET", path, query=[*query, ("limit", "1")])
                   ["metadata"]["resourceVersion"])

    def _loop(self, path: str, query: list[tuple[str, str]], on: Callable[[Any], None]) -> None:
        rv = self._rv(path, query)
        while not self._stop:
            try:
                for line in self.kube.stream(path, query=[
                        *query, ("watch", "true"), ("resourceVersion", rv),
                        ("timeoutSeconds", "300")], timeout=(5, 400)):
                    msg = orjson.loads(line)
                    rv = msg["object"]["metadata"].get("resourceVersion", rv)
                    on(msg)
            except KubeError:
                time.sleep(0.1)

    def _events(self) -> None:
        def on(msg: Any) -> None:
            if msg["type"] == "ADDED":
                self.event_seen.setdefault(msg["object"]["metadata"]["name"], time.monotonic())

        self._loop(f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events",
                   [("fieldSelector", f"reportingController={BUS_CONTROLLER}")], on)

    def _statuses(self) -> None:
        def on(msg: Any) -> None:
            now = time.monotonic()
            obj = msg["object"]
            name = obj["metadata"]["name"]
            st = obj.get("status") or {}
            if "applied" not in st:
                return
            self.writes[name] = self.writes.get(name, 0) + 1
            vv = VersionVector.from_text(st["applied"])
            for inst in vv.instances:
                for lo, hi in vv.ranges(inst):
                    for seq in range(lo, hi + 1):
                        self.applied_seen.setdefault((inst, seq), now)

        self._loop(f"/apis/tidings.dev/v1alpha1/namespaces/{self.ns}/taskfeedbacks", [], on)

    def stop(self) -> None:
        self._stop = True


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


# --- main ---------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    ap.add_argument("--backlog", type=int, default=10000, help="events in the backlog phase")
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--live-seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=100.0, help="fixed rate for latency (ev/s)")
    ap.add_argument("--rate-seconds", type=float, default=15.0)
    ap.add_argument("--hot-rate", type=float, default=1000.0)
    ap.add_argument("--hot-seconds", type=float, default=10.0)
    ap.add_argument("--write-interval", type=float, default=0.5)
    ap.add_argument("--max-write-rate", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--procs", type=int, default=4, help="creator processes for the hot task")
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.backlog, a.tasks, a.live_seconds, a.rate, a.rate_seconds = 60, 3, 1.0, 20.0, 1.0
        a.hot_rate, a.hot_seconds, a.threads, a.procs = 40.0, 1.0, 4, 1

    from tidings.cli.dev import devcluster  # the checkout's tools/devcluster.py

    tmp = Path(tempfile.mkdtemp(prefix="bench-watcher-"))
    with devcluster().admin_kubeconfig(a.kubeconfig, "bench-watcher-cp-") as kubeconfig:
        run(a, kubeconfig, tmp)


def run(a: argparse.Namespace, kubeconfig: str, tmp: Path) -> None:
    from tidings.cli.dev import devcluster

    find_bin_dir = devcluster().find_bin_dir

    kubectl = str(find_bin_dir() / "kubectl")
    kube = connect(kubeconfig, maxsize=a.threads * 4)
    subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "apply", "-f",
                    str(REPO / "deploy/crd.yaml")], check=True, capture_output=True)
    subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "wait", "--for=condition=Established",
                    "crd/taskfeedbacks.tidings.dev", "--timeout=60s"], check=True,
                   capture_output=True)
    rows: list[tuple[str, str]] = []

    def namespace(tasks: list[str]) -> tuple[str, dict[str, dict[str, str]]]:
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",  # no controller-manager
                     body={"metadata": {"name": "default"}})
        pods = {}
        for t in tasks:
            p = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body={
                "metadata": {"name": f"{t}-pod", "labels": {TASK_LABEL: t}},
                "spec": {"nodeName": "kwok-node-0",
                         "containers": [{"name": "main", "image": "busybox"}]}})
            pods[t] = {"name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        return ns, pods

    # 1 + 2: backlog then live throughput ------------------------------------------------
    tasks = [f"t{i}" for i in range(a.tasks)]
    ns, pods = namespace(tasks)
    creator = Creator(kube, ns, pods)
    n, secs = creator.run(tasks, total=a.backlog, threads=a.threads)
    rows.append(("API creates/s (16 threads, no watcher)", f"{n / secs:,.0f}"))
    w = Watcher(kubeconfig, ns, a.write_interval, a.max_write_rate, tmp / "watcher-1.log")
    t_fold = w.wait_applied(n)
    rows.append((f"backlog: {n:,} events listed+folded", f"{n / t_fold:,.0f} ev/s "
                                                          f"({t_fold:.2f} s)"))
    base = w.metric("tidings_watcher_events_applied_total")
    w0 = w.metric('tidings_watcher_status_writes_total{result="ok"}')
    m, secs = creator.run(tasks, seconds=a.live_seconds, threads=a.threads)
    lag = w.wait_applied(base + m)
    writes = w.metric('tidings_watcher_status_writes_total{result="ok"}') - w0
    rows.append((f"live: {m:,} events at max create rate over {a.tasks} tasks",
                 f"{m / (secs + lag):,.0f} ev/s folded (created {m / secs:,.0f}/s; lag at end "
                 f"{lag:.2f} s; {writes / (secs + lag):.0f} status writes/s)"))
    w.stop()

    # 3: latency at a fixed rate ------------------------------------------------------------
    tasks = [f"r{i}" for i in range(10)]
    ns, pods = namespace(tasks)
    timer = StreamTimer(kube, ns)
    w = Watcher(kubeconfig, ns, a.write_interval, a.max_write_rate, tmp / "watcher-2.log")
    creator = Creator(kube, ns, pods)
    time.sleep(1.0)
    n, secs = creator.run(tasks, seconds=a.rate_seconds, rate=a.rate, threads=a.threads)
    w.wait_applied(n)
    time.sleep(a.write_interval + 1.0)
    raw = [timer.event_seen[name] - creator.sent_at[key]
           for name, key in creator.names.items() if name in timer.event_seen]
    e2e = [timer.applied_seen[k] - t for k, t in creator.sent_at.items()
           if k in timer.applied_seen]
    rows.append((f"latency at {n / secs:,.0f} ev/s: raw create->watch p50/p99",
                 f"{pct(raw, 50) * 1e3:,.1f} / {pct(raw, 99) * 1e3:,.1f} ms (n={len(raw)})"))
    rows.append((f"latency: emit->status p50/p99 (write interval {a.write_interval}s)",
                 f"{pct(e2e, 50) * 1e3:,.1f} / {pct(e2e, 99) * 1e3:,.1f} ms (n={len(e2e)})"))
    timer.stop()
    w.stop()

    # 4: one hot task ------------------------------------------------------------------------
    tasks = ["hot"]
    ns, pods = namespace(tasks)
    timer = StreamTimer(kube, ns)
    w = Watcher(kubeconfig, ns, a.write_interval, a.max_write_rate, tmp / "watcher-3.log")
    time.sleep(1.0)
    w0 = w.metric('tidings_watcher_status_writes_total{result="ok"}')
    n, secs = hot_run(kubeconfig, ns, "hot", pods["hot"], a.hot_rate, a.hot_seconds, a.procs)
    lag = w.wait_applied(n)
    time.sleep(a.write_interval + 0.5)
    writes = w.metric('tidings_watcher_status_writes_total{result="ok"}') - w0
    window = secs + lag + a.write_interval + 0.5
    rows.append((f"hot task: {n:,} events at {n / secs:,.0f} ev/s",
                 f"{writes:.0f} status writes = {writes / window:.2f} writes/s "
                 f"(bound 1/(2 x interval) = {1 / (2 * a.write_interval):.2f}/s; "
                 f"watch saw {timer.writes.get('hot', 0)})"))
    timer.stop()
    w.stop()

    width = max(len(r[0]) for r in rows)
    print(f"\nwatcher: --write-interval {a.write_interval} --max-write-rate {a.max_write_rate}")
    print(f"\n{'measure'.ljust(width)}  result")
    print(f"{'-' * width}  {'-' * 40}")
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    print(f"\n(watcher logs in {tmp})")


if __name__ == "__main__":
    main()
