"""The pod and the platform object as ground truth (the pure half): how a
pod's object reads (OOM kill, a signal, eviction, preemption, deletion, success, waiting),
how a platform object reads (Job, JobSet, TrainJob, Workflow, as their controllers write
them), and how the fold merges those observations beside the processes' own facts:
idempotent, in any order with the facts, bounded, surviving the status round trip; hostile
objects never raise and come out sanitised and bounded."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_schemas_fold import T0, TASK, without_duplicates
from tests.unit.test_schemas_roster import report
from tidings._compat import UTC
from tidings.schemas import Limits, ParsedEvent, TaskState, fold_all, new_state
from tidings.schemas.engine.folding import fold_many
from tidings.schemas.engine.observed import (
    MESSAGE_LIMIT,
    REASON_LIMIT,
    PlatformOutcome,
    PodVerdict,
    gone,
    platform_outcome,
    pod_verdict,
)
from tidings.schemas.engine.observing import observe
from tidings.schemas.engine.roster import pod_hash
from tidings.schemas.status.decoder import decode_status, read_status
from tidings.schemas.status.encoder import STATUS_BUDGET, to_status
from tidings.schemas.status.roster_text import (
    decode_ends,
    encode_end_uids,
    encode_ends,
    with_end_uids,
)
from tidings.schemas.view.model import task_view
from tidings.schemas.view.summary import summarize

SEEN = datetime(2026, 11, 30, 3, 5, tzinfo=UTC)
T = "2026-11-30T03:02:00Z"


def pod(name: str = "w-01", *, phase: str = "Running", reason: str | None = None,
        message: str | None = None, containers: list[dict[str, Any]] | None = None,
        conditions: list[dict[str, Any]] | None = None, deleting: bool = False,
        uid: str = "uid-1") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "startTime": "2026-11-30T03:00:00Z"}
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    if containers is not None:
        status["containerStatuses"] = containers
    if conditions is not None:
        status["conditions"] = conditions
    meta: dict[str, Any] = {"name": name, "uid": uid, "namespace": "team-a",
                            "creationTimestamp": "2026-11-30T02:59:59Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T03:04:00Z"
    return {"metadata": meta, "status": status}


def terminated(code: int, reason: str = "Error", *, name: str = "main",
               message: str | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"exitCode": code, "reason": reason, "finishedAt": T,
                         "startedAt": "2026-11-30T03:00:01Z"}
    if message is not None:
        t["message"] = message
    return {"name": name, "state": {"terminated": t}, "restartCount": 0, "ready": False}


def waiting(why: str, message: str = "", **last: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "state": {"waiting": {"reason": why,
                                                             "message": message}}}
    if last:
        c["lastState"] = {"terminated": last}
    return c


# --- reading a pod ---------------------------------------------------------------------


def test_an_oom_killed_pod_reads_as_failed_with_the_kernel_s_reason() -> None:
    v = pod_verdict(pod(phase="Failed", containers=[terminated(137, "OOMKilled")]), seen=SEEN)
    assert v == PodVerdict("w-01", "uid-1", "Failed", "OOMKilled",
                           "container main: OOMKilled, exit code 137 (SIGKILL)", 137,
                           datetime(2026, 11, 30, 3, 2, tzinfo=UTC))


def test_an_exit_code_above_128_names_its_signal_and_a_sidecar_s_clean_exit_does_not_hide_it(
        ) -> None:
    v = pod_verdict(pod(phase="Failed", containers=[
        terminated(0, "Completed", name="sidecar"), terminated(143)]), seen=SEEN)
    assert v is not None and (v.reason, v.exit_code) == ("Error", 143)
    assert v.message == "container main: Error, exit code 143 (SIGTERM)"


def test_eviction_preemption_and_node_loss_explain_more_than_the_exit_they_caused() -> None:
    evicted = pod_verdict(pod(phase="Failed", reason="Evicted",
                              message="The node was low on resource: memory.",
                              containers=[terminated(137)]), seen=SEEN)
    assert evicted is not None and evicted.reason == "Evicted"
    assert evicted.message.startswith("The node was low on resource: memory.; container main")
    preempted = pod_verdict(pod(phase="Failed", containers=[terminated(143)], conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
         "message": "Preempted in order to admit critical pod",
         "lastTransitionTime": "2026-11-30T03:01:00Z"}]), seen=SEEN)
    assert preempted is not None and preempted.reason == "PreemptionByScheduler"
    assert preempted.exit_code == 143 and preempted.explained
    # Deleted by the pod garbage collector when its node went: the pod object says so.
    lost = pod_verdict(pod(conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
         "message": "PodGC: node no longer exists"}], deleting=True), deleted=True, seen=SEEN)
    assert lost is not None and (lost.phase, lost.reason) == ("Failed", "DeletionByPodGC")
    assert lost.at == datetime(2026, 11, 30, 3, 4, tzinfo=UTC)  # its deletionTimestamp


def test_a_deleted_pod_that_never_ended_reads_as_deleted_and_a_succeeded_one_as_such() -> None:
    d = pod_verdict(pod(deleting=True), deleted=True, seen=SEEN)
    assert d is not None and (d.phase, d.reason, d.explained) == ("Failed", "Deleted", False)
    ok = pod_verdict(pod(phase="Succeeded", containers=[terminated(0, "Completed")]),
                     deleted=True, seen=SEEN)
    assert ok is not None and (ok.phase, ok.exit_code) == ("Succeeded", 0)
    g = gone("w-01", "uid-1", SEEN)
    assert (g.phase, g.reason, g.explained) == ("Failed", "Deleted", False)


def test_a_pod_that_waits_for_a_reason_says_why_and_a_starting_one_says_nothing() -> None:
    assert pod_verdict(pod(), seen=SEEN) is None
    assert pod_verdict(pod(phase="Pending", containers=[waiting("ContainerCreating")]),
                       seen=SEEN) is None
    pull = pod_verdict(pod(phase="Pending", containers=[
        waiting("ImagePullBackOff", 'Back-off pulling image "nope:1"')]), seen=SEEN)
    assert pull is not None and (pull.phase, pull.reason) == ("Waiting", "ImagePullBackOff")
    assert pull.message == 'container main: ImagePullBackOff: Back-off pulling image "nope:1"'
    unsched = pod_verdict(pod(phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
         "lastTransitionTime": "2026-11-30T03:00:30Z"}]), seen=SEEN)
    assert unsched is not None and unsched.reason == "Unschedulable"
    assert unsched.at == datetime(2026, 11, 30, 3, 0, 30, tzinfo=UTC)
    crash = pod_verdict(pod(containers=[waiting(
        "CrashLoopBackOff", "back-off 40s", exitCode=137, reason="OOMKilled", finishedAt=T)]),
        seen=SEEN)
    assert crash is not None and crash.exit_code == 137
    assert "(last: OOMKilled, exit code 137 (SIGKILL))" in crash.message


HOSTILE = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b[31m" + "A" * 10_000


def test_a_hostile_pod_status_comes_out_sanitised_and_bounded() -> None:
    for code in (2**40, "137", 1.5, True, None, -(2**33)):
        v = pod_verdict(pod(phase="Failed", reason=HOSTILE, message=HOSTILE,
                            containers=[terminated(0, HOSTILE, message=HOSTILE) | {
                                "state": {"terminated": {"exitCode": code,
                                                         "reason": HOSTILE,
                                                         "message": HOSTILE}}}]),
                        seen=SEEN)
        assert v is not None and v.phase == "Failed"
        assert v.exit_code is None
        assert len(v.reason) <= REASON_LIMIT and v.reason.isalnum()
        assert len(v.message) <= MESSAGE_LIMIT and "\x1b" not in v.message
        assert "\x07" not in v.message and "evil" not in v.message


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from([
                        "metadata", "status", "name", "uid", "phase", "reason", "message",
                        "conditions", "containerStatuses", "initContainerStatuses", "state",
                        "terminated", "waiting", "exitCode", "type", "lastState",
                        "finishedAt", "deletionTimestamp", "lastTransitionTime"]), inner,
                        max_size=6), max_leaves=30),
       st.booleans())
def test_reading_any_object_never_raises(obj: object, deleted: bool) -> None:
    v = pod_verdict(obj, deleted=deleted, seen=SEEN)
    assert v is None or (len(v.message) <= MESSAGE_LIMIT and len(v.reason) <= REASON_LIMIT)
    for kind in ("Job", "JobSet", "TrainJob", "Workflow", "Other"):
        platform_outcome("x/v1", kind, obj)


# --- reading a platform object ------------------------------------------------------------


def job(conditions: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    s = dict(status)
    if conditions is not None:
        s["conditions"] = conditions
    return {"metadata": {"name": "train", "uid": "job-uid"}, "status": s}


def test_a_platform_object_decides_only_once_its_controller_reported_and_by_its_end() -> None:
    assert platform_outcome("batch/v1", "Job", job()) is None  # no controller acted on it
    running = platform_outcome("batch/v1", "Job", job(startTime=T, active=1))
    assert running is not None and (running.phase, running.terminal) == ("Running", False)
    # Kubernetes 1.31+: FailureTarget first, Failed once every pod ended: Failed decides.
    target = platform_outcome("batch/v1", "Job", job([
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"}],
        startTime=T))
    assert target is not None and (target.phase, target.reason, target.failing) == (
        "Running", "BackoffLimitExceeded", True)
    assert not running.failing
    # A running Workflow names its phase ("Running"): not a failure, whatever its workers say.
    wf = platform_outcome("argoproj.io/v1alpha1", "Workflow", {
        "metadata": {"name": "train", "uid": "wf-uid"},
        "status": {"phase": "Running", "startedAt": T}})
    assert wf is not None and (wf.phase, wf.failing) == ("Running", False)
    failed = platform_outcome("batch/v1", "Job", job([
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit",
         "lastTransitionTime": T}], startTime=T))
    assert failed == PlatformOutcome("batch/v1", "Job", "train", "job-uid", "Failed",
                                     "BackoffLimitExceeded",
                                     "Job has reached the specified backoff limit",
                                     datetime(2026, 11, 30, 3, 2, tzinfo=UTC))
    done = platform_outcome("jobset.x-k8s.io/v1alpha2", "JobSet", job([
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]))
    assert done is not None and (done.phase, done.reason) == ("Succeeded", "AllJobsCompleted")
    tj = platform_outcome("trainer.kubeflow.org/v1alpha1", "TrainJob", job([
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]))
    assert tj is not None and (tj.phase, tj.reason) == ("Failed", "DeadlineExceeded")
    wf = platform_outcome("argoproj.io/v1alpha1", "Workflow", {
        "metadata": {"name": "etl", "uid": "u"},
        "status": {"phase": "Error", "message": "child 'train' failed", "finishedAt": T}})
    assert wf is not None and (wf.phase, wf.reason, wf.message) == (
        "Failed", "Error", "child 'train' failed")
    assert platform_outcome("argoproj.io/v1alpha1", "Workflow", {
        "metadata": {"name": "etl", "uid": "u"}, "status": {"phase": "Running"}}) is not None


# --- the fold: beside the facts -----------------------------------------------------------

OOM = PodVerdict("w-01", "uid-1", "Failed", "OOMKilled",
                 "container main: OOMKilled, exit code 137 (SIGKILL)", 137,
                 T0 + timedelta(seconds=30))


def ended(i: int, *, failed: bool = True, secs: int = 30, explained: bool = True,
          reason: str = "OOMKilled") -> PodVerdict:
    return PodVerdict(f"w-{i:02d}", f"uid-{i}", "Failed" if failed else "Succeeded",
                      reason if failed else "Completed", f"pod w-{i:02d} {reason}",
                      137 if failed else 0, T0 + timedelta(seconds=secs), explained)


def conditions(s: TaskState) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in to_status(s)["conditions"]}


def test_a_worker_killed_without_a_word_fails_the_task_with_the_kubelet_s_reason() -> None:
    s = observe(fold_all(TASK, [report(1, 0, 0.5)]), [OOM])
    assert s.phase == "Failed" and s.finished
    c = conditions(s)
    assert c["Failed"]["reason"] == "PodFailed"
    assert c["Failed"]["message"] == ("pod w-01 ended without a final report: OOMKilled: "
                                      "container main: OOMKilled, exit code 137 (SIGKILL)")
    assert c["Failed"]["lastTransitionTime"] == "2026-11-30T03:00:30Z"
    st_ = to_status(s)
    assert st_["podOutcomes"] == [{"pod": "w-01", "uid": "uid-1", "phase": "Failed",
                                   "reason": "OOMKilled", "message": OOM.message,
                                   "exitCode": 137, "at": "2026-11-30T03:00:30Z"}]
    assert st_["progress"]["percent"] == 50 and "estimatedCompletionTime" not in st_["progress"]
    # What the process said stays beside it: its worker record is untouched.
    assert s.workers["w-01"].fraction == 0.5 and not s.workers["w-01"].final


def test_a_pod_s_own_final_decides_whenever_it_arrives() -> None:
    late_final = report(1, 1, 1.0, final=True, secs=40)
    first = observe(fold_all(TASK, [report(1, 0, 0.5)]), [OOM])
    assert first.phase == "Failed"
    for s in (fold_many(first, [late_final]),
              observe(fold_all(TASK, [report(1, 0, 0.5), late_final]), [OOM])):
        assert s.phase == "Succeeded"
        assert to_status(s)["podOutcomes"][0]["reason"] == "OOMKilled"  # still shown


def test_a_pod_that_succeeded_without_a_final_is_a_successful_final_at_100_percent() -> None:
    s = observe(fold_all(TASK, [report(1, 0, 0.5, workers=2), report(2, 0, 1.0, final=True,
                                                                      workers=2)]),
                [ended(1, failed=False, secs=50)])
    assert s.phase == "Succeeded"
    st_ = to_status(s)
    assert st_["progress"]["percent"] == 100
    assert conditions(s)["Completed"]["message"] == (
        "2 workers final (1 by their pod's end, without a final report)")
    assert conditions(s)["Completed"]["lastTransitionTime"] == "2026-11-30T03:00:50Z"


def test_a_pod_that_never_reported_does_not_become_a_worker() -> None:
    s = observe(fold_all(TASK, [report(1, 0, 1.0, final=True)]), [ended(7)])
    assert s.phase == "Succeeded" and len(s.roster.marks) == 1
    assert [o["pod"] for o in to_status(s)["podOutcomes"]] == ["w-07"]
    # ... until it does: then its end decides it.
    assert fold_many(s, [report(7, 0, 0.2)]).phase == "Failed"


def test_an_explained_end_beats_a_bare_deletion_in_any_order() -> None:
    deleted = ended(1, secs=90, explained=False, reason="Deleted")
    base = fold_all(TASK, [report(1, 0, 0.5)])
    a = observe(observe(base, [deleted]), [OOM])
    b = observe(observe(base, [OOM]), [deleted])
    assert a == b and a.observed.pods["w-01"].reason == "OOMKilled"
    assert observe(a, [OOM, deleted]) is a  # nothing new: the same state


def test_waiting_pods_show_why_until_they_run_or_end() -> None:
    pull = PodVerdict("w-02", "uid-2", "Waiting", "ImagePullBackOff",
                      'container main: ImagePullBackOff: Back-off pulling image "nope"', None,
                      T0 + timedelta(seconds=5))
    s = observe(fold_all(TASK, [report(1, 0, 0.5, workers=2)]), waiting=[pull])
    c = conditions(s)["PodsReady"]
    assert (c["status"], c["reason"]) == ("False", "ImagePullBackOff")
    assert c["message"] == f"1 pod of the task waits: pod w-02: {pull.message}"
    assert to_status(s)["waitingPods"][0]["since"] == "2026-11-30T03:00:05Z"
    assert s.phase == "Running"
    ready = conditions(observe(s, waiting=[]))["PodsReady"]
    assert (ready["status"], ready["reason"]) == ("True", "PodsRunning")
    # A waiting pod that ends is no longer waiting, whichever was seen first.
    end = ended(2, secs=60)
    assert observe(observe(s, [end]), waiting=[pull]) == observe(s, [end])
    # A task with no fact yet shows it too (a pre-created TaskFeedback whose pods wait).
    bare = observe(new_state(TASK), waiting=[pull])
    assert bare.phase == "Pending" and conditions(bare)["PodsReady"]["status"] == "False"


def test_observations_are_bounded() -> None:
    lim = Limits(observed_pods=3, waiting=2, roster=5)
    base = fold_all(TASK, [report(i, 0, 0.5) for i in range(8)], lim)
    s = observe(base, [ended(i) for i in range(8)[::-1]],
                waiting=[ended(i, secs=1)._replace(phase="Waiting") for i in range(10, 20)])
    assert sorted(s.observed.pods) == ["w-00", "w-01", "w-02"]
    assert len(s.observed.waiting) == 2 and len(s.roster.ends) <= 5
    assert s == observe(base, [ended(i) for i in range(8)],
                        waiting=[ended(i, secs=1)._replace(phase="Waiting")
                                 for i in range(10, 20)])
    # podOutcomes is what the byte budget drops first after the sender pods; the outcome
    # (roster.outcomes, conditions) never.
    big = observe(base, [ended(i, reason="X" * 60)._replace(message="m" * 256)
                         for i in range(8)])
    written = to_status(big, budget=1500)
    assert "podOutcomes" not in written and written["budgetDropped"]["podOutcomes"] >= 1
    assert written["phase"] == "Failed" and written["roster"]["outcomes"]


def test_a_thousand_waiting_pods_are_named_by_the_first_few_and_counted() -> None:
    # A Job of 1,000 pods that cannot pull their image: the status names the first 16 (by
    # name) and counts them all, within its byte budget with nothing dropped; PodsReady says
    # how many wait, names three and counts the rest; the count survives a status read.
    message = 'container main: ImagePullBackOff: Back-off pulling image "' + "r" * 190 + '"'
    pulls = [PodVerdict(f"train-{i:04d}-" + "p" * 200, f"uid-{i:04d}", "Waiting",
                        "ImagePullBackOff", message, None, T0 + timedelta(seconds=i % 7))
             for i in range(1000)]
    s = observe(new_state(TASK), waiting=pulls[::-1])
    status = to_status(s, budget=STATUS_BUDGET)
    size = len(orjson.dumps(status))
    assert size <= STATUS_BUDGET and "budgetDropped" not in status, size
    assert [w["pod"] for w in status["waitingPods"]] == sorted(v.pod for v in pulls)[:16]
    assert status["waitingCount"] == 1000
    ready = conditions(s)["PodsReady"]
    assert ready["message"].startswith("1000 pods of the task wait: pod train-0000-")
    assert ready["message"].endswith("(and 997 more)"), ready["message"][-80:]
    restored = decode_status(TASK, json.loads(orjson.dumps(status)))
    assert restored.observed.waiting_more == 984 and to_status(restored) == to_status(s)
    view = task_view(restored, status)
    assert len(view.waiting) == 16 and view.waiting_more == 984  # `state` and the page
    # Pods that end leave the count with the next view; none waiting beyond: no count.
    fewer = observe(s, [ended(0)._replace(pod=pulls[0].pod, uid=pulls[0].uid)],
                    waiting=pulls[1:])
    assert to_status(fewer)["waitingCount"] == 999
    assert "waitingCount" not in to_status(observe(s, waiting=pulls[:16]))


def test_pod_outcomes_round_trip_and_garbage_is_refused() -> None:
    s = observe(fold_all(TASK, [report(i, 0, 0.5) for i in range(3)]),
                [ended(0), ended(1, failed=False), gone("w-02", "uid-2", SEEN)],
                waiting=[ended(5)._replace(phase="Waiting")],
                platform=PlatformOutcome("batch/v1", "Job", "train", "u", "Running", "", "",
                                         None))
    restored = decode_status(TASK, json.loads(orjson.dumps(to_status(s))))
    assert restored == s
    assert with_end_uids(decode_ends(encode_ends(s.roster.ends)),
                         encode_end_uids(s.roster.ends)) == s.roster.ends
    # Read entry by entry: an unreadable pod outcome is kept verbatim
    # beside the rest; an unreadable roster or platform makes the read partial (shown, never
    # written over).
    exploded = {"pod": "x", "phase": "Exploded", "reason": "", "at": T}
    read = read_status(TASK, {**to_status(s), "podOutcomes": [
        *to_status(s)["podOutcomes"], exploded]})
    assert read.state.observed == s.observed and not read.unread.partial
    assert read.unread.items == {"podOutcomes": (exploded,)}
    for bad in ({"roster": {**to_status(s)["roster"], "outcomes": "%%%"}},
                {"platform": {"name": "x", "phase": "Sideways"}}):
        partial = read_status(TASK, {**to_status(s), **bad})
        assert partial.unread.partial and partial.state.workers == s.workers


# --- the platform decides -----------------------------------------------------------------

JOB = PlatformOutcome("batch/v1", "Job", "train", "job-uid", "Running", "", "", None)
COMPLETE = JOB._replace(phase="Succeeded", reason="CompletionsReached",
                        message="Reached expected number of succeeded pods",
                        at=T0 + timedelta(seconds=99))
BACKOFF = JOB._replace(phase="Failed", reason="BackoffLimitExceeded",
                       message="Job has reached the specified backoff limit",
                       at=T0 + timedelta(seconds=99))


def test_a_retried_attempt_is_not_the_task_s_failure_nor_a_missing_25_percent() -> None:
    """The issue's Job: backoffLimit 1, the first pod crashes (a failed final) or is
    OOM-killed, the second succeeds; the Job is Complete."""
    crashed = fold_all(TASK, [report(1, 0, 0.5, workers=1),
                              report(1, 1, 0.5, final=True, failed=True, workers=1)])
    killed = observe(fold_all(TASK, [report(1, 0, 0.5, workers=1)]), [OOM])
    for first in (crashed, killed):
        retrying = observe(first, platform=JOB)
        assert retrying.phase == "Running"  # the Job may retry: it decides
        second = fold_many(retrying, [report(2, 0, 1.0, final=True, workers=1, secs=60)])
        assert second.phase == "Running"  # all final, but the Job has not said so yet
        assert to_status(second)["progress"]["percent"] == 99
        done = observe(second, platform=COMPLETE)
        st_ = to_status(done)
        assert (st_["phase"], st_["progress"]["percent"]) == ("Succeeded", 100)
        c = conditions(done)
        assert c["Completed"]["message"] == ("Job train succeeded: CompletionsReached: "
                                             "Reached expected number of succeeded pods")
        assert c["Completed"]["lastTransitionTime"] == "2026-11-30T03:01:39Z"
        assert c["Failed"]["status"] == "False"


def test_the_platform_s_failure_fails_the_task_with_its_reason_whatever_the_workers_said(
        ) -> None:
    s = observe(fold_all(TASK, [report(1, 0, 1.0, final=True)]), platform=BACKOFF)
    assert s.phase == "Failed"
    c = conditions(s)["Failed"]
    assert (c["reason"], c["message"]) == (
        "BackoffLimitExceeded",
        "Job train failed: BackoffLimitExceeded: Job has reached the specified backoff limit")
    # Terminal beats running, whichever arrives first.
    assert observe(observe(new_state(TASK), platform=BACKOFF), platform=JOB).phase == "Failed"


TARGET = JOB._replace(reason="BackoffLimitExceeded",
                      message="Job has reached the specified backoff limit",
                      at=T0 + timedelta(seconds=99))
TAINT = PodVerdict("w-01", "uid-1", "Failed", "DeletionByTaintManager",
                   "Taint manager: deleting due to NoExecute taint", None,
                   T0 + timedelta(seconds=90))


def test_a_job_its_controller_failed_fails_the_task_once_none_of_its_pods_is_left_to_end(
        ) -> None:
    """FailureTarget, with the Job's Failed waiting for its pods to end: a worker deleted
    on a lost node never confirms its end, yet it has ended for the task."""
    working = fold_all(TASK, [report(1, 0, 0.3, workers=1)])
    # Its worker may still say its last words: the Job has not failed the task yet.
    assert observe(working, platform=TARGET).phase == "Running"
    for ended_ in (observe(working, [TAINT]),
                   fold_many(working, [report(1, 1, 0.3, final=True, failed=True,
                                              workers=1)])):
        s = observe(ended_, platform=TARGET)
        assert s.phase == "Failed" and s.finished
        c = conditions(s)["Failed"]
        assert (c["reason"], c["message"], c["lastTransitionTime"]) == (
            "BackoffLimitExceeded", "Job train failed: BackoffLimitExceeded: Job has reached "
            "the specified backoff limit", "2026-11-30T03:01:39Z")
        assert to_status(s)["progress"]["percent"] == 30  # what it reached, no retry
        # The Job's own Failed, once the node returns, says the same.
        assert observe(s, platform=BACKOFF).phase == "Failed"
    # A task no pod of which reported: its pods waiting or running keep it open.
    quiet = observe(new_state(TASK), platform=TARGET, running=(1, T0))
    assert quiet.phase == "Running"
    assert observe(quiet, running=(0, None)).phase == "Failed"


def test_a_task_the_platform_failed_keeps_the_progress_its_workers_reached() -> None:
    """A Job with backoffLimit 0 whose one worker reported 40 % and was OOM-killed (or
    reported 20 % and exited 3: a failed final of its own): the Job failed it, nothing is
    retried, so its progress is what the worker reached, not 0 %, in the status (the list's
    row, the page) and in the view (the Progress line, `watch`), as the worker's row says."""
    killed = observe(fold_all(TASK, [report(1, 0, 0.4, workers=1)]), [OOM])
    exited = fold_all(TASK, [report(1, 0, 0.2, workers=1),
                             report(1, 1, 0.2, final=True, failed=True, workers=1)])
    for first, pct in ((killed, 40), (exited, 20)):
        # While the Job may retry, a failed attempt is one a retry takes the place of.
        assert to_status(observe(first, platform=JOB))["progress"]["percent"] == 0
        failed = observe(first, platform=BACKOFF)
        st_ = to_status(failed)
        assert (st_["phase"], st_["progress"]["percent"]) == ("Failed", pct)
        row = summarize({"metadata": {"name": "train", "namespace": "team-a"},
                         "status": st_})
        assert (row.phase, row.percent) == ("Failed", pct)
        v = task_view(failed, st_)
        assert v.progress is not None and (v.progress.percent, v.progress.fraction) == (
            pct, pct / 100)
        assert [w.fraction for w in v.workers] == [pct / 100]
        assert task_view(failed).progress == v.progress  # a local fold says the same


# --- properties -----------------------------------------------------------------------------


@st.composite
def facts_and_observations(draw: st.DrawFn) -> list[ParsedEvent | PodVerdict | PlatformOutcome]:
    items: list[ParsedEvent | PodVerdict | PlatformOutcome] = []
    for pod_i, seq in draw(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2)),
                                    unique=True, max_size=12)):
        final = draw(st.booleans())
        items.append(report(pod_i, seq, draw(st.sampled_from([0.0, 0.5, 1.0])), final=final,
                            failed=final and draw(st.booleans()),
                            workers=draw(st.sampled_from([0, 3])), secs=seq))
    for _ in range(draw(st.integers(0, 6))):
        items.append(ended(draw(st.integers(0, 5)), failed=draw(st.booleans()),
                           secs=draw(st.integers(0, 3)), explained=draw(st.booleans())))
    for _ in range(draw(st.integers(0, 2))):
        items.append(draw(st.sampled_from([JOB, COMPLETE, BACKOFF])))
    return items


def apply(state: TaskState, item: ParsedEvent | PodVerdict | PlatformOutcome) -> TaskState:
    if isinstance(item, PodVerdict):
        return observe(state, [item])
    if isinstance(item, PlatformOutcome):
        return observe(state, platform=item)
    return fold_many(state, [item])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(facts_and_observations(), st.randoms(use_true_random=False),
       st.sampled_from([Limits(), Limits(workers=2, roster=4, observed_pods=2)]))
def test_observations_and_facts_fold_the_same_in_any_order_and_twice(
        items: list[ParsedEvent | PodVerdict | PlatformOutcome], rnd: random.Random,
        limits: Limits) -> None:
    base = new_state(TASK, limits)
    for item in items:
        base = apply(base, item)
    shuffled = items + [rnd.choice(items) for _ in range(3)] if items else []
    rnd.shuffle(shuffled)
    again = new_state(TASK, limits)
    for item in shuffled:
        again = apply(again, item)
    assert without_duplicates(to_status(again)) == without_duplicates(to_status(base))
    restored = decode_status(TASK, json.loads(orjson.dumps(to_status(base))), limits)
    assert restored == base
    # The rule, recomputed plainly from what the state holds.
    r = base.roster
    p = base.observed.platform
    if p is not None and p.phase != "Running":
        assert base.phase == p.phase
    elif p is None:
        own = {h: m.bits for h, m in r.marks.items()}
        ends = {h: e for h, e in r.ends.items() if h in own and not own[h] & (1 << 14)}
        failed = r.first_failure is not None or any(e.failed for e in ends.values())
        final = sum(1 for b in own.values() if b & (1 << 14)) + len(ends)
        want = ("Failed" if failed else "Succeeded" if own and final == len(own)
                and len(own) >= r.declared else base.phase)
        assert base.phase == want
    assert len(base.observed.pods) <= limits.observed_pods
    if limits == Limits():  # (under tiny caps the two cuts may keep different pods)
        assert all(pod_hash(p_) in r.ends for p_ in base.observed.pods)
    assert len(orjson.dumps(to_status(base, budget=STATUS_BUDGET))) <= STATUS_BUDGET


def test_every_field_an_observed_status_holds_is_in_the_crd() -> None:
    """The API server prunes what its schema does not name: every key written must be in
    deploy/crd.yaml (and so in the chart's byte-equal copy), with its type."""
    from pathlib import Path

    import yaml

    crd = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    s = observe(fold_all(TASK, [report(1, 0, 0.5), report(2, 0, 0.5)]),
                [OOM, gone("w-02", "uid-2", SEEN)],
                waiting=[OOM._replace(pod="w-03", phase="Waiting", reason="ErrImagePull")],
                platform=BACKOFF)
    status = to_status(s, budget=400)  # budgetDropped too

    def walk(value: Any, sch: dict[str, Any], path: str) -> None:
        if sch.get("x-kubernetes-preserve-unknown-fields") and "type" not in sch:
            # A record: a string, each of whose fields the entry's description names.
            assert isinstance(value, str), path
            for part in value.split("; "):
                assert f"{part.partition('=')[0]} (" in sch["description"], (path, part)
            return
        kind = {dict: "object", list: "array", str: "string", bool: "boolean",
                int: "integer", float: "number"}[type(value)]
        assert sch.get("type") == kind or (kind == "integer" and sch.get("type") == "number"), \
            (path, sch.get("type"), kind)
        if isinstance(value, dict):
            for k, v in value.items():
                sub = sch.get("properties", {}).get(k) or sch.get("additionalProperties")
                assert isinstance(sub, dict), f"{path}.{k} is not in the CRD"
                walk(v, sub, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, sch["items"], f"{path}[{i}]")
        if isinstance(value, str) and "maxLength" in sch:
            assert len(value) <= sch["maxLength"], path
        if "enum" in sch:
            assert value in sch["enum"], path

    walk(status, schema, "status")
    for key in ("podOutcomes", "platform", "budgetDropped"):
        assert key in status or key in status.get("budgetDropped", {}), key
