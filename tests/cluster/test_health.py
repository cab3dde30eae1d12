"""Health, and statuses no value can break, on the real control plane with a real watcher:
Stalled from silence (`kubectl wait --for=condition=Stalled`,
cleared by the next report, one write per change however long the silence), NonFiniteMetrics
from a NaN loss, Straggling from the median pace; an eventTime from a skewed clock that used
to stop every status write; an admin's hand-edited status that used to blank the task."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import emit
from tests.cluster.support_watcher import task_status
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import create_kwok_pod, eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport, connect
from tidings.schemas import LogLink, Progress
from tidings.schemas.wire.constants import TASK_LABEL
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

TIDINGS = str(Path(sys.executable).parent / "tidings")
# Small thresholds, so silence shows within seconds: stalled after 3 report intervals and at
# least 2 s; a worker that reported once, after 6 s.
FAST_STALL = ("--stall-factor", "3", "--stall-min", "2", "--stall-unpaced", "6")


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return Path(control_plane.kubeconfig("admin"))


def pod_for(admin: Any, namespace: str, task: str, i: int = 0) -> dict[str, str]:
    return create_kwok_pod(admin, namespace, f"{task}-{i}", labels={TASK_LABEL: task})


def emitter(kubeconfig: Path, namespace: str, task: str, pod: dict[str, str]) -> Emitter:
    env = {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"],
           "TIDINGS_TASK": task}
    return Emitter(EmitterConfig(retry_initial_s=0.05, rate=50, burst=50),
                   identity=Identity.from_env(env),
                   transport=KubeTransport(connect(str(kubeconfig))))


def new_task(admin: Any, namespace: str, kubeconfig: Path
             ) -> tuple[str, dict[str, str], Emitter]:
    """A fresh task id, its worker pod (labelled for it) and an emitter speaking as that pod."""
    task = f"train-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    return task, pod, emitter(kubeconfig, namespace, task, pod)


def cli(kubeconfig: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TIDINGS, *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=timeout)


def kubectl_wait(cp: ControlPlane, namespace: str, task: str, condition: str,
                 timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(cp.bin_dir) / "kubectl"), "--kubeconfig", str(cp.kubeconfig("admin")),
         "-n", namespace, "wait", f"--for=condition={condition}", f"taskfeedback/{task}",
         f"--timeout={timeout}s"], capture_output=True, text=True, timeout=timeout + 30)


def condition(status: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    for c in (status or {}).get("conditions", []):
        if c["type"] == ctype:
            return dict(c)
    return None


def rv(admin: Any, namespace: str, task: str) -> str:
    from kubernetes import client

    obj = client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "tidings.dev", "v1alpha1", namespace, "taskfeedbacks", task)
    return str(obj["metadata"]["resourceVersion"])


# --- Stalled ------------------------------------------------------------------------------


def test_a_silent_worker_is_stalled_on_the_clock_once_and_clears_on_its_next_report(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    w = start_watcher(*FAST_STALL)
    task, quiet = f"train-{uuid.uuid4().hex[:6]}", f"eval-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    em = emitter(kubeconfig, namespace, task, pod)
    for i in range(4):  # a report every ~0.3 s, then silence (a hung collective, say)
        em.progress(0.1 * (i + 1), f"step {i}")
        assert em.flush(15), em.stats()
        eventually(lambda i=i: (s := task_status(admin, namespace, task)) and s.get(
            "workers", [{}])[0].get("events", 0) >= i + 1, 30, f"report {i} folded")
    # A second task whose only worker reported once goes silent later (6 s): the point up
    # to which the first must see no more writes.
    quiet_pod = pod_for(admin, namespace, quiet)
    quiet_em = emitter(kubeconfig, namespace, quiet, quiet_pod)
    quiet_em.progress(0.2, "loading")
    assert quiet_em.flush(15)

    waited = kubectl_wait(control_plane, namespace, task, "Stalled")
    assert waited.returncode == 0, waited.stderr
    status = task_status(admin, namespace, task)
    assert status is not None
    stalled = condition(status, "Stalled")
    assert stalled and stalled["status"] == "True" and stalled["reason"] == "NoProgressReports"
    assert stalled["message"].startswith(f"{pod['name']} silent for ")
    assert status["health"]["stalled"] == [pod["name"]] and status["phase"] == "Running"
    assert "evaluatedAt" in status["health"]
    written = rv(admin, namespace, task)
    gauge = 'tidings_watcher_tasks_unhealthy{condition="Stalled"}'
    eventually(lambda: w.metrics().get(gauge, 0) >= 1, 30, "the Stalled gauge")

    # Who shows it: tidings state (the Health row, the workers table), list -o wide, kubectl.
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "Stalled" in shown.stdout and "stalled" in shown.stdout
    wide = cli(kubeconfig, "list", "-n", namespace, "-o", "wide")
    (row,) = [line for line in wide.stdout.splitlines() if line.startswith(task)]
    assert "Stalled" in row and "HEALTH" in wide.stdout.splitlines()[0]
    got = subprocess.run([str(Path(control_plane.bin_dir) / "kubectl"), "--kubeconfig",
                          str(kubeconfig), "-n", namespace, "get", "tfb", task, "-o", "wide"],
                         capture_output=True, text=True, timeout=60)
    assert "Stalled" in got.stdout and "HEALTH" in got.stdout.splitlines()[0], got.stdout

    # The silence goes on, the clock keeps running (the quiet task stalls meanwhile), and
    # the first task's status is not written again: a write only when a condition changes.
    assert kubectl_wait(control_plane, namespace, quiet, "Stalled").returncode == 0
    assert rv(admin, namespace, task) == written

    em.progress(0.5, "step 4")  # the next report clears it
    assert em.flush(15)
    cleared = kubectl_wait(control_plane, namespace, task, "Stalled=false")
    assert cleared.returncode == 0, cleared.stderr
    assert "stalled" not in (task_status(admin, namespace, task) or {})["health"]
    for e in (em, quiet_em):
        e.close(5)


# A quiet period long against FAST_STALL's 2 s, short enough for a test (the rule does not
# depend on its length: tests/unit/test_health_quiet.py takes it to a day).
QUIET_S = 30.0


def test_a_worker_quiet_on_purpose_is_shown_quiet_then_stalled_once_its_period_is_over(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """A worker about to write a checkpoint declares it (tidings.emitter.quiet): silent past
    its usual limit it is not Stalled but shown quiet on purpose; silent past the period it
    declared (and the usual allowance), it is Stalled; its next report clears it."""
    start_watcher(*FAST_STALL)
    task = f"ckpt-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    em = emitter(kubeconfig, namespace, task, pod)
    for i in range(4):
        em.progress(0.1 * (i + 1), f"step {i}")
        assert em.flush(15), em.stats()
        eventually(lambda i=i: (s := task_status(admin, namespace, task)) and s.get(
            "workers", [{}])[0].get("events", 0) >= i + 1, 30, f"report {i} folded")
    sent = time.monotonic()
    with em.quiet(QUIET_S, "checkpoint"):
        assert em.flush(15), em.stats()
        # Past its usual limit (2 s), the clock writes it quiet on purpose, not stalled.
        quiet = eventually(lambda: (c := condition(task_status(admin, namespace, task),
                                                   "Stalled"))
                           and c["reason"] == "QuietOnPurpose" and c, 30, "shown quiet")
        assert quiet["status"] == "False"
        assert f"1 worker quiet on purpose: {pod['name']} (checkpoint) until " in \
            quiet["message"], quiet["message"]
        status = task_status(admin, namespace, task)
        assert status is not None and status["health"]["quiet"] == [pod["name"]]
        assert status["health"]["summary"] == "Healthy"
        assert status["quiet"][0].startswith(f"{pod['name']} ")
        assert time.monotonic() - sent < QUIET_S, "(the machine was too slow to tell)"
        # The checkpoint hangs: Stalled once the period and the usual allowance are over.
        waited = kubectl_wait(control_plane, namespace, task, "Stalled", timeout=120)
        assert waited.returncode == 0, waited.stderr
    # (The period counts from the API server's receipt, whole seconds: up to 1 s earlier.)
    assert time.monotonic() - sent >= QUIET_S - 1
    status = task_status(admin, namespace, task)
    stalled = condition(status, "Stalled")
    assert stalled and stalled["reason"] == "NoProgressReports"
    assert stalled["message"].startswith(f"{pod['name']} silent for "), stalled["message"]
    assert status and status["health"]["stalled"] == [pod["name"]]
    assert "quiet" not in status["health"]

    em.progress(0.5, "step 4")  # the checkpoint is written: the report clears it
    assert em.flush(15)
    assert kubectl_wait(control_plane, namespace, task, "Stalled=false").returncode == 0
    em.close(5)


def test_a_sender_cannot_keep_health_quiet_for_longer_than_the_watcher_allows(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """A worker declaring a day of quiet (the longest a note may say) under a watcher whose
    --quiet-max is 8 s is shown held to that cap, then Stalled; a longer period is refused
    by the emitter and never sent."""
    start_watcher(*FAST_STALL, "--quiet-max", "8")
    task = f"hush-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    em = emitter(kubeconfig, namespace, task, pod)
    for i in range(3):
        em.progress(0.1 * (i + 1), f"step {i}")
        assert em.flush(15), em.stats()
    em.quiet(86_400 * 30, "forever")  # refused here: more than a day
    assert not em.flush(15) and em.stats()["invalid"] == 1
    em.quiet(86_400, "a day")
    assert em.flush(15), em.stats()
    held = eventually(lambda: (c := condition(task_status(admin, namespace, task), "Stalled"))
                      and c["reason"] == "QuietOnPurpose" and c, 30, "shown quiet")
    assert "(a day) until " in held["message"] and "held to the watcher's cap" in \
        held["message"], held["message"]
    waited = kubectl_wait(control_plane, namespace, task, "Stalled", timeout=60)
    assert waited.returncode == 0, waited.stderr
    status = task_status(admin, namespace, task)
    assert status and status["counters"]["quietDeclared"] == 1
    em.close(5)


def test_a_silent_worker_beyond_the_64_detailed_ones_is_stalled(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """In a 100-pod job whose last pod (by name, beyond the 64 detailed
    workers) went silent, the task said Healthy. The other 99 report every 10 s: 100 s of
    silence allowed them, so only the silent one stalls while the test runs. It reported
    every 0.1 s and first (silence is counted from when its reports were received, not from
    the times its clock gave them): 2 s of silence, the least, and it stalls."""
    start_watcher("--stall-factor", "10", "--stall-min", "2", "--stall-unpaced", "600")
    task = f"big-{uuid.uuid4().hex[:6]}"
    pods = [pod_for(admin, namespace, task, i) for i in range(100)]
    for i, pod in [(99, pods[99]), *enumerate(pods[:99])]:
        now = datetime.now(UTC)
        backs = (0.2, 0.1, 0) if i == 99 else (20, 10, 0)
        for seq, back in enumerate(backs):
            emit(admin, namespace, task, Progress(fraction=round(0.001 * (400 - back), 4)),
                 seq, instance=f"inst-{i}", pod=(pod["name"], pod["uid"]),
                 when=now - timedelta(seconds=back))
    assert kubectl_wait(control_plane, namespace, task, "Stalled").returncode == 0
    status = eventually(lambda: (s := task_status(admin, namespace, task) or {}).get(
        "roster", {}).get("reporting") == 100 and s, 60, "every pod's reports folded")
    assert status["health"]["stalled"] == [f"{task}-99"]
    assert status["health"]["counts"] == {"stalled": 1}
    assert condition(status, "Stalled")["message"].startswith(f"{task}-99 silent for ")
    assert condition(status, "Stalled")["message"].endswith("(1 of 100 running)")
    assert len(status["workers"]) == 64 and status["roster"]["reporting"] == 100
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "Stalled" in shown.stdout


def test_a_worker_whose_clock_is_behind_is_judged_by_when_its_reports_arrive(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """A worker whose node clock is 2 minutes behind reports steadily: never "silent for 2m"
    (it was, judged by its eventTimes); once it goes quiet it stalls when its silence, counted
    from when its last report arrived, passes the 20 s allowed."""
    start_watcher("--stall-factor", "3", "--stall-min", "20", "--stall-unpaced", "30")
    task = f"skew-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    for seq in range(6):
        emit(admin, namespace, task, Progress(fraction=0.1 * (seq + 1)), seq, instance="i",
             pod=(pod["name"], pod["uid"]), when=datetime.now(UTC) - timedelta(minutes=2))
        status = eventually(lambda seq=seq: (s := task_status(admin, namespace, task)) and s.get(
            "workers", [{}])[0].get("events", 0) >= seq + 1 and s, 30, f"report {seq} folded")
        stalled = condition(status, "Stalled") or {}
        assert stalled.get("status") != "True", stalled
    assert kubectl_wait(control_plane, namespace, task, "Stalled").returncode == 0
    stalled = condition(task_status(admin, namespace, task), "Stalled") or {}
    assert stalled["message"].startswith(f"{pod['name']} silent for "), stalled
    assert "silent for 2m" not in stalled["message"], stalled


def test_a_report_that_ends_a_stall_is_written_as_soon_as_the_stall_was(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """The health clock wrote a stall at once, but the report that ended it
    waited for the coalescing interval (a worker reporting every 6 s against a 5 s limit
    read Stalled 5 s of every 6). With a 120 s coalescing interval, the clearing must land
    within the deadline below all the same."""
    start_watcher(*FAST_STALL, "--coalesce-interval", "120")
    task = f"train-{uuid.uuid4().hex[:6]}"
    pod = pod_for(admin, namespace, task)
    now = datetime.now(UTC)
    for seq, back in enumerate((30, 20, 10)):  # every 10 s, the last 10 s ago: 30 s allowed
        emit(admin, namespace, task, Progress(fraction=0.1 * (seq + 1)), seq,
             pod=(pod["name"], pod["uid"]), when=now - timedelta(seconds=back))
    assert kubectl_wait(control_plane, namespace, task, "Stalled").returncode == 0
    emit(admin, namespace, task, Progress(fraction=0.5), 3, pod=(pod["name"], pod["uid"]))
    eventually(lambda: (condition(task_status(admin, namespace, task), "Stalled") or {}).get(
        "status") == "False", 30, "the stall cleared well before the coalescing interval")


def test_a_watcher_started_after_the_silence_began_judges_it(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """Silence makes no event: a watcher restarted (or newly elected) reads the statuses and
    judges them again at once, instead of waiting for a fact that may never come."""
    first = start_watcher()  # default thresholds: nothing stalls during this test
    task = f"train-{uuid.uuid4().hex[:6]}"
    em = emitter(kubeconfig, namespace, task, pod_for(admin, namespace, task))
    em.progress(0.3, "step 3")
    assert em.flush(15)
    eventually(lambda: (s := task_status(admin, namespace, task)) and s.get("health"), 30,
               "the first status")
    assert condition(task_status(admin, namespace, task), "Stalled")["status"] == "False"
    first.kill()
    start_watcher(*FAST_STALL)  # the one report is 6 s old soon: stalled by these limits
    eventually(lambda: (c := condition(task_status(admin, namespace, task), "Stalled"))
               and c["status"] == "True", 60, "Stalled after the restart")
    em.close(5)


# --- NonFiniteMetrics and Straggling ---------------------------------------------------------


def test_a_nan_loss_is_kept_and_named_by_non_finite_metrics(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task, pod, em = new_task(admin, namespace, kubeconfig)
    em.metric("loss", 0.7, step=10)
    em.progress(0.2, "step 10")
    assert em.flush(15)
    em.metric("loss", math.nan, step=11)  # the run diverges
    em.metric("lr", 0.001, step=11)
    assert em.flush(15)
    assert kubectl_wait(control_plane, namespace, task, "NonFiniteMetrics").returncode == 0
    status = task_status(admin, namespace, task) or {}
    assert status["metrics"]["loss"]["nonFinite"] == "NaN"
    assert status["metrics"]["loss"]["step"] == 11 and "value" not in status["metrics"]["loss"]
    assert condition(status, "NonFiniteMetrics")["message"] == "loss=NaN"
    assert status["health"]["nonFinite"] == ["loss"]
    # From a shell script too (the CLI's own process: its own emitter and identity).
    env = {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"],
           "TIDINGS_TASK": task, "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"}
    sent = subprocess.run([TIDINGS, "emit", "metric", "grad_norm", "inf"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert sent.returncode == 0, sent.stderr
    eventually(lambda: (task_status(admin, namespace, task) or {}).get("metrics", {}).get(
        "grad_norm", {}).get("nonFinite") == "Infinity", 30, "grad_norm=Infinity")
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "NonFiniteMetrics" in shown.stdout
    assert "NaN" in shown.stdout and "Infinity" in shown.stdout
    em.metric("loss", 0.6, step=12)  # recovered: a finite latest value clears it
    em.metric("grad_norm", 2.0, step=12)
    assert em.flush(15)
    assert kubectl_wait(control_plane, namespace, task, "NonFiniteMetrics=false").returncode == 0
    em.close(5)


def test_a_worker_far_behind_the_median_pace_is_straggling(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task = f"train-{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC)
    paces = {0: 0.01, 1: 0.01, 2: 0.012, 3: 0.002}  # per second; w-3 at a fifth of the median
    for i, pace in paces.items():
        pod = pod_for(admin, namespace, task, i)
        for seq, back in enumerate((20, 10, 0)):
            emit(admin, namespace, task, Progress(fraction=round(pace * (20 - back), 4),
                                                  message=f"w{i}"),
                 seq, instance=f"inst-{i}", pod=(pod["name"], pod["uid"]),
                 when=now - timedelta(seconds=back))
    assert kubectl_wait(control_plane, namespace, task, "Straggling").returncode == 0
    status = task_status(admin, namespace, task) or {}
    assert status["health"]["straggling"] == [f"{task}-3"]
    assert condition(status, "Straggling")["message"] == (
        f"{task}-3 at 0.20 of the median pace (1 of 4 with a pace)")
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "straggling" in shown.stdout


# --- the ETA cannot stop a write ---------------------------------------------------


def test_an_event_time_from_a_skewed_clock_stops_no_write_and_no_command(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """w-0's node clock is decades behind: its pace would put the ETA past year 9999. Every
    status write of the task used to raise, so w-1's facts were never shown, and `tidings
    state --from-events` died of an OverflowError."""
    w = start_watcher()
    task = f"train-{uuid.uuid4().hex[:6]}"
    skewed, ok = pod_for(admin, namespace, task, 0), pod_for(admin, namespace, task, 1)
    now = datetime.now(UTC)
    emit(admin, namespace, task, Progress(fraction=0.0, message="start"), 0, instance="skew",
         pod=(skewed["name"], skewed["uid"]), when=datetime(1971, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
    emit(admin, namespace, task, Progress(fraction=0.0001, message="crawl"), 1,
         instance="skew", pod=(skewed["name"], skewed["uid"]), when=now)
    for seq, (back, f) in enumerate(((10, 0.2), (0, 0.6))):
        emit(admin, namespace, task, Progress(fraction=f, message=f"ok {f}"), seq,
             instance="ok", pod=(ok["name"], ok["uid"]), when=now - timedelta(seconds=back))
    emit(admin, namespace, task, LogLink(name="wandb", url="https://wandb.example/r"), 2,
         instance="ok", pod=(ok["name"], ok["uid"]))
    status = eventually(lambda: (s := task_status(admin, namespace, task))
                        and len(s.get("workers", [])) == 2 and "wandb" in s.get("links", {})
                        and s, 30, "both workers and the link written")
    assert status["phase"] == "Running" and "estimatedCompletionTime" not in status["progress"]
    assert [x["fraction"] for x in status["workers"]] == [0.0001, 0.6]
    assert w.metrics().get('tidings_watcher_status_writes_total{result="error"}', 0) == 0
    for args in (("state", task), ("state", task, "--from-events"),
                 ("state", task, "--from-events", "-o", "json"), ("list", "-o", "wide")):
        res = cli(kubeconfig, *args, "-n", namespace)
        assert res.returncode == 0 and "Traceback" not in res.stderr, (args, res.stderr)
    local = json.loads(cli(kubeconfig, "state", task, "--from-events", "-o", "json",
                           "-n", namespace).stdout)
    assert local["status"]["phase"] == "Running"
    assert "estimatedCompletionTime" not in local["status"]["progress"]


# --- a hand-edited status is read entry by entry -----------------------------------


def patch_status(cp: ControlPlane, namespace: str, task: str, patch: dict[str, Any]) -> None:
    cp.kubectl_run("-n", namespace, "patch", "taskfeedback", task, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": patch}))


def delete_bus_events(admin: Any, namespace: str) -> None:
    """What the API server's event TTL does an hour later."""
    from kubernetes import client

    client.EventsV1Api(admin).delete_collection_namespaced_event(
        namespace, field_selector="reportingController=tidings.dev/bus")


def test_a_hand_edited_entry_blanks_nothing_and_survives_a_restart_and_a_new_fact(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    first = start_watcher()
    task, pod, em = new_task(admin, namespace, kubeconfig)
    em.log_link("wandb", "https://wandb.example/run")
    em.metric("loss", 0.42, step=60)
    em.progress(0.6, "step 60")
    assert em.flush(15)
    eventually(lambda: (s := task_status(admin, namespace, task)) and s.get("metrics")
               and s.get("progress", {}).get("percent") == 60, 30, "the run's status")
    em.close(5)

    # The admin's edit: a link whose "at" is no order key (the CRD takes any string).
    runbook = {"url": "https://wiki.example/runbook", "at": "added by hand", "events": 1}
    patch_status(control_plane, namespace, task, {"links": {"runbook": runbook}})
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "Running" in shown.stdout and "60.0%" in shown.stdout and "Pending" not in shown.stdout
    assert "links/runbook" in shown.stdout and "wandb" in shown.stdout
    data = json.loads(cli(kubeconfig, "state", task, "-n", namespace, "-o", "json").stdout)
    assert data["status"]["links"]["runbook"] == runbook
    assert data["unreadable"]["entries"] == ["links/runbook: bad order key"]

    # The events' TTL passes, the watcher restarts, and the run reports one more fact.
    first.kill()
    delete_bus_events(admin, namespace)
    start_watcher()
    em2 = emitter(kubeconfig, namespace, task, pod)
    em2.log_link("tensorboard", "https://tb.example/run")
    assert em2.flush(15)
    status = eventually(lambda: (s := task_status(admin, namespace, task))
                        and "tensorboard" in s.get("links", {}) and s, 30, "the new fact")
    assert status["links"]["runbook"] == runbook  # kept verbatim
    assert status["links"]["wandb"]["url"] == "https://wandb.example/run"
    assert status["metrics"]["loss"]["value"] == 0.42
    assert status["progress"]["percent"] == 60 and status["linkCount"] == 3
    em2.close(5)


def test_a_status_that_is_partly_unreadable_is_never_written_over(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    w = start_watcher()
    task, _pod, em = new_task(admin, namespace, kubeconfig)
    em.progress(0.6, "step 60")
    assert em.flush(15)
    good = eventually(lambda: (s := task_status(admin, namespace, task)) and s.get("roster")
                      and s, 30, "the first status")
    w.kill()
    patch_status(control_plane, namespace, task, {"roster": {**good["roster"], "marks": "!"}})
    w2 = start_watcher()
    em.progress(0.7, "step 70")
    assert em.flush(15)
    refused = 'tidings_watcher_status_writes_total{result="unreadable"}'
    eventually(lambda: w2.metrics().get(refused, 0) >= 1, 30, "the write refused")
    assert (task_status(admin, namespace, task) or {})["roster"]["marks"] == "!"  # as it was
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "partly unreadable" in shown.stdout
    assert w2.wait_line("is not fully readable", 30) or "not fully readable" in w2.tail(200)
    # Repaired by hand: the next fact is written, with everything folded meanwhile.
    patch_status(control_plane, namespace, task, {"roster": good["roster"]})
    em.progress(0.8, "step 80")
    assert em.flush(15)
    eventually(lambda: (task_status(admin, namespace, task) or {}).get("progress", {}).get(
        "percent") == 80, 30, "written once repaired")
    em.close(5)
