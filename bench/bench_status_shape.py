"""Benchmark what a custom resource's status write costs the API server per part of its shape:
objects, numbers inside objects, numbers in an array, bytes of a string, and the schema's
validation, each varied alone, next to a bus event's create in the same run.

The shapes are written to a custom resource of this bench's own (``StatusShape``, group
``bench.tidings.dev``, installed here), whose status is atomic like the TaskFeedback's and
whose schema types every field the shapes use (so nothing is pruned):
  empty         ``status: {}``;
  objects-1     64 objects of one number each (a map of 64 entries);
  objects-6     64 objects of six numbers each;
  array         the same 384 numbers in one array;
  string        a string of the same bytes as objects-6;
  preserved     objects-6 under ``x-kubernetes-preserve-unknown-fields`` (no schema below it:
                what the structural schema's validation and pruning of those fields cost);
and, for the TaskFeedback, a real training task's status (``hf-300``, bench/training_run.py)
beside the same status without its metrics' histories (``hf-300-no-history``: what a write
would cost if the curves were written elsewhere or at a slower cadence). Each case is a PUT
of ``/status`` with the resourceVersion, answered with the metadata only (the watcher's write),
each a real change (one number moves); kube-apiserver's CPU from /proc per request, its idle
rate taken off, median over the rounds, and the ratio to the create's. The last table derives
what each part costs: one object, one number in an object, one number in an array, 1 kB of
string, over ``empty``.

Run: ``TIDINGS_BIN_DIR=$(tools/controlplane/build.sh) .venv/bin/python bench/bench_status_shape.py``
(``--pprof DIR`` also profiles each case). Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from bench_status_write import (  # bench/bench_status_write.py
    OTHER,
    STAGES,
    Creates,
    breakdown,
    measure,
    profile_during,
    training,
)
from support import add_control_plane_arg, control_plane, load_average  # bench/support.py
from training_run import Run  # bench/training_run.py

from tidings.kube import JSON, METADATA_ONLY, Client, connect
from tidings.schemas import TaskRef
from tidings.schemas.wire.contract import taskfeedback_body, taskfeedback_path
from tidings.schemas.wire.record import without
from tidings.watcher.writer import FIELD_MANAGER

GROUP, PLURAL = "bench.tidings.dev", "statusshapes"
ENTRIES = 64
NUMBER = 0.4543375733096907  # a metric's value as a Trainer logs it (17 significant digits)

_SIX = {k: {"type": "number"} for k in "abcdef"}
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "StatusShape", "plural": PLURAL, "singular": "statusshape",
                       "listKind": "StatusShapeList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "status": {"type": "object", "x-kubernetes-map-type": "atomic",
                                          "properties": {
                                   "n": {"type": "integer"},
                                   "entries": {"type": "object", "additionalProperties": {
                                       "type": "object", "properties": _SIX}},
                                   "numbers": {"type": "array", "items": {"type": "number"}},
                                   "text": {"type": "string"},
                                   "preserved": {"type": "object",
                                                 "x-kubernetes-preserve-unknown-fields": True},
                               }}}}}}]}}


def _entries(width: int) -> dict[str, Any]:
    return {f"name-{i:02d}": {k: NUMBER + i for k in "abcdef"[:width]} for i in range(ENTRIES)}


def shapes() -> dict[str, dict[str, Any]]:
    six = _entries(6)
    return {
        "empty": {},
        "objects-1": {"entries": _entries(1)},
        "objects-6": {"entries": six},
        "array": {"numbers": [NUMBER + i for i in range(ENTRIES * 6)]},
        "string": {"text": "x" * len(orjson.dumps(six))},
        "preserved": {"preserved": six},
    }


def shape_of(o: Any) -> dict[str, int]:
    """Objects, object members, array items and bytes of a JSON value."""
    out = {"objects": 0, "members": 0, "items": 0}

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            out["objects"] += 1
            out["members"] += len(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            out["items"] += len(x)
            for v in x:
                walk(v)

    walk(o)
    out["bytes"] = len(orjson.dumps(o))
    return out


class Shape:
    """One StatusShape whose status is rewritten, ``n`` moved each time."""

    def __init__(self, kube: Client, ns: str, name: str, status: dict[str, Any]) -> None:
        self.kube, self.status = kube, status
        base = f"/apis/{GROUP}/v1/namespaces/{ns}/{PLURAL}"
        self.path = f"{base}/{name}/status"
        self.obj: dict[str, Any] = {"apiVersion": f"{GROUP}/v1", "kind": "StatusShape",
                                    "metadata": {"name": name, "namespace": ns}}
        made = kube.request("POST", base, body=self.obj)
        self.obj["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
        self.n = 0

    def write(self) -> None:
        self.n += 1
        data = orjson.dumps({**self.obj, "status": {**self.status, "n": self.n}})
        got = self.kube.request("PUT", self.path, data=data, content_type=JSON,
                                query=[("fieldManager", FIELD_MANAGER)], accept=METADATA_ONLY)
        self.obj["metadata"]["resourceVersion"] = got["metadata"]["resourceVersion"]


class Feedback:
    """A TaskFeedback whose status is rewritten as the watcher writes it, a counter moved."""

    def __init__(self, kube: Client, ns: str, name: str, status: dict[str, Any]) -> None:
        self.kube, self.ns, self.name, self.status = kube, ns, name, status
        self.path = taskfeedback_path(ns, name, "status")
        made = kube.request("POST", taskfeedback_path(ns), body=taskfeedback_body(ns, name))
        self.rv = str(made["metadata"]["resourceVersion"])
        self.n = 0

    def write(self) -> None:
        self.n += 1
        st = {**self.status, "counters": {**self.status.get("counters", {}), "duplicates": self.n}}
        data = orjson.dumps(taskfeedback_body(self.ns, self.name, resource_version=self.rv,
                                              status=st))
        got = self.kube.request("PUT", self.path, data=data, content_type=JSON,
                                query=[("fieldManager", FIELD_MANAGER)], accept=METADATA_ONLY)
        self.rv = str(got["metadata"]["resourceVersion"])


def without_history(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with its metrics' curves left out (their values and extremes stay)."""
    metrics = {k: without(e, "history") if isinstance(e, str)
               else {f: v for f, v in e.items() if f != "history"}
               for k, e in status.get("metrics", {}).items()}
    return {**status, "metrics": metrics} if metrics else status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=300, help="writes per case and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; the median is reported")
    ap.add_argument("--idle", type=float, default=1.0,
                    help="seconds of idle CPU measured before each case (taken off)")
    ap.add_argument("--pprof", metavar="DIR", help="also profile each case into DIR")
    ap.add_argument("--pprof-seconds", type=int, default=15)
    add_control_plane_arg(ap)
    a = ap.parse_args()
    if a.smoke:
        a.writes, a.rounds, a.idle, a.pprof_seconds = 6, 1, 0.1, 1

    load0 = load_average()
    with control_plane(a.control_plane, "bench-status-shape-") as cp:
        cp.kubectl_run("apply", "-f", "-", input_text=orjson.dumps(CRD).decode())
        cp.wait_established(f"{PLURAL}.{GROUP}")
        kube = connect(str(cp.kubeconfig("admin")), None, maxsize=4)
        pids = {"kube-apiserver": cp.processes["kube-apiserver"].pid}
        ns = f"shape-{uuid.uuid4().hex[:6]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        creates = Creates(kube, ns)
        cases: dict[str, tuple[Callable[[], None], dict[str, Any]]] = {
            "create (a bus event)": (lambda: creates.write(""), {})}
        for name, status in shapes().items():
            s = Shape(kube, ns, name, status)
            cases[name] = (s.write, status)
        hf = training(Run())(TaskRef(ns, "hf-300"))
        for name, status in (("hf-300", hf), ("hf-300-no-history", without_history(hf))):
            f = Feedback(kube, ns, name, status)
            cases[name] = (f.write, status)
        results: dict[str, list[float]] = {c: [] for c in cases}
        for _ in range(a.rounds):
            for c, (fn, _) in cases.items():
                results[c].append(measure(pids, fn, a.writes, a.idle)["kube-apiserver"])
        profiles: dict[str, tuple[Path, int]] = {}
        if a.pprof:
            out = Path(a.pprof)
            out.mkdir(parents=True, exist_ok=True)
            for c, (fn, _) in cases.items():
                path = out / f"shape-{c.split()[0]}.pprof"
                data, n = profile_during(kube, a.pprof_seconds, fn)
                path.write_bytes(data)
                profiles[c] = (path, n)
        binary = cp.bin_dir / "kube-apiserver"
        cp.kubectl_run("delete", "namespace", ns, "--wait=false")

    med = {c: statistics.median(r) for c, r in results.items()}
    create = max(med["create (a bus event)"], 1e-9)
    print(f"\nkube-apiserver CPU per request, median of {a.rounds} rounds of {a.writes}; "
          f"{load0} before, {load_average()} after\n")
    print("| case | bytes | objects | members | array items | ms | x create | spread x create |")
    print("|---|---|---|---|---|---|---|---|")
    for c, (_, status) in cases.items():
        sh = shape_of(status)
        lo, hi = min(results[c]) / create, max(results[c]) / create
        print(f"| {c} | {sh['bytes']:,} | {sh['objects']} | {sh['members']} | {sh['items']} | "
              f"{med[c]:.2f} | {med[c] / create:.2f} | {lo:.2f}-{hi:.2f} |")
    base = med["empty"]
    per = {
        "one object (with its one number)": (med["objects-1"] - base) / ENTRIES,
        "one more number in an object": (med["objects-6"] - med["objects-1"]) / (ENTRIES * 5),
        "one number in an array": (med["array"] - base) / (ENTRIES * 6),
        "1 kB of one string": (med["string"] - base)
        / (shape_of(shapes()["string"])["bytes"] / 1000),
        "validation of a number in an object (objects-6 - preserved)":
            (med["objects-6"] - med["preserved"]) / (ENTRIES * 6),
    }
    print("\n| part | ms | x create |\n|---|---|---|")
    for k, v in per.items():
        print(f"| {k} | {v:.4f} | {v / create:.4f} |")
    if profiles:
        shares = {c: breakdown(binary, p) for c, (p, _) in profiles.items()}
        print("\n| stage | " + " | ".join(shares) + " |")
        print("|---|" + "---|" * len(shares))
        print("| ms per request (profile) | " + " | ".join(
            f"{t / max(profiles[c][1], 1) * 1000:.2f}" for c, (t, _) in shares.items()) + " |")
        for name in [*(n for n, _ in STAGES), OTHER]:  # ms per request in each stage
            print(f"| {name} | " + " | ".join(
                f"{s[name] * t / max(profiles[c][1], 1) * 1000:.2f}"
                for c, (t, s) in shares.items()) + " |")


if __name__ == "__main__":
    main()
