"""The real Hugging Face and Lightning Trainers with ``callbacks=[TidingsCallback()]``: a tiny
model built from a config trains for a few steps on CPU in a workload process, and a real
watcher folds what it reports into the TaskFeedback."""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import invoke
from tests.cluster.support_watcher import task_status
from tests.integrations.conftest import REPO_ROOT, TaskPod, run_workload
from tests.support import eventually
from tidings.integrations.report import EVAL_SPAN, STEP_SPAN

FRAMEWORKS = ["hf", "lightning"]
# The first metric each run logs (HF's on_log; the LightningModule's self.log).
FIRST_METRIC = {"hf": "loss", "lightning": "train_loss"}

def over(status: dict[str, Any] | None) -> bool:
    return bool(status and status.get("phase") in ("Succeeded", "Failed"))


@pytest.mark.cluster
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_training_run_reports_progress_metrics_and_its_end(
        framework: str, tmp_path: Path, admin: Any, namespace: str, task_pod: TaskPod,
        start_watcher: Callable[..., Any], control_plane: Any) -> None:
    start_watcher()
    task, env = task_pod()
    proc, result = run_workload(framework, tmp_path, env, "--steps", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The final is critical and the metrics coalescible: they may reach the status in a later
    # write (within the coalescing interval), so wait for both.
    name = FIRST_METRIC[framework]
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s)
                        and name in (s.get("metrics") or {}) and s, 30, f"{task} over, {name}")
    assert status["phase"] == "Succeeded"
    assert status["progress"]["percent"] == 100
    (worker,) = status["workers"]
    assert worker["workers"] == 1 and worker["final"] and not worker.get("failed")
    assert worker["message"] == "finished at step 6"
    # (read after a flush of at most 5 s: the first window, sent at once, and the final are
    # in; a flush that ran out of time on a loaded machine leaves only the first window sure)
    assert result["stats"]["delivered"] >= (2 if result["flushed"] else 1), result
    assert result["stats"]["refused"] == 0
    metric = status["metrics"][name]  # from global rank 0
    assert math.isfinite(metric["value"]) and metric["step"] > 0, metric
    # Each training step and each evaluation is a span of the pod, so the
    # run's timeline shows them (it printed "no spans recorded"). Spans are coalescible too.
    def spans_in() -> dict[str, Any] | None:
        got = (task_status(admin, namespace, task) or {}).get("spans", {})
        return got if got.get(STEP_SPAN, {}).get("count") == 6 and EVAL_SPAN in got else None

    spans = eventually(spans_in, 30, f"{task}: its spans")
    step, evaluation = spans[STEP_SPAN], spans[EVAL_SPAN]
    assert step["pod"] == env["POD_NAME"] and evaluation["pod"] == env["POD_NAME"]  # its lane
    assert step["errors"] == 0 and 0 < step["maxS"] <= step["lastEnd"] - step["firstStart"]
    assert evaluation["count"] >= 2  # eval_steps=3 (Lightning: every 3 batches) of 6 steps
    res = invoke(control_plane, "timeline", task, "-n", namespace)
    assert res.exit_code == 0 and "no spans recorded" not in res.stdout, res.output
    assert STEP_SPAN in res.stdout and EVAL_SPAN in res.stdout and " 6 " in res.stdout


@pytest.mark.cluster
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_crash_mid_training_shows_the_task_failed_within_seconds(
        framework: str, tmp_path: Path, admin: Any, namespace: str, task_pod: TaskPod,
        start_watcher: Callable[..., Any]) -> None:
    start_watcher()
    task, env = task_pod()
    proc, result = run_workload(framework, tmp_path, env, "--steps", "6", "--crash-at", "3")
    died = time.monotonic()
    assert proc.returncode == 1 and result == {}, proc.stderr[-3000:]
    assert "SimulatedOOM" in proc.stderr  # the interpreter's own traceback still printed
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s) and s,
                        10, f"{task} failed")
    seen_after = time.monotonic() - died
    assert status["phase"] == "Failed", status
    (worker,) = status["workers"]
    assert worker["failed"] and worker["message"].startswith(
        "__main__.SimulatedOOM: CUDA out of memory at step 3"), worker
    assert "\x1b" not in worker["message"]
    assert 0 < status["progress"]["percent"] < 100  # the progress made is kept
    print(f"{framework}: Failed in the status {seen_after:.2f}s after the process died")


# What a diverging run logs as NaN: Lightning passes the module's own loss on; the HF Trainer
# filters NaN losses out of its logged loss by default (logging_nan_inf_filter) but its
# gradient norm, which it logs too, goes NaN with them.
DIVERGED = {"hf": "grad_norm", "lightning": "train_loss"}


@pytest.mark.cluster
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_diverging_run_reports_its_nan_metrics(
        framework: str, tmp_path: Path, admin: Any, namespace: str, task_pod: TaskPod,
        start_watcher: Callable[..., Any]) -> None:
    """The callbacks used to drop NaN values, so the most important signal
    of a diverging run vanished; now the metric's entry says NaN and the task's
    NonFiniteMetrics condition names it."""
    start_watcher()
    task, env = task_pod()
    proc, _ = run_workload(framework, tmp_path, env, "--steps", "8", "--diverge-at", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    name = DIVERGED[framework]
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s)
                        and (s.get("metrics") or {}).get(name, {}).get("nonFinite") and s,
                        30, f"{task} over, {name} NaN")
    assert status["metrics"][name]["nonFinite"] == "NaN"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["NonFiniteMetrics"]["status"] == "True"
    assert f"{name}=NaN" in conditions["NonFiniteMetrics"]["message"]


class BlackHole:
    """A TCP port that accepts connections (the kernel's backlog) and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.sock.close()


def unreachable_kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig-unreachable.yaml"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-secret}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
    return path


@pytest.mark.parametrize(("framework", "server"),
                         [("hf", "refused"), ("hf", "black hole"), ("lightning", "black hole")])
def test_an_unreachable_api_server_never_breaks_or_blocks_training(
        framework: str, server: str, tmp_path: Path, black_hole: BlackHole) -> None:
    if server == "refused":
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        url = f"https://127.0.0.1:{closed.getsockname()[1]}"
        closed.close()
    else:
        url = f"https://127.0.0.1:{black_hole.port}"
    env = {"POD_NAME": "train-0", "POD_NAMESPACE": "ml", "POD_UID": "0c4f-11",
           "TIDINGS_TASK": "run-7", "TIDINGS_EMIT_EXIT_FLUSH_S": "2",
           "KUBECONFIG": str(unreachable_kubeconfig(tmp_path, url))}
    t0 = time.monotonic()
    proc, result = run_workload(framework, tmp_path, env, "--steps", "6")
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result["stats"]["delivered"] == 0 and result["stats"]["sink"] is False
    # No hook waits for the network (a create's connect timeout alone is 3 s): the slowest
    # is an O(1) call, measured at 1-25 ms on 2 loaded cores.
    assert result["slowest_hook_seconds"] < 0.5, result
    # The exit flush gives up at its deadline: the process ends soon after training.
    assert took - result["train_seconds"] < 30, (took, result["train_seconds"])
    print(f"{framework}/{server}: slowest hook {result['slowest_hook_seconds'] * 1e3:.2f} ms")


@pytest.mark.cluster
def test_wandb_offline_sends_no_link_and_no_error(
        tmp_path: Path, admin: Any, namespace: str, task_pod: TaskPod,
        start_watcher: Callable[..., Any]) -> None:
    start_watcher()
    task, env = task_pod()
    env |= {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_PROJECT": "tidings-it"}
    proc, result = run_workload("hf", tmp_path, env, "--steps", "4", "--report-to", "wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((tmp_path / "wandb").glob("offline-run-*")), "wandb did not run offline"
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s) and s,
                        30, f"{task} over")
    assert status["phase"] == "Succeeded" and not status.get("links"), status
    assert result["stats"]["invalid"] == 0 and result["stats"]["refused"] == 0


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real MLflow tracking server on 127.0.0.1 (sqlite store, local artifacts)."""
    home = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
         "--default-artifact-root", str(home / "artifacts")],
        cwd=home, stdout=subprocess.DEVNULL, stderr=open(home / "server.log", "wb"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: urllib.request.urlopen(f"{url}/health", timeout=2).status == 200,
                   120, f"mlflow server\n{(home / 'server.log').read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.cluster
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_mlflow_run_sends_its_run_page_which_opens(
        framework: str, tmp_path: Path, admin: Any, namespace: str, task_pod: TaskPod,
        start_watcher: Callable[..., Any], mlflow_server: str) -> None:
    start_watcher()
    task, env = task_pod()
    env |= {"MLFLOW_TRACKING_URI": mlflow_server, "MLFLOW_EXPERIMENT_NAME": "tidings-it"}
    proc, _ = run_workload(framework, tmp_path, env, "--steps", "4", "--report-to", "mlflow")
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s)
                        and s.get("links") and s, 30, f"{task} over with its link")
    url = status["links"]["mlflow"]["url"]
    assert url.startswith(f"{mlflow_server}/#/experiments/"), url
    with urllib.request.urlopen(url, timeout=10) as page:
        assert page.status == 200 and b"<html" in page.read(4096).lower()
    run_id = url.rsplit("/runs/", 1)[1]
    with urllib.request.urlopen(f"{mlflow_server}/api/2.0/mlflow/runs/get?run_id={run_id}",
                                timeout=10) as api:
        assert api.status == 200  # the page is this run's, on that server


def test_import_tidings_never_imports_a_framework() -> None:
    probe = ("import sys, tidings, tidings.emitter, tidings.integrations, "
             "tidings.integrations.report\n"
             "assert callable(tidings.run)\n"
             "heavy = [m for m in ('torch', 'transformers', 'lightning', 'flytekit', 'wandb', "
             "'mlflow') if m in sys.modules]\n"
             "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_pod_declares_itself_quiet_before_each_evaluation_and_checkpoint(
        framework: str, tmp_path: Path) -> None:
    """A checkpoint being written or an evaluation running is silence on purpose: the
    callback declares it first (one Quiet event each, from the framework's own hooks), so
    the pod is not Stalled meanwhile; its report after ends it. No cluster: the emitter
    sinks what it would send."""
    proc, result = run_workload(framework, tmp_path, {}, "--steps", "6", "--save")
    assert proc.returncode == 0, proc.stderr[-3000:]
    quiet = result["quiet"]
    reasons = " ".join(reason for _, reason, _ in quiet)
    assert "checkpoint" in reasons and "evaluation" in reasons, quiet
    assert all(seconds == 1800.0 for seconds, _, _ in quiet), quiet
    # Declared as training stands at step 3 and 6 of 6, before the work that is quiet.
    assert {round(fraction, 2) for _, _, fraction in quiet} <= {0.5, 1.0}, quiet
    assert result["stats"]["invalid"] == 0
