"""`tidings task create TASK --owner KIND/NAME`: a controller pre-creates a task's TaskFeedback.

The TaskFeedback is owner-referenced to the controller's object (garbage collected with it)
and its uid goes to the task's pods (`tidings.dev/task-uid` annotation -> TIDINGS_TASK_UID),
so bus events carry `regarding.uid` and `kubectl describe taskfeedback` lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidings.cli.common import (
    DEFAULT_CONNECTION,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    Connection,
    Namespace,
    check_name,
    command,
    connection,
    invalid,
    safe,
)

if TYPE_CHECKING:
    from tidings.cli.kube import Kube

app = typer.Typer(help="Manage tasks' TaskFeedback objects (for controllers and scripts).",
                  no_args_is_help=True, rich_markup_mode=None)

OwnerOpt = Annotated[str, typer.Option(
    "--owner", metavar="RESOURCE/NAME", show_default=False,
    help="The object the TaskFeedback belongs to, kubectl-style (job/train, "
         "deployments.apps/web, cm/x), in the task's namespace or cluster-scoped.")]
OutputOpt = Annotated[str, typer.Option(
    "--output", "-o", metavar="FORMAT",
    help="uid (only the uid, for scripts), name, or json; default: a sentence.")]


@app.command("create")
@command
@connection
def create(
    task: Annotated[str, typer.Argument(help="The task id (the TaskFeedback's name).")],
    owner: OwnerOpt,
    namespace: Namespace = None,
    output: OutputOpt = "",
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Create TASK's TaskFeedback owned by --owner (or adopt an unowned one) and print its uid.

    Put the uid into the task's pods: annotation tidings.dev/task-uid, and the env var
    TIDINGS_TASK_UID from the downward API (fieldRef metadata.annotations['tidings.dev/task-uid']).
    """
    check_name(task, "task")
    if output not in ("", "uid", "name", "json"):
        invalid(f"--output {safe(output)!r}: use uid, name or json")
    resource, _, owner_name = owner.partition("/")
    if not resource or not owner_name or "/" in owner_name:
        invalid(f"--owner {safe(owner)!r}: use RESOURCE/NAME, e.g. job/train")
    from tidings.cli.kube import Action, api_error, connect_with
    from tidings.emitter.task import TaskFeedbackError, create_task_feedback
    from tidings.schemas.wire.contract import TASKFEEDBACK_RESOURCE

    kube = connect_with(conn, namespace)
    ns = kube.namespace
    try:
        obj = _get_owner(kube, resource, owner_name, ns)
        made = create_task_feedback(task, namespace=ns, owner=obj, client=kube.client)
    except TaskFeedbackError as e:
        if e.unanswered:
            raise CliError(e.message, EXIT_UNREACHABLE) from None
        import json

        # The same wording and exit codes as every other command's API errors.
        raise api_error(e.status, json.dumps({"message": e.message}),
                        Action("create", TASKFEEDBACK_RESOURCE, ns, task)) from None
    except ValueError as e:
        invalid(str(e))
    if output == "uid":
        typer.echo(made.uid)
    elif output == "name":
        typer.echo(f"taskfeedback.tidings.dev/{made.name}")
    elif output == "json":
        import json

        typer.echo(json.dumps({"name": made.name, "namespace": made.namespace, "uid": made.uid,
                               "created": made.created}))
    else:
        verb = "created" if made.created else "adopted"
        typer.echo(f"taskfeedback.tidings.dev/{made.name} {verb} in {made.namespace} "
                   f"(uid {made.uid}, owner {safe(owner)})")


def _api_resources(kube: Kube) -> list[tuple[str, str, dict[str, Any]]]:
    """(group, groupVersion, resource) for every preferred version the server serves, as
    kubectl's discovery sees them (core first)."""
    from tidings.cli.kube import Action

    doing = Action("discover", "API resources")
    found = [("", "v1", r) for r in kube.get_json("/api/v1", action=doing).get("resources", [])]
    for group in kube.get_json("/apis", action=doing).get("groups", []):
        gv = (group.get("preferredVersion") or {}).get("groupVersion")
        if not gv:
            continue
        listed = kube.get_json(f"/apis/{gv}", action=doing).get("resources", [])
        found.extend((str(group.get("name", "")), gv, r) for r in listed)
    return found


def _get_owner(kube: Kube, resource: str, name: str, namespace: str) -> dict[str, Any]:
    """Resolve RESOURCE (plural, singular, kind or short name, optionally .group) through the
    server's discovery, as kubectl does, and read the object (its uid is the point)."""
    from tidings.cli.kube import Action, ApiError

    word, _, group = resource.lower().partition(".")
    matches = [(g, gv, r) for g, gv, r in _api_resources(kube)
               if "/" not in r.get("name", "") and (not group or g == group)
               and word in (r.get("name"), r.get("singularName"), str(r.get("kind", "")).lower(),
                            *(r.get("shortNames") or []))]
    if not matches:
        raise CliError(f"the server does not have a resource type {safe(resource)!r}",
                       EXIT_NOT_FOUND)
    if len({(g, r.get("kind")) for g, _, r in matches}) > 1:
        kinds = ", ".join(sorted(f"{r['name']}.{g}" if g else r["name"] for g, _, r in matches))
        invalid(f"--owner {safe(resource)!r} is ambiguous ({kinds}); add the group")
    g, gv, res = matches[0]
    base = f"/apis/{gv}" if g else "/api/v1"
    scope = f"/namespaces/{namespace}" if res.get("namespaced") else ""
    kind = f"{res['name']}.{g}" if g else res["name"]
    try:
        return kube.get_json(f"{base}{scope}/{res['name']}/{name}",
                             action=Action("get", kind, namespace, name))
    except ApiError as e:
        if e.not_found:
            raise CliError(f"not found: {res.get('kind')} {safe(name)!r} in namespace "
                           f"{namespace}", EXIT_NOT_FOUND) from None
        raise
