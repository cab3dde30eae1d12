"""The task from the platform's own labels, pure: which key names a
pod's task, which object owns it, and the watcher's handling of a fact about a pod (the
sender cache holds the pods, so nothing asks the API server)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.schemas import LogLink, ParsedEvent, PodRef, Progress, TaskRef
from tidings.schemas.wire.constants import API_VERSION, KIND, TASK_LABEL
from tidings.schemas.wire.event import ObjectRef
from tidings.schemas.wire.platform import (
    DEFAULT_TASK_KEYS,
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_UID_LABEL,
    TRAINJOB_LABEL,
    WORKFLOW_LABEL,
    PodTask,
    parse_task_keys,
    pod_task,
)
from tidings.schemas.wire.rejection import Rejection
from tidings.watcher.controller import Controller, Settings
from tidings.watcher.metrics import Metrics
from tidings.watcher.platform import JOB, Seen
from tidings.watcher.senders import Senders

UID = "0b6c1d2e-1111-4222-8333-444455556666"
UID2 = "9a8b7c6d-1111-4222-8333-444455556666"


def meta(labels: dict[str, Any], owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": "p-0", "namespace": "ml", "uid": "pod-uid", "labels": labels,
            "ownerReferences": owners or []}


def controller_ref(api: str, kind: str, name: str, uid: str = UID) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}


def test_the_default_keys_are_the_issue_s_list_and_the_help_text_names_them() -> None:
    assert DEFAULT_TASK_KEYS == (
        "tidings.dev/task", "trainer.kubeflow.org/trainjob-name",
        "training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name",
        "workflows.argoproj.io/workflow", "batch.kubernetes.io/job-name")
    from dataclasses import fields

    from tidings.watcher.settings import Settings, task_keys

    (declared,) = [f for f in fields(Settings) if f.name == "task_label_keys"]
    assert ", ".join(DEFAULT_TASK_KEYS) in declared.metadata["help"]
    assert task_keys(Settings()) == DEFAULT_TASK_KEYS
    assert task_keys(Settings(task_label_keys="a/b,c")) == ("a/b", "c")


def test_a_job_pod_names_its_job_owned_by_the_controller_uid_label() -> None:
    # What the Job controller sets on its pods (batch/v1, Kubernetes 1.27+).
    got = pod_task(meta({JOB_NAME_LABEL: "train-7", "batch.kubernetes.io/controller-uid": UID,
                         "controller-uid": UID, "job-name": "train-7",
                         "batch.kubernetes.io/job-completion-index": "0"},
                        [controller_ref("batch/v1", "Job", "train-7")]))
    assert got == PodTask("train-7", JOB_NAME_LABEL, owner=ObjectRef(
        "batch/v1", "Job", "train-7", "ml", UID), job="train-7")


def test_a_jobset_pod_names_the_jobset_not_its_child_job() -> None:
    got = pod_task(meta({JOBSET_NAME_LABEL: "llm", JOBSET_UID_LABEL: UID,
                         "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                         JOB_NAME_LABEL: "llm-workers-0",
                         "batch.kubernetes.io/controller-uid": UID2},
                        [controller_ref("batch/v1", "Job", "llm-workers-0", UID2)]))
    assert got == PodTask("llm", JOBSET_NAME_LABEL, owner=ObjectRef(
        "jobset.x-k8s.io/v1alpha2", "JobSet", "llm", "ml", UID))
    assert got.job == ""  # its completions are the child Job's, not the task's


def test_a_jobset_pod_without_its_uid_label_names_the_job_to_read_its_owner_through() -> None:
    # JobSet v0.8.2 (the release Trainer v2.0.0 installs) labels no jobset-uid: the pod's
    # controller Job is the way to its JobSet (the watcher verifies both links).
    job = controller_ref("batch/v1", "Job", "llm-workers-0", UID2)
    got = pod_task(meta({JOBSET_NAME_LABEL: "llm", JOB_NAME_LABEL: "llm-workers-0"}, [job]))
    assert got == PodTask("llm", JOBSET_NAME_LABEL, via=ObjectRef(
        "batch/v1", "Job", "llm-workers-0", "ml", UID2))
    # The uid label, where there is one, is the claim itself: no detour.
    got = pod_task(meta({JOBSET_NAME_LABEL: "llm", JOBSET_UID_LABEL: UID}, [job]))
    assert got is not None and got.via is None and got.owner is not None
    # Only a batch/v1 Job that controls the pod, with a uid, for a pod of the JobSet that
    # names the task (a Workflow's pod is owned by its Workflow, never through a Job).
    for labels, owners in [
            ({JOBSET_NAME_LABEL: "llm"}, [{**job, "controller": False}]),
            ({JOBSET_NAME_LABEL: "llm"}, [{**job, "apiVersion": "evil.example/v1"}]),
            ({JOBSET_NAME_LABEL: "llm"}, [{**job, "uid": "not a uid!"}]),
            ({JOBSET_NAME_LABEL: "llm"}, [{**job, "name": "../../secrets/x"}]),
            ({WORKFLOW_LABEL: "llm"}, [job]),
            ({TRAINJOB_LABEL: "bert", JOBSET_NAME_LABEL: "other"}, [job])]:
        got = pod_task(meta(labels, owners))
        assert got is not None and got.via is None, (labels, owners)


def test_a_trainjob_pod_names_the_trainjob_owned_through_its_jobset() -> None:
    got = pod_task(meta({TRAINJOB_LABEL: "bert", JOBSET_NAME_LABEL: "bert",
                         JOBSET_UID_LABEL: UID, JOB_NAME_LABEL: "bert-node-0"}))
    assert got is not None and (got.task, got.key) == ("bert", TRAINJOB_LABEL)
    assert got.owner == ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "bert", "ml", UID)


def test_an_argo_pod_names_its_workflow_owned_by_its_owner_reference() -> None:
    got = pod_task(meta({WORKFLOW_LABEL: "wf-x2k9"},
                        [controller_ref("argoproj.io/v1alpha1", "Workflow", "wf-x2k9")]))
    assert got is not None and got.task == "wf-x2k9"
    assert got.owner == ObjectRef("argoproj.io/v1alpha1", "Workflow", "wf-x2k9", "ml", UID)


@pytest.mark.parametrize("owners", [
    [],  # no owner shown: unowned
    [controller_ref("argoproj.io/v1alpha1", "Workflow", "another-wf")],  # not the task's
    [{**controller_ref("argoproj.io/v1alpha1", "Workflow", "wf-x2k9"), "controller": False}],
    [controller_ref("argoproj.io/v1alpha1", "Workflow", "wf-x2k9", uid="not a uid!")],
    [controller_ref("evil.example/v1", "Workflow", "wf-x2k9")],
])
def test_an_owner_is_taken_only_from_what_names_the_task(owners: list[dict[str, Any]]) -> None:
    got = pod_task(meta({WORKFLOW_LABEL: "wf-x2k9"}, owners))
    assert got is not None and got.owner is None


def test_tidings_task_wins_and_has_no_owner() -> None:
    got = pod_task(meta({TASK_LABEL: "mine", JOB_NAME_LABEL: "train-7",
                         "batch.kubernetes.io/controller-uid": UID}))
    assert got == PodTask("mine", TASK_LABEL)


@pytest.mark.parametrize("value", ["Train_7", "x" * 64, "-a", ""])
def test_a_label_naming_no_valid_task_is_an_error_not_the_next_key(value: str) -> None:
    got = pod_task(meta({JOBSET_NAME_LABEL: value, JOB_NAME_LABEL: "fine"}))
    assert got is not None and got.task == "" and got.key == JOBSET_NAME_LABEL
    assert got.error.startswith(f"label {JOBSET_NAME_LABEL}: task id ")


def test_no_key_no_task() -> None:
    assert pod_task(meta({"app": "x"})) is None
    assert pod_task({"labels": None}) is None
    assert pod_task(None) is None


@given(st.dictionaries(st.sampled_from([*DEFAULT_TASK_KEYS, "x"]), st.text(max_size=70)),
       st.lists(st.dictionaries(st.sampled_from(["apiVersion", "kind", "name", "uid",
                                                 "controller"]),
                                st.one_of(st.text(max_size=20), st.booleans())), max_size=3))
def test_any_labels_and_owners_read_without_raising(labels: dict[str, str],
                                                    owners: list[dict[str, Any]]) -> None:
    got = pod_task(meta(labels, owners))
    assert got is None or (bool(got.task) != bool(got.error))


def test_key_lists_are_parsed_and_bad_keys_refused() -> None:
    assert parse_task_keys(" a/b , c ,a/b") == ("a/b", "c")
    for bad in ("", " , ", "bad key", "UPPER.example/x", "a/b/c"):
        with pytest.raises(ValueError):
            parse_task_keys(bad)


# --- the watcher's side ---------------------------------------------------------------------

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)


def pod_fact(pod: PodRef, payload: Any, seq: int) -> ParsedEvent:
    """A fact about the sender's own pod, as parse_event returns it."""
    return ParsedEvent(TaskRef(pod.namespace, pod.name), pod, payload, "inst-1", seq, T0,
                       f"{pod.name}.{seq:016x}", "Pod", regarding_api_version="v1",
                       regarding_uid=pod.uid)


def test_a_fact_about_a_known_pod_is_folded_into_its_platform_task() -> None:
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    pod = PodRef("train-7-0-x", "uid-0", "ml")
    info = pod_task(meta({JOB_NAME_LABEL: "train-7", "batch.kubernetes.io/controller-uid": UID}))
    assert info is not None
    c.senders.put(("ml", pod.name, pod.uid), info)
    task = TaskRef("ml", "train-7")
    # The Job's informer has seen it: the uid the pod shows is the live Job's, so it owns
    # the TaskFeedback (an owner the watcher cannot read is never written: no API here).
    c.platform.put(JOB, ("ml", "train-7"), Seen(UID, None, 4, None))
    c.delivery.deliver_many([pod_fact(pod, LogLink(name="w", url="https://w.ai/"), 1)])
    c.store.load(task, None, exists=False)
    c.folder.fold_task(task)
    state, _ = c.store.take(task)
    assert state.links == {"w": "https://w.ai/"}
    assert c.platform.owner(task) == ObjectRef("batch/v1", "Job", "train-7", "ml", UID)


def test_a_pod_claiming_an_owner_no_live_object_is_is_refused() -> None:
    """A bare pod labelled for the Job with a forged controller-uid."""
    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    c.platform.put(JOB, ("ml", "victim"), Seen(UID, None, 1, None))
    forged = "0f0f0f0f-0000-4000-8000-000000000000"
    info = pod_task(meta({JOB_NAME_LABEL: "victim", "controller-uid": forged}))
    pod = PodRef("victim-x", "uid-x", "ml")
    c.senders.put(("ml", pod.name, pod.uid), info)
    task = TaskRef("ml", "victim")
    c.delivery.deliver_many([pod_fact(pod, LogLink(name="w", url="https://evil.example/"), 1)])
    c.store.load(task, None, exists=False)
    c.folder.fold_task(task)
    state, _ = c.store.take(task)
    assert state.links == {} and c.platform.owner(task) is None
    assert c.metrics.events_rejected.labels("unverified_owner")._value.get() == 1


def test_a_fact_about_a_pod_whose_task_cannot_be_known_is_refused_never_guessed() -> None:
    senders = Senders(None)
    gone = PodRef("ghost-0", "uid-g", "ml")
    senders.delete(("ml", gone.name, gone.uid))  # seen once, with no task key
    verdict = senders.task_of(pod_fact(gone, Progress(fraction=1.0, final=True), 1))
    assert isinstance(verdict, Rejection) and verdict.reason.value == "unknown_task"
    bad = PodRef("bad-0", "uid-b", "ml")
    senders.put(("ml", bad.name, bad.uid), pod_task(meta({JOB_NAME_LABEL: "Bad_Name"})))
    verdict = senders.task_of(pod_fact(bad, Progress(fraction=1.0, final=True), 1))
    assert isinstance(verdict, Rejection) and verdict.reason.value == "bad_task_id"
    assert "Bad_Name" in verdict.message


def test_a_pod_of_two_platforms_takes_the_first_key_and_says_so_at_debug(
        caplog: pytest.LogCaptureFixture) -> None:
    from tidings.watcher.senders import PodSource

    senders = Senders(None)
    src = PodSource(senders, WORKFLOW_LABEL)
    pod = {"metadata": {**meta({WORKFLOW_LABEL: "wf-1", JOB_NAME_LABEL: "job-1"}),
                        "resourceVersion": "5"}}
    import orjson

    with caplog.at_level(logging.DEBUG, "tidings.watcher.senders"):
        src.watch_line(orjson.dumps({"type": "ADDED", "object": pod}))
    known, info = senders.lookup(("ml", "p-0", "pod-uid"))
    assert known and isinstance(info, PodTask) and info.task == "wf-1"
    assert [r.getMessage() for r in caplog.records] == [
        f"pod ml/p-0 carries the task keys {WORKFLOW_LABEL}, {JOB_NAME_LABEL}; its task is "
        f"{WORKFLOW_LABEL}=wf-1 (the first)"]


def test_a_task_fact_from_a_job_pod_is_checked_against_its_job_label() -> None:
    senders = Senders(None)
    pod = PodRef("train-7-0-x", "uid-0", "ml")
    senders.put(("ml", pod.name, pod.uid), pod_task(meta({JOB_NAME_LABEL: "train-7"})))

    def fact(task: str) -> ParsedEvent:
        return ParsedEvent(TaskRef("ml", task), pod, LogLink(name="w", url="https://w.ai/"),
                           "i", 1, T0, f"{task}.0000000000000001", KIND,
                           regarding_api_version=API_VERSION)

    assert senders.check(fact("train-7")) is None
    refused = senders.check(fact("victim"))
    assert isinstance(refused, Rejection) and refused.reason.value == "spoofed_sender"
    assert refused.message == (f"related pod train-7-0-x is labelled {JOB_NAME_LABEL}=train-7; "
                               "the event claims task victim")


# --- what the pod informers say of each pod ------------------------------


def pod_line(wtype: str, labels: dict[str, str], status: dict[str, Any],
             deleting: bool = False) -> bytes:
    import orjson

    m = {**meta(labels), "resourceVersion": "7"}
    if deleting:
        m["deletionTimestamp"] = "2026-12-01T09:05:00Z"
    return orjson.dumps({"type": wtype, "object": {"metadata": m, "status": status}})


def test_the_pod_informers_keep_each_pod_s_end_by_task_and_tell_each_change_once() -> None:
    from tidings.watcher.senders import PodSource

    told: list[TaskRef] = []
    senders = Senders(None, on_change=told.append)
    labels = {JOB_NAME_LABEL: "train", TASK_LABEL: "train"}
    # The same pod comes through two task keys' informers, as a JobSet's pod would.
    sources = [PodSource(senders, TASK_LABEL), PodSource(senders, JOB_NAME_LABEL)]
    task = TaskRef("ml", "train")
    running = {"phase": "Running"}
    oom = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-12-01T09:04:00Z"}}}]}
    pulling = {"phase": "Pending", "containerStatuses": [{"name": "main", "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}]}
    for src in sources:
        src.watch_line(pod_line("ADDED", labels, running))
    # (told once: a pod that runs makes a task that said nothing yet Running)
    assert told == [task] and senders.verdicts(task) == [] and senders.running(task)[0] == 1
    for src in sources:
        src.watch_line(pod_line("MODIFIED", labels, pulling))
    assert told == [task] * 2 and [v.reason for v in senders.verdicts(task)] == [
        "ImagePullBackOff"] and senders.running(task)[0] == 0
    for src in sources:
        src.watch_line(pod_line("MODIFIED", labels, running))
    assert told == [task] * 3 and senders.verdicts(task) == []  # no longer waiting
    for src in sources:
        src.watch_line(pod_line("MODIFIED", labels, oom))
    for src in sources:
        src.watch_line(pod_line("DELETED", labels, running, deleting=True))
    (v,) = senders.verdicts(task)
    assert (v.reason, v.exit_code) == ("OOMKilled", 137) and len(told) == 4  # an end is kept
    # The second informer's delete keeps what the first remembered of the pod: its task.
    known, info = senders.lookup(("ml", "p-0", "pod-uid"))
    assert known and isinstance(info, PodTask) and info.task == "train"
    assert senders.pods_of(task) == ["p-0"]


def test_a_reporting_pod_gone_while_no_watcher_watched_is_found_gone() -> None:
    senders = Senders(None)
    task = TaskRef("ml", "train")
    senders.put(("ml", "live-0", "u0"), PodTask("train", TASK_LABEL))
    senders.delete(("ml", "dead-0", "u1"))  # seen deleted, with no object (a relist)
    gone = senders.gone(task, [("live-0", "u0"), ("dead-0", "u1")])
    assert [(v.pod, v.reason, v.explained) for v in gone] == [("dead-0", "Deleted", False)]


def test_pod_ends_are_bounded_but_never_for_a_task_the_watcher_holds() -> None:
    from tidings.schemas.engine.observed import gone

    senders = Senders(None, holds=lambda task: task.name == "held", max_verdicts=2)
    for i, name in enumerate(["other", "other", "other", "held", "held"]):
        key = ("ml", f"{name}-{i}", f"u{i}")
        senders.put(key, PodTask(name, TASK_LABEL), gone(key[1], key[2], T0))
    assert len(senders.verdicts(TaskRef("ml", "other"))) == 2
    assert len(senders.verdicts(TaskRef("ml", "held"))) == 2


# --- a JobSet's pods without its uid label: the owner through their Job (JobSet v0.8.2) -----

JOBSET_REF = ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "llm", "ml", UID)
FORGED = "0f0f0f0f-0000-4000-8000-000000000000"


def fold_as_jobset_pod(job_ref: dict[str, Any], jobs: dict[str, Seen]) -> Controller:
    """A pod of JobSet ``llm`` whose controller is ``job_ref`` reports a link, with the live
    Jobs ``jobs`` and the live JobSet llm (uid UID) in the watcher's caches."""
    from tidings.watcher.platform import JOBSET

    c = Controller(None, Settings(), Metrics())  # type: ignore[arg-type]
    for name, seen in jobs.items():
        c.platform.put(JOB, ("ml", name), seen)
    c.platform.put(JOBSET, ("ml", "llm"), Seen(UID, None, None, None))
    pod = PodRef("llm-w-0-0-x", "uid-0", "ml")
    c.senders.put(("ml", pod.name, pod.uid), pod_task(meta(
        {JOBSET_NAME_LABEL: "llm", JOB_NAME_LABEL: job_ref["name"]}, [job_ref])))
    c.delivery.deliver_many([pod_fact(pod, LogLink(name="w", url="https://w.ai/"), 1)])
    c.store.load(TaskRef("ml", "llm"), None, exists=False)
    c.folder.fold_task(TaskRef("ml", "llm"))
    return c


def test_a_jobset_pod_s_owner_is_read_through_its_verified_job() -> None:
    job = controller_ref("batch/v1", "Job", "llm-w-0", UID2)
    c = fold_as_jobset_pod(job, {"llm-w-0": Seen(UID2, JOBSET_REF, 1, None)})
    task = TaskRef("ml", "llm")
    state, _ = c.store.take(task)
    assert state.links == {"w": "https://w.ai/"}
    assert c.platform.owner(task) == JOBSET_REF


@pytest.mark.parametrize("job_ref, jobs, refused", [
    # A Job of that name, but not the one the pod names (a forged uid): refused.
    (controller_ref("batch/v1", "Job", "llm-w-0", FORGED),
     {"llm-w-0": Seen(UID2, JOBSET_REF, 1, None)}, True),
    # A live Job (the attacker's) whose controller reference forges the JobSet's uid.
    (controller_ref("batch/v1", "Job", "llm-fake", UID2),
     {"llm-fake": Seen(UID2, replace(JOBSET_REF, uid=FORGED), 1, None)}, True),
    # A live Job of another JobSet, or of none: no owner, nothing forged (the pod's label
    # still names the task, as a hand-labelled pod's does).
    (controller_ref("batch/v1", "Job", "other-w-0", UID2),
     {"other-w-0": Seen(UID2, ObjectRef("jobset.x-k8s.io/v1alpha2", "JobSet", "other", "ml",
                                        UID), 1, None)}, False),
    (controller_ref("batch/v1", "Job", "plain", UID2), {"plain": Seen(UID2, None, 1, None)},
     False),
], ids=["forged-job-uid", "forged-jobset-uid", "another-jobset", "no-jobset"])
def test_a_jobset_pod_claiming_through_a_fake_job_chain_owns_nothing(
        job_ref: dict[str, Any], jobs: dict[str, Seen], refused: bool) -> None:
    c = fold_as_jobset_pod(job_ref, jobs)
    task = TaskRef("ml", "llm")
    state, _ = c.store.take(task)
    assert c.platform.owner(task) is None
    assert state.links == ({} if refused else {"w": "https://w.ai/"})
    assert c.metrics.events_rejected.labels("unverified_owner")._value.get() == int(refused)
