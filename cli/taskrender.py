"""Drawing a task in the terminal: the table view of `state` (and `watch` on a terminal),
the one line `watch` prints when piped, and the sparkline of a metric's history. Both render
the view model the page renders too (``schemas/view/model.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tidings._compat import UTC
from tidings.cli.common import safe
from tidings.cli.snapshot import SOURCE_CR, Snapshot
from tidings.schemas.view.model import (
    CURVE_HEADERS,
    RegisterRow,
    RegisterTable,
    TaskView,
    WorkerCounts,
    ago,
    eta_text,
    fmt_seconds,
    scalar_text,
    task_view,
)
from tidings.schemas.wire.contract import FAILED, SUCCEEDED
from tidings.schemas.wire.history import heights
from tidings.schemas.wire.payloads import NON_FINITE
from tidings.schemas.wire.times import format_seconds


def _t(value: object, style: str = "") -> Any:
    from rich.text import Text

    return Text(safe(value), style=style)


def _ago(t: datetime | None) -> str:
    return ago(t, datetime.now(UTC))


# Cells of a sparkline: one per history point, at most this many.
SPARK_WIDTH = 32
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-~=+*#"  # when the terminal's encoding has no block characters


def sparkline(values: list[float], width: int = SPARK_WIDTH, ascii_only: bool = False) -> str:
    """A one-line curve of ``values`` (oldest first): one cell per value (the points are
    spread over the run), the lowest value the lowest block; ASCII levels on request."""
    levels = SPARK_ASCII if ascii_only else SPARK_BLOCKS
    values = values[-width:] if width > 0 else []
    if not values:
        return ""
    top = len(levels) - 1
    if not max(values) > min(values):  # flat (or one point): the middle level
        return levels[top // 2] * len(values)
    return "".join(levels[round(h * top)] for h in heights(values))


class Sparkline:
    """A rich renderable of ``sparkline``: block characters, or ASCII when the console's
    encoding cannot show them (``LANG=C``, a legacy code page)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def text(self, ascii_only: bool) -> str:
        return sparkline(self.values, ascii_only=ascii_only)

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        yield Text(self.text(options.ascii_only), style="green", no_wrap=True)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        n = len(self.text(True))
        return Measurement(n, n)


def progress_bar(fraction: float, width: int = 24) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def view(snap: Snapshot) -> TaskView:
    """The snapshot's view model (schemas/view/model.py): what the page shows too. A local fold's
    health is judged now, with the watcher's default thresholds."""
    return task_view(snap.state, snap.status, now=datetime.now(UTC),
                     partial=snap.unread.partial)


def render(snap: Snapshot) -> Any:
    """A rich renderable of one state: summary, then links, decks, spans, pods, counters."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    v = view(snap)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("Task", _t(f"{v.task.namespace}/{v.task.name}"))
    head.add_row("Source", _t("TaskFeedback status" if snap.source == SOURCE_CR
                              else "events (folded locally; no watcher status)"))
    if v.progress is not None:
        pct = f"{v.progress.fraction * 100:5.1f}%"
        head.add_row("Progress", _t(f"{progress_bar(v.progress.fraction)} {pct}"))
        if v.progress.message:
            head.add_row("Message", _t(v.progress.message))
        if v.progress.eta is not None:
            eta = v.progress.eta
            head.add_row("ETA", _t(f"{format_seconds(eta)} "
                                   f"({eta_text(eta, datetime.now(UTC))})"))
        head.add_row("Workers", worker_text(v.worker_counts))
    else:
        head.add_row("Progress", _t("no progress reported"))
    if snap.unread.partial and snap.status is not None:
        head.add_row("Status", _t("partly unreadable: the watcher does not write over it "
                                  "(see below)", "red"))
        written = snap.status.get("progress")
        if isinstance(written, dict) and "percent" in written:
            head.add_row("As written", _t(f"{safe(written.get('percent'))}% "
                                          f"{safe(written.get('message', ''))}"))
    head.add_row("Phase", _t(v.phase, {SUCCEEDED: "green", FAILED: "red"}.get(v.phase,
                                                                             "yellow")))
    if v.health_summary:
        judged = "" if v.judged_at is None or snap.source != SOURCE_CR \
            else f" (judged {_ago(v.judged_at)} by the watcher)"
        head.add_row("Health", _t(v.health_summary + judged,
                                  "green" if v.health_summary == "Healthy" else "red"))
    for c in v.notable:  # a failure, a pod waiting, what health says
        head.add_row(c.type, _t(f"{c.reason}: {c.message}", "red" if c.type == FAILED
                                else "yellow"))
    if v.platform is not None:
        pl = v.platform
        head.add_row("Platform", _t(f"{pl.kind} {pl.name} {pl.phase}"
                                    + (f" ({pl.reason})" if pl.reason else "")))
    head.add_row("Last event", _t(_ago(v.last_event)))
    if v.warnings:
        # What the number counts: a bare "Warnings 2" left people guessing.
        head.add_row("Warnings", _t(f"{v.warnings} failure report"
                                    f"{'s' if v.warnings != 1 else ''} (events of type "
                                    "Warning: kubectl describe lists them)", "red"))
    parts: list[Any] = [head]

    def table(title: str, *cols: str) -> Table:
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
        for c in cols:
            t.add_column(c, overflow="fold")
        return t

    for reg in v.tables:  # links, decks, ...: one table each, as the registry says
        kind = reg.kind
        t = table(reg.title, "NAME", *reg.headers, *(CURVE_HEADERS if reg.curve else ()),
                  *(["UPDATED"] if kind.age else []))
        for row in reg.rows:
            t.add_row(*register_cells(reg, row))
        parts.append(t)
    if v.spans:
        t = table("Spans", "NAME", "COUNT", "TOTAL", "MIN", "MAX", "ERRORS")
        for s in v.spans:
            t.add_row(_t(s.name), _t(s.count), _t(fmt_seconds(s.total_s)),
                      _t(fmt_seconds(s.min_s)), _t(fmt_seconds(s.max_s)),
                      _t(s.errors, "red" if s.errors else ""))
        parts.append(t)
    if v.shows_workers:
        ends = v.has_pod_ends
        t = table("Workers", "POD", "PROGRESS", "STATE", "HEALTH", "MESSAGE",
                  *(("POD ENDED",) if ends else ()))
        for w in v.workers:
            flag = ", ".join(w.flags)
            cells = [_t(w.pod), _t("-" if w.fraction is None else f"{w.fraction * 100:.1f}%"),
                     _t(w.state, "red" if w.bad else ""),
                     # (quiet on purpose is no fault: only the conditions are red)
                     _t(flag, "red" if set(w.flags) - {"quiet"} else "yellow"), _t(w.message)]
            if ends:
                cells.append(_t(w.ended, "red" if w.ended_failed else ""))
            t.add_row(*cells)
        parts.append(t)
    if v.waiting:
        t = table("Waiting pods", "POD", "REASON", "SINCE", "MESSAGE")
        for wp in v.waiting:
            t.add_row(_t(wp.pod), _t(wp.reason, "yellow"), _t(_ago(wp.since)), _t(wp.message))
        if v.waiting_more:
            t.add_row(_t(f"... {v.waiting_more} more"), _t(""), _t(""), _t(""))
        parts.append(t)
    if v.pods:
        t = table("Reporting pods", "POD", "UID", "EVENTS")
        for p in v.pods:
            t.add_row(_t(p.name), _t(p.uid), _t(p.events))
        parts.append(t)
    noisy = dict(v.counters)
    if snap.rejected:
        noisy["rejected_events"] = snap.rejected
        t = table("Refused events (not applied)", "REASON", "SENDER", "EVENTS", "WHY")
        for reason, sender, n, detail in snap.refusals.rows():
            t.add_row(_t(reason, "red"), _t(sender), _t(n), _t(detail))
        parts.append(t)
    if snap.unread:
        t = table("Unreadable in the status (kept as written)", "ENTRY", "WHY")
        for problem in snap.unread.problems:
            where, _, why = problem.partition(": ")
            t.add_row(_t(where, "red"), _t(why))
        parts.append(t)
    if v.refused:
        t = table("Refused by the watcher", "REASON", "EVENTS")
        for reason, n in v.refused:
            t.add_row(_t(reason, "red"), _t(n))
        parts.append(t)
    footer = f"{v.events_applied} events applied"
    if noisy:
        footer += "; " + ", ".join(f"{k}={n}" for k, n in sorted(noisy.items()))
    parts.append(_t(footer, "dim"))
    return Group(*parts)


def worker_text(counts: WorkerCounts) -> Any:
    """The count of a task's workers as rich text, its bad news in red."""
    from rich.text import Text

    return Text.assemble(*((safe(text), "red" if bad else "") for text, bad in counts.words()))


def register_cells(reg: RegisterTable, row: RegisterRow) -> list[Any]:
    """The table cells of one register of a named kind: its name, its value fields, its
    extremes and history when the kind keeps a curve, and how long ago it was written when
    the kind shows that."""
    kind = reg.kind
    cells = [_t(row.name), *(_t(text, "red" if f.non_finite and text in NON_FINITE else f.style)
                             for f, text in zip(kind.values, row.values, strict=True))]
    if reg.curve:
        cells += [_t(scalar_text(row.low)), _t(scalar_text(row.high)),
                  Sparkline(list(row.points))]
    if kind.age:
        cells.append(_t(_ago(row.at)))
    return cells


def one_line(snap: Snapshot) -> str:
    """A compact, sanitised line for one state (what `watch` prints when piped)."""
    v = view(snap)
    now = datetime.now(UTC).strftime("%H:%M:%S")
    pr = v.progress
    progress = "no progress" if pr is None else f"{pr.fraction * 100:5.1f}% {pr.message}"
    if pr is not None and pr.eta is not None:
        progress += f" (eta {format_seconds(pr.eta)})"
    values = ""
    counts = {reg.kind.section: len(reg.rows) for reg in v.tables}
    for reg in v.tables:  # metrics: their latest values, the first few names
        if reg.kind.inline:
            shown = reg.rows[:INLINE_MAX]
            values += "".join(f" {row.name}={row.values[0]}" for row in shown)
            if len(reg.rows) > INLINE_MAX:
                values += f" (+{len(reg.rows) - INLINE_MAX} {reg.kind.section})"
    tail = f" {v.phase.lower()}" if v.finished else ""
    if v.health_summary and v.health_summary != "Healthy":
        tail += f" health={v.health_summary}"
    return safe(f"{now} {v.task.namespace}/{v.task.name} {progress} "
                f"(links {counts.get('links', 0)}, decks {counts.get('decks', 0)}, "
                f"spans {len(v.spans)}){values}{tail}")


# Registers of an inline kind that one `watch` line shows (the table view shows them all).
INLINE_MAX = 6
