"""Helpers for the CLI cluster tests: run `tidings` in-process or as a process, write bus
events and lineage records, and install the TaskFeedback CRD. (No tests live here.)"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tidings.cli.main import app
from tidings.schemas import (
    API_GROUP,
    PLURAL,
    ObjectRef,
    PodRef,
    PodSpawned,
    TaskRef,
    build_event,
)
from tools.devcluster import REPO_ROOT, ControlPlane

TIDINGS = str(Path(sys.executable).parent / "tidings")
# Anything a terminal would act on: ESC, BEL, CSI/OSC/DCS/ST in 8-bit form, other C0/C1, DEL.
CONTROL = [chr(c) for c in range(0x20) if chr(c) not in "\n"] + \
    [chr(0x7F)] + [chr(c) for c in range(0x80, 0xA0)]
HOSTILE = "ok\x1b[31mred\x1b]0;pwned-title\x07\x1b]8;;http://evil/\x1b\\link\x1b\\\x9b2J\x08\r\x00end"


def invoke(cp: ControlPlane, *args: str, user: str = "admin") -> Any:
    """`tidings ARGS --kubeconfig <user's>` through typer's CliRunner."""
    return CliRunner().invoke(app, [*args, "--kubeconfig", str(cp.kubeconfig(user))])


def assert_harmless(text: str) -> None:
    bad = sorted({f"{ord(c):#x}" for c in text if c in CONTROL})
    assert not bad, f"control characters in output: {bad}"


def task_pod(admin: Any, namespace: str, task: str) -> tuple[str, str]:
    """The task's worker pod `<task>-worker-0`, labelled for the task (created once): the
    CLI, like the watcher, applies only events whose related pod is labelled for the task."""
    from kubernetes import client

    from tests.support import create_kwok_pod

    name = f"{task}-worker-0"
    try:
        pod = client.CoreV1Api(admin).read_namespaced_pod(name, namespace)
        return name, str(pod.metadata.uid)
    except client.ApiException as err:
        if err.status != 404:
            raise
    made = create_kwok_pod(admin, namespace, name, labels={"tidings.dev/task": task})
    return name, made["uid"]


def emit(admin: Any, namespace: str, task: str, payload: Any, seq: int, *,
         instance: str = "inst-1", pod: tuple[str, str] | None = None,
         when: datetime | None = None, note: dict[str, Any] | None = None) -> dict[str, Any]:
    """Create one bus event for `task` (optionally with a hand-made, hostile note), sent by
    `pod` (default: the task's labelled worker pod). Admin has no pod-bound token, so no
    sender proof."""
    from kubernetes import client

    pod = pod or task_pod(admin, namespace, task)
    body = build_event(task=TaskRef(namespace, task), pod=PodRef(pod[0], pod[1], namespace),
                       payload=payload, instance=instance, seq=seq,
                       time=when or datetime.now(UTC), sender_proof=False)
    if note is not None:
        body["note"] = json.dumps(note)
    client.EventsV1Api(admin).create_namespaced_event(namespace, body)
    return body


def record_spawn(admin: Any, namespace: str, app_name: str, pod_name: str, pod_uid: str,
                 seq: int, *, role: str = "", attempt: int = 0) -> None:
    """The controller's lineage record: pod (name, uid) was spawned for app `app_name`."""
    from kubernetes import client

    body = build_event(
        task=TaskRef(namespace, app_name), pod=PodRef("controller-0", "uid-controller", namespace),
        payload=PodSpawned(pod_name=pod_name, pod_uid=pod_uid, app=app_name, role=role,
                           attempt=attempt),
        instance="controller", seq=seq, time=datetime.now(UTC),
        regarding=ObjectRef("apps.example.dev/v1", "App", app_name, namespace),
        sender_proof=False)
    client.EventsV1Api(admin).create_namespaced_event(namespace, body)


def closed_port_kubeconfig(cp: ControlPlane, folder: Path) -> Path:
    """A copy of admin's kubeconfig that points at a loopback port nobody listens on."""
    import socket

    import yaml

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = yaml.safe_load(cp.kubeconfig("admin").read_text())
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = folder / "closed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def install_crd(control_plane: ControlPlane) -> str:
    """The TaskFeedback CRD, installed (idempotently) and Established: the ``crd`` fixture
    (tests/cluster/conftest.py)."""
    control_plane.kubectl_run("apply", "-f", str(REPO_ROOT / "deploy" / "crd.yaml"))
    control_plane.wait_established(f"{PLURAL}.{API_GROUP}")
    return f"{PLURAL}.{API_GROUP}"


def write_status(cp: ControlPlane, namespace: str, task: str, status: dict[str, Any]) -> None:
    """Create the TaskFeedback (if needed) and set its status, as a watcher would."""
    obj = {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
           "metadata": {"name": task, "namespace": namespace}, "spec": {"task": task}}
    cp.kubectl_run("apply", "-f", "-", input_text=json.dumps(obj))
    cp.kubectl_run("patch", "taskfeedback", task, "-n", namespace, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": status}))


def grant(cp: ControlPlane, namespace: str, user: str, rules: list[dict[str, Any]]) -> None:
    name = f"cli-test-{user}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": user}]}
    for obj in (role, binding):
        cp.kubectl_run("apply", "-f", "-", input_text=json.dumps(obj))


class Proc:
    """`tidings ...` as a child process whose output lines are collected by a thread."""

    def __init__(self, cp: ControlPlane, *args: str) -> None:
        self.proc = subprocess.Popen(
            [TIDINGS, *args, "--kubeconfig", str(cp.kubeconfig("admin"))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.out: list[str] = []
        self.err: list[str] = []
        self._q: queue.Queue[str] = queue.Queue()
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream: Any, sink: list[str]) -> None:
        for line in iter(stream.readline, ""):
            sink.append(line.rstrip("\n"))
            self._q.put(line)

    def wait_for(self, pred: Callable[[list[str]], bool], timeout: float = 30.0,
                 what: str = "output") -> None:
        deadline = time.monotonic() + timeout
        while not pred(self.out):
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self._q.empty()):
                raise AssertionError(f"timed out waiting for {what}; stdout={self.out} "
                                     f"stderr={self.err} rc={self.proc.poll()}")
            with contextlib.suppress(queue.Empty):
                self._q.get(timeout=min(left, 0.2))

    def stop(self) -> int:
        return interrupt(self.proc)


def interrupt(proc: subprocess.Popen[str], grace: float = 10.0) -> int:
    """Ctrl-C ``proc`` (unless it ended) as a user stops a command, killed if it has not ended
    within ``grace`` seconds; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return int(proc.returncode)


def proc_pool(control_plane: ControlPlane) -> Iterator[Callable[..., Proc]]:
    """make(*args) -> Proc; every process is stopped at teardown: the ``proc_factory``
    fixture (tests/cluster/conftest.py)."""
    procs: list[Proc] = []

    def make(*args: str) -> Proc:
        p = Proc(control_plane, *args)
        procs.append(p)
        return p

    yield make
    for p in procs:
        p.stop()
