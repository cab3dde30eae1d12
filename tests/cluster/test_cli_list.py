"""`tidings list` and the CLI surface against the real control plane: every -o form, -l, -A,
-w, --as impersonation against RBAC, --request-timeout, the missing-CRD message, piped output
that never wraps, and `kubectl tidings` through the built kubectl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.support_cli import (
    TIDINGS,
    grant,
    install_crd,
    invoke,
)
from tidings.schemas.status.encoder import to_status
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

URL = ("https://grafana.example.com/d/abcdef/very-long-dashboard-name?orgId=1&var-namespace="
       "ml-team&var-pod=train-worker-0&from=now-6h&to=now&refresh=30s&var-extra=" + "x" * 60)


def _status(ns: str, task: str, fraction: float, message: str, final: bool = False
            ) -> dict[str, Any]:
    """The status a watcher would write for a link, a deck and progress (the real fold)."""
    from tidings.schemas import (
        DeckReady,
        LogLink,
        PodRef,
        Progress,
        TaskRef,
        build_event,
        fold_all,
        parse_event,
    )

    ref = TaskRef(ns, task)
    when = datetime(2026, 1, 1, tzinfo=UTC)
    payloads = [LogLink(name="grafana", url=URL), DeckReady(name="report", uri="s3://b/d.html"),
                Progress(fraction=fraction, message=message, final=final)]
    bodies = [build_event(task=ref, pod=PodRef(f"{task}-0", "uid-0", ns), payload=p,
                          instance="i", seq=n, time=when, sender_proof=False)
              for n, p in enumerate(payloads)]
    for b in bodies:
        b["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = to_status(fold_all(ref, [parse_event(b) for b in bodies]))
    return status


def _task(cp: ControlPlane, ns: str, name: str, labels: dict[str, str],
          status: dict[str, Any]) -> None:
    obj = {"apiVersion": "tidings.dev/v1alpha1", "kind": "TaskFeedback",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"task": name}}
    cp.kubectl_run("apply", "-f", "-", input_text=json.dumps(obj))
    _patch_status(cp, ns, name, status)


def _patch_status(cp: ControlPlane, ns: str, name: str, status: dict[str, Any]) -> None:
    cp.kubectl_run("patch", "taskfeedback", name, "-n", ns, "--subresource=status",
                   "--type=merge", "-p", json.dumps({"status": status}))


@pytest.fixture
def two_tasks(control_plane: ControlPlane, namespace: str, crd: str) -> str:
    _task(control_plane, namespace, "train-a", {"team": "a"},
          _status(namespace, "train-a", 0.4, "epoch 2 of 5"))
    _task(control_plane, namespace, "train-b", {"team": "b"},
          _status(namespace, "train-b", 1.0, "done", final=True))
    return namespace


def test_list_table_wide_name_json_yaml_jsonpath(control_plane: ControlPlane,
                                                 two_tasks: str) -> None:
    ns = two_tasks
    res = invoke(control_plane, "list", "-n", ns)
    assert res.exit_code == 0, res.output
    head, a, b = res.stdout.splitlines()
    assert head.split() == ["NAME", "PHASE", "PROGRESS", "REASON", "LINKS", "DECK", "LAST", "EVENT",
                            "AGE"]
    assert a.split()[:6] == ["train-a", "Running", "40%", "<none>", "1", "report"]
    assert b.split()[:3] == ["train-b", "Succeeded", "100%"]
    assert a.split()[6].endswith("d")  # last event 2026-01-01: days ago, kubectl's age

    wide = invoke(control_plane, "get", "-n", ns, "-o", "wide").stdout
    assert "MESSAGE" in wide.splitlines()[0] and "epoch 2 of 5" in wide

    names = invoke(control_plane, "list", "-n", ns, "-o", "name").stdout
    assert names == "taskfeedback.tidings.dev/train-a\ntaskfeedback.tidings.dev/train-b\n"

    data = json.loads(invoke(control_plane, "list", "-n", ns, "-o", "json").stdout)
    assert data["kind"] == "List" and [i["metadata"]["name"] for i in data["items"]] == \
        ["train-a", "train-b"]
    assert data["items"][0]["status"]["progress"]["percent"] == 40
    assert "managedFields" not in data["items"][0]["metadata"]
    assert yaml.safe_load(invoke(control_plane, "list", "-n", ns, "-o", "yaml").stdout) == data

    res = invoke(control_plane, "list", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}")
    assert res.exit_code == 0 and res.stdout == "train-a train-b"
    res = invoke(control_plane, "list", "-n", ns, "-o",
                 'jsonpath={range .items[?(@.status.phase=="Succeeded")]}'
                 '{.metadata.name}={.status.progress.percent}{"\\n"}{end}')
    assert res.stdout == "train-b=100\n", res.output

    for bad in ("jsonpath={.items[*}", "jsonpath=", "xml", "table=x"):
        res = invoke(control_plane, "list", "-n", ns, "-o", bad)
        assert res.exit_code == 2 and res.stderr.startswith("error: invalid input"), bad
        assert len(res.stderr.splitlines()) == 1


def test_list_selector_and_all_namespaces(control_plane: ControlPlane, two_tasks: str) -> None:
    ns = two_tasks
    res = invoke(control_plane, "list", "-n", ns, "-l", "team=b", "-o", "name")
    assert res.stdout == "taskfeedback.tidings.dev/train-b\n", res.output
    res = invoke(control_plane, "list", "-n", ns, "-l", "team in (a,b),team!=a", "-o", "name")
    assert res.stdout == "taskfeedback.tidings.dev/train-b\n", res.output
    res = invoke(control_plane, "list", "-n", ns, "-l", "team=nobody")
    assert res.exit_code == 0 and res.stdout == "" and "No resources found" in res.stderr
    res = invoke(control_plane, "list", "-n", ns, "-l", "team==,=")
    assert res.exit_code == 2 and res.stderr.startswith("error: invalid input"), res.output

    res = invoke(control_plane, "list", "-A", "-l", "team")
    rows = [line.split() for line in res.stdout.splitlines()]
    assert rows[0][:2] == ["NAMESPACE", "NAME"]
    assert [ns, "train-a"] in [r[:2] for r in rows] and [ns, "train-b"] in [r[:2] for r in rows]


def test_list_watch_prints_each_change(control_plane: ControlPlane, two_tasks: str,
                                       proc_factory: Any) -> None:
    ns = two_tasks
    p = proc_factory("list", "-w", "-n", ns, "-l", "team=a")
    p.wait_for(lambda out: any(line.startswith("train-a") for line in out), what="the list")
    _patch_status(control_plane, ns, "train-a", _status(ns, "train-a", 0.8, "epoch 4 of 5"))
    p.wait_for(lambda out: any(line.split()[:3] == ["train-a", "Running", "80%"]
                               for line in out), what="the change")
    _task(control_plane, ns, "train-c", {"team": "b"}, _status(ns, "train-c", 0.1, "x"))
    assert p.stop() == 130
    assert not any("train-c" in line for line in p.out)  # -l holds for the watch too


def test_impersonation_meets_rbac(control_plane: ControlPlane, two_tasks: str) -> None:
    ns = two_tasks
    res = invoke(control_plane, "list", "-n", ns, "--as", "bob")
    assert res.exit_code == 4, res.output
    assert res.stderr == (f"error: forbidden: cannot list taskfeedbacks.tidings.dev in "
                          f"namespace {ns}\n")
    res = invoke(control_plane, "state", "train-a", "-n", ns, "--as", "bob")
    assert res.exit_code == 4 and len(res.stderr.splitlines()) == 1, res.output
    for command in ("lineage", "logs"):  # the app commands take the same flags
        res = invoke(control_plane, command, "train-a", "-n", ns, "--as", "bob",
                     "--request-timeout", "10s")
        assert res.exit_code == 4 and res.stderr.startswith("error: forbidden"), res.output
    # bob himself (his own kubeconfig) is refused impersonating admin.
    res = invoke(control_plane, "list", "-n", ns, "--as", "admin", user="bob")
    assert res.exit_code == 4 and res.stderr.startswith("error: forbidden"), res.output

    grant(control_plane, ns, "bob", [{"apiGroups": ["tidings.dev"],
                                      "resources": ["taskfeedbacks"], "verbs": ["list"]}])
    res = invoke(control_plane, "list", "-n", ns, "--as", "bob", "-o", "name")
    assert res.exit_code == 0 and "train-a" in res.stdout, res.output
    # A group alone grants what its members may do.
    res = invoke(control_plane, "list", "-n", ns, "--as", "carol", "--as-group",
                 "system:masters", "-o", "name")
    assert res.exit_code == 0 and "train-b" in res.stdout, res.output


def test_request_timeout(control_plane: ControlPlane, two_tasks: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Each request carries the timeout asked for, as urllib3 is given it (a total; for 0 the
    # default connect limit and no read limit): a list that merely succeeds would pass with
    # the flag parsed and dropped.
    import urllib3

    from tidings.cli.kube import REQUEST_TIMEOUT

    sent: list[str] = []
    urlopen = urllib3.HTTPConnectionPool.urlopen

    def spy(self: urllib3.HTTPConnectionPool, *args: Any, **kw: Any) -> Any:
        sent.append(repr(kw.get("timeout")))
        return urlopen(self, *args, **kw)

    monkeypatch.setattr(urllib3.HTTPConnectionPool, "urlopen", spy)
    for value, meant in (("0", urllib3.Timeout(connect=REQUEST_TIMEOUT[0], read=None)),
                         ("30", urllib3.Timeout(total=30.0)), ("30s", urllib3.Timeout(total=30.0)),
                         ("1m", urllib3.Timeout(total=60.0))):
        sent.clear()
        res = invoke(control_plane, "list", "-n", two_tasks, "-o", "name",
                     "--request-timeout", value)
        assert res.exit_code == 0 and "train-a" in res.stdout, (value, res.output)
        assert sent and set(sent) == {repr(meant)}, (value, sent)
    sent.clear()
    res = invoke(control_plane, "state", "train-a", "-n", two_tasks, "--request-timeout", "1m")
    assert res.exit_code == 0 and sent and set(sent) == {repr(urllib3.Timeout(total=60.0))}, (
        res.output, sent)
    for cmd in (["list"], ["state", "train-a"], ["watch", "train-a"], ["timeline", "train-a"],
                ["task", "create", "t", "--owner", "cm/x"]):
        res = invoke(control_plane, *cmd, "-n", two_tasks, "--request-timeout", "soon")
        assert res.exit_code == 2, (cmd, res.output)
        assert res.stderr.startswith("error: invalid input: --request-timeout 'soon'")


def test_piped_output_never_wraps(control_plane: ControlPlane, two_tasks: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR")}
    kc = str(control_plane.kubeconfig("admin"))

    def run(*args: str) -> list[str]:
        out = subprocess.run([TIDINGS, *args, "-n", two_tasks, "--kubeconfig", kc],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    # The long Grafana URL stays whole on one line (rich would fold it at 80 columns).
    assert [line for line in run("state", "train-a") if URL in line]
    # The list is a header and one line per task, however long its cells.
    wide = run("list", "-o", "wide")
    assert len(wide) == 3 and wide[1].startswith("train-a"), wide


def test_kubectl_tidings_plugin(control_plane: ControlPlane, two_tasks: str) -> None:
    bin_dir = os.environ.get("TIDINGS_BIN_DIR")
    kubectl = Path(bin_dir or "") / "kubectl"
    if not bin_dir or not kubectl.exists():
        pytest.skip("TIDINGS_BIN_DIR/kubectl is not built")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}"}
    out = subprocess.run([str(kubectl), "tidings", "list", "-n", two_tasks, "-o", "name",
                          "--kubeconfig", str(control_plane.kubeconfig("admin"))],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["taskfeedback.tidings.dev/train-a",
                                       "taskfeedback.tidings.dev/train-b"]
    usage = subprocess.run([str(kubectl), "tidings", "list", "--bogus"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert usage.returncode == 2 and "kubectl tidings list --help" in usage.stderr


def test_kubectl_describe_keeps_the_bookkeeping_to_one_line_and_tidings_describe_reads_in_order(
        control_plane: ControlPlane, two_tasks: str) -> None:
    """What docs/cli.md's "kubectl describe taskfeedback" says, against the real kubectl: its
    generic describer prints a custom resource's fields sorted by name (a CRD cannot change
    that), the fold's bookkeeping (the version vector `applied`, the roster's `marks`) is one
    line each, and `tidings describe` shows the same task in the order a person reads, with
    no bookkeeping."""
    ns = two_tasks
    # A task with many emitter instances (restarts, ranks): its bookkeeping still one line.
    from tidings.schemas import PodRef, Progress, TaskRef, build_event, fold_all, parse_event

    ref = TaskRef(ns, "wide")
    when = datetime(2026, 1, 1, tzinfo=UTC)
    events = [parse_event(build_event(
        task=ref, pod=PodRef(f"wide-{n}", f"uid-{n}", ns), instance=f"rank{n}", seq=0,
        payload=Progress(fraction=0.5, message="half"), time=when, sender_proof=False))
        for n in range(40)]
    _task(control_plane, ns, "wide", {}, to_status(fold_all(ref, events)))  # type: ignore[arg-type]

    for name in ("train-a", "wide"):
        out = control_plane.kubectl_run("describe", "taskfeedback", name, "-n", ns)
        lines = out.splitlines()
        status = lines[lines.index("Status:") + 1:]
        top = [line.split(":")[0].strip() for line in status
               if line.startswith("  ") and not line.startswith("   ")]
        obj = json.loads(control_plane.kubectl_run("get", "taskfeedback", name, "-n", ns,
                                                   "-o", "json"))
        # Go's sort.Strings, as Python's on ASCII; labels are the keys split at capitals
        assert [label.replace(" ", "").lower() for label in top] == \
            [key.lower() for key in sorted(obj["status"])], top
        assert top[0] == "Applied"  # so the version vector comes first
        applied = [n for n, line in enumerate(status) if line.startswith("  Applied:")]
        marks = [n for n, line in enumerate(status) if line.startswith("    Marks:")]
        assert len(applied) == 1 and len(marks) == 1, out
        for n in applied + marks:  # one line each: the next line is the next field
            assert status[n + 1].lstrip().split(":")[0][0].isupper(), out
            assert len(status[n + 1]) - len(status[n + 1].lstrip()) <= \
                len(status[n]) - len(status[n].lstrip()), out
        if name == "wide":
            assert status[applied[0]].count("rank") == 40 and len(status[applied[0]]) < 1024

    res = invoke(control_plane, "describe", "train-a", "-n", ns)
    assert res.exit_code == 0, res.output
    assert res.output == invoke(control_plane, "state", "train-a", "-n", ns).output
    labels = [line.split()[0] for line in res.stdout.splitlines()[:4]]
    assert labels == ["Task", "Source", "Progress", "Message"], res.stdout
    assert "Applied" not in res.stdout and "Marks" not in res.stdout


def test_missing_crd_is_named(control_plane: ControlPlane, namespace: str, crd: str) -> None:
    """Without the CRD, list and state say what to install, not 'not found'. (The CRD is
    deleted for this test and installed again before it ends.)"""
    from tidings.cli.kube import NO_CRD

    control_plane.kubectl_run("delete", "crd", crd, "--wait=true")
    try:
        res = invoke(control_plane, "list", "-n", namespace)
        assert res.exit_code == 5 and res.stderr == f"error: {NO_CRD}\n", res.output
        res = invoke(control_plane, "state", "nothing", "-n", namespace)
        assert res.exit_code == 5 and res.stderr.startswith(f"error: {NO_CRD}"), res.output
        res = invoke(control_plane, "task", "create", "t1", "--owner", "ns/" + namespace,
                     "-n", namespace)
        assert res.exit_code == 5 and NO_CRD in res.stderr, res.output
    finally:
        install_crd(control_plane)
    # With the CRD back, a missing object is "not found" again.
    res = invoke(control_plane, "state", "nothing", "-n", namespace)
    assert res.exit_code == 5 and res.stderr.startswith("error: not found: task"), res.output


def test_watch_jsonl_streams_one_object_per_change(control_plane: ControlPlane,
                                                   two_tasks: str, proc_factory: Any) -> None:
    ns = two_tasks
    p = proc_factory("watch", "train-a", "-n", ns, "-o", "jsonl", "--grace", "0")
    p.wait_for(lambda out: len(out) >= 1, what="the first object")
    _patch_status(control_plane, ns, "train-a", _status(ns, "train-a", 0.7, "epoch 3 of 5"))
    _patch_status(control_plane, ns, "train-a", _status(ns, "train-a", 1.0, "done", final=True))
    assert p.proc.wait(30) == 0, p.err
    objs = [json.loads(line) for line in p.out]  # every line is one JSON object
    percents = [o["status"]["progress"]["percent"] for o in objs]
    assert percents[0] == 40 and percents[-1] == 100 and objs[-1]["status"]["phase"] == \
        "Succeeded"
    assert all(o["task"] == {"namespace": ns, "name": "train-a"} for o in objs)
    res = invoke(control_plane, "watch", "train-a", "-n", ns, "-o", "json")
    assert res.exit_code == 2 and res.stderr.startswith("error: invalid input: --output")


def _complete(words: str, kubeconfig: Path) -> tuple[list[str], float]:
    """What bash completion offers for the last word of `words` (typer's protocol)."""
    import time

    env = {**os.environ, "_TIDINGS_COMPLETE": "complete_bash",
           "COMP_WORDS": f"{words}", "COMP_CWORD": str(len(words.split()) - 1),
           "KUBECONFIG": str(kubeconfig)}
    start = time.monotonic()
    out = subprocess.run([TIDINGS], capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return out.stdout.split(), time.monotonic() - start


def test_task_names_complete_quickly_and_fail_silently(control_plane: ControlPlane,
                                                       two_tasks: str, tmp_path: Path) -> None:
    from tests.cluster.support_cli import closed_port_kubeconfig

    admin = control_plane.kubeconfig("admin")
    names, _ = _complete(f"tidings state -n {two_tasks} train-", admin)
    assert names == ["train-a", "train-b"]
    names, _ = _complete(f"tidings timeline -n {two_tasks} train-b", admin)
    assert names == ["train-b"]
    # No cluster: nothing offered, nothing printed, well within the 2 s bound.
    names, took = _complete("tidings state tr", closed_port_kubeconfig(control_plane, tmp_path))
    assert names == [] and took < 5
    # bob may not list: nothing offered either.
    names, _ = _complete(f"tidings state -n {two_tasks} train-", control_plane.kubeconfig("bob"))
    assert names == []
