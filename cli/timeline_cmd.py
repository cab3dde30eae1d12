"""`tidings timeline TASK [--svg FILE]`: a task's span summaries as a Gantt-like chart, in
the terminal (rich) and, on request, as a self-contained SVG file: a row per span name and
under it a lane per pod that ran it, so a slow worker stands out."""

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

# A lane whose mean span is this much above its span name's median lane is marked slow.
SLOW_RATIO = 1.25


def rows(state: Any) -> list[dict[str, Any]]:
    """One row per span name, oldest first, with offsets from the earliest start; each with
    ``pods``, one lane row per sender pod (``slow`` when its mean span is ``SLOW_RATIO``
    above the name's median lane), and ``unlaned``, the summaries of pods beyond the task's
    lanes."""
    spans = sorted(state.spans.items(), key=lambda kv: (kv[1].first_start, kv[0]))
    if not spans:
        return []
    t0 = min(s.first_start for _, s in spans)
    out = []
    for name, s in spans:
        row = _row(name, s, t0)
        lanes = [_row(pod, lane, t0) for pod, lane in sorted(s.lanes.items())]
        if len(lanes) > 1:
            means = sorted(lane["mean_s"] for lane in lanes)
            mid = len(means) // 2
            median = means[mid] if len(means) % 2 else (means[mid - 1] + means[mid]) / 2
            for lane in lanes:
                lane["slow"] = lane["mean_s"] > SLOW_RATIO * median
        row["pods"] = lanes
        row["unlaned"] = s.unlaned
        out.append(row)
    return out


def _row(name: str, s: Any, t0: float) -> dict[str, Any]:
    return {
        "name": safe(name), "count": s.count, "total_s": s.total_s,
        "mean_s": s.total_s / s.count if s.count else 0.0,
        "min_s": s.min_s, "max_s": s.max_s, "errors": s.errors,
        "first_start": s.first_start, "last_end": s.last_end,
        "offset_s": s.first_start - t0, "duration_s": s.last_end - s.first_start,
        # Where the spans actually ran (the folded windows), as offsets from t0. Windows
        # are stored coarsened (whole microseconds or more), so one may reach past the
        # name's first start or last end: cut to them, or a 3 µs span's bar would run
        # past the axis.
        "windows": [[lo, max(lo, min(b, s.last_end) - t0)]
                    for a, b in s.busy() for lo in [max(a, s.first_start) - t0]]
        or [[s.first_start - t0, s.last_end - t0]],
    }


def lanes_shown(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The lanes a chart draws under a name: none when one pod sent all of it (the name's
    own row is that pod's lane)."""
    lanes: list[dict[str, Any]] = row.get("pods", [])
    return lanes if len(lanes) > 1 or row.get("unlaned") else []


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

    from tidings.schemas.view.model import fmt_seconds

    span_total = max(r["offset_s"] + r["duration_s"] for r in data)
    axis = f"0s{fmt_seconds(span_total).rjust(width - 2)}"
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, title_justify="left",
              title=Text(f"Timeline of {safe(namespace)}/{safe(task)}  ({header(data)} over "
                         f"{fmt_seconds(span_total)})"))
    t.add_column("SPAN", overflow="fold", min_width=8, max_width=28)
    t.add_column(axis, no_wrap=True, width=width, min_width=width)
    for col in ("COUNT", "TOTAL", "MEAN", "ERRORS"):
        t.add_column(col, justify="right", no_wrap=True, min_width=len(col))
    for r in data:
        style = "red" if r["errors"] else "cyan"
        t.add_row(Text(r["name"]), Text(busy_bar(r["windows"], span_total, width), style=style),
                  str(r["count"]), fmt_seconds(r["total_s"]), fmt_seconds(r["mean_s"]),
                  Text(str(r["errors"]), style=style if r["errors"] else ""))
        lanes = lanes_shown(r)
        for lane in lanes:  # one lane per pod, under its span name
            lane_style = "red" if lane["errors"] else "yellow" if lane["slow"] else "blue"
            mean = fmt_seconds(lane["mean_s"]) + (" slow" if lane["slow"] else "")
            t.add_row(Text(f"  {elide(lane['name'], 26)}", style="dim", no_wrap=True),
                      Text(busy_bar(lane["windows"], span_total, width), style=lane_style),
                      str(lane["count"]), fmt_seconds(lane["total_s"]),
                      Text(mean, style="yellow" if lane["slow"] else ""),
                      Text(str(lane["errors"]), style="red" if lane["errors"] else ""))
        if lanes and r["unlaned"]:
            t.add_row(Text(f"  (other pods: {r['unlaned']:,})", style="dim"), "", "", "", "",
                      "")
    return t


def header(data: list[dict[str, Any]]) -> str:
    """Names, spans and pods counted apart: "3 names, 1,812 spans, 4 pods"."""
    names, spans = len(data), sum(r["count"] for r in data)
    pods = len({lane["name"] for r in data for lane in r.get("pods", ())})
    return (f"{names} name{'s' if names != 1 else ''}, "
            f"{spans:,} span{'s' if spans != 1 else ''}"
            + (f", {pods} pods" if pods > 1 else ""))


def _x(s: object) -> str:
    from xml.sax.saxutils import escape

    return escape(safe(s), {'"': "&quot;", "'": "&apos;"})


# A monospace glyph is 0.6 em wide (DejaVu Sans Mono 0.602, Courier 0.6). Wide (East Asian)
# characters take two cells; every other code point one, combining marks too: a browser draws
# "é" as e + U+0301 in one cell, but a renderer that does not shape text gives each its own.
_EM_RATIO = 0.61


def _cells(text: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def elide(text: str, cells: int) -> str:
    """``text`` cut to at most ``cells`` monospace cells, ending in '…' when cut (never
    inside a grapheme: the cut is `schemas`' own)."""
    from tidings.schemas.wire.payloads import cut_text

    if _cells(text) <= cells:
        return text
    keep, used = 0, 1  # the ellipsis takes one cell
    for c in text:
        used += _cells(c)
        if used > cells:
            break
        keep += 1
    return cut_text(text, keep + 1)


def _px(text: str, font_px: float) -> float:
    return _cells(text) * font_px * _EM_RATIO


# Tick steps: 1-2-5 decades below a minute, clock steps above it, 1-2-5 days beyond a day.
_CLOCK_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def _decade_step(raw: float) -> float:
    import math

    base = 10.0 ** math.floor(math.log10(raw))
    return next(m * base for m in (1, 2, 5, 10) if m * base >= raw * (1 - 1e-9))


def ticks(total: float, intervals: int = 5) -> tuple[float, list[tuple[float, str]]]:
    """The axis for ``total`` seconds: its end (a whole number of steps, so the last tick is
    the right edge) and (seconds, label) per tick, at most ``intervals`` + 1 of them. The step
    is 1, 2 or 5 of a unit (ns, µs, ms, s) or a clock step (1m, 5m, 15m, 1h, 6h, 1d, ...), so
    every label is an exact whole number of its unit and no two are alike."""
    import math

    raw = max(total, 1e-9) / intervals
    if raw < 60:
        step = max(_decade_step(raw), 1e-9)
    elif raw <= _CLOCK_STEPS[-1]:
        step = float(next(s for s in _CLOCK_STEPS if s >= raw))
    else:
        step = 86400 * _decade_step(raw / 86400)
    count = max(1, math.ceil(total / step - 1e-9))
    if step < 60:
        # The unit of the axis' end (so 0.5s, 1s, 1.5s rather than 500ms ... 1500ms), with
        # as many decimals as the step needs: labels differ by a step, so they stay distinct.
        unit, name = next((u, n) for u, n in _UNITS if count * step >= u * (1 - 1e-9))
        decimals = max(0, -math.floor(math.log10(step / unit) + 1e-9))
        labels = ["0s"] + [_number(i * step / unit, decimals) + name for i in range(1, count + 1)]
    else:
        labels = [_clock(round(i * step)) for i in range(count + 1)]
    return count * step, [(i * step, label) for i, label in enumerate(labels)]


def _number(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


def _clock(seconds: int) -> str:
    """2d, 1h30m, 15m: whole clock units, largest first."""
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"),
             (seconds % 3600 // 60, "m"), (seconds % 60, "s")]
    return "".join(f"{n}{u}" for n, u in parts if n) or "0s"


def _lines(data: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool, str]]:
    """The chart's lines, top to bottom: (row, is a lane, its stats text)."""
    from tidings.schemas.view.model import fmt_seconds

    out = []
    for r in data:
        noun = "span" if r["count"] == 1 else "spans"
        out.append((r, False, f'{r["count"]:,} {noun}, total {fmt_seconds(r["total_s"])} '
                              f'mean {fmt_seconds(r["mean_s"])}'
                    + (f' errors {r["errors"]:,}' if r["errors"] else "")))
        for lane in lanes_shown(r):
            noun = "span" if lane["count"] == 1 else "spans"
            out.append((lane, True, f'{lane["count"]:,} {noun}, mean '
                                    f'{fmt_seconds(lane["mean_s"])}'
                        + (f' errors {lane["errors"]:,}' if lane["errors"] else "")
                        + (" (slow)" if lane["slow"] else "")))
        if lanes_shown(r) and r["unlaned"]:
            out.append(({"windows": []}, True,
                        f'{r["unlaned"]:,} summaries from pods beyond the lanes'))
    return out


def svg(task: str, namespace: str, data: list[dict[str, Any]]) -> str:
    """A hand-written SVG Gantt chart: a row per span name and under it a lane per pod (when
    several pods ran it), a slow lane in orange. Every text node is sanitised and
    XML-escaped; names too long for their column are elided, with the whole name in a
    tooltip (``<title>``); the columns are sized so that no text or bar overlaps another or
    leaves the picture. Each element carries a class (heading, grid, tick, label, bar,
    stats) for styling."""
    from datetime import datetime

    from tidings._compat import UTC
    from tidings.schemas.view.model import fmt_seconds

    font, small, big, pad, gap = 12, 11, 15, 10, 8
    label_w, chart_w, row_h, lane_h, top = 220, 560, 26, 20, 72
    total = max((r["offset_s"] + r["duration_s"] for r in data), default=0.0)
    lines = _lines(data)
    stats_w = max([_px(text, small if lane else font) for _, lane, text in lines]
                  + [120.0]) + 2 * gap
    width = round(label_w + chart_w + stats_w + pad)
    rows_h = sum(lane_h if lane else row_h for _, lane, _ in lines)
    height = top + max(row_h, rows_h) + 40
    fits = int((width - 2 * pad) / (font * _EM_RATIO))  # cells of a full-width line
    heading = f"Timeline of {safe(namespace)}/{safe(task)}"
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="{font}">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<g class="heading"><title>{_x(heading)}</title>'
        f'<text x="{pad}" y="22" font-size="{big}" font-weight="bold">'
        f'{_x(elide(heading, int((width - 2 * pad) / (big * _EM_RATIO))))}</text></g>',
    ]
    if not data:
        out.append(f'<text class="heading" x="{pad}" y="{top}" fill="#666">'
                   "no spans recorded</text>")
        out.append("</svg>\n")
        return "\n".join(out)
    end, axis = ticks(total)
    t0 = min(r["first_start"] for r in data)
    start = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    out.append(f'<text class="heading" x="{pad}" y="42" fill="#666">'
               f'{_x(elide(f"{header(data)} from {start} over {fmt_seconds(total)}", fits))}'
               "</text>")
    for value, label in axis:
        x = label_w + chart_w * value / end
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 8}" x2="{x:.1f}" '
                   f'y2="{height - 30}" stroke="#e5e5e5"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{top - 14}" text-anchor="middle" '
                   f'fill="#666">{_x(label)}</text>')
    y = top
    for r, lane, line in lines:
        h, size = (lane_h, small) if lane else (row_h, font)
        base = y + (h + size) // 2 - 2  # the text's baseline, centred in its line
        if lane:
            colour = "#d9534f" if r.get("errors") else "#e8912d" if r.get("slow") \
                else "#8fb8de"
            indent = 2 * small * _EM_RATIO
            cells = int((label_w - pad - gap - indent) / (small * _EM_RATIO))
            label_attrs = f'font-size="{small}" fill="#555"'
        else:
            colour = "#d9534f" if r["errors"] else "#3b82c4"
            cells = int((label_w - pad - gap) / (font * _EM_RATIO))
            label_attrs = ""
        tip = ""
        if "count" in r:  # (not the line that counts the pods beyond the lanes)
            out.append(f'<g class="label"><title>{_x(r["name"])}</title>'
                       f'<text x="{label_w - gap}" y="{base}" text-anchor="end" {label_attrs}>'
                       f'{_x(elide(r["name"], cells))}</text></g>')
            tip = (f'{_x(r["name"])}: {r["count"]} spans, total '
                   f'{_x(fmt_seconds(r["total_s"]))}, max {_x(fmt_seconds(r["max_s"]))}, '
                   f'{r["errors"]} errors')
        for a, b in r["windows"]:  # one mark per window where the spans ran
            # A mark is at least 1 px wide, and never past the chart's right edge.
            x = label_w + chart_w * min(max(a, 0.0), end) / end
            w = min(max(1.0, chart_w * (b - a) / end), label_w + chart_w - x)
            if w < 1.0:
                x, w = label_w + chart_w - 1.0, 1.0
            out.append(f'<rect class="bar" x="{x:.1f}" y="{y + 4}" width="{w:.1f}" '
                       f'height="{h - 8}" rx="2" fill="{colour}"><title>{tip}</title>'
                       f'</rect>')
        stats_attrs = f'fill="#777" font-size="{small}"' if lane else 'fill="#333"'
        out.append(f'<text class="stats" x="{label_w + chart_w + gap}" y="{base}" '
                   f'{stats_attrs}>{_x(line)}</text>')
        y += h
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
    """Show a task's spans as a Gantt-like chart: a row per span name where its spans ran and,
    when several pods ran it, a lane per pod under it (one whose mean span is 25 % above the
    name's median lane marked slow); and write an SVG on request."""
    check_task(task)
    if svg_file is not None and not svg_file.parent.is_dir():
        invalid(f"--svg {str(svg_file)!r}: directory {str(svg_file.parent)!r} does not exist")
    from tidings.cli.namespace import open_task
    from tidings.cli.taskread import TaskReader

    k, ref = open_task(task, namespace, all_namespaces, conn, from_events)
    snap = TaskReader(k, ref).load(use_events=from_events)
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
