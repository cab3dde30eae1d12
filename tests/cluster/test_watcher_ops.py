"""The watcher's operations against the real control plane, as real processes: what /metrics
carries (process, build info, emit-to-status latency), rejections logged once across a
relist, and JSON log lines."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import (
    Emitter,
    WatcherProc,
    emitted_events,
    etcd_compact_now,
    payload_for,
)
from tests.cluster.test_watcher import (  # noqa: F401 - fixtures
    assert_exact,
    crd,
    kubeconfig,
    metric,
    pods_for,
    start_watcher,
    watchers,
)
from tests.support import create_kwok_pod, eventually, raw_event

pytestmark = pytest.mark.cluster

LATENCY = "tidings_watcher_emit_to_status_seconds"
SPOOFED = 'tidings_watcher_events_rejected_total{reason="spoofed_sender"}'


def _latency_count(w: WatcherProc, kind: str) -> float:
    return metric(w, f'{LATENCY}_count{{kind="{kind}"}}')


def _is_critical(seq: int, total: int) -> bool:
    from tidings.schemas.wire.payloads import Progress, SpanSummary

    p = payload_for(seq, total)
    return not (isinstance(p, SpanSummary) or (isinstance(p, Progress) and not p.final))


def _relists(w: WatcherProc) -> float:
    return sum(v for k, v in w.metrics().items() if k.startswith("tidings_watcher_relists_total"))


def _rejected(w: WatcherProc) -> float:
    return sum(v for k, v in w.metrics().items()
               if k.startswith("tidings_watcher_events_rejected_total"))


def _names(f: Path) -> list[str]:
    return [b["metadata"]["name"] for b in emitted_events([f])]


def test_metrics_carry_process_build_info_and_one_latency_sample_per_applied_event(
        admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,  # noqa: F811
        start_watcher: Any) -> None:  # noqa: F811
    w = start_watcher()
    files = []
    for i, pod in enumerate(pods_for(admin, namespace, "lat", 2)):
        files.append(tmp_path / f"lat-{i}.jsonl")
        Emitter(kubeconfig, namespace, "lat", pod, f"lat-i{i}", files[-1], count=30).wait()
    assert_exact(admin, namespace, ["lat"], files)
    critical = 2 * sum(_is_critical(seq, 30) for seq in range(1, 31))
    assert 0 < critical < 60  # the burst mixes both kinds
    eventually(lambda: _latency_count(w, "critical") == critical
               and _latency_count(w, "coalescible") == 60 - critical, 20,
               "one latency sample per applied event, by kind")
    m = w.metrics()
    assert m["tidings_watcher_events_applied_total"] == 60
    for kind in ("critical", "coalescible"):
        count = m[f'{LATENCY}_count{{kind="{kind}"}}']
        assert m[f'{LATENCY}_bucket{{kind="{kind}",le="+Inf"}}'] == count
        # Local and idle: every fact reaches the status within a minute of its eventTime.
        assert m[f'{LATENCY}_bucket{{kind="{kind}",le="60.0"}}'] == count
        assert 0 < m[f'{LATENCY}_sum{{kind="{kind}"}}'] < 60 * count
    assert m["process_cpu_seconds_total"] > 0 and m["process_resident_memory_bytes"] > 0
    assert m["process_open_fds"] > 0
    (info,) = [k for k in m if k.startswith("tidings_watcher_build_info{")]
    assert m[info] == 1 and 'python="3.' in info and 'version="unknown"' not in info
    assert any(k.startswith("python_info{") for k in m)


def test_a_rejected_event_is_logged_once_across_a_forced_relist(
        control_plane: Any, admin: Any, namespace: str, kubeconfig: Path,  # noqa: F811
        tmp_path: Path, start_watcher: Any) -> None:  # noqa: F811
    # Short server-side watches: each resumes from the last resourceVersion, so compacting
    # etcd past it forces a relist (410 Gone), which delivers every event again.
    w = start_watcher("--watch-timeout", "2")
    (good,) = pods_for(admin, namespace, "victim", 1)
    bare = create_kwok_pod(admin, namespace, "bare-pod")  # no tidings.dev/task label
    fg, fs = tmp_path / "good.jsonl", tmp_path / "spoof.jsonl"
    Emitter(kubeconfig, namespace, "victim", good, "good", fg, count=3, total=10).wait()
    Emitter(kubeconfig, namespace, "victim", bare, "spoof", fs, count=2).wait()
    # A bus event the parser refuses (its note is no payload): named in the log as well.
    from kubernetes import client

    from tidings.schemas.wire.constants import BUS_CONTROLLER

    client.EventsV1Api(admin).create_namespaced_event(
        namespace, raw_event(namespace, "malformed-1", controller=BUS_CONTROLLER))
    eventually(lambda: metric(w, SPOOFED) == 2 and _rejected(w) == 3, 20,
               "2 spoofed events and 1 malformed rejected")
    relists = _relists(w)
    # Twice: the watch's resourceVersion may be etcd's newest, which one compaction keeps.
    etcd_compact_now(control_plane.etcd_url)
    etcd_compact_now(control_plane.etcd_url)
    eventually(lambda: _relists(w) > relists, 30, f"a relist after compaction\n{w.tail()}")
    # Counted per delivery, as documented: the relist delivered both again.
    eventually(lambda: metric(w, SPOOFED) == 4 and _rejected(w) == 6, 20,
               "the relisted events rejected again")
    # Folds of one task run one at a time: once a later event of it is written, the fold that
    # re-rejected the relisted ones has finished (and logged whatever it logs).
    Emitter(kubeconfig, namespace, "victim", good, "good", fg, first=4, count=1, total=10).wait()
    # The task's status counts each refused event once, as the log names it once.
    assert_exact(admin, namespace, ["victim"], [fg], refused={"spoofedSender": 2})
    log = w.log.read_text().splitlines()
    for name in [*_names(fs), "malformed-1"]:
        lines = [x for x in log if "rejected" in x and name in x]
        assert len(lines) == 1, (name, lines)


def test_json_log_format_prints_only_json_objects_with_structured_fields(
        admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,  # noqa: F811
        start_watcher: Any) -> None:  # noqa: F811
    w = start_watcher("--log-format", "json", "--log-level", "DEBUG")
    (good,) = pods_for(admin, namespace, "js", 1)
    bare = create_kwok_pod(admin, namespace, "bare-js")
    fg, fs = tmp_path / "good.jsonl", tmp_path / "spoof.jsonl"
    Emitter(kubeconfig, namespace, "js", good, "good", fg, count=5).wait()
    assert_exact(admin, namespace, ["js"], [fg])
    # Once the task is held, a refusal of its name is counted in its status (before, none
    # would be: a task name with nothing accepted gets no entry), so the order is fixed.
    Emitter(kubeconfig, namespace, "js", bare, "spoof", fs, count=1).wait()
    eventually(lambda: metric(w, SPOOFED) == 1, 20, "the spoofed event rejected")
    assert_exact(admin, namespace, ["js"], [fg], refused={"spoofedSender": 1})
    w.kill(signal.SIGTERM)  # a graceful stop logs its flush too
    assert w.proc.returncode == 0, w.tail()
    stdout = w.raw_lines
    stderr = w.log.read_text().splitlines()
    assert len(stderr) >= 3 and len(stdout) >= 1, (stdout, stderr)
    records = []
    for line in stdout + stderr:
        rec = json.loads(line)  # every line the watcher printed is one JSON object
        assert isinstance(rec, dict), line
        assert {"time", "level", "logger", "message"} <= rec.keys(), rec
        records.append(rec)
    assert any("http on 127.0.0.1:" in r["message"] for r in records)
    assert any(r["message"].startswith("stopped (flushed=True") for r in records)
    (name,) = _names(fs)
    (rej,) = [r for r in records if r.get("event") == name]
    assert rej["level"] == "INFO" and rej["logger"] == "tidings.watcher"
    assert (rej["namespace"], rej["task"], rej["reason"]) == (namespace, "js", "spoofed_sender")
