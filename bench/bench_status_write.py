"""Benchmark the API server's CPU per TaskFeedback status write, next to a raw event create
measured in the same run.

The statuses are what the watcher writes (``status_body`` of a real fold):
  minimal  one worker's progress;
  typical  a training task: 2 workers, 2 links, a deck, 5 span names, ~100 events;
  capped   every cap full with the longest names and URLs, cut to the byte budget;
  hf-300   a real training task (bench/training_run.py): a Hugging Face Trainer run of two
           pods, 300 steps, logging every 5 and evaluating every 50, its 13 metrics with
           their curves, span lanes per pod, workers and health, folded from the events the
           callback and the emitter send;
  hf-long  the same for 3,960 steps with all 13 metrics logged at each logging step, so
           every curve holds its 32 points.
Each is written N times per round, every write a real change (a counter moves), by each
``--methods`` entry:
  put      PUT of ``/status`` with the object's resourceVersion (a precondition), answered
           with the object's metadata only (``Accept: ...;as=PartialObjectMetadata``): the
           watcher's write;
  put-object  the same PUT answered with the whole object (the watcher's write before);
  merge    JSON merge patch of ``/status`` carrying ``metadata.resourceVersion`` (the same
           precondition);
  json     JSON Patch ``test`` of the resourceVersion, then ``add /status``.
The baseline, ``create``, is a bus event (a LogLink, as the emitter sends it) POSTed the same
number of times in the same rounds. API-server and etcd CPU are read from
``/proc/<pid>/stat`` (utime + stime) around the requests, minus their idle rate measured just
before, and divided by N; medians over the rounds, and each figure as a ratio to the create's.
``--pprof DIR`` also records a CPU profile of kube-apiserver (its ``/debug/pprof/profile``)
for the create and every status write, and prints where the time goes (``go tool pprof``).

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_status_write.py``
Not a test.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from support import (  # bench/support.py
    add_control_plane_arg,
    control_plane,
    cpu_seconds,
    load_average,
)
from training_run import Run, hf_run_state  # bench/training_run.py

from tidings.kube import JSON, JSON_PATCH, MERGE_PATCH, METADATA_ONLY, Client, connect
from tidings.schemas import (
    NAME_LIMIT,
    URL_LIMIT,
    DeckReady,
    Limits,
    LogLink,
    Metric,
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
from tidings.schemas.wire.contract import events_path, taskfeedback_body, taskfeedback_path
from tidings.watcher.writer import FIELD_MANAGER, json_values, status_body, write_cost

T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
METHODS = ("put", "put-object", "merge", "json")


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
    # Each name at the payload model's limit (a 3-digit prefix keeps them distinct), in
    # 2-byte characters: the most bytes a name can put into the status.
    heavy = "é" * (NAME_LIMIT - 3)
    # The longest URL that still fits a note beside the longest name.
    url = "https://e.example/" + "x" * (URL_LIMIT - 120 - len("https://e.example/"))
    lim = Limits()
    items: list[tuple[Payload, PodRef, str, int]] = []
    pod0 = PodRef("p" * 200, "u" * 36)
    for i in range(lim.links):
        items.append((LogLink(name=f"{i:03d}" + heavy, url=url), pod0, "i" * 64, len(items)))
    for i in range(lim.decks):
        items.append((DeckReady(name=f"{i:03d}" + heavy, uri=url), pod0, "i" * 64, len(items)))
    for i in range(lim.metrics):
        items.append((Metric(name=f"{i:03d}" + heavy, value=1 / 3, step=2**40), pod0, "i" * 64,
                      len(items)))
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
        items.append((LogLink(name="000" + heavy, url=url), pod0, f"{i:032x}x", 0))
    return status_body(fold_all(ref, _events(ref, items)))


def training(run: Run) -> Callable[[TaskRef], dict[str, Any]]:
    """The status of a training task as the watcher writes it at the run's end."""

    def status(ref: TaskRef) -> dict[str, Any]:
        state, _, end = hf_run_state(ref.namespace, ref.name, run)
        return status_body(state, now=end)

    return status


class Target:
    """One TaskFeedback whose status is rewritten, each time with a counter moved."""

    def __init__(self, kube: Client, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.kube, self.namespace, self.name, self.status = kube, namespace, name, status
        self.path = taskfeedback_path(namespace, name, "status")
        obj = kube.request("POST", taskfeedback_path(namespace), query=[("fieldManager",
                                                                          FIELD_MANAGER)],
                           body=taskfeedback_body(namespace, name))
        self.rv = str(obj["metadata"]["resourceVersion"])
        self.n = 0

    def body(self) -> dict[str, Any]:
        self.n += 1
        return {**self.status, "counters": {**self.status.get("counters", {}),
                                            "duplicates": self.n}}  # a real change

    def write(self, method: str) -> None:
        query = [("fieldManager", FIELD_MANAGER)]
        st = self.body()
        accept = METADATA_ONLY
        if method in ("put", "put-object"):
            data = orjson.dumps(taskfeedback_body(self.namespace, self.name,
                                                  resource_version=self.rv, status=st))
            obj = self.kube.request("PUT", self.path, data=data, content_type=JSON, query=query,
                                    accept=None if method == "put-object" else accept)
        elif method == "merge":
            data = orjson.dumps({"metadata": {"resourceVersion": self.rv}, "status": st})
            obj = self.kube.request("PATCH", self.path, data=data, content_type=MERGE_PATCH,
                                    query=query, accept=accept)
        else:
            data = orjson.dumps([
                {"op": "test", "path": "/metadata/resourceVersion", "value": self.rv},
                {"op": "add", "path": "/status", "value": st}])
            obj = self.kube.request("PATCH", self.path, data=data, content_type=JSON_PATCH,
                                    query=query, accept=accept)
        self.rv = str(obj["metadata"]["resourceVersion"])


class Creates:
    """The baseline: bus events (a LogLink each) created one after another."""

    def __init__(self, kube: Client, namespace: str) -> None:
        self.kube, self.namespace, self.seq = kube, namespace, 0
        self.inst = uuid.uuid4().hex
        self.size = len(self._body())

    def _body(self) -> bytes:
        self.seq += 1
        return orjson.dumps(build_event(
            task=TaskRef(self.namespace, "baseline"), pod=PodRef("train-0", "uid-train-0"),
            payload=LogLink(name=f"l{self.seq % 32}", url=f"https://logs.example/{self.seq}"),
            instance=self.inst, seq=self.seq, time=datetime.now(UTC), sender_proof=False))

    def write(self, method: str) -> None:
        self.kube.request("POST", events_path(self.namespace), data=self._body(),
                          content_type=JSON)


def measure(pids: dict[str, int], write: Callable[[], None], n: int, idle_s: float
            ) -> dict[str, float]:
    """CPU milliseconds per request of each process in ``pids``, its idle rate (measured for
    ``idle_s`` just before) subtracted."""
    write()  # warm (the first write of an object costs more: managedFields appear)
    c0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    time.sleep(idle_s)
    dt = time.monotonic() - t0
    idle = {k: (cpu_seconds(p) - c0[k]) / dt for k, p in pids.items()}
    c0, t0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    for _ in range(n):
        write()
    elapsed = time.monotonic() - t0
    return {k: max(0.0, cpu_seconds(p) - c0[k] - idle[k] * elapsed) / n * 1000
            for k, p in pids.items()}


# --- profiles -------------------------------------------------------------------------------
# Where kube-apiserver's CPU goes. Each profile sample goes to the first stage, in this order,
# that a frame of its stack matches (so the shares are exclusive and add up to 100 %): the
# background goroutines first (GC, the watch cache, the etcd watch), then the request's own
# phases from the innermost out (validation and managed fields run inside the storage update,
# which runs inside the handler).
STAGES: tuple[tuple[str, str], ...] = (
    ("garbage collector (background)", r"^runtime\.gcBgMarkWorker"),
    ("watch cache: decode + fan-out", r"storage/cacher\.\(\*(Cacher|watchCache|cacheWatcher)\)|"
                                      r"storage/etcd3\.\(\*(watchChan|concurrentOrdered)"),
    ("validation: CRD schema + ratcheting", r"^k8s\.io/apiserver/pkg/registry/rest\.Before"),
    ("managed fields", r"managedfields|structured-merge-diff|fieldmanager"),
    ("admission", r"apiserver/pkg/admission|admission/plugin"),
    ("etcd: client + gRPC", r"go\.etcd\.io/etcd/client|google\.golang\.org/grpc"),
    ("storage: decode current, encode new", r"storage/etcd3\.\(\*store\)\."),
    ("decode + prune + default the body", r"serializer/versioning\.\(\*codec\)\.Decode|"
                                          r"schemaCoercing|unstructuredSchemaCoercer|"
                                          r"schema/pruning|schema/defaulting|runtime\.Decode"),
    ("write the response", r"responsewriters\.|transformResponseObject"),
    ("handler chain: TLS, HTTP, authn/z, flow control", r"net/http\.|crypto/tls|"
                                                        r"endpoints/filters|server/filters|"
                                                        r"flowcontrol"),
)


def profile_during(kube: Client, seconds: int, work: Callable[[], None]) -> tuple[bytes, int]:
    """A CPU profile of kube-apiserver over ``seconds`` while ``work`` runs (repeatedly), and
    how many times it ran."""
    out: dict[str, bytes] = {}

    def fetch() -> None:
        out["p"] = kube.open("GET", "/debug/pprof/profile", query=[("seconds", str(seconds))],
                             timeout=(5, seconds + 60)).data

    t = threading.Thread(target=fetch)
    t.start()
    time.sleep(0.2)
    n = 0
    while t.is_alive():
        work()
        n += 1
    t.join()
    return out["p"], n


OTHER = "other (runtime, scheduler, idle work)"


def breakdown(binary: Path, profile: Path) -> tuple[float, dict[str, float]]:
    """(total samples' seconds, {stage: share of samples}) from ``go tool pprof -traces``."""
    text = subprocess.run(["go", "tool", "pprof", "-traces", str(binary), str(profile)],
                          capture_output=True, text=True, check=True).stdout
    total = 0.0
    hits = dict.fromkeys([*(name for name, _ in STAGES), OTHER], 0.0)
    pats = [(name, re.compile(rx)) for name, rx in STAGES]
    for block in text.split("-----------+-------------------------------------------------------"):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if not lines or not re.match(r"^[0-9.]+(ms|s|us)\s", lines[0]):
            continue
        head, _, first = lines[0].partition(" ")
        secs = _seconds(head)
        frames = [first.strip(), *lines[1:]]
        total += secs
        stage = next((name for name, rx in pats if any(rx.search(f) for f in frames)), OTHER)
        hits[stage] += secs
    return total, {k: v / total if total else 0.0 for k, v in hits.items()}


def _seconds(text: str) -> float:
    for unit, scale in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


# --- main -------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=300, help="writes per status (capped: 1/3)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    ap.add_argument("--methods", default="put,put-object",
                    help=f"comma-separated write methods to compare, of {','.join(METHODS)}")
    ap.add_argument("--idle", type=float, default=1.0,
                    help="seconds of idle CPU measured before each case (taken off)")
    ap.add_argument("--pprof", metavar="DIR", help="also profile each case into DIR and print "
                    "where kube-apiserver's CPU goes")
    ap.add_argument("--pprof-seconds", type=int, default=15)
    add_control_plane_arg(ap)
    a = ap.parse_args()
    methods = a.methods.split(",")
    if set(methods) - set(METHODS):
        ap.error(f"unknown methods: {','.join(sorted(set(methods) - set(METHODS)))}")
    if a.smoke:  # every method once, and a profile when asked
        a.writes, a.rounds, a.idle, a.pprof_seconds = 6, 1, 0.1, 1
        methods = list(METHODS)

    statuses = {"minimal": minimal, "typical": typical, "capped": capped,
                "hf-300": training(Run()),
                "hf-long": training(Run(steps=3960, every_metric_each_log=True))}
    load0 = load_average()
    with control_plane(a.control_plane, "bench-status-write-") as cp:
        kube = connect(str(cp.kubeconfig("admin")), None, maxsize=4)
        pids = {k: cp.processes[k].pid for k in ("kube-apiserver", "etcd")}
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        cases: dict[tuple[str, str], tuple[Callable[[], None], int, int]] = {}
        values: dict[tuple[str, str], int] = {}
        creates = Creates(kube, ns)
        cases[("create", "event")] = (lambda: creates.write(""), creates.size, a.writes)
        targets = {}
        for k, f in statuses.items():
            status = f(TaskRef(ns, k))
            for m in methods:
                t = targets[(k, m)] = Target(kube, ns, f"{k}-{m}", status)
                cases[(k, m)] = ((lambda t=t, m=m: t.write(m)), len(orjson.dumps(t.status)),
                                 a.writes // 3 if k == "capped" else a.writes)
                values[(k, m)] = json_values(t.status)
        results: dict[tuple[str, str], list[dict[str, float]]] = {c: [] for c in cases}
        for _ in range(a.rounds):
            for c, (fn, _, n) in cases.items():
                results[c].append(measure(pids, fn, n, a.idle))
        profiles: dict[tuple[str, str], Path] = {}
        profiled: dict[tuple[str, str], int] = {}
        if a.pprof:
            out = Path(a.pprof)
            out.mkdir(parents=True, exist_ok=True)
            for c, (fn, _, _) in cases.items():
                path = out / f"{c[0]}-{c[1]}.pprof"
                data, profiled[c] = profile_during(kube, a.pprof_seconds, fn)
                path.write_bytes(data)
                profiles[c] = path
        binary = cp.bin_dir / "kube-apiserver"
    print(f"\nAPI-server CPU per request, median of {a.rounds} rounds of {a.writes} requests "
          f"(capped {a.writes // 3}); {load0} before, {load_average()} after\n")
    print("| status | method | bytes | JSON values | kube-apiserver ms | x create | etcd ms | "
          "x create | the watcher's estimate |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = {p: statistics.median(r[p] for r in results[("create", "event")])
            for p in pids}
    for c, (_, size, _) in cases.items():
        med = {p: statistics.median(r[p] for r in results[c]) for p in pids}
        n = values.get(c, 0)
        estimate = f"{write_cost(size, n):.2f} ms" if n else "-"
        print(f"| {c[0]} | {c[1]} | {size:,} | {n or '-'} | {med['kube-apiserver']:.2f} | "
              f"{med['kube-apiserver'] / max(base['kube-apiserver'], 1e-9):.2f} | "
              f"{med['etcd']:.2f} | {med['etcd'] / max(base['etcd'], 1e-9):.2f} | "
              f"{estimate} |")
    print("\n(goals: a real training task's status write (hf-300) <= 4x an event "
          "create, the typical one <= 3.5x; create = a bus event, the same run)")
    if profiles:
        print(f"\nWhere kube-apiserver's CPU goes (profile samples, each to the first stage "
              f"its stack matches; {a.pprof_seconds} s each; ms per request = sampled CPU over "
              "the requests made meanwhile)\n")
        shares = {c: breakdown(binary, p) for c, p in profiles.items()}
        heads = [f"{c[0]} {c[1]}" for c in shares]
        print("| stage | " + " | ".join(heads) + " |")
        print("|---|" + "---|" * len(heads))
        print("| CPU seconds sampled | " + " | ".join(f"{t:.2f}" for t, _ in shares.values())
              + " |")
        print("| ms per request | " + " | ".join(
            f"{t / max(profiled[c], 1) * 1000:.2f}" for c, (t, _) in shares.items()) + " |")
        for name in [*(n for n, _ in STAGES), OTHER]:
            print(f"| {name} | " + " | ".join(f"{s[name]:.0%}" for _, s in shares.values())
                  + " |")
        print(f"\n(profiles in {a.pprof}; `go tool pprof -top {binary} FILE` for the rest)")


if __name__ == "__main__":
    main()
