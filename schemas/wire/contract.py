"""Where the bus lives on the API server (pure): the API paths, field and label selectors,
resource names and phase names that the emitter, the watcher and the CLI must agree on, and
the TaskFeedback object as it is sent.

A path, selector or TaskFeedback body built anywhere else is a second copy of the contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from .constants import API_GROUP, API_VERSION, BUS_CONTROLLER, EVENTS_API_VERSION, KIND, PLURAL
from .constants import TASK_LABEL as TASK_LABEL
from .times import format_seconds

# ---- API paths -----------------------------------------------------------------------------
EVENTS_GROUP_PATH: Final = f"/apis/{EVENTS_API_VERSION}"
TASKFEEDBACK_GROUP_PATH: Final = f"/apis/{API_VERSION}"


def events_path(namespace: str | None = None) -> str:
    """The events.k8s.io Event collection in ``namespace`` (None or "": every namespace)."""
    if namespace:
        return f"{EVENTS_GROUP_PATH}/namespaces/{namespace}/events"
    return f"{EVENTS_GROUP_PATH}/events"


def pods_path(namespace: str | None = None, name: str = "") -> str:
    """The core/v1 Pod collection in ``namespace`` (None or "": every namespace), or the pod
    ``name`` in it: senders are pods, and lineage and logs find pods."""
    if not namespace:
        return "/api/v1/pods"
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def taskfeedback_path(namespace: str | None = None, name: str = "",
                      subresource: str = "") -> str:
    """The TaskFeedback collection in ``namespace`` (None or "": every namespace), or the
    object ``name`` in it, or that object's ``subresource`` ("status")."""
    if not namespace:
        return f"{TASKFEEDBACK_GROUP_PATH}/{PLURAL}"
    base = f"{TASKFEEDBACK_GROUP_PATH}/namespaces/{namespace}/{PLURAL}"
    if not name:
        return base
    return f"{base}/{name}/{subresource}" if subresource else f"{base}/{name}"


def taskfeedback_body(namespace: str, name: str, *, labels: Mapping[str, str] | None = None,
                      owner_references: Sequence[Mapping[str, Any]] = (),
                      resource_version: str | None = None,
                      status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A TaskFeedback as sent: without ``status``, the object to create (its spec names the
    task); with it, the whole status replaced at ``resource_version`` (a PUT of /status)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if owner_references:
        meta["ownerReferences"] = [dict(ref) for ref in owner_references]
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
    if status is None:
        body["spec"] = {"task": name}
    else:
        body["status"] = status
    return body


# ---- the APIs around the bus the watcher calls -----------------------------------------------
# The admission policy (deploy/admission-policy.yaml) that refuses spoofed senders, and its
# binding of the same name: the watcher trusts sender proofs only while both are there.
SENDER_POLICY: Final = "tidings-sender-identity"
SENDER_POLICY_PATH: Final = (
    f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{SENDER_POLICY}")
SENDER_POLICY_BINDING_PATH: Final = (
    f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{SENDER_POLICY}")
# Who may read /tasks on the watcher's HTTP port: the API server's own answers.
TOKEN_REVIEWS_PATH: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS_PATH: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def lease_path(namespace: str, name: str = "") -> str:
    """The coordination.k8s.io Lease collection in ``namespace``, or the Lease ``name``
    (the watcher replicas' leader election)."""
    base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{base}/{name}" if name else base


# ---- resource names (RBAC, the CLI's error messages) ---------------------------------------
EVENTS_RESOURCE: Final = "events.events.k8s.io"
TASKFEEDBACK_RESOURCE: Final = f"{PLURAL}.{API_GROUP}"

# ---- selectors -----------------------------------------------------------------------------
# Every bus event names the bus as its reportingController (the API server indexes it).
BUS_SELECTOR: Final = f"reportingController={BUS_CONTROLLER}"


def task_selector(task: str) -> str:
    """The field selector of the bus events about the TaskFeedback ``task``."""
    return f"{BUS_SELECTOR},regarding.kind={KIND},regarding.name={task}"


# The bus events about pods themselves (what an emitter that knows no task id sends; the
# watcher folds them into the task the pod's labels name).
POD_FACTS_SELECTOR: Final = f"{BUS_SELECTOR},regarding.kind=Pod"


def pod_facts_selector(pod: str) -> str:
    """The field selector of the bus events about the pod ``pod`` itself."""
    return f"{POD_FACTS_SELECTOR},regarding.name={pod}"


def lineage_selector(app: str) -> str:
    """The field selector of the PodSpawned records about ``app`` (any kind)."""
    return f"{BUS_SELECTOR},reason=PodSpawned,regarding.name={app}"


def pod_selector(task: str) -> str:
    """The label selector of the pods labelled for ``task``."""
    return f"{TASK_LABEL}={task}"


# ---- phases and conditions -----------------------------------------------------------------
# A TaskFeedback's status.phase (the completion rule, completion.py); a Pod's ends the same way.
PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
TERMINAL_PHASES: Final = frozenset({SUCCEEDED, FAILED})


def condition(ctype: str, true: bool | None, reason: str, message: str, at: datetime
              ) -> dict[str, Any]:
    """One entry of a TaskFeedback's ``status.conditions``, metav1.Condition style: the
    outcome's (completion.py) and health's (health.py) alike (``true`` None: Unknown, a
    condition that could not judge all it judges)."""
    return {"type": ctype, "status": "Unknown" if true is None else "True" if true else "False",
            "reason": reason, "message": message, "lastTransitionTime": format_seconds(at)}


def retries(platform_decides: bool, phase: str) -> bool:
    """Whether a failed worker is an attempt its platform ran again (shown "retried") rather
    than the outcome: under a platform object that decides the task's outcome, until that
    object failed the task (a Job that gave up retried nothing more)."""
    return platform_decides and phase != FAILED
