"""Benchmark (not a test): the emitter's CPU per delivered event against a raw urllib3
client doing the same creates, in the same process and run (the goal: at most 1.1x, so
instrumenting a workload costs it about what creating the Events itself would).

    TIDINGS_BIN_DIR=... .venv/bin/python bench/bench_emitter_cpu.py [--events 2000]

Each round creates ``--events`` LogLink events in one namespace, one at a time, on a kept
connection, and measures this process's CPU time (all threads: the emitter's sender
included) until the last create is answered:

- raw urllib3: bodies built beforehand (build_event, outside the clock), then orjson.dumps +
  one POST each, with a fixed bearer header: the floor for "the same creates";
- tidings.kube Client.open: the same requests through the layer (cached auth header,
  token check, error mapping);
- the Emitter: log_link() calls from the workload thread, then flush(): validation, event
  building, the queue, the sender thread, retries policy and the transport;
- the kubernetes client (when installed), as the emitter used it before tidings.kube.

Rounds run the clients in a shuffled order so drift hits all of them alike; the median and
the best round are printed, with "raw urllib3 again" as the noise floor of the comparison.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

import orjson
import urllib3

from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import EVENTS_PATH, KubeTransport
from tidings.kube import connect
from tidings.schemas.wire.event import PodRef, TaskRef, build_event
from tidings.schemas.wire.payloads import LogLink


def bodies(ns: str, n: int) -> list[dict[str, object]]:
    instance = uuid.uuid4().hex
    now = datetime.now(timezone.utc)
    return [build_event(task=TaskRef(ns, "bench"), pod=PodRef("bench-0", "uid-0", ns),
                        payload=LogLink(name=f"l{i}", url=f"https://example.com/{i}"),
                        instance=instance, seq=i, time=now) for i in range(n)]


def cpu(fn: Callable[[], None]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting one")
    ap.add_argument("--events", type=int, default=2000, help="creates per round and client")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="a few iterations only, to check that the bench runs (no figures)")
    a = ap.parse_args()
    if a.smoke:
        a.events, a.rounds = 20, 1
    from tidings.cli.dev import devcluster  # the checkout's tools/devcluster.py

    with devcluster().admin_kubeconfig(a.kubeconfig, "bench-emitter-") as kubeconfig:
        run(a, kubeconfig)


def run(a: argparse.Namespace, kubeconfig: str) -> None:
    kube = connect(kubeconfig)
    cfg = kube.config
    n = a.events
    auth = cfg.auth.header() or ""

    def fresh_namespace() -> str:
        ns = f"bench-{uuid.uuid4().hex[:8]}"
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        return ns

    # The raw client: one pool to the server, the same TLS settings, a fixed header.
    raw_pool = urllib3.PoolManager(
        maxsize=2, retries=False, ssl_context=kube._ssl_context()
    ).connection_from_url(cfg.server)
    raw_headers = {"Accept": "application/json", "Content-Type": "application/json",
                   "Authorization": auth}

    def raw() -> float:
        ns = fresh_namespace()
        todo = bodies(ns, n)
        path = EVENTS_PATH.format(namespace=ns) + "?fieldManager=tidings-emitter"

        def go() -> None:
            for body in todo:
                resp = raw_pool.urlopen("POST", path, body=orjson.dumps(body),
                                        headers=raw_headers, retries=False)
                if resp.status != 201:
                    raise SystemExit(f"raw create failed: {resp.status} {resp.data[:200]!r}")
        return cpu(go)

    transport = KubeTransport(connect(kubeconfig))  # kept, like the raw pool

    def layer() -> float:
        ns = fresh_namespace()
        todo = bodies(ns, n)

        def go() -> None:
            for body in todo:
                transport.post(ns, body)
        return cpu(go)

    def emitter() -> float:
        ns = fresh_namespace()
        em = Emitter(EmitterConfig(burst=1e9, rate=1e9, max_queue=n + 10),
                     identity=Identity(namespace=ns, pod_name="bench-0", pod_uid="uid-0",
                                       task="bench"),
                     transport=KubeTransport(connect(kubeconfig)))
        em.log_link("warm", "https://example.com/warm")  # starts the sender, opens the pool
        assert em.flush(30)

        def go() -> None:
            for i in range(n):
                em.log_link(f"l{i}", f"https://example.com/{i}")
            if not em.flush(300):
                raise SystemExit(f"emitter did not flush: {em.stats()}")
        spent = cpu(go)
        s = em.stats()
        assert s["delivered"] == n + 1 and s["refused"] == 0, s
        em.close(5)
        return spent

    clients: list[tuple[str, Callable[[], float]]] = [
        ("raw urllib3 (baseline)", raw), ("tidings.kube Client", layer),
        ("raw urllib3 again (the noise floor)", raw),
        ("tidings Emitter (log_link + flush)", emitter)]
    try:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        api = k8s_config.new_client_from_config(config_file=kubeconfig)
        events = k8s.EventsV1Api(api)

        def official() -> float:
            ns = fresh_namespace()
            todo = bodies(ns, n)

            def go() -> None:
                for body in todo:
                    events.create_namespaced_event(ns, body, _preload_content=False)
            return cpu(go)

        clients.append(("kubernetes client (the emitter before)", official))
    except ImportError:
        pass

    for _, fn in clients:  # warm-up: imports, TLS handshakes, server-side caches
        fn()
    spent: dict[str, list[float]] = {name: [] for name, _ in clients}
    order = list(clients)
    for _ in range(a.rounds):
        random.shuffle(order)  # no client always runs right after another one's garbage
        for name, fn in order:
            spent[name].append(fn() / n * 1e6)
    base, base_best = statistics.median(spent[clients[0][0]]), min(spent[clients[0][0]])
    print(f"\nemitter CPU per delivered event ({n} creates x {a.rounds} rounds, Python "
          f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs)\n")
    print("| client | CPU µs/event (median) | vs raw | best round | vs raw's best |")
    print("|---|---|---|---|---|")
    for name, _ in clients:
        med, best = statistics.median(spent[name]), min(spent[name])
        print(f"| {name} | {med:.0f} | {med / base:.2f}x | {best:.0f} | "
              f"{best / base_best:.2f}x |")

if __name__ == "__main__":
    main()
