"""Metric facts on the real control plane: a training loop's metrics go
from the emitter, coalesced to the latest value per name, through the watcher into
``status.metrics``, and ``tidings state`` and ``tidings watch`` show them."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import invoke
from tests.cluster.support_watcher import WatcherProc, task_status
from tests.support import create_kwok_pod, eventually
from tidings.cli.taskrender import SPARK_BLOCKS
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport, connect
from tidings.schemas.wire.history import HISTORY_POINTS
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

TASK = "train-metrics"
STEPS = 500


@pytest.fixture
def watcher(control_plane: ControlPlane, namespace: str, crd: str,
            tmp_path: Path) -> Iterator[WatcherProc]:
    w = WatcherProc(Path(control_plane.kubeconfig("admin")), namespace, tmp_path / "w.log",
                    "--coalesce-interval", "0.5")
    try:
        eventually(w.ready, 30, f"watcher ready\n{w.tail()}")
        yield w
    finally:
        w.kill(signal.SIGKILL)


def test_a_training_loops_metrics_reach_the_status_and_the_cli(
        control_plane: ControlPlane, admin: Any, namespace: str, watcher: WatcherProc,
        proc_factory: Any) -> None:
    pod = create_kwok_pod(admin, namespace, f"{TASK}-0", labels={"tidings.dev/task": TASK})
    me = Identity(namespace=namespace, pod_name=pod["name"], pod_uid=pod["uid"], task=TASK)
    em = Emitter(EmitterConfig(span_window_s=0.5, retry_initial_s=0.05, retry_max_s=1.0),
                 identity=me, transport=KubeTransport(connect(str(control_plane.kubeconfig(
                     "admin")))))
    for step in range(STEPS):  # a loop that logs every step
        em.metric("loss", round(2.0 / (step + 1), 6), step=step)
        em.metric("learning_rate", 3e-4, step=step)
        em.progress(step / STEPS, f"step {step}")
    em.metric("loss", "fast", step=STEPS)  # type: ignore[arg-type]  # no number: refused
    em.metric("eval_accuracy", 0.875)
    assert not em.flush(15), em.stats()  # one was refused: not all of it delivered
    assert em.flush(15), em.stats()  # settled: the rest was delivered, nothing lost since
    stats = em.stats()
    assert stats["invalid"] == 1
    # Latest per name per window, the names of a window in one note: a few events for
    # the whole loop, not 1,000.
    by_reason = stats["delivered_by_reason"]
    metric_events = by_reason.get("Window", 0)  # (each window carries the progress too)
    assert 1 <= metric_events <= 30, stats
    assert stats["metrics_coalesced"] >= 2 * STEPS - 2 * metric_events

    def metrics() -> dict[str, Any] | None:
        st = task_status(admin, namespace, TASK) or {}
        got = st.get("metrics", {})
        return got if len(got) == 3 and got["loss"].get("step") == STEPS - 1 else None

    got = eventually(metrics, 60, f"status.metrics with the last step\n{watcher.tail()}")
    assert got["loss"]["value"] == round(2.0 / STEPS, 6)
    assert got["learning_rate"] == {**got["learning_rate"], "value": 3e-4, "step": STEPS - 1}
    assert got["eval_accuracy"]["value"] == 0.875 and "step" not in got["eval_accuracy"]
    assert all(e["events"] >= 1 for e in got.values())
    # The curve: exact extremes of every value logged, though only a few
    # were sent as latest values, and a history from step 0 to the last, kept by the API
    # server (the CRD's schema would prune fields it does not document).
    loss = got["loss"]
    assert loss["max"] == 2.0 and loss["min"] == round(2.0 / STEPS, 6)
    history = loss["history"]
    assert history["steps"][0] == 0 and history["steps"][-1] == STEPS - 1
    assert 2 <= len(history["steps"]) == len(history["values"]) <= HISTORY_POINTS
    assert history["values"][0] == 2.0 and history["values"] == sorted(history["values"])[::-1]
    assert got["learning_rate"]["min"] == got["learning_rate"]["max"] == 3e-4
    assert "history" not in got["eval_accuracy"]  # no step, no point

    res = invoke(control_plane, "state", TASK, "-n", namespace)
    assert res.exit_code == 0, res.output
    assert "TaskFeedback status" in res.output
    for text in ("Metrics", "loss", "0.004", str(STEPS - 1), "learning_rate", "0.0003",
                 "eval_accuracy", "0.875", "HISTORY", "█"):
        assert text in res.output, (text, res.output)
    # The loss falls: its sparkline starts at the top block and ends at the bottom one.
    (line,) = [ln for ln in res.output.splitlines() if ln.split()[:1] == ["loss"]]
    spark = next(w for w in line.split() if set(w) <= set(SPARK_BLOCKS))
    assert spark[0] == "█" and spark[-1] == "▁" and len(spark) == len(history["steps"]), line
    as_json = invoke(control_plane, "state", TASK, "-n", namespace, "-o", "json")
    in_json = json.loads(as_json.output)["status"]["metrics"]["loss"]
    assert in_json["step"] == STEPS - 1 and in_json["history"] == history

    em.progress(1.0, "done", final=True)
    assert em.flush(15)
    p = proc_factory("watch", TASK, "-n", namespace)
    assert p.proc.wait(30) == 0, p.err
    assert any("eval_accuracy=0.875" in line and "loss=0.004" in line for line in p.out), p.out


def test_tidings_emit_metric_delivers_numbers_and_refuses_what_is_not_one(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    from tests.cluster.test_emitter import parsed_events
    from tests.cluster.test_emitter_cli import env_for, one_line, run
    from tidings.schemas.wire.payloads import Metric, Window

    env = env_for(control_plane, admin, namespace)
    ok = run(["metric", "log_likelihood", "-0.5", "--step", "3"], env)  # a negative VALUE
    assert ok.returncode == 0, ok.stderr
    (ev,) = parsed_events(admin, namespace)
    assert isinstance(ev.payload, Window)  # a metric is coalescible: it leaves in a window
    assert ev.payload.metrics == (Metric(name="log_likelihood", value=-0.5, step=3),)
    # NaN and infinities are numbers a diverging run reports.
    nan = run(["metric", "loss", "nan", "--step", "4"], env)
    assert nan.returncode == 0, nan.stderr
    sent = [m for e in parsed_events(admin, namespace) if isinstance(e.payload, Window)
            for m in e.payload.metrics]
    assert any(m.name == "loss" and math.isnan(m.value) and m.step == 4 for m in sent), sent
    for bad, why in ((["lo\u200bss", "1"], "invisible"),
                     (["loss", "1", "--step", "-1"], "--step"), (["loss", "fast"], "number")):
        res = run(["metric", *bad], env)
        assert res.returncode == 2, (bad, res.stderr)
        assert why in one_line(res.stderr), res.stderr
    assert len(parsed_events(admin, namespace)) == 2  # nothing refused was sent


def test_a_nan_beyond_the_metrics_cap_is_judged_and_survives_a_watcher_restart(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: str,
        tmp_path: Path) -> None:
    """With 64 metric names held, a 65th sent as NaN was capped away and
    NonFiniteMetrics said AllFinite. It is named now, and a new watcher that reads the status
    (a restart, a failover) still names it: the status keeps the names beyond the cap."""
    from tests.cluster.support_cli import emit
    from tidings.schemas.wire.payloads import Metrics

    task = "wide-metrics"
    pod = create_kwok_pod(admin, namespace, f"{task}-0", labels={"tidings.dev/task": task})
    kubeconfig = Path(control_plane.kubeconfig("admin"))
    first = WatcherProc(kubeconfig, namespace, tmp_path / "w1.log", "--coalesce-interval", "0.5")
    try:
        eventually(first.ready, 30, f"watcher ready\n{first.tail()}")
        for seq in range(8):  # 64 names, finite, 8 to a note
            emit(admin, namespace, task, Metrics(metrics=[
                [f"layer{n:02d}_grad", 0.5, None] for n in range(seq * 8, seq * 8 + 8)]),
                seq, pod=(pod["name"], pod["uid"]))
        emit(admin, namespace, task, Metrics(metrics=[["zz_loss", math.nan, 7]]), 8,
             pod=(pod["name"], pod["uid"]))

        def judged() -> dict[str, Any] | None:
            st = task_status(admin, namespace, task) or {}
            return st if st.get("health", {}).get("nonFinite") == ["zz_loss"] else None

        st = eventually(judged, 60, f"zz_loss named non-finite\n{first.tail()}")
        assert len(st["metrics"]) == 64 and "zz_loss" not in st["metrics"]
        assert st["metricsBeyond"]["zz_loss"].endswith(" NaN")
        (c,) = [c for c in st["conditions"] if c["type"] == "NonFiniteMetrics"]
        assert c["status"] == "True" and c["message"] == "zz_loss=NaN"
    finally:
        first.kill(signal.SIGKILL)
    second = WatcherProc(kubeconfig, namespace, tmp_path / "w2.log", "--coalesce-interval",
                         "0.5")
    try:
        eventually(second.ready, 30, f"watcher ready\n{second.tail()}")
        emit(admin, namespace, task, Metrics(metrics=[["layer00_grad", 0.25, None]]), 9,
             pod=(pod["name"], pod["uid"]))
        st = eventually(lambda: (s := task_status(admin, namespace, task)) and s[
            "metrics"]["layer00_grad"]["value"] == 0.25 and s, 60, "the new watcher's write")
        assert st["health"]["nonFinite"] == ["zz_loss"]
        shown = invoke(control_plane, "state", task, "-n", namespace)
        assert shown.exit_code == 0 and "NonFiniteMetrics" in shown.output, shown.output
    finally:
        second.kill(signal.SIGKILL)
