"""`tidings task create TASK --owner KIND/NAME`: a controller pre-creates a task's TaskFeedback.

The TaskFeedback is owner-referenced to the controller's object (garbage collected with it)
and its uid goes to the task's pods (`tidings.dev/task-uid` annotation -> TIDINGS_TASK_UID),
so bus events carry `regarding.uid` and `kubectl describe taskfeedback` lists them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tidings.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    Context,
    Kubeconfig,
    Namespace,
    check_name,
    check_namespace,
    command,
    invalid,
    safe,
)

app = typer.Typer(help="Manage tasks' TaskFeedback objects (for controllers and scripts).",
                  no_args_is_help=True)

OwnerOpt = Annotated[str, typer.Option(
    "--owner", metavar="RESOURCE/NAME", show_default=False,
    help="The object the TaskFeedback belongs to, kubectl-style (job/train, "
         "deployments.apps/web, cm/x), in the task's namespace or cluster-scoped.")]
OutputOpt = Annotated[str, typer.Option(
    "--output", "-o", metavar="FORMAT",
    help="uid (only the uid, for scripts), name, or json; default: a sentence.")]


@app.command("create")
@command
def create(
    task: Annotated[str, typer.Argument(help="The task id (the TaskFeedback's name).")],
    owner: OwnerOpt,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    output: OutputOpt = "",
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
    from tidings.emitter.task import TaskFeedbackError, create_task_feedback
    from tidings.emitter.transport import kubeconfig_namespace, load_api_client

    try:
        api = load_api_client(kubeconfig, context)
    except Exception as e:  # no kubeconfig, unknown context
        raise CliError(f"cannot load cluster config: {e}", EXIT_UNREACHABLE) from None
    ns = check_namespace(namespace or kubeconfig_namespace(kubeconfig, context) or "default")
    try:
        obj = _get_owner(api, resource, owner_name, ns)
        made = create_task_feedback(task, namespace=ns, owner=obj, api_client=api)
    except TaskFeedbackError as e:
        if e.status == 0:
            raise CliError(e.message, EXIT_UNREACHABLE) from None
        import json

        from tidings.cli.kube import Action, api_error

        # The same wording and exit codes as every other command's API errors.
        raise api_error(e.status, json.dumps({"message": e.message}),
                        Action("create", "taskfeedbacks.tidings.dev", ns, task)) from None
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


def _get_owner(api: Any, resource: str, name: str, namespace: str) -> dict[str, Any]:
    """Resolve RESOURCE (plural, singular, kind or short name, optionally .group) through the
    server's discovery, as kubectl does, and read the object (its uid is the point)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.resource import ResourceList

    from tidings.cli.kube import Action, api_error

    word, _, group = resource.lower().partition(".")
    try:
        dyn = DynamicClient(api)
        matches = [r for r in dyn.resources.search()
                   if not isinstance(r, ResourceList) and r.preferred and "/" not in r.name
                   and (not group or (r.group or "") == group)
                   and word in (r.name, r.singular_name, r.kind.lower(),
                                *(r.short_names or []))]
    except ApiException as e:
        raise api_error(int(e.status or 0), e.body, Action("discover", "API resources"),
                        str(e.reason)) from None
    if not matches:
        raise CliError(f"the server does not have a resource type {safe(resource)!r}",
                       EXIT_NOT_FOUND)
    if len({(r.group, r.kind) for r in matches}) > 1:
        kinds = ", ".join(sorted(f"{r.name}.{r.group}" if r.group else r.name for r in matches))
        invalid(f"--owner {safe(resource)!r} is ambiguous ({kinds}); add the group")
    res = matches[0]
    try:
        obj = dyn.get(res, name=name, namespace=namespace if res.namespaced else None)
    except ApiException as e:
        if e.status == 404:
            raise CliError(f"not found: {res.kind} {safe(name)!r} in namespace {namespace}",
                           EXIT_NOT_FOUND) from None
        kind = f"{res.name}.{res.group}" if res.group else res.name
        raise api_error(int(e.status or 0), e.body, Action("get", kind, namespace, name),
                        str(e.reason)) from None
    data: dict[str, Any] = obj.to_dict()
    return data
