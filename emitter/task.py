"""For controllers: create a task's TaskFeedback before its pods start, owned by your object.

    from tidings.emitter.task import create_task_feedback, pod_task_uid

    made = create_task_feedback("train-42", namespace="ml", owner=my_job)  # the API's dict
    wiring = pod_task_uid(made.uid)
    pod["metadata"]["annotations"].update(wiring["annotations"])
    container["env"] += wiring["env"]

The TaskFeedback then carries an ownerReference to the controller's object, so the garbage
collector deletes it with that object; the pods read its uid from their own annotation
through the downward API (``TIDINGS_TASK_UID``), and the emitter puts it into every event's
``regarding.uid``, which is what ``kubectl describe taskfeedback`` lists events by. Without a
pre-created TaskFeedback nothing changes: the watcher creates it at the first fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidings.kube import Client, ConfigError, KubeError, StatusPredicates
from tidings.schemas.wire.constants import TASK_LABEL
from tidings.schemas.wire.contract import taskfeedback_body, taskfeedback_path
from tidings.schemas.wire.event import ObjectRef, valid_uid

from .transport import FIELD_MANAGER

# The pod annotation the controller writes and the downward API turns into TIDINGS_TASK_UID.
TASK_UID_ANNOTATION = "tidings.dev/task-uid"
TASK_UID_ENV = "TIDINGS_TASK_UID"
MERGE_PATCH = "application/merge-patch+json"


class TaskFeedbackError(StatusPredicates, Exception):
    """The API refused or could not be reached; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class CreatedTask:
    """The TaskFeedback as created (or adopted): its name, namespace and uid."""

    name: str
    namespace: str
    uid: str
    created: bool  # False: it existed already and now carries this owner


def owner_ref(owner: ObjectRef | Mapping[str, Any]) -> ObjectRef:
    """``owner`` as an ObjectRef: given as one (with uid), or as an object as the API returns
    it (apiVersion, kind, metadata.name, metadata.uid). Raises ValueError when incomplete."""
    if isinstance(owner, ObjectRef):
        ref = owner
    else:
        meta = owner.get("metadata") or {}
        ref = ObjectRef(str(owner.get("apiVersion", "")), str(owner.get("kind", "")),
                        str(meta.get("name", "")), str(meta.get("namespace", "") or ""),
                        str(meta.get("uid", "")))
    if not (ref.api_version and ref.kind and ref.name):
        raise ValueError("owner needs apiVersion, kind and name")
    if not valid_uid(ref.uid):
        raise ValueError(f"owner {ref.kind}/{ref.name} needs its uid (read it from the API)")
    return ref


def owner_reference(ref: ObjectRef) -> dict[str, Any]:
    """The controller ownerReference to ``ref``. blockOwnerDeletion stays off, so creating the
    dependent needs no rights on the owner's finalizers."""
    return {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid,
            "controller": True}


def pod_task_uid(uid: str) -> dict[str, Any]:
    """What a pod template needs so its emitter sets ``regarding.uid``: the annotation, and
    the container env entry that reads it through the downward API."""
    if not valid_uid(uid):
        raise ValueError(f"{uid!r} is not an object uid")
    return {
        "annotations": {TASK_UID_ANNOTATION: uid},
        "env": [{"name": TASK_UID_ENV, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{TASK_UID_ANNOTATION}']"}}}],
    }


def create_task_feedback(task: str, *, namespace: str, owner: ObjectRef | Mapping[str, Any],
                         client: Client | None = None, labels: Mapping[str, str] | None = None
                         ) -> CreatedTask:
    """Create TaskFeedback ``namespace/task`` owned by ``owner`` (same namespace, or a
    cluster-scoped owner). Idempotent: an existing one without owners is adopted, one with
    this owner is returned; one owned by another object is an error (status 409).

    ``client`` is a ``tidings.kube.Client`` (default: in-cluster config, else the
    kubeconfig, as kubectl would choose). Raises ValueError for bad arguments,
    TaskFeedbackError for API refusals.
    """
    oref = owner_ref(owner)
    if oref.namespace and oref.namespace != namespace:
        raise ValueError(f"owner is in namespace {oref.namespace}, the task in {namespace}: "
                         "owner references cannot cross namespaces")
    ref = owner_reference(oref)
    if client is None:
        from tidings.kube import connect

        try:
            client = connect(user_agent=FIELD_MANAGER)
        except ConfigError as e:
            raise TaskFeedbackError(0, f"cannot load cluster config: {e}") from None
    body = taskfeedback_body(namespace, task, labels={TASK_LABEL: task, **(labels or {})},
                             owner_references=[ref])
    try:
        obj = _call(client, "POST", taskfeedback_path(namespace), body)
        return CreatedTask(task, namespace, str(obj["metadata"]["uid"]), True)
    except TaskFeedbackError as err:
        if not err.conflict:
            raise
    existing = _call(client, "GET", taskfeedback_path(namespace, task))
    meta = existing.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if any(o.get("uid") == ref["uid"] for o in owners):
        return CreatedTask(task, namespace, str(meta["uid"]), False)
    if owners:
        raise TaskFeedbackError(409, f"taskfeedback {namespace}/{task} already exists and is "
                                f"owned by {owners[0].get('kind')}/{owners[0].get('name')}")
    # Adopt (e.g. the watcher created it from an earlier run's facts): the resourceVersion
    # precondition makes a concurrent adoption by someone else fail instead of merging.
    patch = {"metadata": {"ownerReferences": [ref],
                          "resourceVersion": meta.get("resourceVersion")}}
    obj = _call(client, "PATCH", taskfeedback_path(namespace, task), patch, MERGE_PATCH)
    return CreatedTask(task, namespace, str(obj["metadata"]["uid"]), False)


def _call(client: Client, method: str, path: str, body: Any = None,
          content_type: str | None = None) -> Any:
    try:
        out = client.request(method, path, query=[("fieldManager", FIELD_MANAGER)]
                             if method != "GET" else None, body=body,
                             content_type=content_type, timeout=(5.0, 30.0))
    except KubeError as e:
        raise TaskFeedbackError(e.status, str(e)) from None
    if not isinstance(out, dict):
        raise TaskFeedbackError(0, f"unexpected answer to {method} {path}")
    return out
