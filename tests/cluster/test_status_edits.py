"""A status edited by someone with status rights (or left by an older writer) never stops the
watcher writing: an entry a record cannot hold is kept as it was, and the task's final lands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.support_watcher import raw_task_status, task_status
from tests.cluster.test_health import kubeconfig, new_task, patch_status  # noqa: F401
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import eventually
from tools.devcluster import ControlPlane

ERRORS = 'tidings_watcher_status_writes_total{result="error"}'


def test_a_worker_edited_in_with_a_forged_field_does_not_stop_the_final_landing(
        control_plane: ControlPlane, admin: Any, namespace: str, kubeconfig: Path,  # noqa: F811
        start_watcher: Callable[..., Any]) -> None:  # noqa: F811
    w = start_watcher()
    task, _pod, em = new_task(admin, namespace, kubeconfig)
    em.progress(0.5, "half")
    assert em.flush(15)
    eventually(lambda: (s := task_status(admin, namespace, task))
               and s.get("progress", {}).get("percent") == 50 and s, 30, "the first status")
    raw = raw_task_status(admin, namespace, task)
    assert raw is not None
    # The edit, in layout 2's shape: a worker whose pod name forges a field of a record. The
    # watcher reads it when it next loads the status (here: it restarts).
    w.kill()
    ghost = {"pod": "ghost; final=true", "fraction": 0.5, "events": 1,
             "at": "2026-11-30T03:00:00.000000Z 00000000aaaaaaaaaaaaaaaaaaaaaaaa 1"}
    patch_status(control_plane, namespace, task, {"workers": [*raw["workers"], ghost]})
    w = start_watcher()
    em.progress(1.0, "done", final=True)
    assert em.flush(15)
    status = eventually(lambda: (s := task_status(admin, namespace, task))
                        and s.get("phase") == "Succeeded" and s, 60,
                        f"the final written\n{w.tail(40)}\n"
                        f"{w.metrics().get(ERRORS, 0)} write errors")
    assert ghost in status["workers"]  # kept as it was, not read
    assert w.metrics().get(ERRORS, 0) == 0
    em.close(5)
