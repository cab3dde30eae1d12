"""The Emitter against an in-memory transport: never raises, bounds, coalescing, counting."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from tests.support import eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.retry import SendError
from tidings.emitter.transport import LogSink
from tidings.schemas.wire.constants import NOTE_LIMIT
from tidings.schemas.wire.event import ParsedEvent, parse_event
from tidings.schemas.wire.payloads import (
    LogLink,
    Payload,
    PodSpawned,
    Progress,
    Window,
    span_summaries,
)

ME = Identity(namespace="ml", pod_name="train-0", pod_uid="0c4f-11", task="run-7")


class Recorder:
    """A transport that keeps what it was sent; ``fail`` scripts errors for the next posts."""

    sink = False

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail: list[SendError] = []
        self.lock = threading.Lock()

    def post(self, namespace: str, body: dict[str, Any]) -> bool:
        with self.lock:
            if self.fail:
                raise self.fail.pop(0)
            assert namespace == body["metadata"]["namespace"]
            self.bodies.append(body)
        return True

    def parsed(self) -> list[ParsedEvent]:
        out = [parse_event(b) for b in self.bodies]
        assert all(isinstance(p, ParsedEvent) for p in out), out
        return out  # type: ignore[return-value]


def unpack(p: Payload) -> list[Any]:
    """The facts a payload carries: a Window's parts (its progress, each metric, each span
    aggregate), else the payload itself."""
    if not isinstance(p, Window):
        return [p]
    return [*([p.progress] if p.progress is not None else []), *p.metrics, *p.spans]


def make(**cfg: Any) -> tuple[Emitter, Recorder]:
    rec = Recorder()
    cfg.setdefault("retry_initial_s", 0.01)
    cfg.setdefault("retry_max_s", 0.05)
    em = Emitter(EmitterConfig(**cfg), identity=ME, transport=rec)
    return em, rec


def test_every_payload_kind_becomes_a_contract_event() -> None:
    em, rec = make()
    em.log_link("wandb", "https://wandb.ai/acme/run/7")
    em.deck_ready("report", "s3://bucket/deck.html")
    em.progress(0.5, "half")
    em.progress(1.0, "done", final=True)
    em.record_span("epoch", 1000.0, 1041.0)
    em.pod_spawned("train-1", "9f9f-22", app="trainer", role="worker", attempt=1,
                   app_kind="Job", app_api_version="batch/v1")
    assert em.flush(5)
    parsed = rec.parsed()
    kinds = sorted(type(p.payload).__name__ for p in parsed)
    # The non-final progress and the span leave in one window (the first at once, before
    # the final: a final supersedes the progress, whatever arrives first).
    assert kinds == ["DeckReady", "LogLink", "PodSpawned", "Progress", "Window"]
    window = next(p.payload for p in parsed if isinstance(p.payload, Window))
    assert [type(f).__name__ for f in unpack(window)] in (
        ["Progress", "SpanSummary"], ["SpanSummary"])
    for p in parsed:
        assert p.instance == em.instance and p.sender.name == "train-0"
    lineage = next(p for p in parsed if isinstance(p.payload, PodSpawned))
    assert (lineage.task.name, lineage.regarding_kind) == ("trainer", "Job")
    assert lineage.payload.pod_uid == "9f9f-22"
    assert {p.task.name for p in parsed if p is not lineage} == {"run-7"}
    assert len({p.name for p in parsed}) == 5  # unique names, nothing rolled up
    assert em.stats()["delivered"] == 5


def test_a_huge_multibyte_message_is_shrunk_not_refused() -> None:
    em, rec = make()
    em.progress(1.0, "日本語のメッセージ" * 1200, final=True)  # ~32 kB of 3-byte characters
    assert em.flush(5)
    (body,) = rec.bodies
    assert len(body["note"].encode()) <= NOTE_LIMIT
    (p,) = rec.parsed()
    assert isinstance(p.payload, Progress) and p.payload.message.endswith("…")


def test_calls_never_raise_and_bad_input_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    em, rec = make()
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        em.log_link("x", "javascript:alert(1)")
        em.log_link("x", "javascript:alert(2)")
        em.log_link(None, 42)  # type: ignore[arg-type]
        em.progress("lots", final=True)  # type: ignore[arg-type]
        em.progress(object())  # type: ignore[arg-type]
        em.record_span(None, "a", "b")  # type: ignore[arg-type]
        em.pod_spawned("Not A Pod!", "", app="")
        em.emit("not a payload")  # type: ignore[arg-type]
        assert not em.flush(5)  # settled, but nothing of it delivered: not a success
    s = em.stats()
    assert rec.bodies == []
    assert s["invalid"] >= 6
    # Logged once per distinct problem, not once per call.
    assert sum("javascript" in r.getMessage() or "http and https" in r.getMessage()
               for r in caplog.records) <= 1


def test_non_final_progress_coalesces_latest_wins() -> None:
    em, rec = make(burst=1, rate=0.001)
    em.log_link("first", "https://example.com/a")  # takes the only token
    for i in range(1000):
        em.progress(i / 1000, f"step {i}")
    assert not em.flush(0.3)  # no budget left for progress: not settled
    s = em.stats()
    assert s["progress_coalesced"] >= 998
    assert [b["reason"] for b in rec.bodies] == ["LogLink"]


def test_critical_payloads_wait_for_budget_and_are_never_dropped() -> None:
    em, rec = make(burst=2, rate=40)
    for i in range(20):
        em.log_link(f"l{i}", f"https://example.com/{i}")
    for i in range(500):
        em.progress(i / 500)
    t0 = time.monotonic()
    assert em.flush(10)
    assert time.monotonic() - t0 >= 18 / 40 * 0.8  # paced by the bucket
    links = [p.payload.name for p in rec.parsed() if isinstance(p.payload, LogLink)]
    assert links == [f"l{i}" for i in range(20)]
    assert em.stats()["dropped_queue_full"] == 0


def test_the_queue_is_bounded_and_overflow_is_counted() -> None:
    em = Emitter(EmitterConfig(max_queue=100), identity=ME, transport=Recorder(),
                 autostart=False)
    for i in range(250):
        em.log_link("l", f"https://example.com/{i}")
    s = em.stats()
    assert s["queued"] == 100 and s["dropped_queue_full"] == 150


def test_spans_coalesce_into_few_summaries_with_exact_counts() -> None:
    em, rec = make(span_window_s=0.2)
    for k in range(30_000):
        em.record_span(f"op{k % 3}", 1000.0 + k, 1000.5 + k, error=k % 1000 == 0)
    assert em.flush(5)
    summaries = [s for p in rec.parsed() for s in span_summaries(p.payload)]
    assert 3 <= len(summaries) <= 12
    assert em.stats()["api_calls"] == len(rec.bodies) <= 4  # three names share each note
    assert sum(s.count for s in summaries) == 30_000
    assert sum(s.errors for s in summaries) == 30
    s = em.stats()
    assert s["spans_sent"] == 30_000 and s["spans_coalesced"] == 30_000 - len(summaries)


def test_transient_errors_are_retried_and_permanent_ones_counted() -> None:
    em, rec = make()
    rec.fail = [SendError(503, "unavailable"), SendError(0, "connection refused")]
    em.log_link("a", "https://example.com/a")
    assert em.flush(5)
    assert [b["reason"] for b in rec.bodies] == ["LogLink"]
    rec.fail = [SendError(403, "Forbidden: no")]
    em.log_link("b", "https://example.com/b")
    t0 = time.monotonic()
    assert not em.flush(5)  # refused for good: settled at once, and not delivered
    assert time.monotonic() - t0 < 2.0
    s = em.stats()
    assert s["retries"] == 2 and s["refused"] == 1 and s["refused_by_status"] == {403: 1}
    assert s["api_calls"] == 4


def test_close_abandons_undeliverable_events_at_its_deadline() -> None:
    em, rec = make()
    rec.fail = [SendError(0, "connection refused")] * 10_000
    for i in range(5):
        em.log_link(f"l{i}", "https://example.com/")
    t0 = time.monotonic()
    assert not em.close(0.3)
    assert time.monotonic() - t0 < 2.0
    s = em.stats()
    assert s["undelivered"] + s["queued"] == 5 and s["delivered"] == 0
    em.log_link("late", "https://example.com/")  # after close: counted, ignored
    assert em.stats()["dropped_after_close"] == 1


def test_missing_identity_is_counted_once_not_raised() -> None:
    em = Emitter(EmitterConfig(), identity=Identity(namespace="ml"), transport=Recorder())
    em.log_link("a", "https://example.com/a")
    em.log_link("b", "https://example.com/b")
    assert not em.flush(5)
    assert em.stats()["unaddressable"] == 2


def test_no_cluster_means_a_counting_log_sink() -> None:
    em = Emitter(EmitterConfig(), identity=ME, transport=LogSink())
    em.log_link("a", "https://example.com/a")
    em.record_span("s", 1.0, 2.0)
    assert em.flush(5)
    s = em.stats()
    assert s["sink"] and s["sunk"] == 2 and s["api_calls"] == 0


def test_flush_of_an_idle_emitter_returns_at_once() -> None:
    em, _ = make()
    t0 = time.monotonic()
    assert em.flush(5)
    assert time.monotonic() - t0 < 0.1


def test_a_forked_child_gets_its_own_instance_and_sender() -> None:
    import os

    em, rec = make()
    em.log_link("parent", "https://example.com/p")
    assert em.flush(5)
    parent_instance = em.instance
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new instance id (so no seq collides) and a working sender
        ok = False
        try:
            em.log_link("child", "https://example.com/c")
            ok = em.flush(5) and em.instance != parent_instance and len(rec.bodies) == 2
        finally:
            os.write(write_end, b"1" if ok else b"0")
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 1) == b"1"
    os.close(read_end)
    os.waitpid(pid, 0)


def test_span_windows_go_out_before_the_final_and_fail_is_a_failed_final() -> None:
    em, rec = make(span_window_s=3600.0, workers=3)  # the window would not close by itself
    em.progress(0.1, "started")
    eventually(lambda: len(rec.bodies) == 1, 5, "the first window, at once")
    em.record_span("evaluate", 1000.0, 1000.05)
    em.record_span("evaluate", 1001.0, 1001.05)
    em.fail("CUDA out of memory", 0.4)
    assert em.flush(5)
    parsed = sorted(rec.parsed(), key=lambda p: p.seq)
    assert [type(p.payload).__name__ for p in parsed] == ["Window", "Window", "Progress"]
    assert [s.count for s in span_summaries(parsed[1].payload)] == [2]
    assert parsed[1].seq < parsed[2].seq  # so a reader can tell nothing is still pending
    final = parsed[2].payload
    assert isinstance(final, Progress) and final.final and final.failed
    assert final.workers == 3 and parsed[2].warning and final.message == "CUDA out of memory"


# --- many span names ----------------------------------------------------------------------

def _offer(em: Emitter, names: list[str], n: int) -> float:
    t = time.time()
    for k in range(n):
        em.record_span(names[k % len(names)], t, t + 0.001, error=k % 997 == 0)
    return time.time() - t


def test_100k_spans_over_256_names_leave_in_a_handful_of_calls_within_the_budget() -> None:
    em, rec = make()  # the default budget: burst 20, then 2/s
    names = [f"stage.{i:03d}" for i in range(256)]
    t0 = time.monotonic()
    _offer(em, names, 100_000)  # its speed is bench/bench_span_names.py's, not a test's
    assert em.flush(30)
    took = time.monotonic() - t0
    s = em.stats()
    cfg = em.config
    assert s["api_calls"] == len(rec.bodies) <= cfg.burst + cfg.rate * took, s
    got: dict[str, int] = {}
    for p in rec.parsed():
        for row in span_summaries(p.payload):
            got[row.name] = got.get(row.name, 0) + row.count
    assert got == {n: 100_000 // 256 + (i < 100_000 % 256) for i, n in enumerate(names)}
    # (a name may be in the first window, sent at once, and again in the next)
    assert s["spans_sent"] == 100_000 and 256 <= s["span_summaries"] <= 2 * 256
    assert s["span_notes"] == len(rec.bodies) and s["spans_unsent"] == 0
    assert all(len(b["note"].encode()) <= NOTE_LIMIT for b in rec.bodies)


def test_names_waiting_for_budget_are_bounded_and_every_span_is_counted() -> None:
    # A tiny budget and names that change every window: pending names stay bounded, and
    # each span ends up sent, counted as dropped (name bound) or as unsent at the deadline.
    em, rec = make(rate=0.5, burst=1, max_span_names=8, span_window_s=0.05)
    offered = 0
    for w in range(12):
        offered += 40
        _offer(em, [f"w{w}.{i}" for i in range(20)], 40)
        # The sender takes the window over into its pending names, then waits for budget.
        eventually(lambda: len(em._spans) == 0, 5, "the window drained", interval=0.01)
        assert len(em._sender.pending) <= 8
    em.close(0.5)
    s = em.stats()
    assert s["dropped_span_names"] > 0 and s["spans_unsent"] > 0
    assert s["spans_sent"] + s["spans_unsent"] + s["dropped_span_names"] == offered, s
    assert s["spans_sent"] == sum(r.count for p in rec.parsed()
                                  for r in span_summaries(p.payload))


def test_one_bad_span_name_costs_only_its_own_spans() -> None:
    em, rec = make()
    names = [f"ok{i}" for i in range(10)] + ["bad\u200bname"]
    _offer(em, names, 110)
    assert not em.flush(5)  # ten spans were not sent
    s = em.stats()
    sent = {r.name for p in rec.parsed() for r in span_summaries(p.payload)}
    assert sent == set(names[:10]) and s["invalid"] == 1
    assert s["spans_sent"] == 100 and s["spans_unsent"] == 10 and len(rec.bodies) <= 2


def test_a_lone_span_name_is_a_window_of_one_row() -> None:
    em, rec = make(span_window_s=3600.0)
    _offer(em, ["only"], 5)
    assert em.flush(5)
    assert {b["reason"] for b in rec.bodies} == {"Window"}
    assert sum(r.count for p in rec.parsed() for r in span_summaries(p.payload)) == 5
