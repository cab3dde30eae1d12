"""`tidings logs`' PodView (cli/logtargets.py) against the real API server: one list of the
app's labelled pods answers the streams, and a pod that left the list is read once to say
why, so an impostor under the same name and label never passes for the streamed pod."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support import create_kwok_pod, eventually
from tidings.cli.kube import connect
from tidings.cli.logtargets import PodView, Target
from tidings.schemas import TASK_LABEL
from tools.devcluster import ControlPlane


def _view(control_plane: ControlPlane, namespace: str, app: str) -> PodView:
    return PodView(connect(str(control_plane.kubeconfig("admin")), None, namespace),
                   namespace, app)


def test_a_monitor_list_that_shows_the_pod_left_answers_without_another_list(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    a = create_kwok_pod(admin, namespace, "pv-a", labels={TASK_LABEL: "pv"})
    b = create_kwok_pod(admin, namespace, "pv-b", labels={TASK_LABEL: "pv"})
    view = _view(control_plane, namespace, "pv")
    started = time.monotonic()  # the streams of both pods are open from here
    assert set(view.refresh() or {}) == {a["uid"], b["uid"]} and view.lists == 1

    client.CoreV1Api(admin).patch_namespaced_pod(
        "pv-b", namespace, {"metadata": {"labels": {TASK_LABEL: None}}})
    eventually(lambda: b["uid"] not in (view.refresh() or {b["uid"]: ""}),
               what="the monitor's list without pv-b")
    lists = view.lists
    # pv-b's stream ends: the monitor's list (taken since it started) already explains it.
    assert view.check(Target("pv-b", b["uid"], "main"), since=started) == \
        ("pod no longer labelled tidings.dev/task=pv", "")
    assert view.lists == lists
    # pv-a's stream ends for no reason the list shows: one fresh list, pv-a is still ours.
    assert view.check(Target("pv-a", a["uid"], "main"), since=started)[0] == ""
    assert view.lists == lists + 1


def test_an_impostor_under_the_same_name_and_label_ends_the_stream_as_replaced(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    from kubernetes import client

    old = create_kwok_pod(admin, namespace, "pv-c", labels={TASK_LABEL: "pv2"})
    view = _view(control_plane, namespace, "pv2")
    started = time.monotonic()
    core = client.CoreV1Api(admin)
    core.delete_namespaced_pod("pv-c", namespace, grace_period_seconds=0)
    eventually(lambda: not [p for p in core.list_namespaced_pod(namespace).items
                            if p.metadata.uid == old["uid"]], what="deletion")
    new = create_kwok_pod(admin, namespace, "pv-c", labels={TASK_LABEL: "pv2"})
    assert new["uid"] != old["uid"]
    assert view.check(Target("pv-c", old["uid"], "main"), since=started) == \
        ("pod replaced", "")
    assert view.check(Target("pv-c", new["uid"], "main"), since=started)[0] == ""
    core.delete_namespaced_pod("pv-c", namespace, grace_period_seconds=0)
    eventually(lambda: view.check(Target("pv-c", new["uid"], "main"),
                                  since=time.monotonic())[0] == "pod gone", what="gone")


def test_a_running_pod_that_wrote_no_logs_is_not_said_to_be_not_running(
        control_plane: ControlPlane, admin: Any, namespace: str) -> None:
    from tests.cluster.support_cli import invoke

    create_kwok_pod(admin, namespace, "quiet-0", labels={TASK_LABEL: "quiet"})
    eventually(lambda: client.CoreV1Api(admin).read_namespaced_pod(
        "quiet-0", namespace).status.phase == "Running", 60, "the pod running")
    res = invoke(control_plane, "logs", "quiet", "-n", namespace)
    assert "not running" not in res.output, res.output
    assert "quiet-0" in res.output and "written none (pod Running)" in res.output, res.output
