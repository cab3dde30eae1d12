"""`tidings state` and `tidings watch` against the real control plane: both sources (the
TaskFeedback status and the folded events), every error class, and hostile text."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.support_cli import (
    HOSTILE,
    assert_harmless,
    closed_port_kubeconfig,
    emit,
    grant,
    invoke,
    write_status,
)
from tests.cluster.support_watcher import unjudged
from tests.support import expanded, only_here
from tidings.schemas import (
    DeckReady,
    LogLink,
    Progress,
    SpanSummary,
    TaskRef,
    fold_all,
    parse_event,
)
from tidings.schemas.status.encoder import to_status
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster


def _facts(admin: Any, ns: str, task: str) -> list[dict[str, Any]]:
    t = datetime.now(UTC).timestamp()
    payloads = [
        LogLink(name="wandb", url="https://wandb.ai/team/run-1"),
        DeckReady(name="report", uri="s3://bucket/deck.html"),
        SpanSummary(name="epoch", count=3, total_s=12.5, min_s=3.5, max_s=5.0,
                    first_start=t - 20, last_end=t - 5),
        Progress(fraction=0.4, message="epoch 2 of 5"),
    ]
    return [emit(admin, ns, task, p, seq) for seq, p in enumerate(payloads)]


def test_state_folds_the_events_when_no_watcher_runs(control_plane: ControlPlane, admin: Any,
                                                     namespace: str) -> None:
    _facts(admin, namespace, "train-1")
    res = invoke(control_plane, "state", "train-1", "-n", namespace)
    assert res.exit_code == 0, res.output
    for text in ("train-1", "events (folded locally", "40.0%", "epoch 2 of 5", "wandb",
                 "https://wandb.ai/team/run-1", "report", "s3://bucket/deck.html", "epoch",
                 "12.50s", "worker-0", "4 events applied"):
        assert text in res.stdout, text

    data = json.loads(invoke(control_plane, "state", "train-1", "-n", namespace,
                             "-o", "json").stdout)
    assert data["source"] == "events"
    assert data["status"]["links"]["wandb"]["url"] == "https://wandb.ai/team/run-1"
    assert data["status"]["spans"]["epoch"]["count"] == 3
    assert data["status"]["phase"] == "Running" and data["status"]["progress"]["percent"] == 40
    same = yaml.safe_load(invoke(control_plane, "state", "train-1", "-n", namespace,
                                 "-o", "yaml").stdout)
    # (each run judges silence at its own time: only health's evaluatedAt may differ)
    assert {**same, "status": unjudged(same["status"])} == \
        {**data, "status": unjudged(data["status"])}
    assert same["status"]["health"]["summary"] == data["status"]["health"]["summary"]


def test_state_prefers_the_taskfeedback_status(control_plane: ControlPlane, admin: Any,
                                               namespace: str, crd: str) -> None:
    bodies = _facts(admin, namespace, "train-2")
    ref = TaskRef(namespace, "train-2")
    # The watcher would write exactly the fold of those events, plus one more link.
    state = fold_all(ref, [parse_event(b) for b in bodies])  # type: ignore[misc]
    status = expanded(to_status(state))  # its entries as objects, to add one
    status["links"]["from-watcher"] = {"url": "https://example.com/w", "at":
                                       status["links"]["wandb"]["at"], "events": 1}
    write_status(control_plane, namespace, "train-2", status)

    data = json.loads(invoke(control_plane, "state", "train-2", "-n", namespace,
                             "-o", "json").stdout)
    assert data["source"] == "TaskFeedback"
    assert set(data["status"]["links"]) == {"from-watcher", "wandb"}
    res = invoke(control_plane, "state", "train-2", "-n", namespace)
    assert "TaskFeedback status" in res.stdout and "from-watcher" in res.stdout

    # --from-events ignores the status and folds the events: the same fold the watcher runs.
    ev = json.loads(invoke(control_plane, "state", "train-2", "-n", namespace, "-o", "json",
                           "--from-events").stdout)
    assert ev["source"] == "events"
    assert set(ev["status"]["links"]) == {"wandb"}
    assert ev["status"]["spans"] == expanded(to_status(state))["spans"]


def test_state_finds_the_namespace_with_A(control_plane: ControlPlane, admin: Any,
                                          namespace: str) -> None:
    task = only_here("only-here", namespace)  # (-A: a rerun's task is another namespace's)
    emit(admin, namespace, task, Progress(fraction=1.0, final=True), 0)
    data = json.loads(invoke(control_plane, "state", task, "-A", "-o", "json").stdout)
    assert data["task"] == {"namespace": namespace, "name": task}
    assert data["status"]["phase"] == "Succeeded"


def test_hostile_notes_print_harmlessly(control_plane: ControlPlane, admin: Any,
                                        namespace: str, crd: str) -> None:
    # A hand-made note (what a compromised workload could send), bypassing the emitter.
    emit(admin, namespace, "evil", Progress(fraction=0.5), 0,
         note={"v": 1, "t": "Progress", "i": "inst-1", "s": 0, "fraction": 0.5,
               "message": HOSTILE})
    emit(admin, namespace, "evil", LogLink(name="x", url="https://example.com/x"), 1,
         note={"v": 1, "t": "LogLink", "i": "inst-1", "s": 1, "name": HOSTILE[:60],
               "url": "https://example.com/x"})
    for fmt in ("table", "json", "yaml"):
        res = invoke(control_plane, "state", "evil", "-n", namespace, "-o", fmt)
        assert res.exit_code == 0, res.output
        assert_harmless(res.output)
        assert "pwned-title" not in res.output  # the OSC payload is dropped whole
        assert "okredlink end" in res.output  # the text survives, the sequences do not

    # A status written by someone other than the watcher is not trusted either.
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    write_status(control_plane, namespace, "evil-cr", {
        "schemaVersion": 2, "phase": "Running",
        "workers": [{"pod": "w-0", "fraction": 0.2, "message": HOSTILE,
                     "at": f"{ts} inst-1 0", "events": 1}],
        "links": {"x\x1b[2Jy": {"url": "https://e.com/\x1b]0;t\x07", "at": f"{ts} i 1",
                                "events": 1}},
        "pods": [{"name": "p\x1b[31m", "uid": "u\x07", "events": 1}],
    })
    for fmt in ("table", "json", "yaml"):
        res = invoke(control_plane, "state", "evil-cr", "-n", namespace, "-o", fmt)
        assert res.exit_code == 0, res.output
        assert "TaskFeedback" in res.output
        assert_harmless(res.output)


def test_state_errors_are_one_line_with_distinct_codes(control_plane: ControlPlane,
                                                       admin: Any, namespace: str,
                                                       tmp_path: Path) -> None:
    emit(admin, namespace, "t", Progress(fraction=0.1), 0)

    res = invoke(control_plane, "state", "missing", "-n", namespace)
    assert res.exit_code == 5
    assert res.stderr == f"error: not found: task 'missing' in namespace {namespace} " \
        "(no TaskFeedback and no events)\n"

    res = invoke(control_plane, "state", "t", "-n", namespace, user="alice")
    assert res.exit_code == 4
    assert res.stderr.startswith(
        f"error: forbidden: cannot list events.events.k8s.io in namespace {namespace}")
    assert res.stderr.count("\n") == 1

    res = invoke(control_plane, "state", "bad,name=x", "-n", namespace)
    assert res.exit_code == 2 and res.stderr.startswith("error: invalid input: task ")
    res = invoke(control_plane, "state", "t", "-n", namespace, "-o", "xml")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "xml" in res.stderr
    res = invoke(control_plane, "state", "t", "-n", "Not_A_Namespace")
    assert res.exit_code == 2 and "namespace" in res.stderr
    res = invoke(control_plane, "state", "t", "-n", namespace, "--context", "nope")
    assert res.exit_code == 2 and "context 'nope'" in res.stderr

    closed = closed_port_kubeconfig(control_plane, tmp_path)
    from typer.testing import CliRunner

    from tidings.cli.main import app

    res = CliRunner().invoke(app, ["state", "t", "-n", namespace, "--kubeconfig", str(closed)])
    assert res.exit_code == 3
    assert res.stderr.startswith("error: cannot reach the cluster at https://127.0.0.1:")
    assert "connection refused" in res.stderr and res.stderr.count("\n") == 1
    for r in (res,):
        assert "Traceback" not in r.output


def test_state_with_just_enough_rights(control_plane: ControlPlane, admin: Any,
                                       namespace: str) -> None:
    """bob may list events and get pods (to verify their senders, as the watcher does) but
    not read TaskFeedbacks: state still works from the events. Without pods it says why."""
    emit(admin, namespace, "t", Progress(fraction=0.3, message="bob sees this"), 0)
    grant(control_plane, namespace, "bob",
          [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]}])
    from tests.support import eventually

    res = eventually(lambda: (r := invoke(control_plane, "state", "t", "-n", namespace,
                                          user="bob")).exit_code == 4 and r,
                     what="bob's RBAC to apply")
    assert res.stderr == (f"error: forbidden: cannot get pods in namespace {namespace} (needed "
                          "to verify the senders of the task's events)\n")
    grant(control_plane, namespace, "bob",
          [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
           {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    res = eventually(lambda: (r := invoke(control_plane, "state", "t", "-n", namespace,
                                          user="bob")).exit_code == 0 and r,
                     what="bob's pod grant to apply")
    assert "bob sees this" in res.stdout


def test_watch_follows_until_the_task_completes(control_plane: ControlPlane, admin: Any,
                                                namespace: str, proc_factory: Any) -> None:
    emit(admin, namespace, "live", Progress(fraction=0.1, message="starting"), 0)
    p = proc_factory("watch", "live", "-n", namespace)
    p.wait_for(lambda out: any("starting" in line for line in out), 30, "the first state")
    base = datetime.now(UTC)
    for seq, frac in enumerate((0.5, 0.9), start=1):
        emit(admin, namespace, "live", Progress(fraction=frac, message=f"at {frac}"), seq,
             when=base + timedelta(milliseconds=seq))
    emit(admin, namespace, "live", Progress(fraction=1.0, message="all done", final=True), 3,
         when=base + timedelta(seconds=1))
    assert p.proc.wait(30) == 0, p.err
    p.wait_for(lambda out: any("Phase" in line and "Succeeded" in line for line in out), 10,
               "the final view")
    changes = [line for line in p.out if re.match(rf"\d\d:\d\d:\d\d {namespace}/live ", line)]
    assert any("at 0.5" in line for line in changes[1:-1]), changes  # seen live
    assert changes[-1].endswith("succeeded") and "all done" in changes[-1]


def test_watch_wait_follows_a_task_that_has_not_started(control_plane: ControlPlane,
                                                       admin: Any, namespace: str,
                                                       proc_factory: Any) -> None:
    p = proc_factory("watch", "later", "-n", namespace, "--wait")
    p.wait_for(lambda out: any(f"{namespace}/later" in line for line in out), 30,
               "the empty first view")
    assert p.proc.poll() is None  # waiting, not "not found"
    emit(admin, namespace, "later", Progress(fraction=1.0, message="done", final=True), 0)
    assert p.proc.wait(30) == 0, p.err
    assert any("done" in line for line in p.out)


def test_watch_errors(control_plane: ControlPlane, namespace: str) -> None:
    res = invoke(control_plane, "watch", "nothing-here", "-n", namespace)
    assert res.exit_code == 5 and res.stderr.startswith("error: not found: task")
    res = invoke(control_plane, "watch", "t", "-n", namespace, user="alice")
    assert res.exit_code == 4 and "forbidden: cannot list events" in res.stderr


def test_watch_follows_the_taskfeedback_status(control_plane: ControlPlane, admin: Any,
                                               namespace: str, crd: str,
                                               proc_factory: Any) -> None:
    ref = TaskRef(namespace, "cr-live")
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def status(fraction: float, message: str, final: bool) -> dict[str, Any]:
        st = to_status(fold_all(ref, []))
        st["workers"] = [{"pod": "w-0", "fraction": fraction, "message": message,
                          "final": final, "at": f"{ts} inst-1 {int(fraction * 10)}",
                          "events": 1}]
        return st

    write_status(control_plane, namespace, "cr-live", status(0.2, "from the watcher", False))
    p = proc_factory("watch", "cr-live", "-n", namespace)
    p.wait_for(lambda out: any("from the watcher" in line for line in out), 30, "first state")
    write_status(control_plane, namespace, "cr-live", status(1.0, "watcher says done", True))
    assert p.proc.wait(30) == 0, p.err
    p.wait_for(lambda out: any("TaskFeedback status" in line for line in out), 10, "the view")
    assert any("watcher says done" in line and line.endswith("succeeded") for line in p.out)


def test_the_namespace_defaults_to_the_contexts(control_plane: ControlPlane, admin: Any,
                                                namespace: str, tmp_path: Path) -> None:
    emit(admin, namespace, "ctx-task", Progress(fraction=0.7, message="found via context"), 0)
    cfg = yaml.safe_load(control_plane.kubeconfig("admin").read_text())
    for c in cfg["contexts"]:
        c["context"]["namespace"] = namespace
    path = tmp_path / "ns.yaml"
    path.write_text(yaml.safe_dump(cfg))
    from typer.testing import CliRunner

    from tidings.cli.main import app

    res = CliRunner().invoke(app, ["state", "ctx-task", "--kubeconfig", str(path)])
    assert res.exit_code == 0, res.output
    assert "found via context" in res.stdout


def test_watch_ends_only_once_the_windows_before_the_final_are_in(
        control_plane: ControlPlane, admin: Any, namespace: str, proc_factory: Any) -> None:
    """The final arrives before a span window its emitter sent earlier (seq 1 < 2): watch
    keeps following until that window is folded, so its last view has the span."""
    t = datetime.now(UTC).timestamp()
    emit(admin, namespace, "late-span", Progress(fraction=0.5, message="half"), 0)
    emit(admin, namespace, "late-span", Progress(fraction=1.0, message="done", final=True), 2)
    p = proc_factory("watch", "late-span", "-n", namespace, "--grace", "120")
    p.wait_for(lambda out: any("done" in line and "succeeded" in line for line in out), 30,
               "the final")
    assert p.proc.poll() is None  # over, but a window is missing: still following
    emit(admin, namespace, "late-span", SpanSummary(
        name="evaluate", count=3, total_s=0.151, min_s=0.05, max_s=0.051, first_start=t - 2,
        last_end=t - 1), 1)
    assert p.proc.wait(30) == 0, p.err
    p.wait_for(lambda out: any("evaluate" in line for line in out), 10, "the span in the view")
