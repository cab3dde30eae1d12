"""The page's HTML: Jinja2 templates (autoescaped, and every value neutralised first by the
same rule as the terminal's, schemas/wire/text.py) over the view model of
schemas/view/model.py, so a status becomes rows in one place for the CLI and the page alike.

Each part a live update replaces (a row of the list, the body of a task, its lineage tree,
the banner) is a template of its own, rendered once per change and shared by every tab.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from tidings._compat import UTC
from tidings.cli import lineage as lin
from tidings.cli.timeline_cmd import rows as timeline_rows
from tidings.kube.objects import KubeObject
from tidings.schemas import TaskRef
from tidings.schemas.status.decoder import StatusRead, read_status
from tidings.schemas.view.model import (
    TaskView,
    age,
    eta_text,
    fmt_seconds,
    pace_text,
    summarize,
    task_view,
)
from tidings.schemas.wire.contract import FAILED, PENDING, RUNNING, SUCCEEDED
from tidings.schemas.wire.history import heights
from tidings.schemas.wire.text import sanitize_text
from tidings.schemas.wire.times import format_seconds
from tidings.ui.hub import Key

PHASES = (PENDING, RUNNING, SUCCEEDED, FAILED)
SPARK_W, SPARK_H = 120, 24


def _finalize(value: Any) -> Any:
    """Every value a template prints, neutralised before it is escaped: no control or
    invisible character from the cluster reaches the page either."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return sanitize_text(value)
    return value


def task_url(namespace: str, name: str) -> str:
    return f"/tasks/{quote(namespace, safe='')}/{quote(name, safe='')}"


def row_id(key: Key) -> str:
    return f"row:{key[0]}/{key[1]}"


def phase_class(phase: str) -> str:
    """A CSS class from a fixed set (never the cluster's text itself)."""
    return phase.lower() if phase in PHASES else "unknown"


def iso(t: datetime | None) -> str:
    return "" if t is None else format_seconds(t)


def epoch(t: datetime | None) -> str:
    return "" if t is None else str(int(t.timestamp()))


def spark(points: Sequence[float]) -> str:
    """The polyline of a sparkline, SPARK_W x SPARK_H, numbers only."""
    values = [p for p in points if math.isfinite(p)]
    if len(values) < 2:
        return ""
    flat = not max(values) > min(values)  # (drawn along the bottom, as it always was)
    step = SPARK_W / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{SPARK_H - 2 - (0.0 if flat else h) * (SPARK_H - 4):.1f}"
                    for i, h in enumerate(heights(values)))


def _env() -> Environment:
    env = Environment(loader=PackageLoader("tidings.ui", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, finalize=_finalize, trim_blocks=True,
                      lstrip_blocks=True)
    env.globals.update(task_url=task_url, row_id=row_id, phase_class=phase_class, iso=iso,
                       epoch=epoch, spark=spark, fmt_seconds=fmt_seconds, pace_text=pace_text,
                       SPARK_W=SPARK_W, SPARK_H=SPARK_H)
    env.filters["age"] = lambda t: age(t, datetime.now(UTC))
    env.filters["eta"] = lambda t: eta_text(t, datetime.now(UTC))
    return env


ENV = _env()


def render(template: str, **values: Any) -> str:
    return ENV.get_template(template).render(**values).strip()


# --- the parts a live update replaces ------------------------------------------------------


class Cache:
    """The parts rendered per resourceVersion of their task: a change is rendered once,
    however many tabs show it."""

    def __init__(self) -> None:
        self.rows: dict[Key, tuple[str, str]] = {}  # key -> (resourceVersion, html)
        self.bodies: dict[Key, tuple[str, str]] = {}

    def _get(self, store: dict[Key, tuple[str, str]], obj: KubeObject,
             make: Any) -> str:
        s = summarize(obj)
        cached = store.get(s.key)
        if cached is not None and s.resource_version and cached[0] == s.resource_version:
            return cached[1]
        html: str = make(obj)
        store[s.key] = (s.resource_version, html)
        return html

    def row(self, obj: KubeObject) -> str:
        return self._get(self.rows, obj, lambda o: render("row.html", s=summarize(o)))

    def body(self, obj: KubeObject) -> str:
        return self._get(self.bodies, obj, task_body)

    def forget(self, key: Key) -> None:
        self.rows.pop(key, None)
        self.bodies.pop(key, None)


def read_of(obj: KubeObject) -> tuple[StatusRead, Mapping[str, Any]]:
    """The task's state as its status holds it (what it cannot read is left out, and said),
    and the status itself."""
    s = summarize(obj)
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    return read_status(TaskRef(s.namespace, s.name), status), status


def view_of(obj: KubeObject) -> TaskView:
    read, status = read_of(obj)
    return task_view(read.state, status, partial=read.unread.partial)


def spans_digest(view: TaskView) -> str:
    """Changes when the timeline would: the page reloads the image only then."""
    text = repr([(s.name, s.count, s.total_s, s.errors, s.pods) for s in view.spans])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def task_body(obj: KubeObject) -> str:
    view = view_of(obj)
    s = summarize(obj)
    return render("task_body.html", v=view, s=s, digest=spans_digest(view),
                  timeline=task_url(*s.key) + "/timeline.svg")


def timeline_svg(obj: KubeObject) -> str:
    from tidings.cli.timeline_cmd import svg

    state = read_of(obj)[0].state
    return svg(state.task.name, state.task.namespace, timeline_rows(state))


def lineage(namespace: str, name: str, fates: list[lin.PodFate] | None, error: str) -> str:
    roles: dict[str, list[lin.PodFate]] = {}
    for f in fates or []:
        roles.setdefault(f.entry.role, []).append(f)
    return render("lineage.html", namespace=namespace, name=name, roles=roles,
                  loading=fates is None, error=error)


def message(text: str, kind: str = "error") -> str:
    return render("message.html", text=text, kind=kind)
