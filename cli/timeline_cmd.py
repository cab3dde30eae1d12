"""`tidings timeline TASK [--svg FILE]`: a task's span summaries as a Gantt-like chart, in
the terminal (rich) and, on request, as a self-contained SVG file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    safe,
)


def rows(state: Any) -> list[dict[str, Any]]:
    """One row per span name, oldest first, with offsets from the earliest start."""
    spans = sorted(state.spans.items(), key=lambda kv: (kv[1].first_start, kv[0]))
    if not spans:
        return []
    t0 = min(s.first_start for _, s in spans)
    out = []
    for name, s in spans:
        out.append({
            "name": safe(name), "count": s.count, "total_s": s.total_s,
            "mean_s": s.total_s / s.count if s.count else 0.0,
            "min_s": s.min_s, "max_s": s.max_s, "errors": s.errors,
            "first_start": s.first_start, "last_end": s.last_end,
            "offset_s": s.first_start - t0, "duration_s": s.last_end - s.first_start,
            # Where the spans actually ran (the folded windows), as offsets from t0.
            "windows": [[max(0.0, a - t0), max(0.0, b - t0)] for a, b in s.busy()]
            or [[s.first_start - t0, s.last_end - t0]],
        })
    return out


def busy_bar(windows: list[list[float]], total: float, width: int) -> str:
    """`width` cells, a block where any window ran (at least a sliver per window), so a name
    that ran three times shows three marks, not one bar from its first start to last end."""
    total = total if total > 0 else 1.0
    cells = [" "] * width
    for a, b in windows:
        lo = min(width - 1, max(0, int(a / total * width)))
        hi = max(lo + 1, min(width, round(b / total * width)))
        for i in range(lo, hi):
            cells[i] = "█"
    return "".join(cells)


def render(task: str, namespace: str, data: list[dict[str, Any]], width: int) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from tidings.cli.taskview import fmt_seconds

    span_total = max(r["offset_s"] + r["duration_s"] for r in data)
    axis = f"0s{fmt_seconds(span_total).rjust(width - 2)}"
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, title_justify="left",
              title=Text(f"Timeline of {safe(namespace)}/{safe(task)}  ({header(data)} over "
                         f"{fmt_seconds(span_total)})"))
    t.add_column("SPAN", overflow="fold", min_width=8, max_width=24)
    t.add_column(axis, no_wrap=True, width=width, min_width=width)
    for col in ("COUNT", "TOTAL", "ERRORS"):
        t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for r in data:
        style = "red" if r["errors"] else "cyan"
        t.add_row(Text(r["name"]), Text(busy_bar(r["windows"], span_total, width), style=style),
                  str(r["count"]), fmt_seconds(r["total_s"]),
                  Text(str(r["errors"]), style=style if r["errors"] else ""))
    return t


def header(data: list[dict[str, Any]]) -> str:
    """Names and spans counted apart: "3 names, 1,812 spans"."""
    names, spans = len(data), sum(r["count"] for r in data)
    return (f"{names} name{'s' if names != 1 else ''}, "
            f"{spans:,} span{'s' if spans != 1 else ''}")


def _x(s: object) -> str:
    from xml.sax.saxutils import escape

    return escape(safe(s), {'"': "&quot;", "'": "&apos;"})


def svg(task: str, namespace: str, data: list[dict[str, Any]]) -> str:
    """A hand-written SVG Gantt chart; every text node is sanitised and XML-escaped."""
    from datetime import datetime

    from tidings._compat import UTC
    from tidings.cli.taskview import fmt_seconds

    # stats_w fits the longest stats line (~50 monospace characters at 12 px).
    label_w, chart_w, stats_w, row_h, top = 220, 560, 380, 26, 64
    width = label_w + chart_w + stats_w
    height = top + row_h * max(1, len(data)) + 40
    total = max((r["offset_s"] + r["duration_s"] for r in data), default=0.0) or 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="22" font-size="15" font-weight="bold">Timeline of '
        f'{_x(namespace)}/{_x(task)}</text>',
    ]
    if not data:
        out.append(f'<text x="10" y="{top}" fill="#666">no spans recorded</text>')
    else:
        t0 = min(r["first_start"] for r in data)
        start = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        out.append(f'<text x="10" y="40" fill="#666">{_x(header(data))} from {_x(start)} '
                   f'over {_x(fmt_seconds(total))}</text>')
        for i in range(6):  # axis ticks
            x = label_w + chart_w * i / 5
            out.append(f'<line x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" '
                       f'y2="{height - 30}" stroke="#e5e5e5"/>')
            out.append(f'<text x="{x:.1f}" y="{top - 12}" text-anchor="middle" fill="#666">'
                       f'{_x(fmt_seconds(total * i / 5))}</text>')
        for n, r in enumerate(data):
            y = top + n * row_h
            colour = "#d9534f" if r["errors"] else "#3b82c4"
            out.append(f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">'
                       f'{_x(r["name"][:30])}</text>')
            tip = (f'{_x(r["name"])}: {r["count"]} spans, total '
                   f'{_x(fmt_seconds(r["total_s"]))}, max {_x(fmt_seconds(r["max_s"]))}, '
                   f'{r["errors"]} errors')
            for a, b in r["windows"]:  # one mark per window where the spans ran
                x = label_w + chart_w * a / total
                w = max(1.0, chart_w * (b - a) / total)
                out.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" '
                           f'height="{row_h - 8}" rx="2" fill="{colour}"><title>{tip}</title>'
                           f'</rect>')
            noun = "span" if r["count"] == 1 else "spans"
            stats = (f'{r["count"]} {noun}, total {fmt_seconds(r["total_s"])} '
                     f'mean {fmt_seconds(r["mean_s"])}'
                     + (f' errors {r["errors"]}' if r["errors"] else ""))
            out.append(f'<text x="{label_w + chart_w + 8}" y="{y + 16}" fill="#333">'
                       f'{_x(stats)}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


@command
@connection
def timeline(
    task: Annotated[str, typer.Argument(metavar="TASK", show_default=False,
                                        help="The task id (TaskFeedback name).",
                                        autocompletion=complete_task)],
    svg_file: Annotated[Path | None, typer.Option(
        "--svg", metavar="FILE", show_default=False, dir_okay=False,
        help="Also write the chart as an SVG file.")] = None,
    width: Annotated[int | None, typer.Option(
        "--width", min=10, max=400, show_default=False,
        help="Bar width in terminal cells (default: what the terminal leaves).")] = None,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    output: OutputOpt = Output.table,
    from_events: Annotated[bool, typer.Option(
        "--from-events", help="Fold the task's events here instead of reading its status.")
    ] = False,
    conn: Connection = DEFAULT_CONNECTION,
) -> None:
    """Show a task's spans as a Gantt-like chart (and write an SVG on request)."""
    check_task(task)
    if svg_file is not None and not svg_file.parent.is_dir():
        invalid(f"--svg {str(svg_file)!r}: directory {str(svg_file.parent)!r} does not exist")
    from tidings.cli import taskview

    k, ref = taskview.open_task(task, namespace, all_namespaces, conn, from_events)
    snap = taskview.load(k, ref, use_events=from_events)
    data = rows(snap.state)
    if svg_file is not None:
        try:
            svg_file.write_text(svg(task, ref.namespace, data), encoding="utf-8")
        except OSError as err:
            invalid(f"cannot write {str(svg_file)!r}: {err.strerror}")
    if output is not Output.table:
        doc = {"task": {"namespace": ref.namespace, "name": task}, "spans": data}
        typer.echo(dump(doc, output), nl=False)
        return
    out = console()
    if not data:
        out.print(f"no spans recorded for task {safe(task)} in namespace {ref.namespace}")
    else:
        out.print(render(task, ref.namespace, data, width or max(10, min(100, out.width - 56))))
    if svg_file is not None:
        console(stderr=True).print(f"wrote {safe(svg_file)}")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel="Tasks")(timeline)
