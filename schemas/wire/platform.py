"""Which task a pod works for, read from the labels its platform's controller gives it (Job,
JobSet, Kubeflow Trainer and training-operator, Argo Workflows), and which object owns that
task: one pure reading shared by the watcher's sender check, `lineage` and `logs`.

A task key list is ordered, most specific first: a JobSet's pods also carry their child Job's
name, and a TrainJob's pods their JobSet's; the first key a pod carries names its task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .constants import TASK_LABEL
from .event import ObjectRef, valid_uid
from .names import task_id_error, valid_task_id

JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
JOB_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"
TRAINJOB_LABEL: Final = "trainer.kubeflow.org/trainjob-name"
TRAINING_JOB_LABEL: Final = "training.kubeflow.org/job-name"
WORKFLOW_LABEL: Final = "workflows.argoproj.io/workflow"

#: The default task keys, most specific first (``tidings watcher run --task-label-keys``).
DEFAULT_TASK_KEYS: Final[tuple[str, ...]] = (
    TASK_LABEL, TRAINJOB_LABEL, TRAINING_JOB_LABEL, JOBSET_NAME_LABEL, WORKFLOW_LABEL,
    JOB_NAME_LABEL)

# A label key: an optional DNS-subdomain prefix and a name of at most 63 characters.
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


@dataclass(frozen=True, slots=True)
class PodTask:
    """What a pod's labels say about its task: ``task`` named by the label ``key`` (the first
    key of the list the pod carries), or ``error`` when that label's value is no valid task
    id; the ``owner`` its TaskFeedback gets, when the pod shows that object's uid; ``job``:
    the batch/v1 Job whose ``spec.completions`` is the task's worker count (the task is that
    Job itself); ``via``: the Job that controls the pod, when the task is that Job's
    controller's and the pod shows no uid of it (JobSet before v0.10 labels no uid): the
    watcher reads the owner through that Job (``watcher/platform.py``)."""

    task: str
    key: str
    error: str = ""
    owner: ObjectRef | None = None
    job: str = ""
    via: ObjectRef | None = None


def parse_task_keys(text: str) -> tuple[str, ...]:
    """A comma-separated key list; raises ValueError (one line) for an empty list or a key
    that is not a label key."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise ValueError("no label keys given")
    for k in keys:
        if len(k) > 316 or not _LABEL_KEY.match(k):
            raise ValueError(f"{k[:80]!r} is not a label key ([prefix/]name)")
    return tuple(dict.fromkeys(keys))


def task_selector(key: str, task: str) -> str:
    """The label selector of the pods whose label ``key`` names ``task``."""
    return f"{key}={task}"


def pod_task(meta: Any, keys: Sequence[str] = DEFAULT_TASK_KEYS) -> PodTask | None:
    """The task a pod's metadata (as the API returns it) names through ``keys``; None when
    the pod carries none of them."""
    if not isinstance(meta, Mapping):
        return None
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        return None
    for key in keys:
        value = labels.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            return PodTask("", key, f"label {key} is not a string")
        bad = task_id_error(value)
        if bad is not None:
            return PodTask("", key, f"label {key}: {bad}")
        namespace = meta.get("namespace")
        namespace = namespace if isinstance(namespace, str) else ""
        refs = meta.get("ownerReferences")
        owner = _owner(key, namespace, value, labels, refs)
        via = _controlling_job(namespace, refs) if owner is None and key in (
            JOBSET_NAME_LABEL, TRAINJOB_LABEL) and labels.get(JOBSET_NAME_LABEL) == value \
            else None
        return PodTask(value, key, owner=owner, job=value if key == JOB_NAME_LABEL else "",
                       via=via)
    return None


def other_keys(meta: Any, keys: Sequence[str], chosen: str) -> list[str]:
    """The keys of the list a pod carries besides ``chosen`` (two platforms' labels: the
    first key wins, and the watcher says so at DEBUG)."""
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return []
    return [k for k in keys if k != chosen and k in labels]


# The platforms' owner objects: (apiVersion, kind) of the uid labels' objects.
_JOB = ("batch/v1", "Job")
_JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
# Per key: which controller ownerReferences name the task (apiVersion group prefix, kinds;
# an empty kinds tuple: any kind of that group, as training-operator has several).
_CONTROLLERS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    JOB_NAME_LABEL: ("batch/", ("Job",)),
    WORKFLOW_LABEL: ("argoproj.io/", ("Workflow",)),
    TRAINING_JOB_LABEL: ("kubeflow.org/", ()),
    TRAINJOB_LABEL: ("trainer.kubeflow.org/", ("TrainJob",)),
}


def _owner(key: str, namespace: str, task: str, labels: Mapping[str, Any], refs: Any
           ) -> ObjectRef | None:
    """The object owning the task, when the pod shows its uid: the pod's controller
    ownerReference naming the task, else the platform's uid label."""
    group = _CONTROLLERS.get(key)
    if group is not None and isinstance(refs, list):
        prefix, kinds = group
        for ref in refs:
            if not isinstance(ref, Mapping) or ref.get("controller") is not True:
                continue
            api, kind, name, uid = (ref.get(f) for f in ("apiVersion", "kind", "name", "uid"))
            if (isinstance(api, str) and api.startswith(prefix) and isinstance(kind, str)
                    and (not kinds or kind in kinds) and name == task
                    and isinstance(uid, str) and valid_uid(uid)):
                return ObjectRef(api, kind, task, namespace, uid)
    if key == JOB_NAME_LABEL:
        for uid_label in JOB_UID_LABELS:
            uid = labels.get(uid_label)
            if isinstance(uid, str) and valid_uid(uid):
                return ObjectRef(*_JOB, task, namespace, uid)
    # A TrainJob's JobSet has the TrainJob's name and is owned by it: owned by the JobSet,
    # the TaskFeedback goes with the TrainJob too.
    if key in (JOBSET_NAME_LABEL, TRAINJOB_LABEL) and labels.get(JOBSET_NAME_LABEL) == task:
        uid = labels.get(JOBSET_UID_LABEL)
        if isinstance(uid, str) and valid_uid(uid):
            return ObjectRef(*_JOBSET, task, namespace, uid)
    return None


def _controlling_job(namespace: str, refs: Any) -> ObjectRef | None:
    """The batch/v1 Job a pod's controller ownerReference names (a JobSet's Jobs own their
    pods), with its uid: a claim the watcher verifies, then follows to the Job's own
    controller."""
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        api, kind, name, uid = (ref.get(f) for f in ("apiVersion", "kind", "name", "uid"))
        if api == _JOB[0] and kind == _JOB[1] and isinstance(name, str) \
                and valid_task_id(name) and isinstance(uid, str) and valid_uid(uid):
            return ObjectRef(*_JOB, name, namespace, uid)
    return None


def jobset_of(task: str, namespace: str, controller: ObjectRef | None) -> ObjectRef | None:
    """The JobSet named ``task`` when a Job's controller reference (``controller``) names it:
    the owner a JobSet's pod claims through its Job (``PodTask.via``)."""
    if controller is None or controller.kind != _JOBSET[1] or controller.name != task \
            or controller.api_version.split("/")[0] != _JOBSET[0].split("/")[0]:
        return None
    return ObjectRef(controller.api_version, controller.kind, task, namespace, controller.uid)
