"""The view model (schemas/view/model.py) and the page's HTML made from it (tidings.ui.pages): a
status becomes rows in one place, whatever it holds; the page shows every kind the CLI
shows; anything from the cluster is escaped, and only an http(s) URL becomes a link."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tests.support import expanded
from tests.unit.test_kinds import EXAMPLES, TASK, event_of, models
from tidings._compat import UTC
from tidings.schemas import PodRef, build_event, parse_event
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.engine.state import TaskState
from tidings.schemas.view.model import (
    TaskView,
    WorkerCounts,
    age,
    eta_text,
    pace_text,
    summarize,
    task_view,
)
from tidings.schemas.wire.kinds import Kind
from tidings.schemas.wire.payloads import LogLink, Progress

pytest.importorskip("jinja2", reason="the ui extra (tidings[ui]) is not installed")
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import to_status
from tidings.ui import pages

HOSTILE = '<img src=x onerror="window.pwned=1">'
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def a_status(*payloads: Any) -> dict[str, Any]:
    events = [event_of(p, seq=n + 1) for n, p in enumerate(payloads)]
    status: dict[str, Any] = to_status(fold_all(TASK, events))
    return status


def obj(status: Any, name: str = TASK.name) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": TASK.namespace, "uid": "u1",
                         "resourceVersion": "7", "creationTimestamp": "2026-11-30T11:00:00Z",
                         "labels": {"team": "a"}},
            "status": status}


class Tags(HTMLParser):
    """Every start tag and its attributes, as a browser would parse the markup."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(html)
    return parser.tags


# --- the list's row ------------------------------------------------------------------------


def test_a_row_reads_what_the_status_says() -> None:
    s = summarize(obj(a_status(Progress(fraction=0.4, message="epoch 2"),
                               LogLink(name="w", url="https://w.example/r"))))
    assert (s.namespace, s.name, s.phase, s.percent, s.message) == (
        TASK.namespace, TASK.name, "Running", 40, "epoch 2")
    assert (s.worker_counts, s.link_count) == (WorkerCounts(0, 1), 1)
    assert s.health == () and s.labels == {"team": "a"}
    assert s.created == datetime(2026, 11, 30, 11, tzinfo=UTC)


def test_health_is_every_true_condition_but_completed() -> None:
    status = a_status(Progress(fraction=1.0, message="boom", final=True, failed=True))
    status["conditions"].append({"type": "Stalled", "status": "True", "reason": "NoProgress",
                                 "message": "no progress for 10m"})
    s = summarize(obj(status))
    assert s.phase == "Failed"
    assert [c.type for c in s.health] == ["Stalled"]  # the phase already says Failed


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(status=JSONISH, progress=JSONISH, roster=JSONISH, conditions=JSONISH, meta=JSONISH)
def test_no_status_breaks_a_row_or_the_page(status: Any, progress: Any, roster: Any,
                                            conditions: Any, meta: Any) -> None:
    # "Nothing a status may hold breaks a reader": a hand-written or hostile status gives a
    # row (with what could be read) and a page, never an exception.
    st_ = dict(status) if isinstance(status, dict) else {}
    st_.update(progress=progress, roster=roster, conditions=conditions)
    o = {"metadata": meta, "status": st_}
    pages.render("row.html", s=summarize(o))
    pages.task_body(o)


# --- the page of a task ----------------------------------------------------------------------


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_the_page_shows_every_kind(kind: Kind, model: type[BaseModel]) -> None:
    payload, marker = EXAMPLES[model]
    other = event_of(Progress(fraction=0.1, message="other"), seq=2,
                     pod=PodRef("worker-1", "uid-1"))
    status = to_status(fold_all(TASK, [event_of(payload), other]))
    assert marker in pages.task_body(obj(status)), f"the page does not show {model.__name__}"


def test_only_http_links_become_anchors_and_nothing_is_markup() -> None:
    status = a_status(LogLink(name="good", url="https://grafana.example/d/1?a=1&b=2"),
                      Progress(fraction=0.5, message="m"))
    # What a hand-written status can hold (the fold never writes it): hostile names and
    # URLs, controls and bidi overrides.
    at = expanded(status)["links"]["good"]["at"]
    status["links"][HOSTILE] = f"at={at}; events=1; url=javascript:alert(1)"
    status["links"]["tab"] = {"url": "java\tscript:alert(2)", "at": at, "events": 1}
    status["links"]["data"] = f"at={at}; events=1; url=data:text/html,<script>alert(3)</script>"
    status["decks"] = {"d": {"uri": "JAVASCRIPT:alert(4)", "at": at, "events": 1},
                       "s3": {"uri": "s3://bucket/deck.html", "at": at, "events": 1}}
    status["metrics"] = {HOSTILE: f"value=1.0; at={at}; events=1"}
    status["progress"]["message"] = f"{HOSTILE}\x1b[31m\u202e</dd><script>x()</script>"
    status["workers"][0] += f"; message={HOSTILE}"
    html = pages.task_body(obj(status))
    anchors = [a for t, a in tags(html) if t == "a"]
    assert [a["href"] for a in anchors] == ["https://grafana.example/d/1?a=1&b=2"]
    assert all(a["rel"] == "noopener noreferrer" for a in anchors)
    assert [t for t, _ in tags(html) if t in ("img", "script")] == []
    assert "javascript:alert(1)" in html  # shown, as text
    assert "s3://bucket/deck.html" in html and "&lt;img src=x onerror=" in html
    assert "\x1b" not in html and "\u202e" not in html


def test_a_row_escapes_and_links_to_its_page() -> None:
    s = summarize(obj(a_status(Progress(fraction=0.5, message=HOSTILE))))
    html = pages.render("row.html", s=s)
    assert "<img" not in html
    (link,) = [a for t, a in tags(html) if t == "a"]
    assert link["href"] == f"/tasks/{TASK.namespace}/{TASK.name}"


def test_workers_show_their_pace() -> None:
    t0 = datetime(2026, 11, 30, 3, tzinfo=UTC)
    events = []
    for n, (frac, secs) in enumerate([(0.1, 0), (0.4, 60)]):
        raw = build_event(task=TASK, pod=PodRef("w-0", "u-0"), instance="i" * 32, seq=n + 1,
                          payload=Progress(fraction=frac, message="m"),
                          time=t0 + timedelta(seconds=secs))
        events.append(parse_event(orjson.loads(orjson.dumps(raw))))
    (w,) = task_view(fold_all(TASK, events)).workers  # type: ignore[arg-type]
    assert w.state == "running" and w.fraction == 0.4
    assert w.pace == pytest.approx(0.3 / 60)
    assert pace_text(w.pace) == "30%/min"


def test_a_metric_history_draws_a_sparkline() -> None:
    line = pages.spark([1.0, 3.0, 2.0, float("nan"), 5.0])
    points = [tuple(map(float, p.split(","))) for p in line.split()]
    assert len(points) == 4 and points[0][0] == 0 and points[-1][0] == pages.SPARK_W
    assert min(y for _, y in points) >= 0 and max(y for _, y in points) <= pages.SPARK_H
    assert pages.spark([1.0]) == ""
    assert re.fullmatch(r"[0-9., -]*", line)


def test_a_metrics_curve_comes_from_the_view_to_the_page_and_the_terminal() -> None:
    """A metric's extremes and history are the view model's (RegisterRow
    points, low, high), which `tidings state` and the page both draw."""
    import io

    from rich.console import Console

    from tidings.cli.snapshot import SOURCE_CR, Snapshot
    from tidings.cli.taskrender import render, sparkline
    from tidings.schemas.wire.payloads import Metric

    status = a_status(Metric(name="loss", value=2.0, step=0),
                      Metric(name="loss", value=0.25, step=30, min=0.125, max=2.5,
                             points=((10, 1.0), (20, 0.125))),
                      LogLink(name="w", url="https://x.example/"))
    state = decode_status(TASK, status)
    v = task_view(state, status)
    (metrics,) = [t for t in v.tables if t.kind.section == "metrics"]
    (links,) = [t for t in v.tables if t.kind.section == "links"]
    assert metrics.curve and not links.curve
    (row,) = metrics.rows
    assert row.points == (2.0, 1.0, 0.125, 0.25) and (row.low, row.high) == (0.125, 2.5)
    assert links.rows[0].points == () and links.rows[0].low is None
    html = pages.task_body(obj(status))
    assert "min 0.125 max 2.5" in html
    (svg,) = [a for t, a in tags(html) if t == "polyline"]
    assert svg["points"] == pages.spark(row.points)
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(render(Snapshot(state, SOURCE_CR)))
    (line,) = [ln for ln in out.getvalue().splitlines() if "loss" in ln]
    assert line.split()[:6] == ["loss", "0.25", "30", "0.125", "2.5", sparkline(list(row.points))]


def test_times_as_kubectl_says_them() -> None:
    assert age(NOW - timedelta(minutes=3, seconds=20), NOW) == "3m20s"
    assert eta_text(NOW + timedelta(seconds=90), NOW) == "in 90s"
    assert eta_text(NOW - timedelta(seconds=5), NOW) == "overdue 5s"
    assert eta_text(NOW, NOW) == "now"
    assert eta_text(None, NOW) == "<none>"


def terminal(state: TaskState, status: dict[str, Any] | None = None) -> str:
    """What `tidings state` prints of a state (read from ``status``, else folded locally)."""
    import io

    from rich.console import Console

    from tidings.cli.snapshot import SOURCE_CR, SOURCE_EVENTS, Snapshot
    from tidings.cli.taskrender import render

    out = io.StringIO()
    snap = Snapshot(state, SOURCE_CR if status is not None else SOURCE_EVENTS, status=status)
    Console(file=out, width=250, color_system=None).print(render(snap))
    return out.getvalue()


def page_text(html: str) -> str:
    """The page's words as a browser shows them: tags dropped, entities read."""
    import html as html_

    return html_.unescape(re.sub(r"<[^>]*>", "", html))


def a_busy_state() -> tuple[TaskState, dict[str, Any]]:
    """Two workers (one OOM-killed without a word, one running), a metric with a history, a
    link, a span, a pod waiting: something in each part of a task's view."""
    from tidings.schemas.engine.observed import PodVerdict
    from tidings.schemas.engine.observing import observe
    from tidings.schemas.wire.payloads import Metric, SpanSummary

    t = datetime(2026, 11, 30, 3, 5, tzinfo=UTC)
    other = PodRef("worker-1", "uid-1")
    state = fold_all(TASK, [
        event_of(Progress(fraction=0.3, message="epoch 1")),
        event_of(Progress(fraction=0.2, message="epoch 1 of 3"), seq=2, pod=other),
        event_of(Metric(name="loss", value=0.5, step=3, min=0.25, max=2.0,
                        points=((1, 2.0), (2, 1.0))), seq=3),
        event_of(LogLink(name="runs", url="https://runs.example/7"), seq=4),
        event_of(SpanSummary(name="train_step", count=3, total_s=1.5, min_s=0.25, max_s=1.0,
                             first_start=1.8e9, last_end=1.8e9 + 9, errors=1), seq=5)])
    state = observe(state, [PodVerdict("worker-1", "uid-1", "Failed", "OOMKilled", "", 137, t)],
                    waiting=[PodVerdict("worker-2", "uid-2", "Waiting", "ImagePullBackOff",
                                        "no such image", None, t)])
    return state, to_status(state)


def shown(v: TaskView) -> list[str]:
    """The words of a view each surface must show: its progress, workers, registers, spans
    and waiting pods."""
    assert v.progress is not None
    out = [v.phase, v.progress.message, v.worker_counts.text()]
    for w in v.workers:
        out += [w.pod, w.state, w.ended]
    for table in v.tables:
        for r in table.rows:
            out += [r.name, *r.values]
    out += [sp.name for sp in v.spans] + [wp.reason for wp in v.waiting]
    return [text for text in out if text]


def test_the_cli_and_the_page_read_one_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tidings state` and the page show every part of the one view of a task, and only
    that: a view changed after ``task_view`` made it shows changed on both, so neither
    reads a state or a status of its own."""
    from tidings.cli import taskrender

    state, status = a_busy_state()
    o = obj(status)
    v = task_view(decode_status(TASK, status), status)
    assert len(v.workers) == 2 and v.tables and v.spans and v.waiting
    for text in shown(v):
        assert text in terminal(state, status), text
        assert text in page_text(pages.task_body(o)), text
    assert v.progress is not None
    told = replace(v, phase="Decided-Elsewhere",
                   progress=replace(v.progress, message="said by the one view"),
                   worker_counts=WorkerCounts(7, 9, failed=2, ended=1),
                   workers=tuple(replace(w, state=f"state-{n}") for n, w in enumerate(v.workers)))
    made: list[tuple[TaskState, Any]] = []

    def one_view(state: TaskState, status: Any = None, now: datetime | None = None, *,
                 partial: bool = False) -> TaskView:
        made.append((state, status))
        return told

    monkeypatch.setattr(taskrender, "task_view", one_view)
    monkeypatch.setattr(pages, "task_view", one_view)
    cli, page = terminal(state, status), page_text(pages.task_body(o))
    assert len(made) == 2
    for text in shown(told):
        assert text in cli, text
        assert text in page, text
    assert "7 of 9 final, 2 failed (1 by their pod's end)" in cli


# --- one count of workers: the list's row, `list -o wide`, the page and `state` ---------------


def four_places(status: dict[str, Any]) -> dict[str, str]:
    """The worker count of a task as each surface shows it: the page's list row, `tidings
    list -o wide`, the task's page and `tidings state`."""
    from tidings.cli.list_cmd import header, row

    o = obj(status)
    cells = dict(zip(header(True, False), row(o, wide=True, namespaced=False, now=NOW),
                     strict=True))
    page_row = re.search(r'<td class="workers">(.*?)</td>', pages.render("row.html",
                                                                        s=summarize(o)))
    page = re.search(r'<dd class="workers">(.*?)</dd>', pages.task_body(o))
    assert page_row is not None and page is not None
    state_line = [ln for ln in terminal(decode_status(TASK, status), status).splitlines()
                  if ln.startswith("Workers")]
    return {"row": page_text(page_row.group(1)), "wide": cells["WORKERS"],
            "page": page_text(page.group(1)),
            "state": state_line[0].removeprefix("Workers").strip()}


@pytest.mark.parametrize("platform, short, long", [
    (None, "1/1 1 failed", "1 of 1 final, 1 failed (1 by their pod's end)"),
    ("Running", "1/1 1 retried", "1 of 1 final, 1 retried (1 by their pod's end)"),
    ("Failed", "1/1 1 failed", "1 of 1 final, 1 failed (1 by their pod's end)"),
], ids=["no-platform", "job-running", "job-gave-up"])
def test_an_oom_killed_worker_reads_the_same_in_all_four_places(
        platform: str | None, short: str, long: str) -> None:
    """One worker, OOM-killed without a final report: final by its pod's end and failed, in
    the list (not 0/1), on the page and in `state`. Under a Job that still runs it was an
    attempt the Job retried; once the Job gave up (backoffLimit 0), it was not retried."""
    from tidings.schemas.engine.observed import PlatformOutcome, PodVerdict
    from tidings.schemas.engine.observing import observe

    t = datetime(2026, 11, 30, 3, 5, tzinfo=UTC)
    state = fold_all(TASK, [event_of(Progress(fraction=0.5, message="epoch 1"))])
    (pod,) = state.workers
    state = observe(state, [PodVerdict(pod, "uid-0", "Failed", "OOMKilled", "", 137, t)])
    if platform is not None:
        state = observe(state, platform=PlatformOutcome(
            "batch/v1", "Job", "job-1", "uid-job", platform,
            "BackoffLimitExceeded" if platform == "Failed" else "", "", t))
    status = to_status(state)
    assert status["roster"]["final"] == 0 and status["roster"]["podFinal"] == 1
    counts = summarize(obj(status)).worker_counts
    assert counts == task_view(decode_status(TASK, status), status).worker_counts
    assert counts is not None and counts.text(short=True) == short and counts.text() == long
    assert four_places(status) == {"row": short, "wide": short, "page": long, "state": long}


def test_the_list_row_and_the_page_count_the_workers_of_any_state_alike() -> None:
    """Over the golden test's random states (pods final by their own word or their pod's
    end, failed, retried under a Job, beyond the roster's cap): the row, read from the
    status alone, counts as the page and `state` do from the whole state."""
    from tests.unit.test_status_golden import random_state

    kinds = set()
    for seed in range(300):
        state = random_state(seed)[0]
        status = to_status(state)
        counts = summarize(obj(status)).worker_counts
        if "roster" not in status:  # nothing reported, no pod ended
            assert counts is None and not state.roster.marks
            continue
        assert counts == task_view(state, status).worker_counts, seed
        assert counts == task_view(decode_status(TASK, status), status).worker_counts, seed
        kinds |= {k for k in ("failed", "retried", "ended") if getattr(counts, k)}
    assert kinds == {"failed", "retried", "ended"}  # the generator reaches each case


def test_reading_a_status_into_its_page_builds_no_payload_validator() -> None:
    # What `tidings state` and the page do with a watcher's status validates no payload, so
    # none of the payload models' validators is built (pydantic's defer_build): building
    # them at import was a fifth of that command's start (bench/bench_cli_startup.py).
    status = to_status(fold_all(TASK, [event_of(p, seq=n + 1) for n, (p, _) in
                                       enumerate(EXAMPLES.values())]))
    probe = ("import sys, orjson\n"
             "from tidings.schemas import TaskRef\nfrom tidings.schemas.wire import payloads\n"
             "from tidings.schemas.status.decoder import read_status\n"
             "from tidings.schemas.view.model import task_view\n"
             "status = orjson.loads(sys.stdin.buffer.read())\n"
             f"read = read_status(TaskRef({TASK.namespace!r}, {TASK.name!r}), status)\n"
             "view = task_view(read.state, status)\n"
             "assert not read.unread.partial and len(view.tables) == 3, view\n"
             "models = [m for m in vars(payloads).values() if isinstance(m, type)\n"
             "          and issubclass(m, payloads.BaseModel) and m is not payloads.BaseModel]\n"
             "print(len(models), 'BUILT', sorted(m.__name__ for m in models\n"
             "                                   if m.__pydantic_complete__))")
    out = subprocess.run([sys.executable, "-c", probe], input=orjson.dumps(status),
                         capture_output=True, check=True).stdout.decode()
    assert out.endswith("BUILT []\n") and int(out.split()[0]) >= 10, out


def test_a_server_on_another_address_than_loopback_says_so() -> None:
    from tidings.ui.server import is_loopback

    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.1.2.3", "example.com"]))
    common = dict(page="list", events="/events", version="0", scope="s", banner="", rows="")
    shown = pages.render("list.html", exposed=True, address="0.0.0.0", **common)
    assert "listens on 0.0.0.0, not a loopback address" in shown
    assert "not a loopback" not in pages.render("list.html", exposed=False,
                                                address="127.0.0.1", **common)


def test_a_pods_end_and_a_waiting_pod_are_in_the_one_view() -> None:
    # What the kubelet says of a worker's death is shown beside what its process said, in
    # the terminal and on the page alike (both render task_view).
    from tidings.schemas.engine.observed import PodVerdict
    from tidings.schemas.engine.observing import observe

    t = datetime(2026, 11, 30, 3, 5, tzinfo=UTC)
    state = fold_all(TASK, [event_of(Progress(fraction=0.3, message="epoch 1")),
                            event_of(Progress(fraction=0.2, message="epoch 1"), seq=2,
                                     pod=PodRef("worker-1", "uid-1"))])
    state = observe(state, [PodVerdict("worker-1", "uid-1", "Failed", "OOMKilled", "", 137, t)],
                    waiting=[PodVerdict("worker-2", "uid-2", "Waiting", "ImagePullBackOff",
                                        "no such image", None, t)])
    view = task_view(state)
    (w0, w1) = view.workers
    assert (w0.pod, w0.state, w0.ended) == ("worker-0", "running", "")
    assert (w1.pod, w1.state, w1.bad) == ("worker-1", "failed (pod)", True)
    assert w1.ended == "Failed: OOMKilled (exit 137)" and w1.ended_failed
    assert [(wp.pod, wp.reason) for wp in view.waiting] == [("worker-2", "ImagePullBackOff")]
    html = pages.task_body(obj(to_status(state)))
    assert "Failed: OOMKilled (exit 137)" in html and "ImagePullBackOff" in html


def test_a_lone_stalled_worker_still_gets_its_row() -> None:
    # One worker is the task itself while healthy; stalled, its row says which one is silent.
    state = fold_all(TASK, [event_of(Progress(fraction=0.3, message="epoch 1"))])
    status = to_status(state)
    assert not task_view(state, status).shows_workers
    (pod,) = (w["pod"] for w in expanded(status)["workers"])
    status["health"] = {"summary": "Stalled", "stalled": [pod]}
    view = task_view(state, status)
    assert view.shows_workers and view.workers[0].flags == ("stalled",)
    # The page shows the flag in the worker's row, as `tidings state` does.
    row = re.search(rf"<tr class=\"flagged\">\s*<td>{pod}(.*?)</td>",
                    pages.task_body(obj(status)))
    assert row is not None and '<span class="cond">stalled</span>' in row.group(1)
    assert any(ln.split()[:1] == [pod] and "stalled" in ln
               for ln in terminal(state, status).splitlines())


def test_a_status_read_in_part_shows_its_own_phase_in_the_cli_and_on_the_page() -> None:
    # What could be read of a partial status does not decide the outcome (the watcher never
    # writes over it): the view shows the phase as written, one rule for `state`, `watch`'s
    # line and the page.
    from tidings.cli.snapshot import cr_snapshot
    from tidings.cli.taskrender import one_line, view

    final = Progress(fraction=1.0, message="done", final=True)
    status = {**a_status(final), "roster": {"reporting": 3, "final": 3, "marks": "x"},
              "phase": "Failed"}  # (what was read says Succeeded: the written word differs)
    snap = cr_snapshot(TASK, status, "7")
    assert snap.unread.partial and snap.state.phase == "Succeeded"
    assert view(snap).phase == "Failed" and "failed" in one_line(snap)
    assert pages.view_of(obj(status)).phase == "Failed"
    assert task_view(snap.state, {**status, "phase": 7}, partial=True).phase == "unknown"
    assert task_view(snap.state, status).phase == snap.state.phase  # a whole read: its own
