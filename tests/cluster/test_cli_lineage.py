"""`tidings lineage` and `tidings logs` against the real control plane and kwok-served logs:
exactly the recorded pods (name AND uid), never a pod that merely shares the name prefix —
the Cornserve bug: logs streamed from pods that only shared a name prefix with the app's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import test_watcher as tw
from tests.cluster.support_cli import (
    assert_harmless,
    closed_port_kubeconfig,
    emit,
    grant,
    invoke,
    record_spawn,
)
from tests.cluster.support_watcher import WatcherProc, task_status
from tests.support import create_kwok_pod, cri_log_line, eventually, only_here, write_cri_log
from tidings.schemas import Progress
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster
TASK_LABEL = "tidings.dev/task"
# The watcher fixtures of test_watcher.py (a watcher process per test, killed at the end).
crd, kubeconfig, watchers, start_watcher = tw.crd, tw.kubeconfig, tw.watchers, tw.start_watcher


def _pod(admin: Any, ns: str, name: str, folder: Path, lines: list[str], **kw: Any
         ) -> dict[str, Any]:
    log = write_cri_log(folder / f"{name}.log", lines)
    pod = create_kwok_pod(admin, ns, name, log_file=log, **kw)
    pod["log"] = log
    return pod


def _running(admin: Any, ns: str, *names: str) -> None:
    from tests.support import pod_phase

    for n in names:
        eventually(lambda n=n: pod_phase(admin, ns, n) == "Running", what=f"{n} Running")


def _serving(admin: Any, ns: str, *names: str) -> None:
    """Running, and kwok serves the pod's logs (it may answer 400 for a moment after)."""
    from kubernetes import client

    def served(name: str) -> bool:
        try:
            client.CoreV1Api(admin).read_namespaced_pod_log(name, ns, container="main")
        except client.ApiException as err:
            if err.status != 400:
                raise
            return False
        return True

    _running(admin, ns, *names)
    for n in names:
        eventually(lambda n=n: served(n), what=f"{n}'s logs served")


def test_lineage_tree_shows_each_pod_and_what_became_of_it(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    app = only_here("mllm", namespace)  # (-A below: no other test's app of this name)
    mllm = {"labels": {TASK_LABEL: app}}  # a spawned pod confirms its lineage record
    enc = _pod(admin, namespace, "te-enc-0", tmp_path, ["e"], **mllm)
    llm = _pod(admin, namespace, "te-llm-0", tmp_path, ["l"], **mllm)
    gone = _pod(admin, namespace, "te-llm-1", tmp_path, ["g"], **mllm)
    old = _pod(admin, namespace, "te-llm-2", tmp_path, ["o"], **mllm)
    for seq, (p, role) in enumerate([(enc, "encoder"), (llm, "llm"), (gone, "llm"),
                                     (old, "llm")]):
        record_spawn(admin, namespace, app, p["name"], p["uid"], seq, role=role)
    core = client.CoreV1Api(admin)
    core.delete_namespaced_pod("te-llm-1", namespace, grace_period_seconds=0)
    core.delete_namespaced_pod("te-llm-2", namespace, grace_period_seconds=0)
    eventually(lambda: not [p for p in core.list_namespaced_pod(namespace).items
                            if p.metadata.name in ("te-llm-1", "te-llm-2")], what="deletion")
    # Same name, new uid: a different pod that is not in the lineage.
    create_kwok_pod(admin, namespace, "te-llm-2")
    _running(admin, namespace, "te-enc-0", "te-llm-0")

    res = invoke(control_plane, "lineage", app, "-n", namespace)
    assert res.exit_code == 0, res.output
    out = res.stdout
    for text in ("App mllm", "4 pods", "role encoder", "role llm", "te-enc-0", "Running",
                 "te-llm-1", "gone", "te-llm-2", "replaced", "controller-0"):
        assert text in out, text

    data = json.loads(invoke(control_plane, "lineage", app, "-n", namespace,
                             "-o", "json").stdout)
    by_name = {p["pod"]: p for p in data["pods"]}
    assert by_name["te-enc-0"]["uid"] == enc["uid"] and by_name["te-enc-0"]["phase"] == "Running"
    assert by_name["te-llm-1"]["state"] == "gone"
    assert by_name["te-llm-2"]["state"] == "replaced"
    assert by_name["te-llm-2"]["current_uid"] not in ("", old["uid"])

    # -A finds the one namespace whose events record the app.
    found = json.loads(invoke(control_plane, "lineage", app, "-A", "-o", "json").stdout)
    assert found["namespace"] == namespace and found["pods"] == data["pods"]


def test_lineage_errors(control_plane: ControlPlane, admin: Any, namespace: str,
                        tmp_path: Path) -> None:
    res = invoke(control_plane, "lineage", "no-such-app", "-n", namespace)
    assert res.exit_code == 5
    assert res.stderr == f"error: not found: app 'no-such-app' in namespace {namespace} " \
        "(no PodSpawned events, no TaskFeedback that lists reporting pods, no pods labelled " \
        "tidings.dev/task=no-such-app)\n"
    res = invoke(control_plane, "lineage", "app", "-n", namespace, user="alice")
    assert res.exit_code == 4
    assert res.stderr == ("error: forbidden: cannot list events.events.k8s.io in namespace "
                          f"{namespace}\n")
    res = invoke(control_plane, "lineage", "app/../x", "-n", namespace)
    assert res.exit_code == 2 and res.stderr.startswith("error: invalid input: app ")
    from typer.testing import CliRunner

    from tidings.cli.main import app

    closed = closed_port_kubeconfig(control_plane, tmp_path)
    res = CliRunner().invoke(app, ["lineage", "x", "--kubeconfig", str(closed)])
    assert res.exit_code == 3 and "cannot reach the cluster" in res.stderr


def test_logs_streams_exactly_the_lineage_pods(control_plane: ControlPlane, admin: Any,
                                               namespace: str, tmp_path: Path) -> None:
    mine = _pod(admin, namespace, "te-vllm-qwen-0", tmp_path, ["mine 1", "mine 2"],
                labels={TASK_LABEL: "app-a"})
    # The Cornserve case: another app's pod whose name shares the prefix (and more).
    _pod(admin, namespace, "te-vllm-qwen-0-other", tmp_path, ["INTRUDER"])
    _pod(admin, namespace, "te-vllm-qwen-1", tmp_path, ["INTRUDER 2"])
    record_spawn(admin, namespace, "app-a", mine["name"], mine["uid"], 0)
    _running(admin, namespace, "te-vllm-qwen-0")

    res = invoke(control_plane, "logs", "app-a", "-n", namespace)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["[te-vllm-qwen-0/main] mine 1",
                                       "[te-vllm-qwen-0/main] mine 2"]
    res = invoke(control_plane, "logs", "app-a", "-n", namespace, "--timestamps")
    assert res.stdout.splitlines()[0].split(" ", 2)[1].endswith("Z")

    res = invoke(control_plane, "logs", "app-a", "-n", namespace, "-c", "sidecar")
    assert res.exit_code == 5 and res.stdout == ""
    assert res.stderr == ("error: not found: container 'sidecar' in pod te-vllm-qwen-0 "
                          "(its containers: main)\n")
    res = invoke(control_plane, "logs", "app-a", "-n", namespace, "--since", "soon")
    assert res.exit_code == 2 and "--since" in res.stderr
    res = invoke(control_plane, "logs", "nothing", "-n", namespace)
    assert res.exit_code == 5 and "app 'nothing'" in res.stderr
    grant(control_plane, namespace, "bob",
          [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
           {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    res = eventually(lambda: (r := invoke(control_plane, "logs", "app-a", "-n", namespace,
                                          user="bob")).exit_code == 4 and r,
                     what="bob's RBAC to apply")
    assert res.stderr == ("error: forbidden: cannot get pods/log in namespace "
                          f"{namespace}\n")


def test_logs_follow_picks_up_pods_spawned_later_and_never_the_lookalikes(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        proc_factory: Any) -> None:
    first = _pod(admin, namespace, "te-llm-0", tmp_path, ["first says hi"],
                 labels={TASK_LABEL: "app-b"})
    record_spawn(admin, namespace, "app-b", first["name"], first["uid"], 0, role="llm")
    _running(admin, namespace, "te-llm-0")

    p = proc_factory("logs", "app-b", "-f", "-n", namespace)
    p.wait_for(lambda out: "[te-llm-0/main] first says hi" in out, 30, "the first pod's log")

    # Spawned after the command started: a lineage record arrives, its logs must follow.
    later = _pod(admin, namespace, "te-llm-1", tmp_path, ["later says hi"],
                 labels={TASK_LABEL: "app-b"})
    lookalike = _pod(admin, namespace, "te-llm-1-x", tmp_path, ["INTRUDER"])
    _pod(admin, namespace, "te-llm-10", tmp_path, ["INTRUDER"])
    _running(admin, namespace, "te-llm-1", "te-llm-1-x")
    record_spawn(admin, namespace, "app-b", later["name"], later["uid"], 1, role="llm")
    p.wait_for(lambda out: "[te-llm-1/main] later says hi" in out, 30, "the later pod's log")

    # Running containers keep writing; follow delivers it, once.
    with first["log"].open("a") as f:
        f.write(cri_log_line("first again"))
    with lookalike["log"].open("a") as f:
        f.write(cri_log_line("INTRUDER again"))
    p.wait_for(lambda out: "[te-llm-0/main] first again" in out, 30, "the appended line")
    assert p.proc.poll() is None
    assert p.stop() in (0, 130)
    assert not [line for line in p.out if "INTRUDER" in line]
    assert p.out.count("[te-llm-0/main] first says hi") == 1
    assert_harmless("\n".join(p.out))
    assert "+ [te-llm-1/main]" in p.err


def test_logs_follow_stops_streams_of_pods_that_finish(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        proc_factory: Any) -> None:
    short = _pod(admin, namespace, "job-0", tmp_path, ["working"], run_for="3s",
                 labels={TASK_LABEL: "app-c"})
    record_spawn(admin, namespace, "app-c", short["name"], short["uid"], 0)
    p = proc_factory("logs", "app-c", "-f", "-n", namespace)
    p.wait_for(lambda out: "[job-0/main] working" in out, 30, "the log line")
    eventually(lambda: any(line.startswith("- [job-0/main] finished") for line in p.err),
               timeout=30, what="the finished pod's stream to end")
    assert p.proc.poll() is None  # -f keeps following the app
    assert p.out.count("[job-0/main] working") == 1


def test_logs_bounds_concurrent_streams(control_plane: ControlPlane, admin: Any,
                                        namespace: str, tmp_path: Path,
                                        proc_factory: Any) -> None:
    pods = [_pod(admin, namespace, f"w-{i}", tmp_path, [f"line of w-{i}"],
                 labels={TASK_LABEL: "app-d"}) for i in range(3)]
    for seq, pod in enumerate(pods):
        record_spawn(admin, namespace, "app-d", pod["name"], pod["uid"], seq)
    _running(admin, namespace, *(p["name"] for p in pods))
    p = proc_factory("logs", "app-d", "-f", "-n", namespace, "--max-streams", "2")
    p.wait_for(lambda out: len(out) >= 2, 30, "two streams")
    eventually(lambda: any("--max-streams=2 reached" in line for line in p.err), timeout=10,
               what="the bound message")
    assert len({line.split("]")[0] for line in p.out}) == 2  # the third waits its turn

    # Without -f every stream ends, so waiting streams get their turn and all lines appear.
    # (Whether the bound is hit then depends on how fast each short stream ends.)
    res = invoke(control_plane, "logs", "app-d", "-n", namespace, "--max-streams", "1")
    assert res.exit_code == 0, res.output
    assert sorted(res.stdout.splitlines()) == [f"[w-{i}/main] line of w-{i}" for i in range(3)]


def test_a_broken_stream_resumes_without_repeating_lines(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        proc_factory: Any) -> None:
    pod = _pod(admin, namespace, "resume-0", tmp_path, [f"before {i}" for i in range(5)],
               labels={TASK_LABEL: "app-e"})
    record_spawn(admin, namespace, "app-e", pod["name"], pod["uid"], 0)
    _running(admin, namespace, "resume-0")
    p = proc_factory("logs", "app-e", "-f", "-n", namespace)
    p.wait_for(lambda out: "[resume-0/main] before 4" in out, 30, "the first lines")

    control_plane.stop_apiserver()  # every stream and watch breaks
    with pod["log"].open("a") as f:
        f.write(cri_log_line("while the API was away"))
    control_plane.start_apiserver()
    with pod["log"].open("a") as f:
        f.write(cri_log_line("after the restart"))
    p.wait_for(lambda out: "[resume-0/main] after the restart" in out, 60, "resumed stream")
    body = [line for line in p.out if line.startswith("[resume-0/main]")]
    assert body == [f"[resume-0/main] before {i}" for i in range(5)] + [
        "[resume-0/main] while the API was away", "[resume-0/main] after the restart"]


# --- no lineage controller: the TaskFeedback status and the task label -------------------


def _reported(admin: Any, ns: str, task: str, *pods: dict[str, Any]) -> None:
    """Each pod sends a progress event as a workload would; the watcher folds them."""
    for seq, pod in enumerate(pods):
        emit(admin, ns, task, Progress(fraction=0.1 * (seq + 1), message=pod["name"]), seq,
             instance=pod["name"], pod=(pod["name"], pod["uid"]))

    def listed() -> bool:
        status = task_status(admin, ns, task) or {}
        return {p["uid"] for p in status.get("pods", [])} >= {p["uid"] for p in pods}

    eventually(listed, 30, "the reporting pods in the TaskFeedback status")


def test_logs_and_lineage_without_a_lineage_controller_use_the_status_and_the_label(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        start_watcher: Any) -> None:
    """No PodSpawned record anywhere: `logs` streams exactly the task's pods, the ones its
    TaskFeedback status lists as reporting (by uid) and the ones labelled for it; a pod whose
    name merely looks like theirs, and a pod that took a reporting pod's name under a new uid,
    never appear. `lineage` lists each pod with where it was found."""
    from kubernetes import client

    w: WatcherProc = start_watcher()
    task = only_here("train", namespace)  # (-A below: the page's tests make tasks `train`)
    label = {"labels": {TASK_LABEL: task}}
    w0 = _pod(admin, namespace, "train-worker-0", tmp_path, ["w0 says hi"], **label)
    # (kwok serves logs by pod name: the pod that reuses this name below would serve them.)
    old = _pod(admin, namespace, "train-worker-1", tmp_path, ["INTRUDER reused name"],
               **label)
    _reported(admin, namespace, task, w0, old)
    # worker-1 is deleted and its name reused by an unlabelled pod: the status still names
    # the old uid, so the new pod is "replaced", never streamed.
    core = client.CoreV1Api(admin)
    core.delete_namespaced_pod("train-worker-1", namespace, grace_period_seconds=0)
    eventually(lambda: not [p for p in core.list_namespaced_pod(namespace).items
                            if p.metadata.uid == old["uid"]], what="deletion")
    create_kwok_pod(admin, namespace, "train-worker-1")
    # Labelled but has not reported (yet): found by the label.
    quiet = _pod(admin, namespace, "train-worker-2", tmp_path, ["w2 is quiet"], **label)
    # Look-alikes: the name prefix, and more, without the label or a recorded uid.
    _pod(admin, namespace, "train-worker-0-x", tmp_path, ["INTRUDER prefix"])
    _pod(admin, namespace, "train-worker-00", tmp_path, ["INTRUDER prefix 2"],
         labels={TASK_LABEL: f"{task}-other"})
    _serving(admin, namespace, "train-worker-0", "train-worker-1", "train-worker-2",
             "train-worker-0-x", "train-worker-00")
    w.kill()  # the status is written; what follows reads it without a watcher running

    res = invoke(control_plane, "logs", task, "-n", namespace)
    assert res.exit_code == 0, res.output
    assert sorted(res.stdout.splitlines()) == ["[train-worker-0/main] w0 says hi",
                                               "[train-worker-2/main] w2 is quiet"]
    assert "INTRUDER" not in res.output
    assert "train-worker-1: replaced" in res.stderr

    data = json.loads(invoke(control_plane, "lineage", task, "-n", namespace,
                             "-o", "json").stdout)
    by_uid = {p["uid"]: p for p in data["pods"]}
    assert set(by_uid) == {w0["uid"], old["uid"], quiet["uid"]}
    assert by_uid[w0["uid"]]["sources"] == ["status", "label"]
    assert by_uid[w0["uid"]]["state"] == "current" and by_uid[w0["uid"]]["events"] == 1
    assert by_uid[old["uid"]]["sources"] == ["status"]
    assert by_uid[old["uid"]]["state"] == "replaced"
    assert by_uid[quiet["uid"]]["sources"] == ["label"]
    assert by_uid[w0["uid"]]["spawned_at"] is None
    tree = invoke(control_plane, "lineage", task, "-n", namespace)
    assert tree.exit_code == 0, tree.output
    for text in (f"TaskFeedback {task}", "3 pods", "found by status (1 events), label",
                 "replaced", f"found by label tidings.dev/task={task}"):
        assert text in tree.stdout, text
    assert "train-worker-0-x" not in tree.stdout and "train-worker-00" not in tree.stdout

    # -A finds the task by its TaskFeedback (it has no PodSpawned events to be found by).
    found = json.loads(invoke(control_plane, "lineage", task, "-A", "-o", "json").stdout)
    assert found["namespace"] == namespace
    res = invoke(control_plane, "logs", "nothing", "-n", namespace)
    assert res.exit_code == 5 and "no pods labelled tidings.dev/task=nothing" in res.stderr


def test_logs_follow_without_a_lineage_controller_picks_up_labelled_pods(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        proc_factory: Any) -> None:
    """`logs -f` of a task with no PodSpawned records watches the pods labelled for it:
    a labelled pod created later is streamed, a look-alike created with it is not."""
    first = _pod(admin, namespace, "lab-0", tmp_path, ["lab-0 hi"],
                 labels={TASK_LABEL: "lab"})
    _running(admin, namespace, "lab-0")
    p = proc_factory("logs", "lab", "-f", "-n", namespace)
    p.wait_for(lambda out: "[lab-0/main] lab-0 hi" in out, 30, "the first pod's log")
    _pod(admin, namespace, "lab-1", tmp_path, ["lab-1 hi"], labels={TASK_LABEL: "lab"})
    _pod(admin, namespace, "lab-1x", tmp_path, ["INTRUDER"])
    _running(admin, namespace, "lab-1", "lab-1x")
    p.wait_for(lambda out: "[lab-1/main] lab-1 hi" in out, 30, "the later pod's log")
    with first["log"].open("a") as f:
        f.write(cri_log_line("lab-0 again"))
    p.wait_for(lambda out: "[lab-0/main] lab-0 again" in out, 30, "the appended line")
    assert p.stop() in (0, 130)
    assert not [line for line in p.out if "INTRUDER" in line]
    assert p.out.count("[lab-0/main] lab-0 hi") == 1


# --- kubectl/stern flags -------------------------------------------------------------------


def test_logs_flags_select_lines_like_kubectl_and_stern(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    """--tail, --since-time, --include/--exclude, --no-prefix, -o jsonl and --previous each
    change which lines are printed, or how, as kubectl and stern would; bad values exit 2."""
    from datetime import datetime, timedelta

    from tidings._compat import UTC

    now = datetime.now(UTC).replace(microsecond=0)
    old = now - timedelta(hours=2)
    log = tmp_path / "flags-0.log"
    log.write_text(cri_log_line("old INFO boot", old) + cri_log_line("old WARN disk", old)
                   + "".join(cri_log_line(f"new INFO step {i}", now) for i in range(3))
                   + cri_log_line("new WARN \x1b[31mred\x9b2J", now))
    pod = create_kwok_pod(admin, namespace, "flags-0", log_file=log, labels={TASK_LABEL: "fl"})
    _serving(admin, namespace, "flags-0")

    def lines(*flags: str) -> list[str]:
        res = invoke(control_plane, "logs", "fl", "-n", namespace, *flags)
        assert res.exit_code == 0, res.output
        return res.stdout.splitlines()

    assert len(lines()) == 6
    assert lines("--tail", "2", "--no-prefix") == ["new INFO step 2", "new WARN red"]
    assert lines("--tail", "0") == []
    since = (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [x.split()[1] for x in lines("--since-time", since)] == ["new"] * 4
    assert lines("--include", "WARN", "--exclude", "red", "--no-prefix") == ["old WARN disk"]
    assert lines("-i", "boot", "-i", "step 0") == ["[flags-0/main] old INFO boot",
                                                 "[flags-0/main] new INFO step 0"]
    objs = [json.loads(x) for x in lines("-o", "jsonl", "--tail", "1")]
    assert objs == [{"pod": "flags-0", "container": "main", "time": objs[0]["time"],
                     "line": "new WARN \x1b[31mred\x9b2J"}]
    assert objs[0]["time"].startswith(now.strftime("%Y-%m-%dT%H:%M:%S"))
    raw = invoke(control_plane, "logs", "fl", "-n", namespace, "-o", "jsonl").stdout
    assert_harmless(raw)  # escaped in the JSON text, the line itself intact when parsed

    res = invoke(control_plane, "logs", "fl", "-n", namespace, "--previous")
    assert res.stdout == "" and "no previous instance" in res.stderr, res.output
    del pod

    for flags, why in [(["--since-time", "yesterday"], "--since-time 'yesterday'"),
                       (["--since-time", since, "--since", "5m"], "cannot be used together"),
                       (["--previous", "-f"], "--previous cannot be used with --follow"),
                       (["--include", "("], "--include '(' is not a regular expression"),
                       (["--tail", "-1"], "--tail")]:
        res = invoke(control_plane, "logs", "fl", "-n", namespace, *flags)
        assert res.exit_code == 2 and why in res.stderr, (flags, res.output)


def test_logs_follow_ends_the_stream_of_a_pod_that_drops_the_label(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        proc_factory: Any) -> None:
    """A pod streamed by -f that removes its tidings.dev/task label no longer confirms it
    belongs to the task: its stream ends (found by the one pod list per tick), and lines it
    writes afterwards are never shown, while the task's other pod goes on streaming."""
    from kubernetes import client

    label = {"labels": {TASK_LABEL: "drop"}}
    pod = _pod(admin, namespace, "drop-0", tmp_path, ["before"], **label)
    keep = _pod(admin, namespace, "keep-0", tmp_path, ["kept"], **label)
    _serving(admin, namespace, "drop-0", "keep-0")
    p = proc_factory("logs", "drop", "-f", "-n", namespace)
    p.wait_for(lambda out: "[drop-0/main] before" in out and "[keep-0/main] kept" in out, 30,
               "the first lines")
    client.CoreV1Api(admin).patch_namespaced_pod(
        "drop-0", namespace, {"metadata": {"labels": {TASK_LABEL: None}}})
    eventually(lambda: any("- [drop-0/main] pod no longer labelled" in x for x in p.err),
               timeout=30, what="the stream to end")
    with pod["log"].open("a") as f:
        f.write(cri_log_line("SECRET after the label went"))
    with keep["log"].open("a") as f:
        f.write(cri_log_line("kept again"))
    p.wait_for(lambda out: "[keep-0/main] kept again" in out, 30, "the other pod's new line")
    assert p.proc.poll() is None  # -f goes on following the task
    assert not [x for x in p.out if "SECRET" in x]


# --- a decoy lineage record hides nothing ---------------------------------


def test_a_decoy_lineage_record_never_hides_the_task_s_real_pods(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    """Any workload pod of the namespace may write a PodSpawned record for any app: one naming
    a pod that does not exist (or a pod of its own) must not hide the pods found by label,
    and must itself never be streamed."""
    label = {"labels": {TASK_LABEL: "victim"}}
    real = _pod(admin, namespace, "victim-worker-0", tmp_path, ["real line"], **label)
    attacker = _pod(admin, namespace, "attacker-0", tmp_path, ["ATTACKER line"],
                    labels={TASK_LABEL: "other"})
    record_spawn(admin, namespace, "victim", "ghost-0", "0000-ghost", 0)  # no such pod
    record_spawn(admin, namespace, "victim", attacker["name"], attacker["uid"], 1)
    _serving(admin, namespace, "victim-worker-0", "attacker-0")

    res = invoke(control_plane, "logs", "victim", "-n", namespace)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["[victim-worker-0/main] real line"]
    assert "ATTACKER" not in res.output

    lineage = invoke(control_plane, "lineage", "victim", "-n", namespace, "-o", "json")
    assert lineage.exit_code == 0, lineage.output
    by_name = {p["pod"]: p for p in json.loads(lineage.stdout)["pods"]}
    assert by_name["victim-worker-0"]["uid"] == real["uid"]
    assert by_name["victim-worker-0"]["sources"] == ["label"]
    assert by_name["victim-worker-0"]["verified"] is True
    # The records: one names a pod that is gone (history, unverified), the other a pod that
    # does not confirm it (ignored, and said so).
    assert by_name["ghost-0"]["state"] == "gone" and by_name["ghost-0"]["verified"] is False
    assert "attacker-0" not in by_name
    assert "ignored 1 lineage record(s) naming pods not labelled tidings.dev/task=victim: " \
        "attacker-0" in lineage.stderr


def test_logs_and_lineage_find_a_job_s_pods_by_its_labels_and_uid(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path) -> None:
    """A platform task's pods are found by the platform's task key, by uid: the Job's pods,
    not a pod named like them, and not a JobSet's pod whose child Job merely shares the name
    (its task is the JobSet)."""
    job = {"batch.kubernetes.io/job-name": "train-7",
           "batch.kubernetes.io/controller-uid": "6f1c2d3e-0000-4000-8000-000000000007"}
    w0 = _pod(admin, namespace, "train-7-0-abcde", tmp_path, ["w0 line"], labels=job)
    w1 = _pod(admin, namespace, "train-7-1-fghij", tmp_path, ["w1 line"], labels=job)
    _pod(admin, namespace, "train-7-2-lookalike", tmp_path, ["INTRUDER name"])
    _pod(admin, namespace, "llm-0", tmp_path, ["INTRUDER jobset"], labels={
        "jobset.sigs.k8s.io/jobset-name": "llm", "batch.kubernetes.io/job-name": "train-7"})
    _serving(admin, namespace, "train-7-0-abcde", "train-7-1-fghij", "train-7-2-lookalike",
             "llm-0")

    res = invoke(control_plane, "logs", "train-7", "-n", namespace)
    assert res.exit_code == 0, res.output
    assert sorted(res.stdout.splitlines()) == ["[train-7-0-abcde/main] w0 line",
                                               "[train-7-1-fghij/main] w1 line"]
    assert "INTRUDER" not in res.output
    data = json.loads(invoke(control_plane, "lineage", "train-7", "-n", namespace,
                             "-o", "json").stdout)
    assert {p["uid"] for p in data["pods"]} == {w0["uid"], w1["uid"]}
    tree = invoke(control_plane, "lineage", "train-7", "-n", namespace)
    assert "found by label batch.kubernetes.io/job-name=train-7" in tree.stdout
