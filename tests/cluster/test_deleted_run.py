"""A TaskFeedback a user deletes stays deleted: its run's facts (still in the API as bus
events for the event TTL, most naming no TaskFeedback uid) do not bring it back when the
watcher restarts and lists them again. A deletion is a decision; a new run of the same name
after it makes a new TaskFeedback, of its own facts alone."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.cluster.support_watcher import task_status
from tests.cluster.test_health import emitter, kubeconfig, pod_for  # noqa: F401
from tests.cluster.test_pod_truth import idle
from tests.cluster.test_watcher import crd, metric, start_watcher, watchers  # noqa: F401
from tests.support import eventually
from tidings._compat import UTC
from tidings.schemas.wire.times import parse_time
from tools.devcluster import ControlPlane

GROUP, VERSION, PLURAL = "tidings.dev", "v1alpha1", "taskfeedbacks"
RECORD = "tidings-watcher-deletions"  # the default Lease's name, "-deletions"


def recorded(admin: Any, namespace: str, task: str, record: str = RECORD) -> int | None:
    """The second the watcher's durable record says ``task`` was deleted in (the record is
    kept beside the Lease: here, in the test's namespace)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        cm = client.CoreV1Api(admin).read_namespaced_config_map(record, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    doc = json.loads((cm.data or {}).get("deletions.json") or "{}")
    at = doc.get("deleted", {}).get(namespace, {}).get(task)
    return at if isinstance(at, int) else None


def run(admin: Any, namespace: str, kubeconfig: Path, task: str, i: int, link: str,  # noqa: F811
        w: Any) -> dict[str, Any]:
    """One run of ``task``: a pod of its own logs ``link`` and succeeds; its status."""
    pod = pod_for(admin, namespace, task, i)
    em = emitter(kubeconfig, namespace, task, pod)
    em.log_link("wandb", link)
    em.progress(1.0, "done", final=True)
    assert em.flush(15)
    em.close(5)
    return eventually(lambda: (s := task_status(admin, namespace, task) or {}).get("phase")
                      == "Succeeded" and link in json.dumps(s) and s, 30,
                      f"the run written\n{w.tail()}")


def delete(admin: Any, namespace: str, task: str, w: Any, record: str = RECORD) -> int:
    """Delete the TaskFeedback as a user would; the second the watcher recorded it in."""
    from kubernetes import client

    client.CustomObjectsApi(admin).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, task)
    eventually(lambda: task_status(admin, namespace, task) is None, 30, "deleted")
    at = eventually(lambda: recorded(admin, namespace, task, record), 30,
                    f"the deletion recorded\n{w.tail()}")
    assert isinstance(at, int)
    return at


def test_a_taskfeedback_deleted_by_a_user_does_not_come_back_after_a_restart(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,  # noqa: F811
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    here = ("--lease-namespace", namespace)
    w = start_watcher(*here)
    task = f"train-{uuid.uuid4().hex[:6]}"
    run(admin, namespace, kubeconfig, task, 0, "https://wandb.example/old-run", w)
    delete(admin, namespace, task, w)
    w.kill()
    again = start_watcher(*here)
    eventually(lambda: idle(again), 60, f"the restarted watcher idle\n{again.tail()}")
    back = task_status(admin, namespace, task)
    assert back is None, (back or {}).get("links")
    assert metric(again, 'tidings_watcher_events_skipped_total{cause="deleted_run"}') >= 2


def test_a_new_run_after_the_deletion_makes_a_new_taskfeedback_of_its_own_facts(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,  # noqa: F811
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """The deleted run stays gone, across restarts too; the new run of the same name is
    folded in full into a TaskFeedback of its own: no old link, its firstEventTime after
    the deletion."""
    here = ("--lease-namespace", namespace)
    w = start_watcher(*here)
    task = f"train-{uuid.uuid4().hex[:6]}"
    run(admin, namespace, kubeconfig, task, 0, "https://wandb.example/old-run", w)
    at = delete(admin, namespace, task, w)
    w.kill()
    w = start_watcher(*here)
    eventually(lambda: idle(w), 60, f"the restarted watcher idle\n{w.tail()}")
    assert task_status(admin, namespace, task) is None
    # A new run starts after the deletion's second (creation times have whole seconds: an
    # event of the deletion's own second is taken as the deleted run's).
    eventually(lambda: time.time() >= at + 1.2, 5, "the deletion's second over")
    new = run(admin, namespace, kubeconfig, task, 1, "https://wandb.example/new-run", w)
    assert "old-run" not in json.dumps(new), new.get("links")
    first = parse_time(new["firstEventTime"])
    assert first is not None and first >= datetime.fromtimestamp(at, UTC), (first, at)
    # Another restart lists both runs' events again: the new object keeps the new run alone.
    w.kill()
    w = start_watcher(*here)
    eventually(lambda: idle(w), 60, f"the restarted watcher idle\n{w.tail()}")
    again = task_status(admin, namespace, task)
    assert again is not None and "old-run" not in json.dumps(again), again.get("links")
    assert again["firstEventTime"] == new["firstEventTime"]


def test_the_deletion_survives_a_handover(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,  # noqa: F811
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    """Two replicas: the leader sees the deletion and dies; the standby that takes over reads
    the record before it lists the bus, and the deleted run stays gone."""
    lease = ["--lease-namespace", namespace, "--lease-name", "h", "--lease-duration", "4",
             "--renew-deadline", "3", "--retry-period", "0.5"]
    a = start_watcher(*lease, leader=True, ready=False)
    assert a.wait_leading(20), a.tail()
    b = start_watcher(*lease, leader=True, ready=False)
    task = f"train-{uuid.uuid4().hex[:6]}"
    run(admin, namespace, kubeconfig, task, 0, "https://wandb.example/old-run", a)
    delete(admin, namespace, task, a, record="h-deletions")
    a.kill()
    assert b.wait_leading(15), b.tail()
    eventually(lambda: idle(b), 60, f"the new leader idle\n{b.tail()}")
    back = task_status(admin, namespace, task)
    assert back is None, (back or {}).get("links")
    assert metric(b, 'tidings_watcher_events_skipped_total{cause="deleted_run"}') >= 2
