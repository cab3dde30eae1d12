"""`tidings state TASK` and `tidings watch TASK`: a task's folded feedback, once or live.

Both read the TaskFeedback status when a watcher wrote one, else fold the task's events.
"""

from __future__ import annotations

from typing import Annotated

import typer

from tidings.cli.common import (
    AllNamespaces,
    Context,
    Kubeconfig,
    Namespace,
    Output,
    OutputOpt,
    check_name,
    command,
    console,
    dump,
)

# `watch` exits with this when the task it watched failed (distinct from the error codes).
EXIT_FAILED = 6

Task = Annotated[str, typer.Argument(metavar="TASK", help="The task id (TaskFeedback name).",
                                     show_default=False)]
FromEvents = Annotated[bool, typer.Option(
    "--from-events", help="Ignore the TaskFeedback status; list the task's events and fold "
    "them here, exactly as the watcher does.")]


@command
def state(
    task: Task,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    output: OutputOpt = Output.table,
    from_events: FromEvents = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Show a task's state: progress, links, decks, spans and who reported them."""
    check_name(task, "task")
    from tidings.cli import taskview

    k, ref = taskview.open_task(task, namespace, all_namespaces, kubeconfig, context,
                                from_events)
    snap = taskview.load(k, ref, use_events=from_events)
    if output is Output.table:
        console().print(taskview.render(snap))
    else:
        typer.echo(dump(snap.to_data(), output), nl=False)


@command
def watch(
    task: Task,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    from_events: FromEvents = False,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Wait for a task that has no TaskFeedback or events yet, instead of "
        "failing with not found (start it alongside the task's launch).")] = False,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Watch a task live until it is over (phase Succeeded or Failed) or Ctrl-C; exits 6 when
    the task failed."""
    check_name(task, "task")
    from rich.live import Live

    from tidings.cli import taskview

    k, ref = taskview.open_task(task, namespace, all_namespaces, kubeconfig, context,
                                from_events)
    snapshots = taskview.follow(k, ref, use_events=from_events, must_exist=not wait)
    snap = next(snapshots)
    out = console()
    if not out.is_terminal:
        # Piped (CI logs, scripts): one line per change, then the full view at the end.
        typer.echo(taskview.one_line(snap))
        while not snap.state.finished:
            snap = next(snapshots)
            typer.echo(taskview.one_line(snap))
        out.print(taskview.render(snap))
    else:
        with Live(taskview.render(snap), console=out, refresh_per_second=8) as live:
            while not snap.state.finished:
                snap = next(snapshots)
                live.update(taskview.render(snap), refresh=True)
    if snap.state.failed:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Tasks")(state)
    app.command(rich_help_panel="Tasks")(watch)
