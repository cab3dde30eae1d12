"""`tidings state TASK` and `tidings watch TASK`: a task's folded feedback, once or live.

Both read the TaskFeedback status when a watcher wrote one, else fold the task's events.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Generic, TypeVar

import typer

from tidings.cli.common import (
    DEFAULT_CONNECTION,
    AllNamespaces,
    Connection,
    Namespace,
    Output,
    OutputOpt,
    check_task,
    command,
    complete_task,
    connection,
    console,
    dump,
    invalid,
    safe_data,
)

# `watch` exits with this when the task it watched failed (distinct from the error codes).
EXIT_FAILED = 6

T = TypeVar("T")

Task = Annotated[str, typer.Argument(metavar="TASK", help="The task id (TaskFeedback name).",
                                     show_default=False, autocompletion=complete_task)]
FromEvents = Annotated[bool, typer.Option(
    "--from-events", help="Ignore the TaskFeedback status; list the task's events and fold "
    "them here, exactly as the watcher does.")]


@command
@connection
def state(
    task: Task,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    output: OutputOpt = Output.table,
    from_events: FromEvents = False,
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Show a task's state: progress and ETA, health, links, decks, metrics (latest value, min,
    max and a sparkline of their history), spans and who reported them."""
    check_task(task)
    from tidings.cli.namespace import open_task
    from tidings.cli.taskread import TaskReader
    from tidings.cli.taskrender import render

    k, ref = open_task(task, namespace, all_namespaces, conn, from_events)
    snap = TaskReader(k, ref).load(use_events=from_events)
    if output is Output.table:
        console().print(render(snap))
    else:
        typer.echo(dump(snap.to_data(), output), nl=False)


@command
@connection
def watch(
    task: Task,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    from_events: FromEvents = False,
    wait: Annotated[bool, typer.Option(
        "--wait", help="Wait for a task that has no TaskFeedback or events yet, instead of "
        "failing with not found (start it alongside the task's launch).")] = False,
    grace: Annotated[float, typer.Option(
        "--grace", min=0, max=300, help="Seconds to keep following once the task is over "
        "while span windows its workers sent before their finals are still missing.")] = 3.0,
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="FORMAT",
        help="table (live view; one line per change when piped), or jsonl: one JSON object "
        "per status change (the -o json of state), for scripts.")] = "table",
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Watch a task live until it is over (phase Succeeded or Failed) or Ctrl-C; exits 6 when
    the task failed."""
    check_task(task)
    if output not in ("table", "jsonl"):
        invalid(f"--output {output!r}: use table or jsonl")
    from rich.live import Live

    from tidings.cli.namespace import open_task
    from tidings.cli.snapshot import Snapshot
    from tidings.cli.taskfollow import follow
    from tidings.cli.taskrender import one_line, render

    k, ref = open_task(task, namespace, all_namespaces, conn, from_events)
    snapshots = _Pump(follow(k, ref, use_events=from_events, must_exist=not wait))
    snap = snapshots.next(None)
    assert snap is not None
    out = console()
    ended: float | None = None  # when the status first said the task is over

    def done(s: Snapshot) -> bool:
        # Over, and no span window its workers sent before their finals still missing
        # (or the grace is up: a window may have been lost or dropped by the budget).
        nonlocal ended
        if not s.state.finished:
            return False
        ended = ended or time.monotonic()
        return s.state.settled or time.monotonic() - ended >= grace

    def follow_changes(show: Callable[[Snapshot], None]) -> Snapshot:
        # Shows each snapshot after the first until the task is done, or quiet past the
        # grace; returns the last.
        s = snap
        while not done(s):
            left = None if ended is None else max(0.0, grace - (time.monotonic() - ended))
            nxt = snapshots.next(left)
            if nxt is None:
                break
            s = nxt
            show(s)
        return s

    if output == "jsonl":
        # One compact object per change, flushed, so `| jq` or a script sees each at once.
        import json
        import sys

        def emit_line(s: Snapshot) -> None:
            sys.stdout.write(json.dumps(safe_data(s.to_data()), ensure_ascii=False,
                                        separators=(",", ":")) + "\n")
            sys.stdout.flush()

        emit_line(snap)
        last = follow_changes(emit_line)
    elif not out.is_terminal:
        # Piped (CI logs, scripts): one line per change, then the full view at the end.
        typer.echo(one_line(snap))
        last = follow_changes(lambda s: typer.echo(one_line(s)))
        out.print(render(last))
    else:
        with Live(render(snap), console=out, refresh_per_second=8) as live:
            last = follow_changes(lambda s: live.update(render(s), refresh=True))
    if last.state.failed:
        raise typer.Exit(EXIT_FAILED)


class _Pump(Generic[T]):
    """Snapshots from a blocking generator, with a timeout (a daemon thread pulls them)."""

    def __init__(self, gen: Iterator[T]) -> None:
        self._q: queue.Queue[T | _Raised] = queue.Queue()
        threading.Thread(target=self._run, args=(gen,), daemon=True).start()

    def _run(self, gen: Iterator[T]) -> None:
        try:
            for item in gen:
                self._q.put(item)
        except BaseException as e:  # handed to the caller's thread
            self._q.put(_Raised(e))

    def next(self, timeout: float | None) -> T | None:
        """The next snapshot; None when ``timeout`` passed first."""
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, _Raised):
            raise item.error
        return item


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Tasks")(state)
    # kubectl's `describe taskfeedback` prints the status's fields in alphabetical order, the
    # fold's bookkeeping among them: this is the same object in the order a person reads.
    app.command("describe", rich_help_panel="Tasks", help="Alias of state: 'tidings describe "
                "TASK' as 'kubectl describe taskfeedback TASK', in the order a person reads.")(
                    state)
    app.command(rich_help_panel="Tasks")(watch)
