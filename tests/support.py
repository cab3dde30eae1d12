"""Helpers shared by the cluster tests: condition polling, kwok pods with logs, raw events."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from tidings._compat import UTC
from tools.devcluster import NODE_NAME

T = TypeVar("T")


class FakeClock:
    """A clock a test moves by hand (``clock.now += 5``), for code that takes its clock as a
    callable (``clock()``: seconds)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def eventually(probe: Callable[[], T | None], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.05) -> T:
    """Return the first truthy result of probe(); fail with `what` when the deadline passes."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if result:
                return result
        except Exception as err:  # the probe may race the thing it waits for
            last_error = err
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what} (last error: {last_error})")


def only_here(name: str, namespace: str) -> str:
    """``name`` made the test's own: what `-A` looks for in every namespace must not be found
    in an earlier test's namespace too (another test's task `train`; a deleted namespace
    keeps its objects, as no namespace controller runs on the test plane)."""
    return f"{name}-{namespace}"


def cri_log_line(text: str, when: datetime | None = None, stream: str = "stdout",
                 chunk: int = 16 * 1024) -> str:
    """One log line as a container runtime writes it: a long one as partial entries (P) of
    ``chunk`` characters, then the last (F), which the kubelet (and kwok) join again."""
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    parts = [text[i:i + chunk] for i in range(0, len(text), chunk)] or [""]
    return "".join(f"{stamp} {stream} {'F' if i == len(parts) - 1 else 'P'} {part}\n"
                   for i, part in enumerate(parts))


def write_cri_log(path: Path, lines: list[str]) -> Path:
    """A container log file in the CRI format that kwok serves through the kubelet API."""
    path.write_text("".join(cri_log_line(line) for line in lines))
    return path


def create_kwok_pod(admin: Any, namespace: str, name: str, *, labels: dict[str, str] | None = None,
                    log_file: Path | None = None, run_for: str | None = None,
                    service_account: str = "default", containers: tuple[str, ...] = ("main",)
                    ) -> dict[str, Any]:
    """A Pod bound to the kwok node (no scheduler runs), with its logs served from log_file."""
    from kubernetes import client

    annotations = {"tidings.dev/run-for": run_for} if run_for else {}
    body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": {"nodeName": NODE_NAME, "serviceAccountName": service_account,
                 "containers": [{"name": c, "image": "busybox"} for c in containers]},
    }
    if log_file is not None:
        client.CustomObjectsApi(admin).create_namespaced_custom_object(
            "kwok.x-k8s.io", "v1alpha1", namespace, "logs",
            {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"logs": [{"containers": list(containers), "logsFile": str(log_file),
                                "follow": True}]}})
    pod = client.CoreV1Api(admin).create_namespaced_pod(namespace, body)
    return {"name": pod.metadata.name, "uid": pod.metadata.uid}


def node_reports(core: Any, node: str, ready: bool, down: str = "runtime is down") -> None:
    """Write a node's Ready condition as its kubelet writes it (a node with no kubelet:
    Ready, then NotReady with the message ``down``)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    core.patch_node_status(node, {"status": {"conditions": [{
        "type": "Ready", "status": str(ready), "lastHeartbeatTime": now,
        "lastTransitionTime": now, "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else down}]}})


def pod_phase(admin: Any, namespace: str, name: str) -> str:
    from kubernetes import client

    return str(client.CoreV1Api(admin).read_namespaced_pod(name, namespace).status.phase)


def raw_event(namespace: str, name: str, *, controller: str, note: str = "hello",
              reason: str = "Test") -> dict[str, Any]:
    """A minimal events.k8s.io/v1 Event with eventTime set (so the note limit applies)."""
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": controller, "reportingInstance": "test",
        "action": "Report", "reason": reason, "type": "Normal", "note": note,
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace,
                      "name": "subject"},
    }


def expanded(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with its records read into their fields (the readers' own function)."""
    from tidings.schemas.status.decoder import expanded as read_records

    return read_records(status)
