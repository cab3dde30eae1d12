"""The kwok node's simulated kubelet tells the truth the real one tells: a pod ended by
`ControlPlane.end_pod` (what tests/cluster and the demo use) reads, to the watcher and in its
status, as the same pod ended for real on the real node: a success, an exit 1, an OOM kill;
and a pod made to wait by `ControlPlane.wait_pod` as a real one whose image cannot be pulled
or whose container crash-loops.
Where the simulation once lied (a container without its runtime's id, no
PodReadyToStartContainers condition) this test is the reference."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from tests.node.support import container, pod, run_pod, wait_phase
from tests.support import create_kwok_pod, eventually
from tidings.schemas.engine.observed import pod_verdict
from tools.devcluster import ControlPlane
from tools.devnode import RealNode

ENDS = {
    "succeeded": ("pass", 0, None),
    "exit-1": ("raise SystemExit(1)", 1, None),
    "oom-killed": ("hog = []\nwhile True:\n    hog.append(b'x' * (16 << 20))", 137, "OOMKilled"),
}


def as_dict(obj: Any) -> dict[str, Any]:
    """An object as the API server sent it (camelCase), not the client's model."""
    return dict(client.ApiClient().sanitize_for_serialization(obj))


def shape(status: dict[str, Any]) -> dict[str, Any]:
    """What a reader of the pod's end may rely on, without the times and ids."""
    (container,) = status["containerStatuses"]
    ended = container["state"]["terminated"]
    return {
        "phase": status["phase"], "reason": status.get("reason"),
        "conditions": sorted((c["type"], c["status"], c.get("reason"))
                             for c in status["conditions"]),
        "container": (container["ready"], container["started"], container["restartCount"],
                      container["containerID"].split("://")[0]),
        "terminated": (ended["exitCode"], ended["reason"], sorted(ended),
                       ended["containerID"] == container["containerID"]),
    }


@pytest.mark.parametrize("end", sorted(ENDS))
def test_the_simulated_end_reads_as_the_real_kubelet_s(
        real_node: RealNode, control_plane: ControlPlane, admin: Any, namespace: str,
        end: str) -> None:
    program, code, reason = ENDS[end]
    run_pod(admin, namespace, f"real-{end}", program, memory="96Mi")
    wait_phase(admin, namespace, f"real-{end}", ("Succeeded", "Failed"))

    def sandbox_gone() -> dict[str, Any] | None:
        # The kubelet says the sandbox is gone a moment after the container's end.
        status = as_dict(pod(admin, namespace, f"real-{end}"))["status"]
        gone = [c for c in status.get("conditions", [])
                if c["type"] == "PodReadyToStartContainers" and c["status"] == "False"]
        return status if gone else None

    real = eventually(sandbox_gone, 60, "the sandbox torn down")
    create_kwok_pod(admin, namespace, f"sim-{end}")
    wait_phase(admin, namespace, f"sim-{end}", ("Running",))
    control_plane.end_pod(namespace, f"sim-{end}", code, reason)
    sim = as_dict(pod(admin, namespace, f"sim-{end}"))["status"]
    assert shape(sim) == shape(real)
    now = datetime.now(UTC)
    verdicts = [pod_verdict({"metadata": {"name": "p", "uid": "u"}, "status": s}, seen=now)
                for s in (real, sim)]
    assert verdicts[0] is not None and verdicts[1] is not None
    assert verdicts[0]._replace(at=now) == verdicts[1]._replace(at=now)
    assert (verdicts[0].reason, verdicts[0].exit_code) == (reason or (
        "Completed" if code == 0 else "Error"), code)


# --- waiting: an image that cannot be pulled, a crash loop -------------------------------------

WAITS = {  # case -> (what the real container changes, its restart policy, the wait, exit)
    "image-pull": ({"image": "tidings-workload:nope"}, "Never", "ImagePullBackOff", None),
    "crash-loop": ({"command": ["python3", "-c", "raise SystemExit(3)"]}, "Always",
                   "CrashLoopBackOff", 3),
}


def waiting_shape(status: dict[str, Any]) -> dict[str, Any]:
    """What a reader of a pod's wait may rely on, without the times, ids and counts."""
    (container,) = status["containerStatuses"]
    waiting = container["state"]["waiting"]
    last = (container.get("lastState") or {}).get("terminated")
    return {
        "phase": status["phase"], "reason": status.get("reason"),
        "conditions": sorted((c["type"], c["status"], c.get("reason"), c.get("message"))
                             for c in status["conditions"]),
        "container": (container["ready"], container["started"],
                      container["restartCount"] > 0,
                      container.get("containerID", "").split("://")[0]),
        "waiting": (waiting["reason"], sorted(waiting)),
        "last": None if last is None else (
            last["exitCode"], last["reason"],
            last.get("containerID") == container.get("containerID")),
    }


@pytest.mark.parametrize("case", sorted(WAITS))
def test_the_simulated_wait_reads_as_the_real_kubelet_s(
        real_node: RealNode, control_plane: ControlPlane, admin: Any, namespace: str,
        case: str) -> None:
    change, restart, reason, code = WAITS[case]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"real-{case}"},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 0,
                     "containers": [{**container("pass"), **change}]}}
    client.CoreV1Api(admin).create_namespaced_pod(namespace, body)

    def waits() -> dict[str, Any] | None:
        status = as_dict(pod(admin, namespace, f"real-{case}"))["status"]
        states = [c["state"].get("waiting", {}).get("reason")
                  for c in status.get("containerStatuses") or []]
        return status if states == [reason] else None

    real = eventually(waits, 120, f"the real pod in {reason}")
    message = real["containerStatuses"][0]["state"]["waiting"]["message"]
    create_kwok_pod(admin, namespace, f"sim-{case}")
    wait_phase(admin, namespace, f"sim-{case}", ("Running",))
    control_plane.wait_pod(namespace, f"sim-{case}", reason, message, code)
    sim = as_dict(pod(admin, namespace, f"sim-{case}"))["status"]
    assert waiting_shape(sim) == waiting_shape(real)
    now = datetime.now(UTC)
    verdicts = [pod_verdict({"metadata": {"name": "p", "uid": "u"}, "status": s}, seen=now)
                for s in (real, sim)]
    assert verdicts[0] is not None and verdicts[1] is not None
    assert verdicts[0]._replace(at=now) == verdicts[1]._replace(at=now)
    assert (verdicts[0].reason, verdicts[0].exit_code) == (reason, code)
