"""`tidings lineage APP` and `tidings logs APP`: the pods of an app, from structured
PodSpawned records (name and uid) or, without a lineage controller, from its TaskFeedback
status and the pods labelled for it (by uid), and their logs; never pods that merely share a
prefix."""

from __future__ import annotations

import os
import re
import sys
from typing import Annotated

import typer

from tidings._compat import StrEnum
from tidings.cli.common import (
    DEFAULT_CONNECTION,
    AllNamespaces,
    Connection,
    Namespace,
    Output,
    OutputOpt,
    check_name,
    command,
    complete_app,
    connection,
    console,
    dump,
    invalid,
    parse_duration,
    safe,
)

App = Annotated[str, typer.Argument(
    metavar="APP", show_default=False, autocompletion=complete_app,
    help="The app or task: the PodSpawned events' subject, else the TaskFeedback and the "
    "tidings.dev/task label of its pods.")]


class LogFormat(StrEnum):
    text = "text"
    jsonl = "jsonl"


def _patterns(values: list[str] | None, flag: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for v in values or []:
        try:
            out.append(re.compile(v))
        except re.error as err:
            invalid(f"{flag} {v[:64]!r} is not a regular expression: {err}")
    return tuple(out)


class Color(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


@command
@connection
def lineage(
    app: App,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    output: OutputOpt = Output.table,
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Show the pods of an app or task, as a tree, with where each was found and its fate."""
    check_name(app, "app")
    from tidings.cli import lineage as lin
    from tidings.cli.namespace import open_app
    from tidings.schemas.wire.constants import TASK_LABEL

    k, ns = open_app(app, namespace, all_namespaces, conn)
    found = lin.discover(k, ns, app)
    items = lin.fates(k, found)
    disowned = [f for f in items if f.state == "disowned"]
    items = [f for f in items if f.state != "disowned"]
    # Deny by default: a live pod that does not confirm the record (or whose labels do not
    # name the task, for a reporting pod) is not shown; said once per kind.
    key = next(iter(found.key_rvs), TASK_LABEL)
    for what, these in (("lineage record(s) naming pods", [f for f in disowned if f.spawned]),
                        ("reporting pod(s)", [f for f in disowned if not f.spawned])):
        if these:
            names = ", ".join(safe(f.entry.pod.name) for f in these)
            typer.echo(f"ignored {len(these)} {what} not labelled {key}={safe(app)}: {names}",
                       err=True)
    if output is Output.table:
        console().print(lin.render(ns, app, items))
    else:
        typer.echo(dump({"app": app, "namespace": ns,
                         "pods": [f.to_data() for f in items]}, output), nl=False)


@command
@connection
def logs(
    app: App,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep streaming, and stream pods spawned later too.")] = False,
    since: Annotated[str | None, typer.Option(
        "--since", metavar="DURATION", show_default=False,
        help="Only lines newer than this (30s, 5m, 1h).")] = None,
    container: Annotated[str | None, typer.Option(
        "--container", "-c", metavar="NAME", show_default=False,
        help="Only this container (default: all containers of each pod).")] = None,
    max_streams: Annotated[int, typer.Option(
        "--max-streams", min=1, max=1024,
        help="At most this many concurrent log streams; the rest wait their turn.")] = 16,
    timestamps: Annotated[bool, typer.Option(
        "--timestamps", help="Show each line's timestamp.")] = False,
    color: Annotated[Color, typer.Option(
        "--color", case_sensitive=False, help="Colour the \\[pod/container] prefixes.")
    ] = Color.auto,
    tail: Annotated[int | None, typer.Option(
        "--tail", metavar="N", min=0, show_default=False,
        help="Start with the last N lines of each container (default: all).")] = None,
    since_time: Annotated[str | None, typer.Option(
        "--since-time", metavar="RFC3339", show_default=False,
        help="Only lines at or after this time (2026-12-01T10:00:00Z).")] = None,
    previous: Annotated[bool, typer.Option(
        "--previous", "-p", help="The previous instance of each container (after a restart).")
    ] = False,
    no_prefix: Annotated[bool, typer.Option(
        "--no-prefix", help="Print the lines without the \\[pod/container] prefix.")] = False,
    include: Annotated[list[str] | None, typer.Option(
        "--include", "-i", metavar="REGEX", show_default=False,
        help="Only lines matching this (repeatable: any of them).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", "-e", metavar="REGEX", show_default=False,
        help="Not lines matching this (repeatable).")] = None,
    output: Annotated[LogFormat, typer.Option(
        "--output", "-o", case_sensitive=False,
        help="text, or jsonl: one JSON object per line (pod, container, time, line).")
    ] = LogFormat.text,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Stream the logs of exactly the pods of an app or task (by name and uid), like stern."""
    check_name(app, "app")
    since_s = None if since is None else max(1, int(-(-parse_duration(since) // 1)))
    if container is not None and not container.replace("-", "").isalnum():
        invalid(f"container {container[:64]!r} is not a valid container name")
    from tidings.cli import logstream

    if since_time is not None:
        if since is not None:
            invalid("--since and --since-time cannot be used together")
        if logstream.ts_key(since_time) is None:
            invalid(f"--since-time {since_time[:40]!r} is not an RFC 3339 time like "
                    "2026-12-01T10:00:00Z")
    if previous and follow:
        invalid("--previous cannot be used with --follow (a previous instance has ended)")
    includes, excludes = _patterns(include, "--include"), _patterns(exclude, "--exclude")
    from tidings.cli import lineage as lin
    from tidings.cli.namespace import open_app

    k, ns = open_app(app, namespace, all_namespaces, conn)
    use_color = color is Color.always or (
        color is Color.auto and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    printer = logstream.Printer(color=use_color, timestamps=timestamps, prefix=not no_prefix,
                                jsonl=output is LogFormat.jsonl)
    mux = logstream.LogMux(k, ns, logstream.Options(
        follow=follow, since_seconds=since_s, container=container, max_streams=max_streams,
        tail=tail, since_time=since_time, previous=previous, include=includes,
        exclude=excludes), printer, app)
    mux.start(lin.discover(k, ns, app, must_exist=not follow))
    try:
        mux.wait()
    finally:
        mux.stop()


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Apps")(lineage)
    app.command(rich_help_panel="Apps")(logs)
