"""`tidings watch TASK --wait` started before the task's pods exist (the CI use), against the
real control plane: it used to follow only the facts regarding the
TaskFeedback, so a zero-wiring task (pods reporting about themselves) stayed "Pending, 0
events" while the status said Succeeded, until its events watch timed out a minute later.
Now it follows the task however its pods are wired and exits with the outcome's code within
seconds of the status showing it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import task_status
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import create_kwok_pod, eventually
from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import KubeTransport, connect
from tidings.schemas.wire.constants import TASK_LABEL
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

TIDINGS = str(Path(sys.executable).parent / "tidings")
# Far below the minute the events watch took to time out before: what "within seconds"
# means on a loaded 2-core machine.
PROMPT = 20.0


class Watch:
    """`tidings watch TASK --wait -o jsonl` as a process."""

    def __init__(self, kubeconfig: Path, namespace: str, task: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [TIDINGS, "watch", task, "-n", namespace, "--wait", "-o", "jsonl", "--grace", "1",
             *extra, "--kubeconfig", str(kubeconfig)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def first_line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else ""
        return dict(json.loads(line))

    def end(self, timeout: float = 90) -> tuple[int, list[dict[str, Any]], float]:
        """Exit code, the snapshots printed, and when it exited (monotonic)."""
        out, err = self.proc.communicate(timeout=timeout)
        ended = time.monotonic()
        assert "Traceback" not in err, err
        return self.proc.returncode, [json.loads(x) for x in out.splitlines()], ended

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return Path(control_plane.kubeconfig("admin"))


def worker(kubeconfig: Path, admin: Any, namespace: str, task: str, *, task_id: bool,
           name: str = "") -> Emitter:
    """A pod labelled for ``task`` and its emitter: with ``task_id`` it names the task
    (TIDINGS_TASK), without it reports about its own pod (zero wiring)."""
    pod = create_kwok_pod(admin, namespace, name or f"{task}-0", labels={TASK_LABEL: task})
    env = {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace, "POD_UID": pod["uid"],
           **({"TIDINGS_TASK": task} if task_id else {})}
    return Emitter(EmitterConfig(retry_initial_s=0.05), identity=Identity.from_env(env),
                   transport=KubeTransport(connect(str(kubeconfig))))


def status_over(admin: Any, namespace: str, task: str) -> float | None:
    s = task_status(admin, namespace, task)
    return time.monotonic() if s and s.get("phase") in ("Succeeded", "Failed") else None


@pytest.mark.parametrize("wiring", ["pod facts", "task id", "pre-created"])
def test_watch_wait_follows_the_task_and_ends_with_its_status(
        wiring: str, control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    start_watcher()
    task = f"train-{uuid.uuid4().hex[:6]}"
    if wiring == "pre-created":  # a controller's TaskFeedback, no status yet
        control_plane.kubectl_run("-n", namespace, "create", "-f", "-", input_text=json.dumps({
            "apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
            "metadata": {"name": task}, "spec": {"task": task}}))
    watch = Watch(kubeconfig, namespace, task)
    try:
        first = watch.first_line()  # started before the pod exists
        assert first["status"]["phase"] == "Pending"
        em = worker(kubeconfig, admin, namespace, task, task_id=wiring != "pod facts")
        em.progress(0.5, "half way")
        assert em.flush(15), em.stats()
        em.progress(1.0, "done", final=True)
        assert em.flush(15), em.stats()
        shown = eventually(lambda: status_over(admin, namespace, task), 30, "Succeeded")
        code, snaps, ended = watch.end()
        print(f"{wiring}: watch exited {ended - shown:+.2f}s after the status said Succeeded")
        assert code == 0, snaps[-1:]
        assert snaps[-1]["status"]["phase"] == "Succeeded"
        assert snaps[-1]["source"] == "TaskFeedback"
        assert ended - shown < PROMPT
        em.close(5)
    finally:
        watch.kill()


def test_watch_wait_without_a_watcher_folds_the_pods_own_facts(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,
        crd: None) -> None:  # noqa: F811
    """No watcher runs: the pods' facts about themselves are folded here, as the watcher
    would, and the failed final ends the watch with 6."""
    task = f"train-{uuid.uuid4().hex[:6]}"
    watch = Watch(kubeconfig, namespace, task)
    try:
        assert watch.first_line()["status"]["phase"] == "Pending"
        em = worker(kubeconfig, admin, namespace, task, task_id=False)
        em.progress(0.4, "step 40")
        em.fail("CUDA out of memory")
        sent = time.monotonic()
        assert em.flush(15), em.stats()
        code, snaps, ended = watch.end()
        assert code == 6, snaps[-1:]
        assert snaps[-1]["source"] == "events"
        assert snaps[-1]["status"]["progress"]["message"] == "CUDA out of memory"
        assert ended - sent < PROMPT
        em.close(5)
    finally:
        watch.kill()
