"""One pod name, one life, on the real control plane: a labelled kwok pod reports 30 % and is
deleted mid-run; a pod of the same name (a new uid: what a StatefulSet, an operator or a
retry that names its pods makes) reports 30 %, 60 % and its final. The first pod's deletion
is its own end, never the second's: from the second pod's first report the task runs, and it
ends Succeeded, the worker shown as replaced in the status and in `tidings state`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster import test_watcher as tw
from tests.cluster.support_watcher import WatcherProc
from tests.cluster.test_pod_truth import cli, conditions, labelled_pod, say, status
from tests.support import eventually
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher

TASK = "recreate"
POD = "recreate-0"


class Phases:
    """Every (phase, percent) the task's status shows, read as fast as the API answers, on
    a thread, from ``start()`` until ``stop()``."""

    def __init__(self, admin: Any, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.seen: list[tuple[str, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            st = status(self.admin, self.namespace, TASK)
            self.seen.append((st.get("phase", ""), st.get("progress", {}).get("percent")))
            self._stop.wait(0.02)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[tuple[str, int | None]]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


@pytest.fixture
def phases(admin: Any, namespace: str) -> Iterator[Phases]:
    p = Phases(admin, namespace)
    yield p
    p.stop()


def running_at(admin: Any, namespace: str, percent: int) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        st = status(admin, namespace, TASK)
        return st if (st.get("phase"), st.get("progress", {}).get("percent")) == (
            "Running", percent) else None
    return probe


def test_a_pod_recreated_with_its_name_is_a_new_life_and_its_final_decides(
        control_plane: ControlPlane, admin: Any, namespace: str,
        start_watcher: Callable[..., WatcherProc], phases: Phases) -> None:
    core = client.CoreV1Api(admin)
    w = start_watcher()
    first = labelled_pod(admin, namespace, POD, TASK)
    say(control_plane, namespace, first, TASK, 0.3)
    first_said = time.time()
    eventually(running_at(admin, namespace, 30), 30, f"the first pod at 30 %\n{w.tail()}")

    # Deleted mid-run: gone from the API, and its end folded (the task, with no other pod
    # of that name yet, reads as a worker that died without a final, as before).
    core.delete_namespaced_pod(POD, namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(POD, namespace)
        except ApiException as e:
            return e.status == 404
        return False

    eventually(gone, 30, "the first pod gone")
    eventually(lambda: any(o.get("uid") == first["uid"]
                           for o in status(admin, namespace, TASK).get("podOutcomes", [])),
               30, f"the first pod's end folded\n{w.tail()}")
    # A name's lives are ordered by when the API server created their first report (whole
    # seconds): the second pod's first report comes in a later second than the first's.
    eventually(lambda: time.time() >= first_said + 1.05, 5, "the next second")

    second = labelled_pod(admin, namespace, POD, TASK)
    assert second["uid"] != first["uid"]
    phases.start()
    say(control_plane, namespace, second, TASK, 0.3)
    st = eventually(running_at(admin, namespace, 30), 30,
                    f"the second pod's 30 %: the task runs again\n{w.tail()}\n"
                    f"{status(admin, namespace, TASK).get('conditions')}")
    assert st["roster"]["replaced"] == 1 and st["roster"]["reporting"] == 1
    assert "podFailed" not in st["roster"]
    shown = cli(control_plane, "state", TASK, "-n", namespace)
    assert shown.returncode == 0, shown.stderr
    assert "replaced" in shown.stdout and "failed (pod)" not in shown.stdout, shown.stdout
    landed = len(phases.seen)

    say(control_plane, namespace, second, TASK, 0.6)
    eventually(running_at(admin, namespace, 60), 30, f"the second pod's 60 %\n{w.tail()}")
    say(control_plane, namespace, second, TASK, 1.0, final=True)
    st = eventually(lambda: (s := status(admin, namespace, TASK)).get("phase") == "Succeeded"
                    and s, 30, f"the second pod's final: Succeeded\n{w.tail()}")
    seen = phases.stop()
    # From the second pod's first report on, never Failed.
    after = seen[max(0, landed - 1):]
    assert after and all(phase != "Failed" for phase, _ in after), after
    assert st["progress"]["percent"] == 100
    assert conditions(st)["Completed"]["reason"] == "Succeeded"
    # Both pods' ends stay told: the first pod's deletion, by its uid.
    (outcome,) = st["podOutcomes"]
    assert (outcome["uid"], outcome["reason"]) == (first["uid"], "Deleted")
    (worker,) = st["workers"]
    assert worker["final"] is True and worker["fraction"] == 1.0
    watched = cli(control_plane, "watch", TASK, "-n", namespace)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "Traceback" not in w.log.read_text()
