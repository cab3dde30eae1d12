"""The emitter against the real control plane: the Event contract, an API server outage,
a span burst, lineage and the flush at interpreter exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client

from tests.support import create_kwok_pod
from tidings.emitter import Emitter, EmitterConfig, Identity, Span
from tidings.emitter.transport import KubeTransport
from tidings.kube import connect
from tidings.schemas.wire.constants import BUS_CONTROLLER, NOTE_LIMIT
from tidings.schemas.wire.event import ParsedEvent, event_name, parse_event
from tidings.schemas.wire.payloads import (
    DeckReady,
    LogLink,
    PodSpawned,
    Progress,
    SpanSummary,
    span_summaries,
)
from tools.devcluster import ControlPlane

TASK = "train-7"


def bus_events(admin: Any, namespace: str) -> list[dict[str, Any]]:
    """The raw bus events of a namespace, as the API server returns them (camelCase)."""
    resp = client.EventsV1Api(admin).list_namespaced_event(
        namespace, field_selector=f"reportingController={BUS_CONTROLLER}",
        _preload_content=False)
    return list(orjson.loads(resp.data)["items"])


def parsed_events(admin: Any, namespace: str) -> list[ParsedEvent]:
    out = [parse_event(e) for e in bus_events(admin, namespace)]
    assert all(isinstance(p, ParsedEvent) for p in out), out
    return out  # type: ignore[return-value]


def workload(admin: Any, namespace: str, name: str = "worker-0") -> Identity:
    pod = create_kwok_pod(admin, namespace, name, labels={"tidings.dev/task": TASK})
    return Identity(namespace=namespace, pod_name=pod["name"], pod_uid=pod["uid"], task=TASK)


def emitter_for(control_plane: ControlPlane, identity: Identity, user: str = "admin",
                **config: Any) -> Emitter:
    config.setdefault("retry_initial_s", 0.05)
    config.setdefault("retry_max_s", 1.0)
    kube = connect(str(control_plane.kubeconfig(user)))
    return Emitter(EmitterConfig(**config), identity=identity, transport=KubeTransport(kube))


def test_events_follow_the_contract(control_plane: ControlPlane, admin: Any,
                                    namespace: str) -> None:
    me = workload(admin, namespace)
    em = emitter_for(control_plane, me)
    em.log_link("wandb", "https://wandb.ai/acme/runs/7")
    em.deck_ready("report", "s3://bucket/decks/7.html")
    em.record_span("epoch", 1_700_000_000.0, 1_700_000_041.5)
    huge = "進捗メッセージ🚀" * 1300  # ~12 kB of 3- and 4-byte characters
    em.progress(1.0, huge, final=True)
    em.emit(Progress(fraction=0.4, message="loss exploded"), warning=True)
    assert em.flush(15), em.stats()

    raw = bus_events(admin, namespace)
    assert len(raw) == 5
    for ev in raw:
        assert ev["reportingController"] == BUS_CONTROLLER and ev["action"] == "Report"
        assert ev["reportingInstance"] == me.pod_name
        assert [m["manager"] for m in ev["metadata"]["managedFields"]] == ["tidings-emitter"]
        assert ev["related"]["uid"] == me.pod_uid and ev["related"]["kind"] == "Pod"
        assert ev["regarding"]["kind"] == "TaskFeedback" and ev["regarding"]["name"] == TASK
        assert ev["eventTime"].endswith("Z") and len(ev["eventTime"]) == 27  # microseconds
        assert len(ev["note"].encode()) <= NOTE_LIMIT
    by_reason = {p.reason: p for p in parsed_events(admin, namespace) if not p.warning}
    for p in parsed_events(admin, namespace):
        assert p.name == event_name(TASK, em.instance, p.seq)
        assert p.instance == em.instance
    assert isinstance(by_reason["LogLink"].payload, LogLink)
    assert isinstance(by_reason["DeckReady"].payload, DeckReady)
    (span,) = span_summaries(by_reason["Window"].payload)  # the span's window, sent at once
    assert isinstance(span, SpanSummary) and (span.count, span.total_s) == (1, 41.5)
    final = by_reason["Progress"].payload
    assert isinstance(final, Progress) and final.final
    assert final.message.endswith("…") and len(final.message) > 100  # shrunk, not refused
    warnings = [p for p in parsed_events(admin, namespace) if p.warning]
    assert [w.reason for w in warnings] == ["Progress"]
    s = em.stats()
    assert (s["delivered"], s["refused"], s["api_calls"]) == (5, 0, 5)


def test_lineage_names_the_app_and_the_controller_pod(control_plane: ControlPlane, admin: Any,
                                                      namespace: str) -> None:
    controller = workload(admin, namespace, "controller-0")
    spawned = create_kwok_pod(admin, namespace, "trainer-worker-0")
    em = emitter_for(control_plane, Identity(namespace=namespace, pod_name=controller.pod_name,
                                             pod_uid=controller.pod_uid))  # no task needed
    em.pod_spawned(spawned["name"], spawned["uid"], app="trainer", role="worker", attempt=0,
                   app_kind="Job", app_api_version="batch/v1")
    em.pod_spawned(spawned["name"], spawned["uid"], app="trainer", role="worker", attempt=1)
    assert em.flush(15), em.stats()
    events = sorted(parsed_events(admin, namespace), key=lambda p: p.seq)
    assert [(p.regarding_kind, p.task.name) for p in events] == [
        ("Job", "trainer"), ("TaskFeedback", "trainer")]
    for p in events:
        assert isinstance(p.payload, PodSpawned)
        assert (p.payload.pod_name, p.payload.pod_uid) == (spawned["name"], spawned["uid"])
        assert p.sender.uid == controller.pod_uid  # related = the emitting pod


def test_an_api_server_outage_delays_but_never_blocks_or_loses(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    me = workload(admin, namespace)
    # A budget wide enough that the backlog drains quickly: this test is about delivery.
    em = emitter_for(control_plane, me, burst=50, rate=100)
    em.log_link("before", "https://example.com/before")
    assert em.flush(15)

    control_plane.stop_apiserver()
    try:
        slowest = 0.0
        for i in range(200):
            t0 = time.perf_counter()
            em.log_link(f"during-{i}", f"https://example.com/{i}")
            em.progress(i / 200, f"step {i}")
            with Span(em, "step"):
                pass
            slowest = max(slowest, time.perf_counter() - t0)
        em.deck_ready("report", "s3://bucket/report.html")
        em.progress(1.0, "done", final=True)
        assert slowest < 0.01, f"an emit call took {slowest * 1e3:.1f} ms during the outage"
        assert not em.flush(1.0)  # nothing can settle while the server is gone
        assert em.stats()["retries"] >= 1
    finally:
        control_plane.start_apiserver()

    assert em.flush(60), em.stats()
    raw = bus_events(admin, namespace)
    names = [e["metadata"]["name"] for e in raw]
    assert len(names) == len(set(names))
    parsed = parsed_events(admin, namespace)
    links = sorted(p.payload.name for p in parsed if isinstance(p.payload, LogLink))
    assert links == sorted(["before"] + [f"during-{i}" for i in range(200)])  # exactly once
    assert [p.payload.name for p in parsed if isinstance(p.payload, DeckReady)] == ["report"]
    finals = [p for p in parsed if isinstance(p.payload, Progress) and p.payload.final]
    assert len(finals) == 1
    # Every critical event the emitter built is on the server under its deterministic name.
    critical = {p.name for p in parsed if p.reason in ("LogLink", "DeckReady")
                or (isinstance(p.payload, Progress) and p.payload.final)}
    assert critical <= set(names) and len(critical) == 203
    spans = sum(r.count for p in parsed for r in span_summaries(p.payload))
    assert spans == 200
    s = em.stats()
    assert s["undelivered"] == 0 and s["refused"] == 0 and s["dropped_queue_full"] == 0


def test_a_burst_of_100k_spans_costs_a_handful_of_api_calls(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    me = workload(admin, namespace)
    em = emitter_for(control_plane, me, span_window_s=0.5)
    t0 = time.perf_counter()
    for k in range(50_000):
        with Span(em, "batch"):
            pass
        em.record_span("io.read", 1_700_000_000.0 + k * 1e-5, 1_700_000_000.0 + k * 1e-5 + 2e-6,
                       error=k % 10_000 == 0)
    burst_s = time.perf_counter() - t0
    assert burst_s < 1.0, f"100k spans took {burst_s:.2f}s"
    assert em.flush(15), em.stats()
    parsed = parsed_events(admin, namespace)
    summaries = [r for p in parsed for r in span_summaries(p.payload)]
    assert sum(s.count for s in summaries) == 100_000
    assert sum(s.errors for s in summaries) == 5
    s = em.stats()
    assert s["api_calls"] == s["span_notes"] == len(parsed) <= 10, s
    assert s["spans_coalesced"] == 100_000 - len(summaries)
    print(f"\n100k spans in {burst_s:.3f}s -> {s['api_calls']} API calls")


def test_100k_spans_over_256_names_leave_within_5s_of_flush_inside_the_budget(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    me = workload(admin, namespace)
    em = emitter_for(control_plane, me)  # the default budget: burst 20, then 2/s
    names = [f"layer.{i:03d}.forward" for i in range(256)]
    t0 = time.perf_counter()
    base = time.time()
    for k in range(100_000):
        em.record_span(names[k % 256], base + k * 1e-5, base + k * 1e-5 + 3e-6,
                       error=k % 1000 == 0)
    burst_s = time.perf_counter() - t0
    assert burst_s < 1.0, f"100k spans took {burst_s:.2f}s"
    t1 = time.perf_counter()
    assert em.flush(5), em.stats()
    flush_s = time.perf_counter() - t1
    s = em.stats()
    cfg = em.config
    # Within the per-pod budget, counted by the emitter itself (each attempt is a call).
    assert s["api_calls"] <= cfg.burst + cfg.rate * (time.perf_counter() - t0), s
    parsed = parsed_events(admin, namespace)
    assert len(parsed) == s["span_notes"] == s["delivered"]
    got: dict[str, int] = {}
    for p in parsed:
        for r in span_summaries(p.payload):
            got[r.name] = got.get(r.name, 0) + r.count
    assert got == dict.fromkeys(names, 100_000 // 256) | {
        n: 100_000 // 256 + 1 for n in names[:100_000 % 256]}
    assert s["spans_sent"] == 100_000 and s["spans_unsent"] == s["dropped_span_names"] == 0
    print(f"\n100k spans over 256 names: flush {flush_s:.2f}s, {s['api_calls']} API calls")


def test_a_child_that_exits_at_once_still_delivers(control_plane: ControlPlane, admin: Any,
                                                   namespace: str, tmp_path: Path) -> None:
    me = workload(admin, namespace)
    script = textwrap.dedent("""
        import logging
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        from tidings import emitter as tidings
        tidings.log_link("wandb", "https://wandb.ai/acme/runs/9")
        tidings.deck_ready("report", "gs://bucket/deck.html")
        tidings.progress(1.0, "done", final=True)
        tidings.progress(0.5, "coalesced away")
    """)
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig("admin")),
           "POD_NAME": me.pod_name, "POD_UID": me.pod_uid, "POD_NAMESPACE": namespace,
           "TIDINGS_TASK": TASK, "TIDINGS_EMIT_EXIT_FLUSH_S": "5"}
    t0 = time.monotonic()
    child = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert child.returncode == 0, child.stderr
    assert elapsed < 5 + 4, f"exit took {elapsed:.1f}s"
    reasons = sorted(p.reason for p in parsed_events(admin, namespace)  # (not the window)
                     if (p.reason == "Progress" and p.payload.final)  # type: ignore[union-attr]
                     or p.reason not in ("Progress", "Window"))
    assert reasons == ["DeckReady", "LogLink", "Progress"]
    assert "delivered=" in child.stderr  # the one summary line at exit
    assert child.stderr.count("tidings emitter") == 1
