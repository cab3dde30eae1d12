"""`tidings list [NAME...]` (alias `get`): tasks' TaskFeedbacks as `kubectl get taskfeedback
[NAME...]` shows them, with the CRD's printer columns (phase, progress, links, deck, last
event, age), `-l`, `-A`, `-w` and `-o table|wide|name|json|yaml|jsonpath=TEMPLATE`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tidings.cli.common import (
    DEFAULT_CONNECTION,
    Connection,
    Namespace,
    check_name,
    command,
    complete_task,
    connection,
    invalid,
    not_found,
    safe,
    safe_data,
)

if TYPE_CHECKING:
    from tidings.cli.kube import Action, Kube
    from tidings.kube.objects import KubeObject

ALL = "--all-namespaces"
FORMATS = ("table", "wide", "name", "json", "yaml", "jsonpath=TEMPLATE")

def complete_format(incomplete: str) -> list[str]:
    """Shell completion of -o: the formats, and 'jsonpath=' to go on typing after."""
    return [f for f in (*FORMATS[:-1], "jsonpath=") if f.startswith(incomplete)]


OutputFormat = Annotated[str, typer.Option(
    "--output", "-o", metavar="FORMAT", autocompletion=complete_format,
    help="table, wide (adds the progress message, the estimated completion, the workers "
    "final of all, and the health), "
    "name, json, "
    "yaml, or "
    "jsonpath=TEMPLATE (kubectl's, e.g. jsonpath='{.items[*].metadata.name}').")]


def row(obj: KubeObject, wide: bool, namespaced: bool,
        now: datetime | None = None) -> list[str]:
    """One table row: the CRD's printer columns (with -o wide, the workers too: the CRD
    cannot add ``final`` and ``podFinal``), from the task's summary (the page's row)."""
    from tidings._compat import UTC
    from tidings.schemas.view.summary import age, eta_text, summarize

    def text(value: Any) -> str:
        return "<none>" if value is None or value == "" else safe(value)

    now = now or datetime.now(UTC)
    s = summarize(obj)
    cells = [text(s.name), text(s.phase), "<none>" if s.percent is None else f"{s.percent}%",
             text(s.reason)]
    if wide:
        cells.append(text(s.message))
        cells.append(eta_text(s.eta, now))
        cells.append("<none>" if s.worker_counts is None else s.worker_counts.text(short=True))
        cells.append(text(s.health_summary))
    cells += [text(s.link_count), text(s.deck),
              age(s.last_event, now) if s.last_event else "<none>",
              age(s.created, now)]
    if namespaced:
        cells.insert(0, text(s.namespace))
    return cells


def _get(obj: object, *keys: str) -> Any:
    for k in keys:
        obj = obj.get(k) if isinstance(obj, dict) else None
    return obj


def header(wide: bool, namespaced: bool) -> list[str]:
    cols = ["NAME", "PHASE", "PROGRESS", "REASON",
            *(["MESSAGE", "ETA", "WORKERS", "HEALTH"] if wide else []),
            "LINKS", "DECK",
            "LAST EVENT", "AGE"]
    return ["NAMESPACE", *cols] if namespaced else cols


def table(rows: list[list[str]], widths: list[int] | None = None) -> tuple[str, list[int]]:
    """kubectl's tabwriter layout: columns padded by 3 spaces, nothing ever wrapped."""
    widths = widths or [0] * len(rows[0])
    widths = [max(w, *(len(r[i]) for r in rows)) for i, w in enumerate(widths)]
    lines = ["   ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines) + "\n", widths


def clean(obj: KubeObject) -> dict[str, Any]:
    """The object as kubectl -o json shows it (no managedFields), every string neutralised."""
    meta = dict(obj.get("metadata") or {})
    meta.pop("managedFields", None)
    return safe_data({**obj, "metadata": meta})  # type: ignore[no-any-return]


class Printer:
    """Writes a list, then (with -w) each change, in one output format."""

    def __init__(self, output: str, namespaced: bool, echo: Callable[[str], None]) -> None:
        fmt, eq, template = output.partition("=")
        # Only jsonpath takes a value after '=', and it needs one.
        if fmt not in ("table", "wide", "name", "json", "yaml", "jsonpath") \
                or (fmt == "jsonpath") != bool(template) or (fmt != "jsonpath" and eq):
            invalid(f"--output {safe(output)!r}: use one of {', '.join(FORMATS)}")
        self.fmt, self.namespaced, self.echo = fmt, namespaced, echo
        self.widths: list[int] | None = None
        if fmt == "jsonpath":
            from tidings.cli.jsonpath import TemplateError, parse_template

            try:
                parse_template(template)
            except TemplateError as err:
                invalid(f"--output jsonpath: {err}")
        self.template = template

    def listing(self, items: list[KubeObject], resource_version: str, namespace: str = "",
                single: bool = False) -> None:
        """Print a list; ``single`` (one NAME asked for): json, yaml and jsonpath show the
        object itself, not a List, as `kubectl get KIND NAME -o json` does."""
        if self.fmt in ("table", "wide"):
            if not items:
                if not single:  # kubectl's wording, naming the namespace it looked in
                    typer.echo("No resources found" + ("" if self.namespaced else
                               f" in {safe(namespace)} namespace") + ".", err=True)
                return
            wide = self.fmt == "wide"
            rows = [header(wide, self.namespaced)]
            rows += [row(o, wide, self.namespaced) for o in items]
            text, self.widths = table(rows)
            self.echo(text)
        elif self.fmt == "name":
            self.echo("".join(self._name(o) for o in items))
        elif single:
            if items:
                self._data(clean(items[0]))
        else:
            self._data({"apiVersion": "v1", "kind": "List",
                        "items": [clean(o) for o in items],
                        "metadata": {"resourceVersion": resource_version}})

    def change(self, obj: KubeObject) -> None:
        if self.fmt in ("table", "wide"):
            r = row(obj, self.fmt == "wide", self.namespaced)
            if self.widths is None:  # the list was empty: the header comes with the first row
                text, self.widths = table([header(self.fmt == "wide", self.namespaced), r])
            else:
                text, self.widths = table([r], self.widths)
            self.echo(text)
        elif self.fmt == "name":
            self.echo(self._name(obj))
        else:
            self._data(clean(obj))

    def _name(self, obj: KubeObject) -> str:
        return f"taskfeedback.tidings.dev/{safe(_get(obj, 'metadata', 'name') or '')}\n"

    def _data(self, data: Any) -> None:
        if self.fmt == "json":
            import json

            self.echo(json.dumps(data, indent=4, ensure_ascii=False) + "\n")
        elif self.fmt == "yaml":
            import yaml

            self.echo(("---\n" if data.get("kind") != "List" else "")
                      + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**6))
        else:
            from tidings.cli.jsonpath import render

            # The data is already neutralised (clean); the template's own "\n" stays.
            self.echo(render(self.template, data))


@command
@connection
def list_tasks(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="NAME", show_default=False, autocompletion=complete_task,
        help="Only these tasks, as 'kubectl get taskfeedback NAME' (not found: exit 5).")
    ] = None,
    namespace: Namespace = None,
    all_namespaces: Annotated[bool, typer.Option(
        "--all-namespaces", "-A", help="List the tasks of every namespace.")] = False,
    selector: Annotated[str | None, typer.Option(
        "--selector", "-l", metavar="SELECTOR", show_default=False,
        help="Label selector, kubectl's (app=train,team!=ml, env in (a,b)).")] = None,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="After the list, print each change as it happens (Ctrl-C "
        "stops).")] = False,
    output: OutputFormat = "table",
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """List tasks (their TaskFeedbacks): phase, progress, links, deck, last event, age."""
    import sys

    # Any object name, as kubectl takes (a TaskFeedback made by hand need not be a task id);
    # the check keeps ',' and '=' out of the field selector.
    names = [check_name(n, "task") for n in names or []]
    # kubectl's rules for names beside other flags.
    if names and selector:
        invalid("a NAME cannot be given with --selector")
    if names and all_namespaces:
        invalid("a task cannot be got by NAME across all namespaces (use -n NS)")
    if len(names) > 1 and watch:
        invalid("--watch takes one NAME at most")

    from tidings.cli.kube import Action, connect_with
    from tidings.schemas.wire.contract import TASKFEEDBACK_RESOURCE, taskfeedback_path

    def echo(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()  # -w output is read line by line by scripts

    printer = Printer(output.strip(), all_namespaces, echo)
    k = connect_with(conn, namespace)
    ns = "" if all_namespaces else k.namespace
    path = taskfeedback_path(ns)
    resource = TASKFEEDBACK_RESOURCE
    query: dict[str, Any] = {"labelSelector": selector or None}
    if names:
        # One list per name (metadata.name field selector): the list's resourceVersion is
        # what a following --watch resumes from, and an absent name is an empty list.
        items, missing = [], []
        for name in names:
            query = {"fieldSelector": f"metadata.name={name}"}
            got, rv = k.list_all(path, query, action=Action("get", resource, ns, name))
            items += got
            missing += [] if got else [name]
        printer.listing(items, rv, ns, single=len(names) == 1)
        if missing:
            from tidings.cli.kube import found_elsewhere

            not_found(", ".join(f"task {m!r}" for m in missing) + f" in namespace {ns}"
                      + "".join(found_elsewhere(k, m, ns) for m in missing))
    else:
        items, rv = k.list_all(path, query, action=Action("list", resource, ns))
        printer.listing(items, rv, ns)
    if not watch:
        return
    for obj in _changes(k, path, query, rv, Action("watch", resource, ns)):
        printer.change(obj)


def _changes(k: Kube, path: str, query: dict[str, Any], rv: str, action: Action
             ) -> Iterator[KubeObject]:
    """Objects as they change, from watches resumed at the last resourceVersion (relisting
    quietly when the server has compacted it away: changes meanwhile are not replayed)."""
    from tidings.cli.kube import watch_message
    from tidings.kube import WatchLines

    loop = k.list_watch(path, query, action=action, resource_version=rv, watch_timeout=300,
                        read_timeout=330)
    for change in loop:
        if not isinstance(change, WatchLines):
            continue
        for line in change.lines:
            kind, obj = watch_message(line) or ("", None)
            if obj is None:
                continue
            if kind == "ERROR":
                loop.relist("gone")
                break
            loop.advance(str(_get(obj, "metadata", "resourceVersion") or ""))
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                yield obj


def register(app: typer.Typer) -> None:
    app.command("list")(list_tasks)
    app.command("get", help="Alias of list: 'tidings get NAME' as 'kubectl get taskfeedback "
                "NAME'.")(list_tasks)
