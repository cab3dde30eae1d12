"""Benchmark (not a test): 100k spans over many names against the real API server, with the
default per-pod budget (burst 20, then 2/s), packed (Window events of span rows) vs one event
per name (the sender before packing, as the baseline in the same run).

    TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_span_names.py [--rounds 3]

Each round records 100k spans round-robin over N names as fast as the workload thread can,
then calls ``flush(5)`` and reports: the seconds until flush returned, the API calls (from
``stats()``), and the share of the spans delivered within those 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.sender import Sender
from tidings.emitter.transport import KubeTransport
from tidings.kube import connect

SPANS = 100_000


class OneNamePerEventSender(Sender):
    """The sender before SpanSummaries: each pending name is its own SpanSummary event."""

    def take_window(self, with_progress: bool = True) -> Any:
        if not self.pending:
            return super().take_window(with_progress)
        name, a = next(iter(self.pending.items()))
        del self.pending[name]
        return self.build_summary(name, a), (1, int(a[0])), []


class OneNamePerEvent(Emitter):
    sender_type = OneNamePerEventSender


def one_round(kubeconfig: str, ns: str, names: int, cls: type[Emitter]) -> dict[str, float]:
    em = cls(EmitterConfig(), transport=KubeTransport(connect(kubeconfig)),
             identity=Identity(namespace=ns, pod_name="bench-0", pod_uid="uid-0",
                               task=f"spans-{uuid.uuid4().hex[:6]}"))
    labels = [f"layer.{i:03d}.forward" for i in range(names)]
    base = time.time()
    t0 = time.perf_counter()
    for k in range(SPANS):
        em.record_span(labels[k % names], base + k * 1e-5, base + k * 1e-5 + 3e-6)
    record_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    ok = em.flush(5)
    flush_s = time.perf_counter() - t1
    s = em.stats()
    em.close(0.1)
    return {"record_s": record_s, "flush_s": flush_s, "ok": float(ok),
            "calls": s["api_calls"], "sent": s["spans_sent"] / SPANS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    global SPANS
    if a.smoke:
        a.rounds, SPANS = 1, 2_000
    from tidings.cli.dev import devcluster  # the checkout's tools/devcluster.py

    with devcluster().admin_kubeconfig(a.kubeconfig, "bench-spans-") as kubeconfig:
        kube = connect(kubeconfig)
        ns = f"bench-{uuid.uuid4().hex[:8]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        print("| names | sender | flush s | flush ok | API calls | spans sent in 5 s |")
        print("|---|---|---|---|---|---|")
        for names in (1, 16) if a.smoke else (1, 16, 256):
            for label, cls in (("packed", Emitter), ("one per name", OneNamePerEvent)):
                if names == 1 and cls is OneNamePerEvent:
                    continue  # the same single event either way
                rs = [one_round(kubeconfig, ns, names, cls) for _ in range(a.rounds)]

                def med(k: str, rs: list[dict[str, float]] = rs) -> float:
                    return statistics.median(r[k] for r in rs)

                print(f"| {names} | {label} | {med('flush_s'):.2f} | "
                      f"{sum(r['ok'] for r in rs):.0f}/{len(rs)} | {med('calls'):.0f} | "
                      f"{med('sent'):.0%} |")


if __name__ == "__main__":
    main()
