"""Which tasks exist before they speak (watcher/tracking.py, watcher/platform.py's roots):
the selector grammar, the namespaces left out, history that is not news, and which platform
object is a task of its own (never a TaskFeedback per child object)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings._compat import UTC
from tidings.schemas.engine.observing import observe
from tidings.schemas.engine.state import new_state
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.event import TaskRef
from tidings.watcher.platform import JOB, JOBSET, TRAINJOB, WORKFLOW, PlatformTasks
from tidings.watcher.settings import Settings
from tidings.watcher.tracking import Tracking, matches, parse_selector

TRACK = Tracking.of(Settings(), "tidings-system")


def test_the_default_tracks_every_namespace_but_the_systems_and_its_own() -> None:
    assert TRACK.namespace("team-a") and TRACK.namespace("default")
    assert not TRACK.namespace("kube-system") and not TRACK.namespace("kube-public")
    assert not TRACK.namespace("tidings-system")
    skip = Tracking.of(Settings(track_skip_namespaces=["ci,batch"]), "")
    assert not skip.namespace("ci") and not skip.namespace("batch") and skip.namespace("a")
    off = Tracking.of(Settings(track="reported-only"), "")
    assert not off.namespace("team-a") and not off.selects("team-a", {})


def test_the_selector_is_kubectls_equality_grammar() -> None:
    sel = parse_selector("team=ml, tier!=test,gpu,!skip")
    assert sel == (("team", "=", "ml"), ("tier", "!=", "test"), ("gpu", "exists", ""),
                   ("skip", "!exists", ""))
    assert matches(sel, {"team": "ml", "gpu": "a100"})
    assert not matches(sel, {"team": "ml"})  # no gpu
    assert not matches(sel, {"team": "ml", "gpu": "", "skip": "1"})
    assert not matches(sel, {"team": "ml", "gpu": "", "tier": "test"})
    assert not matches(sel, None) and matches((), None)
    assert parse_selector("app==x") == (("app", "=", "x"),)
    for bad in ("team in (a,b)", "!a=b", "=x", "a=b c"):
        with pytest.raises(ValueError, match="not a label requirement"):
            parse_selector(bad)


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", ""])))
def test_a_requirement_and_its_negation_never_both_hold(labels: dict[str, str]) -> None:
    for key in ("a", "b"):
        assert matches(parse_selector(f"{key}=x"), labels) != \
            matches(parse_selector(f"{key}!=x"), labels)
        assert matches(parse_selector(key), labels) != matches(parse_selector(f"!{key}"), labels)


def test_an_end_older_than_the_event_ttl_is_history_not_news() -> None:
    now = datetime.now(UTC)
    assert TRACK.fresh(None) and TRACK.fresh(now - timedelta(minutes=5))
    assert not TRACK.fresh(now - timedelta(hours=2))


def _obj(kind: Any, name: str, *, ns: str = "team-a", labels: dict[str, str] | None = None,
         controller: tuple[str, str] | None = None, template: dict[str, str] | None = None,
         status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}",
                            "labels": labels or {}}
    if controller:
        meta["ownerReferences"] = [{"apiVersion": controller[0], "kind": controller[1],
                                    "name": name, "uid": "uid-parent", "controller": True}]
    pod = {"template": {"metadata": {"labels": template or {}}}}
    spec: dict[str, Any] = pod if kind is JOB else {
        "replicatedJobs": [{"name": "w", "template": {"spec": pod}}]}
    return {"metadata": meta, "spec": spec, "status": status or {}}


def _roots(*objs: tuple[Any, dict[str, Any]], tracking: Tracking = TRACK) -> PlatformTasks:
    p = PlatformTasks(None, tracking=tracking)
    for kind, obj in objs:
        src = next(s for s in p.sources() if s.kind is kind)
        src.list_begin()
        src.list_page([obj])  # type: ignore[list-item]
    return p


def test_the_outermost_platform_object_is_the_task_never_a_child() -> None:
    p = _roots((JOB, _obj(JOB, "train")),
               (JOBSET, _obj(JOBSET, "js")),
               (JOB, _obj(JOB, "js-w-0", controller=("jobset.x-k8s.io/v1alpha2", "JobSet"))),
               (JOBSET, _obj(JOBSET, "tj", controller=("trainer.kubeflow.org/v1alpha1",
                                                      "TrainJob"))),
               (TRAINJOB, _obj(TRAINJOB, "tj")),
               (WORKFLOW, _obj(WORKFLOW, "wf")),
               (JOB, _obj(JOB, "cron-123", controller=("batch/v1", "CronJob"))))
    found = {n: p.root(TaskRef("team-a", n)) for n in
             ("train", "js", "js-w-0", "tj", "wf", "cron-123")}
    assert {n: r[0].kind for n, r in found.items() if r} == {
        "train": "Job", "js": "JobSet", "tj": "TrainJob", "wf": "Workflow",
        "cron-123": "Job"}
    owner = p.owner(TaskRef("team-a", "train"))
    assert owner is not None and not isinstance(owner, str)
    assert (owner.kind, owner.name, owner.uid) == ("Job", "train", "uid-train")  # type: ignore[union-attr]


def test_a_job_whose_pods_name_another_task_is_found_from_its_pods() -> None:
    """Its pod template carries tidings.dev/task: its pods belong to that task, and a
    TaskFeedback under the Job's own name would be a phantom."""
    p = _roots((JOB, _obj(JOB, "runner", template={"tidings.dev/task": "nightly"})),
               (JOBSET, _obj(JOBSET, "js", template={"tidings.dev/task": "other"})))
    assert p.root(TaskRef("team-a", "runner")) is None
    assert p.root(TaskRef("team-a", "js")) is None


def test_only_selected_objects_in_tracked_namespaces_are_roots() -> None:
    sel = Tracking.of(Settings(track_selector="team=ml"), "")
    p = _roots((JOB, _obj(JOB, "ml-job", labels={"team": "ml"})),
               (JOB, _obj(JOB, "web-job", labels={"team": "web"})),
               (JOB, _obj(JOB, "sys", ns="kube-system", labels={"team": "ml"})), tracking=sel)
    assert p.root(TaskRef("team-a", "ml-job")) is not None
    assert p.root(TaskRef("team-a", "web-job")) is None
    assert p.root(TaskRef("kube-system", "sys")) is None
    off = _roots((JOB, _obj(JOB, "ml-job")),
                 tracking=Tracking.of(Settings(track="reported-only"), ""))
    assert off.root(TaskRef("team-a", "ml-job")) is None and \
        off.owner(TaskRef("team-a", "ml-job")) is None


def test_a_job_that_failed_before_any_pod_spoke_decides_its_task() -> None:
    failed = {"conditions": [{"type": "Failed", "status": "True",
                              "reason": "BackoffLimitExceeded",
                              "message": "Job has reached the specified backoff limit",
                              "lastTransitionTime": datetime.now(UTC).strftime(
                                  "%Y-%m-%dT%H:%M:%SZ")}]}
    p = _roots((JOB, _obj(JOB, "crash", status=failed)),
               (JOB, _obj(JOB, "ancient", status={**failed, "conditions": [
                   {**failed["conditions"][0], "lastTransitionTime": "2020-01-01T00:00:00Z"}]})))
    task = TaskRef("team-a", "crash")
    outcome = p.outcome(task)
    assert outcome is not None and outcome.phase == "Failed"
    state = observe(new_state(task), platform=outcome)
    status = to_status(state)
    assert status["phase"] == "Failed" and status["reason"] == "BackoffLimitExceeded"
    assert p.root(TaskRef("team-a", "ancient")) is None  # ended long before: history


def test_a_task_whose_pods_run_is_running_before_any_report() -> None:
    task = TaskRef("team-a", "quiet")
    since = datetime(2026, 12, 7, 15, 0, tzinfo=UTC)
    pending = to_status(observe(new_state(task), running=(0, None)))
    running = observe(new_state(task), running=(2, since))
    st_running = to_status(running)
    assert pending["phase"] == "Pending" and st_running["phase"] == "Running"
    assert st_running["runningPods"] == 2 and st_running["runningSince"] == "2026-12-07T15:00:00Z"
    back = decode_status(task, st_running).observed  # a restart keeps it
    assert (back.running, back.running_since) == (2, since)
    ready = {c["type"]: c for c in st_running["conditions"]}["PodsReady"]
    assert (ready["status"], ready["reason"]) == ("True", "PodsRunning")


def test_running_pods_are_kept_only_until_the_task_speaks() -> None:
    """A task that reported is Running by its reports: the count would only make its status
    differ from the fold of its facts."""
    from tests.unit.test_schemas_fold import TASK
    from tests.unit.test_schemas_roster import report
    from tidings.schemas.engine.folding import fold_all

    spoke = fold_all(TASK, [report(1, 0, 0.5, workers=1)])
    assert spoke.counters["events_applied"] == 1
    after = observe(spoke, running=(3, datetime(2026, 12, 7, tzinfo=UTC)))
    assert after.observed.running == 0 and "runningPods" not in to_status(after)


def test_a_pod_is_creating_only_while_scheduled_and_no_container_started() -> None:
    from tidings.watcher.kubelet_events import creating_since

    scheduled = {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": "2026-12-07T15:00:00Z"}
    creating = {"status": {"phase": "Pending", "conditions": [scheduled], "containerStatuses": [
        {"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert creating_since(creating) == datetime(2026, 12, 7, 15, 0, tzinfo=UTC)
    bare = {"status": {"phase": "Pending", "conditions": [scheduled]}}
    assert creating_since(bare) is not None  # (no container status written yet)
    pulling = {"status": {"phase": "Pending", "conditions": [scheduled], "containerStatuses": [
        {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}}
    unscheduled = {"status": {"phase": "Pending", "conditions": [
        {**scheduled, "status": "False"}]}}
    running = {"status": {"phase": "Running", "conditions": [scheduled]}}
    assert [creating_since(p) for p in (pulling, unscheduled, running, None)] == [None] * 4


def test_a_node_not_ready_makes_its_running_pods_workers_on_a_lost_node() -> None:
    from tidings.schemas.engine.observed import node_loss
    from tidings.schemas.wire.platform import PodTask
    from tidings.watcher.nodes import Nodes
    from tidings.watcher.senders import Senders

    def node(status: str) -> dict[str, Any]:
        return {"status": {"conditions": [{
            "type": "Ready", "status": status, "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastTransitionTime": "2026-12-07T15:00:00Z"}]}}

    assert node_loss(node("True")) is None and node_loss({"status": {}}) is None
    changed: list[str] = []
    nodes = Nodes(changed.append)
    senders = Senders(None)
    task = TaskRef("team-a", "long-run")
    start = datetime(2026, 12, 7, 14, 0, tzinfo=UTC)
    for i, on in enumerate(("n-1", "n-2")):
        senders.put(("team-a", f"w-{i}", f"uid-{i}"), PodTask("long-run", "tidings.dev/task"),
                    running=start, node=on)
    assert senders.running(task, nodes.lost) == (2, start)
    assert senders.tasks_on("n-1") == {task}
    nodes.put("n-1", node_loss(node("Unknown")))
    assert changed == ["n-1"]
    (lost,) = senders.on_lost_nodes(task, nodes.lost)
    assert (lost.pod, lost.reason) == ("w-0", "NodeLost")
    assert lost.message == ("node n-1 not ready (Unknown: NodeStatusUnknown): Kubelet stopped "
                            "posting node status.")
    assert senders.running(task, nodes.lost) == (1, start)
    nodes.put("n-1", None)  # it is back
    assert changed == ["n-1", "n-1"] and senders.on_lost_nodes(task, nodes.lost) == []
    senders.delete(("team-a", "w-0", "uid-0"))
    assert senders.tasks_on("n-1") == set()
