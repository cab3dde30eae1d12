"""Benchmark the bus end to end: facts from 16 emitter processes into TaskFeedback status, as a
ratio to raw event creates with the same 16-way client shape, in the same run, with the CPU of
every process (kube-apiserver, etcd, emitters, watcher) from /proc beside it.

Three phases on one control plane, each ``--seconds`` long, 16 processes, one task and pod
each, every process one sequential sender (what an emitter is):

  raw      prebuilt bodies POSTed one after another with the tidings.kube client, no watcher
           (the baseline: what the API server takes from this client shape);
  raw+watch the same with one events watch that only reads the lines (the API server's
           fan-out to a watcher, which any bus pays; its reader in the watcher column);
  emitters the Emitter library (log_link, its sender thread), no watcher: the emitter's share;
  bus      the Emitter library with a watcher running: throughput counted once each event is
           in its task's status (the watcher's version vectors), so the watch, fold and status
           writes are all in it. Every fact a LogLink: all critical, the worst case for status
           writes (each task may be written every --write-interval).
  realistic the Emitter library driving what a training pod sends, with a watcher running:
           per step spans of several names (data, forward, backward, optimizer, eval) and a
           non-final progress; three links at the start, a deck every ``DECK_EVERY_S``, a
           final progress at the end. One process stands for a pod sending at full speed
           (budget unlimited, span window ``REALISTIC_SPAN_WINDOW_S`` instead of 2 s), so the
           mix is a pod's at its default budget: span windows and progress, a few critical
           facts; the mix delivered is printed.
  realistic-alone the same pods with no watcher: what these facts cost by themselves (a span
           window's event is larger than a LogLink), so the bus's own share shows as
           realistic over realistic-alone.

Per phase, kube-apiserver and etcd CPU per fact (ms; net of their idle CPU, measured for
``--floor`` seconds just before the phase) and, for the bus phases, as a ratio to a
raw create's in the same run (goals: realistic <= 1.15x, worst case <= 1.3x; bus throughput
>= 0.9 of raw; the watcher <= 0.15 ms per event); the realistic phase also against
realistic-alone. ``--phases`` picks a subset (raw is always
run: the ratios need it).

Every sender of a phase is started and made ready first (its events built, its connection
open, its emitter warm); the measuring window opens for all of them together (a barrier:
each says it is ready, then waits for the window's start). A phase in which a sender still
started late (``late_limit``), could not get ready, failed, or whose facts did not all reach
a status is unreliable: its row says why and shows no figure, no ratio is taken against it,
and the bench exits non-zero (2) when a phase asked for could not be measured.

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_e2e.py``
Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support import (  # bench/support.py
    REPO,
    Watcher,
    add_control_plane_arg,
    control_plane,
    cpu_seconds,
)

PYTHON = REPO / ".venv/bin/python"
PHASES = ["raw", "raw+watch", "emitters", "bus", "realistic-alone", "realistic"]
# The realistic phase's pod (see the module doc).
SPAN_NAMES = ("data", "forward", "backward", "optimizer", "eval")
REALISTIC_SPAN_WINDOW_S = 0.05
DECK_EVERY_S = 5.0
STEP_S = 0.01  # one training step: the spans recorded per step sum to this
# The longest every sender of a phase may take to be ready (imports, its events built, its
# connection open) before the phase is given up as unmeasurable.
READY_TIMEOUT_S = 180.0
# Between the barrier and the window's start: the time the go line takes to reach them all.
GO_MARGIN_S = 0.3
# The exit code of a run that could not measure a phase it was asked for.
EXIT_UNMEASURED = 2


def late_limit(seconds: float) -> float:
    """How late a sender may start sending before its phase is unreliable: a fifth of a
    second, or 2 % of the window when that is more."""
    return max(0.2, 0.02 * seconds)


def ready_then_start(seconds: float) -> tuple[float, float]:
    """The child's side of the barrier: say it is ready, wait for the window's start (a line
    on stdin: its epoch time), sleep until then. Returns (start, deadline)."""
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time()))
    return start, start + seconds


# --- a child: one sender process ---------------------------------------------------------


def child(a: argparse.Namespace) -> None:
    """Get ready, wait for the window (``ready_then_start``), send for ``seconds``, print
    {"sent", "cpu", "late"} as JSON (late: seconds after the window's start it began)."""
    import orjson

    from tidings.kube import JSON
    from tidings.schemas.wire.event import PodRef, TaskRef
    from tidings.schemas.wire.payloads import LogLink

    pod_name, pod_uid = a.pod.split(":", 1)
    n = int(a.seconds * 3000)  # more than one sender can do (it stops there if it can)
    if a.child == "watch":
        from tidings.kube import connect, iter_lines

        client = connect(a.kubeconfig, maxsize=2)
        path = f"/apis/events.k8s.io/v1/namespaces/{a.namespace}/events"
        # (The connection is open: the watch itself costs one request in the window.)
        rv = client.request("GET", path, query=[("limit", "1")])["metadata"]["resourceVersion"]
        start, deadline = ready_then_start(a.seconds)
        late = max(0.0, time.time() - start)
        c0 = time.process_time()
        resp = client.stream(path, [("watch", "true"), ("resourceVersion", rv),
                                    ("timeoutSeconds", str(int(a.seconds) + 3))],
                             timeout=(5, a.seconds + 60))
        lines = 0
        for _ in iter_lines(resp, skip_empty=True):
            lines += 1
            if time.time() > deadline + 2:
                break
        print(json.dumps({"sent": 0, "lines": lines, "cpu": time.process_time() - c0,
                          "late": late}), flush=True)
        os._exit(0)
    if a.child == "raw":
        from tidings.kube import connect
        from tidings.schemas.wire.event import build_event

        client = connect(a.kubeconfig, maxsize=2)
        inst = uuid.uuid4().hex
        now = datetime.now(UTC)
        data = [orjson.dumps(build_event(
            task=TaskRef(a.namespace, a.task), pod=PodRef(pod_name, pod_uid, a.namespace),
            payload=LogLink(name=f"l{i % 32}", url=f"https://logs.example/{i}"),
            instance=inst, seq=i + 1, time=now, sender_proof=False)) for i in range(n)]
        path = f"/apis/events.k8s.io/v1/namespaces/{a.namespace}/events"
        client.open("GET", "/version")  # the connection and TLS handshake, outside the clock
        start, deadline = ready_then_start(a.seconds)
        late = max(0.0, time.time() - start)
        c0 = time.process_time()
        sent = 0
        while time.time() < deadline and sent < n:
            client.open("POST", path, data=data[sent], content_type=JSON, timeout=(3, 10))
            sent += 1
        # A sender that ran out of its events before the deadline gives a floor, no rate.
        print(json.dumps({"sent": sent, "cpu": time.process_time() - c0, "late": late,
                          **({"short": f"a raw sender ran out of its {n} events"}
                             if sent == n else {})}), flush=True)
        return
    from tidings.emitter import Emitter, EmitterConfig, Identity

    os.environ["KUBECONFIG"] = a.kubeconfig
    if a.child == "realistic":
        realistic_child(a, Emitter, EmitterConfig, Identity(
            namespace=a.namespace, pod_name=pod_name, pod_uid=pod_uid, task=a.task))
        os._exit(0)
    em = Emitter(EmitterConfig(burst=1e9, rate=1e9, max_queue=n + 10),
                 identity=Identity(namespace=a.namespace, pod_name=pod_name, pod_uid=pod_uid,
                                   task=a.task))
    em.log_link("warm", "https://logs.example/warm")  # starts the sender, opens the pool
    assert em.flush(30), em.stats()
    start, deadline = ready_then_start(a.seconds)
    late = max(0.0, time.time() - start)
    c0 = time.process_time()
    for i in range(n):  # O(1) each: the sender drains as fast as the API server answers
        em.log_link(f"l{i % 32}", f"https://logs.example/{i}")
    time.sleep(max(0.0, deadline - time.time()))
    sent = int(em.stats()["delivered"]) - 1
    print(json.dumps({"sent": sent, "cpu": time.process_time() - c0, "late": late}), flush=True)
    os._exit(0)  # what is still queued is not part of the run


def realistic_child(a: argparse.Namespace, emitter: Any, config: Any, identity: Any) -> None:
    """A training loop at full speed (see the module doc); prints {"sent", "cpu", "total",
    "mix"}: events delivered within the window, and in all (the final's flush included)."""
    em = emitter(config(burst=1e9, rate=1e9, span_window_s=REALISTIC_SPAN_WINDOW_S),
                 identity=identity)
    em.log_link("warm", "https://logs.example/warm")
    assert em.flush(30), em.stats()
    start, deadline = ready_then_start(a.seconds)
    late = max(0.0, time.time() - start)
    c0 = time.process_time()
    em.log_link("wandb", f"https://wandb.example/{a.task}")
    em.log_link("logs", f"https://logs.example/{a.task}")
    em.log_link("tensorboard", f"https://tb.example/{a.task}")
    step, next_deck = 0, time.time() + DECK_EVERY_S
    share = STEP_S / len(SPAN_NAMES)
    while (now := time.time()) < deadline:
        t = now - STEP_S
        for name in SPAN_NAMES:  # the step's spans, back to back
            em.record_span(name, t, t + share)
            t += share
        step += 1
        em.progress(min(0.99, (now - start) / a.seconds), f"step {step}")
        if now >= next_deck:
            em.deck_ready(f"eval-{step}", f"s3://bench/{a.task}/deck-{step}.html")
            next_deck += DECK_EVERY_S
        time.sleep(STEP_S)  # the step's work, off the CPU (on a GPU)
    stats = em.stats()
    sent = int(stats["delivered"]) - 1
    cpu = time.process_time() - c0
    em.progress(1.0, "done", final=True)
    em.flush(10)
    stats = em.stats()
    print(json.dumps({"sent": sent, "cpu": cpu, "total": int(stats["delivered"]),
                      "mix": stats["delivered_by_reason"], "late": late}), flush=True)


# --- the parent ----------------------------------------------------------------------------


def applied_in_status(kube: Any, ns: str) -> int:
    """Events in the TaskFeedback statuses of ``ns`` (from their version vectors)."""
    from tidings.schemas.engine.version_vector import VersionVector

    items = kube.request("GET", f"/apis/tidings.dev/v1alpha1/namespaces/{ns}/taskfeedbacks")
    n = 0
    for obj in items.get("items") or []:
        vv = VersionVector.from_text((obj.get("status") or {}).get("applied", ""))
        n += sum(hi - lo + 1 for inst in vv.instances for lo, hi in vv.ranges(inst))
    return n


def phase(name: str, a: argparse.Namespace, cp: Any, kube: Any, kubeconfig: str,
          tmp: Path) -> dict[str, Any]:
    """One phase's figures, or {"unreliable": why} when it could not be measured."""
    from tidings.schemas.wire.constants import TASK_LABEL

    ns = f"e2e-{name.replace('+', '-')}-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts",
                 body={"metadata": {"name": "default"}})
    pods = []
    for i in range(a.procs):
        p = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body={
            "metadata": {"name": f"e{i}-pod", "labels": {TASK_LABEL: f"e{i}"}},
            "spec": {"nodeName": "kwok-node-0",
                     "containers": [{"name": "main", "image": "busybox"}]}})
        pods.append(f"{p['metadata']['name']}:{p['metadata']['uid']}")
    pids = {"kube-apiserver": cp.processes["kube-apiserver"].pid,
            "etcd": cp.processes["etcd"].pid}
    w = None
    if name in ("bus", "realistic"):  # the phases with a watcher
        w = Watcher(kubeconfig, ns, tmp / "watcher.log")
        pids["watcher"] = w.proc.pid
    try:
        return measure(name, a, kube, kubeconfig, ns, pods, pids, w)
    finally:
        if w is not None:
            w.stop()


def measure(name: str, a: argparse.Namespace, kube: Any, kubeconfig: str, ns: str,
            pods: list[str], pids: dict[str, int], w: Watcher | None) -> dict[str, Any]:
    if w is not None:
        t0 = time.monotonic()
        while not w.ready():
            if time.monotonic() - t0 > 60:
                return unreliable(name, "the watcher was not ready within 60 s")
            time.sleep(0.1)
    # The API server's and etcd's own idle CPU (node heartbeats, leases, the watcher's idle
    # watches), taken off before dividing by the facts: at the few hundred facts/s of a busy
    # shared machine a fixed 0.03 cores would otherwise read as 0.1 ms per fact.
    f0 = {k: cpu_seconds(pids[k]) for k in ("kube-apiserver", "etcd")}
    time.sleep(a.floor)
    floor = {k: (cpu_seconds(pids[k]) - f0[k]) / a.floor for k in f0}
    mode = "raw" if name.startswith("raw") else "realistic" if name.startswith("realistic") \
        else "emitter"

    def kid(mode: str, i: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(PYTHON), __file__, "--child", mode, "--kubeconfig", kubeconfig, "--namespace",
             ns, "--task", f"e{i}", "--pod", pods[i], "--seconds", str(a.seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    reader = kid("watch", 0) if name == "raw+watch" else None
    kids = [kid(mode, i) for i in range(a.procs)]
    everyone = kids + ([reader] if reader is not None else [])
    try:
        not_ready = barrier(everyone)
        if not_ready:
            return unreliable(name, not_ready)
        start = time.time() + GO_MARGIN_S
        for k in everyone:  # the window opens for all of them together
            assert k.stdin is not None
            k.stdin.write(f"{start!r}\n")
            k.stdin.flush()
        time.sleep(max(0.0, start - time.time()))
        c0 = {k: cpu_seconds(p) for k, p in pids.items()}
        time.sleep(a.seconds)
        cpu = {k: (cpu_seconds(p) - c0[k]) / a.seconds for k, p in pids.items()}
        outs, failed = results_of(kids)
        watched, watch_failed = results_of([reader]) if reader is not None else ([], "")
        if failed or watch_failed:
            return unreliable(name, failed or watch_failed)
    finally:
        for k in everyone:
            if k.poll() is None:
                k.kill()
                k.wait()
    sent = sum(o["sent"] for o in outs)
    late = max(o.get("late", 0.0) for o in outs + watched)
    if late > late_limit(a.seconds):
        return unreliable(name, f"a sender started {late:.1f} s into the window (the machine "
                                "is overloaded)")
    short = next((o["short"] for o in outs if o.get("short")), "")
    if short:
        return unreliable(name, f"{short} before the window closed: its rate is a floor")
    # Every event delivered (the warm-up link of each, and the realistic final included).
    total = sum(o.get("total", o["sent"] + 1) for o in outs)
    mix: dict[str, int] = {}
    for o in outs:
        for reason, n in (o.get("mix") or {}).items():
            mix[reason] = mix.get(reason, 0) + n
    cpu["emitters"] = sum(o["cpu"] for o in outs) / a.seconds
    if watched:
        cpu["watcher"] = watched[0]["cpu"] / a.seconds
    elapsed = a.seconds
    if w is not None:
        # The bus's events/s: counted once they are in a status; the lag after the load is
        # part of the time.
        deadline = time.monotonic() + 120
        while (folded := applied_in_status(kube, ns)) < total:
            if time.monotonic() > deadline:
                return unreliable(name, f"{folded} of the {total} facts delivered reached a "
                                        "status within 120 s")
            time.sleep(0.1)
        elapsed = time.time() - start
        writes = w.metrics().get('tidings_watcher_status_writes_total{result="ok"}', 0.0)
        print(f"  {name}: {writes:.0f} status writes in {elapsed:.1f} s = "
              f"{writes / elapsed:.1f}/s, {writes / max(total, 1):.3f} per fact", flush=True)
    if mix:
        print(f"  {name}: delivered by reason {dict(sorted(mix.items()))}", flush=True)
    return {"events": sent, "rate": sent / elapsed, "created": sent / a.seconds,
            **{f"cpu {k}": v for k, v in cpu.items()},
            **{f"floor {k}": v for k, v in floor.items()}}


def unreliable(name: str, why: str) -> dict[str, Any]:
    """A phase that could not be measured: said at once, and no figure of it used."""
    print(f"  {name}: cannot measure: {why}", flush=True)
    return {"unreliable": why}


def barrier(kids: list[subprocess.Popen[str]]) -> str:
    """Wait until every child said it is ready (``ready_then_start``); "" when all did, else
    what went wrong."""
    sel = selectors.DefaultSelector()
    for k in kids:
        assert k.stdout is not None
        sel.register(k.stdout, selectors.EVENT_READ, k)
    waiting = len(kids)
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"{waiting} of {len(kids)} senders not ready within {READY_TIMEOUT_S:g} s"
            for key, _ in sel.select(left):
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if line.strip() != "ready":
                    code = key.data.wait()
                    return f"a sender exited ({code}) before it was ready"
                sel.unregister(key.fileobj)
                waiting -= 1
    finally:
        sel.close()
    return ""


def results_of(kids: list[subprocess.Popen[str]]) -> tuple[list[dict[str, Any]], str]:
    """Each child's JSON line once it is done; and what went wrong ("" when nothing did)."""
    def kill() -> None:
        for k in kids:
            k.kill()

    killer = threading.Timer(120, kill)
    killer.start()
    try:
        outs = []
        for k in kids:
            out, _ = k.communicate()
            lines = out.strip().splitlines()
            if k.returncode != 0 or not lines:
                return [], f"a sender failed (exit code {k.returncode})"
            outs.append(json.loads(lines[-1]))
        return outs, ""
    finally:
        killer.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    ap.add_argument("--floor", type=float, default=4.0,
                    help="seconds of idle CPU measured before each phase (taken off per fact)")
    ap.add_argument("--phases", default=",".join(PHASES),
                    help=f"comma-separated subset of {','.join(PHASES)} (raw always runs)")
    add_control_plane_arg(ap)
    ap.add_argument("--child", choices=["raw", "emitter", "realistic", "watch"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    ap.add_argument("--namespace", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--pod", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return

    from tidings.kube import connect

    if a.smoke:
        a.procs, a.seconds, a.rounds, a.floor = 2, 1.5, 1, 0.3
    tmp = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    load0 = os.getloadavg()
    wanted = {"raw", *a.phases.split(",")}
    if wanted - set(PHASES):
        ap.error(f"unknown phases: {', '.join(sorted(wanted - set(PHASES)))}")
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PHASES if p in wanted}
    with control_plane(a.control_plane, "bench-e2e-") as cp:
        kubeconfig = str(cp.kubeconfig("admin"))
        kube = connect(kubeconfig)
        for _ in range(a.rounds):
            for name in results:
                results[name].append(phase(name, a, cp, kube, kubeconfig, tmp))
    load1 = os.getloadavg()
    print(f"\n{a.procs} senders x {a.seconds:g} s, median of the measured of {a.rounds} "
          f"rounds; {os.cpu_count()} CPUs, load average {load0[0]:.1f} before, "
          f"{load1[0]:.1f} after\n")
    unmeasured = report(results)
    print(f"(watcher log in {tmp})")
    sys.stdout.flush()
    if unmeasured:
        print(f"cannot measure: {unmeasured}", file=sys.stderr, flush=True)
        # (--smoke only checks that the bench runs: its figures are meaningless anyway.)
        if not a.smoke:
            sys.exit(EXIT_UNMEASURED)


def derive(results: dict[str, list[dict[str, Any]]]) -> None:
    """Per round, each measured phase's ms per fact and, only when that round's raw phase
    was measured too, its ratios to it (and the realistic phase's to realistic-alone's)."""
    for rs in zip(*results.values(), strict=True):
        by_name = dict(zip(results, rs, strict=True))
        raw_round = by_name["raw"]
        raw_ok = "unreliable" not in raw_round
        for r in rs:
            if "unreliable" in r:
                continue
            for p in ("kube-apiserver", "etcd", "watcher"):
                if f"cpu {p}" in r:
                    net = r[f"cpu {p}"] - r.get(f"floor {p}", 0.0)
                    r[f"ms {p}"] = net / max(r["created"], 1e-9) * 1000
        for r in rs:
            if "unreliable" in r or not raw_ok:
                continue  # no ratio against (or of) a phase that was not measured
            r["rate ratio"] = r["rate"] / raw_round["rate"]
            for p in ("kube-apiserver", "etcd"):
                r[f"x {p}"] = r[f"ms {p}"] / max(raw_round[f"ms {p}"], 1e-9)
        alone, real = by_name.get("realistic-alone"), by_name.get("realistic")
        if alone is not None and real is not None and "unreliable" not in alone \
                and "unreliable" not in real:
            real["x alone"] = real["ms kube-apiserver"] / max(alone["ms kube-apiserver"], 1e-9)


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    """Print the table of the measured rounds' medians; returns what could not be measured
    ("" when everything asked for was)."""
    derive(results)
    med: dict[str, dict[str, float]] = {}
    missing: list[str] = []
    for name, rs in results.items():
        ok = [r for r in rs if "unreliable" not in r]
        whys = sorted({r["unreliable"] for r in rs if "unreliable" in r})
        if whys:
            print(f"({name}: {len(rs) - len(ok)} of {len(rs)} rounds not measured: "
                  f"{'; '.join(whys)})")
        if not ok:
            missing.append(f"{name} ({'; '.join(whys)})")
            continue
        keys = {k for r in ok for k in r}
        med[name] = {k: statistics.median(r[k] for r in ok if k in r) for k in keys}
    if "raw" not in med:
        missing.append("every ratio (the raw phase, their baseline, was not measured)")
    procs = ["kube-apiserver", "etcd", "emitters", "watcher"]
    print("\n| phase | events/s (into status) | vs raw | created/s | "
          + " | ".join(f"{p} cores (ms/event)" for p in procs)
          + " | CPU ms/event | apiserver ms/fact net (vs raw) | etcd ms/fact net (vs raw) |")
    print("|---|---|---|---|" + "---|" * len(procs) + "---|---|---|")

    def x(m: dict[str, float], key: str) -> str:
        return f"{m[key]:.2f}x" if key in m else "- x"

    for name in results:
        m = med.get(name)
        if m is None:
            print(f"| {name} | cannot measure |" + " |" * (len(procs) + 5))
            continue
        cores = [m.get(f"cpu {p}") for p in procs]
        total = sum(c for c in cores if c is not None)
        ratio = f"{m['rate ratio']:.2f}" if "rate ratio" in m else "-"
        print(f"| {name} | {m['rate']:,.0f} | {ratio} | {m['created']:,.0f} | "
              + " | ".join("-" if c is None else f"{c:.2f} ({c / m['created'] * 1000:.2f})"
                           for c in cores)
              + f" | {total / m['created'] * 1000:.2f}"
              f" | {m['ms kube-apiserver']:.2f} ({x(m, 'x kube-apiserver')}"
              + (f"; {m['x alone']:.2f}x alone" if "x alone" in m else "")
              + f") | {m['ms etcd']:.2f} ({x(m, 'x etcd')}) |")
    if med:
        floors = {p: statistics.median(m[f"floor {p}"] for m in med.values())
                  for p in ("kube-apiserver", "etcd")}
        print(f"\n(idle floor taken off the net figures, median: kube-apiserver "
              f"{floors['kube-apiserver']:.3f} cores, etcd {floors['etcd']:.3f})")
    print("\n(goals: bus >= 0.9 of raw; kube-apiserver per fact <= 1.3x raw in bus (all "
          "critical), <= 1.15x in realistic; watcher <= 0.15 ms/event. ms/event = a process's "
          "cores over the events created in the window (net: less the idle floor); ratios are per "
          "round, only of rounds whose raw phase was measured too, then the median)")
    return "; ".join(missing)


if __name__ == "__main__":
    main()
