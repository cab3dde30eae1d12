"""The wire shapes tidings reads from the API server, as TypedDicts: object metadata, lists,
watch events, Status, Pods, events.k8s.io Events and TaskFeedbacks (only the fields read).

They type what the server sent without checking it: every field may be missing
(``total=False``) and readers still guard against other types, as JSON can hold anything.
"""

from __future__ import annotations

from typing import TypedDict


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]


# "continue" is a keyword: the functional form.
ListMeta = TypedDict("ListMeta", {"resourceVersion": str, "continue": str}, total=False)


class KubeObject(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta


class ObjectList(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ListMeta
    items: list[KubeObject]


class Status(KubeObject, total=False):
    """metav1.Status: a failed request's answer, and a watch's ERROR object."""

    status: str
    message: str
    reason: str
    code: int


class WatchEvent(TypedDict):
    """One line of a watch: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (object: a Status)."""

    type: str
    object: KubeObject


class Container(TypedDict, total=False):
    name: str
    image: str


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    nodeName: str
    serviceAccountName: str


class PodStatus(TypedDict, total=False):
    phase: str


class Pod(KubeObject, total=False):
    spec: PodSpec
    status: PodStatus


class ObjectReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    namespace: str
    uid: str


class Event(KubeObject, total=False):
    """An events.k8s.io/v1 Event (the bus's carrier)."""

    eventTime: str
    reportingController: str
    reportingInstance: str
    action: str
    reason: str
    type: str
    note: str
    regarding: ObjectReference
    related: ObjectReference


class TaskFeedbackSpec(TypedDict, total=False):
    task: str


class TaskFeedback(KubeObject, total=False):
    """A TaskFeedback; its status is the fold's encoding (schemas/status/decoder.py reads
    it, deploy/crd.yaml documents it)."""

    spec: TaskFeedbackSpec
    status: dict[str, object]
