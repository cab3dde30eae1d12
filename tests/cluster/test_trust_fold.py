"""Many workers, time, names and the ETA against the real control plane, with
`tidings watcher run` as a process: many workers (a failure beyond the 64 detailed records
fails the task, 66 declared finals complete it), a future-dated link that no longer pins its
value, an emitter whose clock stepped back keeping its own order, long names refused (never
merged), and the estimated completion time in the status, `state`, `watch` and `list`."""

from __future__ import annotations

import json
import subprocess
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import test_trust as tt
from tests.cluster.support_cli import invoke
from tests.cluster.support_watcher import TIDINGS, WatcherProc
from tests.cluster.test_emitter import emitter_for
from tests.support import create_kwok_pod, eventually
from tidings.emitter import Identity
from tidings.schemas import TaskState
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.payloads import LogLink, Progress
from tidings.schemas.wire.times import parse_time
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tt.crd, tt.kubeconfig, tt.watchers, tt.start_watcher
TASK_LABEL = tt.TASK_LABEL
# (Non-zero microseconds: the Python client re-encodes a whole-second time without them,
# which the API server's MicroTime parser refuses.)
FAR = datetime(9999, 12, 31, 23, 59, 59, 123456, tzinfo=UTC)


def created_at(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> datetime:
    """Create the event; the API server's creationTimestamp of it."""
    out = client.EventsV1Api(api).create_namespaced_event(namespace, body)
    return out.metadata.creation_timestamp  # type: ignore[no-any-return]


def pods(admin: Any, namespace: str, task: str, n: int) -> list[dict[str, str]]:
    return [create_kwok_pod(admin, namespace, f"{task}-{i:02d}", labels={TASK_LABEL: task})
            for i in range(n)]


def status_when(admin: Any, namespace: str, task: str, ok: Callable[[TaskState], bool],
                what: str, timeout: float = 60) -> TaskState:
    def probe() -> TaskState | None:
        s = tt.state_of(admin, namespace, task)
        return s if s is not None and ok(s) else None

    return eventually(probe, timeout, what)


# --- no cap hides an outcome ----------------------------------------------------------


def test_66_workers_a_failure_beyond_the_detailed_64_fails_and_66_finals_complete(
        admin: Any, namespace: str, start_watcher: Callable[..., WatcherProc]) -> None:
    """The issue's runs, one task each: w-65 fails after 65 successes (it was Succeeded);
    66 declared workers all final (it stayed Running at 97 %)."""
    w = start_watcher()
    failing = pods(admin, namespace, "fails", 66)
    for i, pod in enumerate(failing):
        p = Progress(fraction=0.4, message="CUDA out of memory", final=True, failed=True) \
            if i == 65 else Progress(fraction=1.0, final=True)
        tt.create(admin, namespace, tt.event(namespace, "fails", p, 1, pod=pod,
                                             instance=f"i-{i}"))
    s = status_when(admin, namespace, "fails", lambda s: s.counters["events_applied"] == 66,
                    "66 finals folded")
    assert s.phase == "Failed" and len(s.workers) == 64 and "fails-65" not in s.workers
    assert s.roster.first_failure is not None and s.roster.first_failure.pod == "fails-65"
    assert to_status(s)["conditions"][0]["message"] == "CUDA out of memory"
    # 66 declared workers, 66 finals: completes.
    done = pods(admin, namespace, "done", 66)
    for i, pod in enumerate(done):
        tt.create(admin, namespace, tt.event(namespace, "done",
                                             Progress(fraction=0.5, workers=66), 1,
                                             pod=pod, instance=f"d-{i}"))
    s = status_when(admin, namespace, "done", lambda s: len(s.roster.marks) == 66,
                    "66 workers reporting")
    assert s.phase == "Running" and to_status(s)["progress"]["percent"] == 50
    for i, pod in enumerate(done):
        tt.create(admin, namespace, tt.event(namespace, "done", Progress(
            fraction=1.0, final=True, workers=66), 2, pod=pod, instance=f"d-{i}"))
    s = status_when(admin, namespace, "done", lambda s: s.finished, "the task to complete")
    assert s.phase == "Succeeded" and to_status(s)["progress"]["percent"] == 100
    assert s.counters["workers_capped"] == 4  # 2 pods' details left out, not their outcome
    assert tt.rejected(w, "spoofed_sender") == 0


# --- a future eventTime wins for seconds, and an instance's seq orders its facts ----


def test_a_link_dated_9999_loses_to_one_sent_seconds_later_by_another_pod(
        admin: Any, namespace: str, start_watcher: Callable[..., WatcherProc]) -> None:
    start_watcher()
    evil_pod = create_kwok_pod(admin, namespace, "evil-0", labels={TASK_LABEL: "clock"})
    good_pod = create_kwok_pod(admin, namespace, "good-0", labels={TASK_LABEL: "clock"})
    c = created_at(admin, namespace, tt.event(
        namespace, "clock", LogLink(name="wandb", url="https://evil.example/"), 1,
        pod=evil_pod, instance="i-evil", when=FAR))
    status_when(admin, namespace, "clock", lambda s: "wandb" in s.links, "the first link")
    # The honest link, 5 s after the first was created (the server's clock decides).
    eventually(lambda: datetime.now(UTC) >= c + timedelta(seconds=5), 10, "5 s to pass")
    tt.create(admin, namespace, tt.event(
        namespace, "clock", LogLink(name="wandb", url="https://wandb.ai/ok"), 1,
        pod=good_pod, instance="i-good"))
    s = status_when(admin, namespace, "clock", lambda s: s.counters["events_applied"] == 2,
                    "both links folded")
    assert s.links == {"wandb": "https://wandb.ai/ok"}
    assert s.counters["time_clamped"] == 1


def test_an_emitter_whose_clock_stepped_back_keeps_its_own_order(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc], monkeypatch: pytest.MonkeyPatch) -> None:
    """One emitter instance: a link while its clock says 9999, then (NTP stepped it back) the
    same link 1 s later: seq 2 wins, not the future-dated seq 1."""
    start_watcher()
    pod = create_kwok_pod(admin, namespace, "step-0", labels={TASK_LABEL: "step"})
    em = emitter_for(control_plane, Identity(namespace=namespace, pod_name=pod["name"],
                                             pod_uid=pod["uid"], task="step"))
    clock = types.SimpleNamespace(time=lambda: FAR.timestamp())
    monkeypatch.setattr("tidings.emitter.core.time", clock)
    em.log_link("wandb", "https://wandb.ai/stale")
    assert em.flush(15)
    status_when(admin, namespace, "step", lambda s: "wandb" in s.links, "the first link")
    clock.time = time.time  # stepped back to the real time
    t1 = time.time()
    eventually(lambda: time.time() >= t1 + 1, 5, "1 s to pass")
    em.log_link("wandb", "https://wandb.ai/fresh")
    assert em.flush(15)
    em.close(5)
    s = status_when(admin, namespace, "step", lambda s: s.counters["events_applied"] == 2,
                    "both links folded")
    assert s.links == {"wandb": "https://wandb.ai/fresh"}
    assert s.link_entries["wandb"].at[2] == 2  # seq 2 of the one instance


# --- long names are refused, never merged ---------------------------------------------


def test_two_long_names_are_refused_by_emit_and_by_the_watcher_never_merged(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        start_watcher: Callable[..., WatcherProc]) -> None:
    w = start_watcher()
    pod = create_kwok_pod(admin, namespace, "names-0", labels={TASK_LABEL: "names"})
    first, second = "x" * 63 + "AAAAA", "x" * 63 + "BBBBB"
    cfg = control_plane.kubeconfig("admin")
    env = {"PATH": "/usr/bin:/bin", "POD_NAME": pod["name"], "POD_UID": pod["uid"],
           "TIDINGS_TASK": "names", "POD_NAMESPACE": namespace}
    for name, url in ((first, "https://e.example/1"), (second, "https://e.example/2")):
        r = subprocess.run([TIDINGS, "emit", "log-link", "--name", name, "--url", url,
                            "--kubeconfig", str(cfg)],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r
        assert r.stderr.count("\n") == 1 and "more than 64" in r.stderr and "never cut" in r.stderr
    # The same names in raw events (what an emitter of another version could send).
    for seq, (name, url) in enumerate(((first, "https://e.example/1"),
                                       (second, "https://e.example/2")), 1):
        note = {"v": 1, "t": "LogLink", "i": "i-raw", "s": seq, "name": name, "url": url}
        tt.create(admin, namespace, tt.event(namespace, "names", LogLink(name="n", url=url),
                                             seq, pod=pod, instance="i-raw", note=note))
    tt.create(admin, namespace, tt.event(namespace, "names", LogLink(
        name="x" * 64, url="https://e.example/whole"), 3, pod=pod, instance="i-raw"))
    eventually(lambda: tt.rejected(w, "name_too_long") == 2, 30,
               "both long names rejected under name_too_long")
    s = status_when(admin, namespace, "names", lambda s: bool(s.links), "the whole name")
    assert s.links == {"x" * 64: "https://e.example/whole"}  # kept whole, nothing cut


# --- the estimated completion time ---------------------------------------------


def test_the_estimated_completion_is_in_the_status_state_watch_and_list(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc]) -> None:
    start_watcher()
    pod = create_kwok_pod(admin, namespace, "eta-0", labels={TASK_LABEL: "eta"})
    now = datetime.now(UTC).replace(microsecond=500_000)
    for seq, (fraction, ago) in enumerate(((0.1, 40), (0.3, 20)), 1):
        tt.create(admin, namespace, tt.event(namespace, "eta", Progress(fraction=fraction), seq,
                                             pod=pod, when=now - timedelta(seconds=ago)))
    # 0.2 in 20 s; 0.7 to go: 70 s after the latest report.
    want = now - timedelta(seconds=20) + timedelta(seconds=70)
    s = status_when(admin, namespace, "eta", lambda s: s.counters["events_applied"] == 2,
                    "both reports folded")
    assert s.progress is not None and s.progress.eta == want
    obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", "eta")
    stamp = obj["status"]["progress"]["estimatedCompletionTime"]
    # The CRD keeps the field (structural, not pruned), in whole seconds.
    assert parse_time(stamp) == want.replace(microsecond=0)
    state = invoke(control_plane, "state", "eta", "-n", namespace)
    assert state.exit_code == 0 and "ETA" in state.stdout and stamp in state.stdout
    as_json = invoke(control_plane, "state", "eta", "-n", namespace, "-o", "json")
    assert json.loads(as_json.stdout)["status"]["progress"]["estimatedCompletionTime"] == stamp
    wide = invoke(control_plane, "list", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert "ETA" in wide[0].split() and any(line.startswith("eta ") and " in " in line
                                            for line in wide[1:]), wide
    watch = subprocess.Popen(
        [TIDINGS, "watch", "eta", "-n", namespace, "--kubeconfig",
         str(control_plane.kubeconfig("admin"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # piped: one line per change, the first at once
    finally:
        watch.kill()
        watch.wait(10)
    assert f"(eta {stamp})" in first, first
    # Going backwards: no estimate (a restarted worker, say).
    tt.create(admin, namespace, tt.event(namespace, "eta", Progress(fraction=0.05), 3, pod=pod,
                                         when=now - timedelta(seconds=1)))
    s = status_when(admin, namespace, "eta", lambda s: s.counters["events_applied"] == 3,
                    "the third report folded")
    assert s.progress is not None and s.progress.eta is None
