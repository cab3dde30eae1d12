"""Where the bus lives on the API server (pure): the API paths, field and label selectors,
resource names and phase names that the emitter, the watcher and the CLI must agree on.

Only strings: a path or selector built anywhere else is a second copy of the contract.
"""

from __future__ import annotations

from typing import Final

from .constants import API_GROUP, API_VERSION, BUS_CONTROLLER, EVENTS_API_VERSION, KIND, PLURAL
from .constants import TASK_LABEL as TASK_LABEL

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


def taskfeedback_path(namespace: str | None = None, name: str = "") -> str:
    """The TaskFeedback collection in ``namespace`` (None or "": every namespace), or the
    object ``name`` in it."""
    if not namespace:
        return f"{TASKFEEDBACK_GROUP_PATH}/{PLURAL}"
    base = f"{TASKFEEDBACK_GROUP_PATH}/namespaces/{namespace}/{PLURAL}"
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


# ---- phases --------------------------------------------------------------------------------
# A TaskFeedback's status.phase (the completion rule in state.py); a Pod's ends the same way.
PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
TERMINAL_PHASES: Final = frozenset({SUCCEEDED, FAILED})
