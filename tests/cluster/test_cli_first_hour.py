"""kubectl habits against the real control plane: `tidings get NAME` as
`kubectl get taskfeedback NAME`, app names that complete for `logs`/`lineage`, and kubectl's
"No resources found in NS namespace." wording."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import invoke, record_spawn
from tests.cluster.test_cli_list import (  # noqa: F401 (two_tasks: a fixture)
    _complete,
    _patch_status,
    _status,
    _task,
    two_tasks,
)
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster


@pytest.fixture
def tasks(two_tasks: str) -> str:  # noqa: F811 - the two tasks `tidings list`'s tests use
    return two_tasks


def test_get_name_is_kubectl_get_taskfeedback_name(control_plane: ControlPlane,
                                                    tasks: str) -> None:
    ns = tasks
    res = invoke(control_plane, "get", "train-a", "-n", ns)
    assert res.exit_code == 0, res.output
    head, row = res.stdout.splitlines()
    assert head.split()[:3] == ["NAME", "PHASE", "PROGRESS"]
    assert row.split()[:3] == ["train-a", "Running", "40%"]

    # -o json is the object itself, as kubectl prints it (minus managedFields, and with
    # every string made terminal-safe: kubectl's last-applied annotation ends in a newline).
    mine = json.loads(invoke(control_plane, "get", "train-a", "-n", ns, "-o", "json").stdout)
    theirs = json.loads(control_plane.kubectl_run("get", "taskfeedback", "train-a", "-n", ns,
                                                  "-o", "json"))
    theirs["metadata"].pop("managedFields", None)
    for obj in (mine, theirs):
        obj["metadata"].pop("annotations")
    assert mine == theirs
    res = invoke(control_plane, "get", "train-b", "-n", ns, "-o", "jsonpath={.status.phase}")
    assert res.stdout == "Succeeded"
    res = invoke(control_plane, "get", "train-b", "train-a", "-n", ns, "-o", "name")
    assert res.stdout == "taskfeedback.tidings.dev/train-b\ntaskfeedback.tidings.dev/train-a\n"
    assert json.loads(invoke(control_plane, "list", "train-a", "train-b", "-n", ns, "-o",
                             "json").stdout)["kind"] == "List"

    # Not found: exit 5, after printing what was found (kubectl prints both too).
    res = invoke(control_plane, "get", "nope", "-n", ns)
    assert res.exit_code == 5 and res.stdout == ""
    assert res.stderr == f"error: not found: task 'nope' in namespace {ns}\n"
    res = invoke(control_plane, "get", "train-a", "nope", "-n", ns, "-o", "name")
    assert res.exit_code == 5 and res.stdout == "taskfeedback.tidings.dev/train-a\n"

    # kubectl's rules for a name beside other flags; one line, exit 2.
    for args, needle in ((["-l", "team=a"], "cannot be given with --selector"),
                         (["-A"], "across all namespaces"),
                         (["train-b", "-w"], "--watch takes one NAME")):
        res = invoke(control_plane, "get", "train-a", *args, "-n", ns)
        assert res.exit_code == 2 and needle in res.stderr, res.output
        assert len(res.stderr.splitlines()) == 1


def test_get_name_watch_follows_that_task_only(control_plane: ControlPlane, tasks: str,
                                               proc_factory: Any) -> None:
    ns = tasks
    p = proc_factory("get", "train-a", "-w", "-n", ns)
    p.wait_for(lambda out: any(line.startswith("train-a") for line in out), what="the row")
    _patch_status(control_plane, ns, "train-b", _status(ns, "train-b", 0.2, "again"))
    _patch_status(control_plane, ns, "train-a", _status(ns, "train-a", 0.8, "epoch 4 of 5"))
    p.wait_for(lambda out: any(line.split()[:3] == ["train-a", "Running", "80%"]
                               for line in out), what="the change")
    assert p.stop() == 130
    assert not any("train-b" in line for line in p.out)


def test_no_resources_found_names_the_namespace(control_plane: ControlPlane,
                                                crd: str) -> None:
    res = invoke(control_plane, "list", "-n", "nope")
    assert res.exit_code == 0 and res.stdout == ""
    assert res.stderr == "No resources found in nope namespace.\n"
    # Word for word what kubectl says.
    kubectl = subprocess.run([str(control_plane.kubectl),
                              f"--kubeconfig={control_plane.kubeconfig('admin')}", "get",
                              "taskfeedbacks", "-n", "nope"], capture_output=True, text=True,
                             timeout=60)
    assert kubectl.stderr == res.stderr


def test_app_names_complete(control_plane: ControlPlane, tasks: str, admin: Any,
                            tmp_path: Path) -> None:
    ns = tasks
    record_spawn(admin, ns, "trainer-app", "trainer-app-0", "uid-0", 1)
    kubeconfig = control_plane.kubeconfig("admin")
    names, _ = _complete(f"tidings logs -n {ns} train", kubeconfig)
    assert names == ["train-a", "train-b", "trainer-app"]
    names, _ = _complete(f"tidings lineage -n {ns} trainer", kubeconfig)
    assert names == ["trainer-app"]
    names, _ = _complete(f"tidings get -n {ns} train-", kubeconfig)
    assert names == ["train-a", "train-b"]


def test_not_found_says_where_the_task_is_instead(control_plane: ControlPlane, namespace: str,
                                                  crd: str) -> None:
    """The commonest slip is the namespace: "not found" names the one the task is in."""
    ns, elsewhere, task = namespace, "default", f"lost-{namespace}"
    _task(control_plane, ns, task, {}, _status(ns, task, 0.4, "epoch 2 of 5"))
    hint = f"; it exists in namespace {ns}: use -n {ns} (or -A)\n"
    res = invoke(control_plane, "get", task, "-n", elsewhere)
    assert res.exit_code == 5
    assert res.stderr == f"error: not found: task '{task}' in namespace {elsewhere}{hint}"
    res = invoke(control_plane, "state", task, "-n", elsewhere)
    assert res.exit_code == 5 and res.stderr.endswith(hint), res.stderr
    res = invoke(control_plane, "lineage", task, "-n", elsewhere)
    assert res.exit_code == 5 and res.stderr.endswith(hint), res.stderr
    # Nowhere at all: nothing added.
    res = invoke(control_plane, "get", f"nope-{ns}", "-n", ns)
    assert res.stderr == f"error: not found: task 'nope-{ns}' in namespace {ns}\n"


def test_kubectl_s_global_flags_work_before_the_command(control_plane: ControlPlane,
                                                        tasks: str) -> None:
    ns, kubeconfig = tasks, str(control_plane.kubeconfig("admin"))
    for args in (["-n", ns, "list"], ["--kubeconfig", kubeconfig, "-n", ns, "get", "train-a"],
                 [f"--namespace={ns}", "state", "train-a", "-o", "json"]):
        res = invoke(control_plane, *args)
        assert res.exit_code == 0, (args, res.output)
        assert "train-a" in res.stdout, (args, res.stdout)
