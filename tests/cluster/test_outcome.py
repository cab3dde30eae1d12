"""A worker's outcome on the real control plane with a real watcher: a failure keeps the
progress made (`fail()` used to report 0 %), and a process that dies of
an uncaught exception, or leaves ``with tidings.run():``, ends its task within seconds."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import REPO_ROOT, task_status
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import create_kwok_pod, eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport, connect
from tidings.schemas.wire.constants import TASK_LABEL
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

TIDINGS = str(Path(sys.executable).parent / "tidings")


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return Path(control_plane.kubeconfig("admin"))


def worker(admin: Any, namespace: str) -> tuple[str, dict[str, str]]:
    task = f"train-{uuid.uuid4().hex[:8]}"
    pod = create_kwok_pod(admin, namespace, f"{task}-0", labels={TASK_LABEL: task})
    return task, {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"],
                  "TIDINGS_TASK": task}


def over(admin: Any, namespace: str, task: str) -> dict[str, Any] | None:
    s = task_status(admin, namespace, task)
    return s if s and s.get("phase") in ("Succeeded", "Failed") else None


def cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TIDINGS, *args, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("fraction", "percent"), [(None, 75), (0.0, 0)])
def test_a_failure_keeps_the_progress_made_unless_the_caller_says_otherwise(
        fraction: float | None, percent: int, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task, env = worker(admin, namespace)
    em = Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                 transport=KubeTransport(connect(str(kubeconfig))))
    em.progress(0.75, "epoch 3/4")
    assert em.flush(15), em.stats()
    eventually(lambda: (s := task_status(admin, namespace, task)) and s.get("progress"),
               30, "the progress folded")
    em.fail("CUDA out of memory", fraction)
    assert em.flush(15), em.stats()
    status = eventually(lambda: over(admin, namespace, task), 30, f"{task} over")
    assert status["phase"] == "Failed"
    assert status["progress"]["percent"] == percent
    assert status["progress"]["message"] == "CUDA out of memory"

    listed = cli(kubeconfig, "list", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line.split() for line in listed.stdout.splitlines() if line.startswith(task)]
    assert row[1:3] == ["Failed", f"{percent}%"], listed.stdout
    watched = cli(kubeconfig, "watch", task, "-n", namespace, "--grace", "0")
    assert watched.returncode == 6, watched.stderr  # the task failed
    assert f"{percent:5.1f}% CUDA out of memory" in watched.stdout, watched.stdout


CRASHING = """
import sys
import tidings
import tidings.emitter as bus

def train():
    bus.progress(0.4, "step 40/100")
    raise RuntimeError("loss is nan")

if sys.argv[1] == "run":
    with tidings.run():
        train()
elif sys.argv[1] == "bare":
    train()
else:
    with tidings.run():
        bus.progress(0.9)
"""


@pytest.mark.parametrize("how", ["bare", "run"])
def test_a_process_that_dies_of_an_exception_fails_its_task_within_seconds(
        how: str, admin: Any, namespace: str, kubeconfig: Path, tmp_path: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task, env = worker(admin, namespace)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(CRASHING))
    proc = subprocess.run([sys.executable, str(script), how], cwd=REPO_ROOT, timeout=60,
                          env={**env, "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    died = time.monotonic()
    assert proc.returncode == 1 and "RuntimeError: loss is nan" in proc.stderr, proc.stderr
    status = eventually(lambda: over(admin, namespace, task), 10, f"{task} failed")
    print(f"{how}: Failed in the status {time.monotonic() - died:.2f}s after the exit")
    assert status["phase"] == "Failed"
    assert status["progress"] == {"percent": 40, "percentText": "40%",
                                  "message": "RuntimeError: loss is nan"}
    (w,) = status["workers"]
    assert w["failed"] and w["fraction"] == 0.4


def test_run_reports_success_on_a_clean_exit(admin: Any, namespace: str, kubeconfig: Path,
                                             tmp_path: Path,
                                             start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task, env = worker(admin, namespace)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(CRASHING))
    proc = subprocess.run([sys.executable, str(script), "ok"], cwd=REPO_ROOT, timeout=60,
                          env={**env, "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    status = eventually(lambda: over(admin, namespace, task), 30, f"{task} over")
    assert status["phase"] == "Succeeded" and status["progress"]["percent"] == 100


EXITING = """
import argparse
import sys
import time
import tidings.emitter as bus

bus.progress(0.5, "half way")
bus.log_link("ckpt", "https://ckpt.example/step-50")
how = sys.argv[1]
if how == "exit1":
    sys.exit(1)
elif how == "message":
    sys.exit("bad config: no data dir")
elif how == "argparse":
    parser = argparse.ArgumentParser(prog="train")
    parser.add_argument("--epochs", type=int, required=True)
    parser.parse_args([])
elif how == "sigterm":
    print("ready", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize(("how", "code", "message"), [
    ("exit1", 1, "exit code 1"),
    ("message", 1, "exit code 1: bad config: no data dir"),
    ("argparse", 2, "exit code 2"),
    ("sigterm", -15, "terminated by SIGTERM"),
])
def test_a_non_zero_exit_or_sigterm_fails_the_task_with_its_code_or_message(
        how: str, code: int, message: str, admin: Any, namespace: str, kubeconfig: Path,
        tmp_path: Path, start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """SystemExit bypasses the excepthook and SIGTERM's default handler
    skips the exit flush, so these tasks stayed Running 50 % for ever."""
    start_watcher()
    task, env = worker(admin, namespace)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(EXITING))
    proc = subprocess.Popen([sys.executable, str(script), how], cwd=REPO_ROOT, text=True,
                            env={**env, "KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if how == "sigterm":
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            proc.terminate()  # what the kubelet does first on eviction or deletion
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    died = time.monotonic()
    assert proc.returncode == code
    status = eventually(lambda: over(admin, namespace, task), 10, f"{task} failed")
    print(f"{how}: Failed in the status {time.monotonic() - died:.2f}s after the exit")
    assert status["phase"] == "Failed"
    assert (status["progress"]["percent"], status["progress"]["message"]) == (50, message)
    (w,) = status["workers"]
    assert w["failed"] and w["fraction"] == 0.5
    assert "ckpt" in status.get("links", {})  # queued beside it, delivered too
    shown = cli(kubeconfig, "state", task, "-n", namespace)
    assert shown.returncode == 0 and "Failed" in shown.stdout and message in shown.stdout
