"""Where a task or an app is: connect, and find the namespace it is in (the current one,
or with -A the one namespace where it has bus events or a TaskFeedback): the common start of
`state`, `watch`, `timeline`, `lineage` and `logs`."""

from __future__ import annotations

from tidings.cli.common import EXIT_INVALID, CliError, Connection, not_found
from tidings.cli.kube import Action, ApiError, Kube, connect_with
from tidings.schemas.wire.contract import (
    TASKFEEDBACK_RESOURCE,
    lineage_selector,
    task_selector,
    taskfeedback_path,
)
from tidings.schemas.wire.refs import TaskRef


def open_task(task: str, namespace: str | None, all_namespaces: bool, conn: Connection,
              from_events: bool) -> tuple[Kube, TaskRef]:
    """Connect and find the task: the common start of state, watch and timeline."""
    k = connect_with(conn, namespace)
    ns = resolve_namespace(k, task, "task", task_selector(task), all_namespaces,
                           with_cr=not from_events)
    return k, TaskRef(ns, task)


def open_app(app: str, namespace: str | None, all_namespaces: bool, conn: Connection
             ) -> tuple[Kube, str]:
    """Connect and find the app's namespace: the common start of lineage and logs (by its
    PodSpawned records, or its TaskFeedback when it has no lineage controller)."""
    k = connect_with(conn, namespace)
    return k, resolve_namespace(k, app, "app", lineage_selector(app), all_namespaces,
                                with_cr=True)


def resolve_namespace(kube: Kube, name: str, what: str, selector: str, all_namespaces: bool,
                      with_cr: bool = False) -> str:
    """-A: the one namespace where `name` has bus events (or a TaskFeedback)."""
    if not all_namespaces:
        return kube.namespace
    found: set[str] = set()
    items, _ = kube.list_events(None, selector)
    found.update(str((i.get("metadata") or {}).get("namespace") or "") for i in items)
    if with_cr:
        try:
            crs, _ = kube.list_all(taskfeedback_path(),
                                   {"fieldSelector": f"metadata.name={name}"},
                                   action=Action("list", TASKFEEDBACK_RESOURCE))
            found.update(str((i.get("metadata") or {}).get("namespace") or "") for i in crs)
        except ApiError as err:
            if not (err.forbidden or err.not_found):
                raise
    found.discard("")
    if not found:
        not_found(f"{what} {name!r} in any namespace")
    if len(found) > 1:
        raise CliError(f"invalid input: {what} {name!r} exists in namespaces "
                       f"{', '.join(sorted(found))}; choose one with -n", EXIT_INVALID)
    return found.pop()
