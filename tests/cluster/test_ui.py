"""`tidings ui` in a real browser (Debian's headless Chromium, driven by playwright) against
the real control plane: the list, a task's page with its lineage and logs, a status write
reaching the page, hostile names that stay text, RBAC that applies as it does to the CLI, an
unreachable cluster, a screenshot that is not blank, and a page that fetches nothing from
outside this server."""

from __future__ import annotations

import http.client
import http.server
import io
import ipaddress
import json
import os
import queue
import socket
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import TIDINGS, grant, interrupt, invoke
from tests.support import create_kwok_pod, cri_log_line, eventually, expanded, write_cri_log
from tidings.schemas import (
    DeckReady,
    LogLink,
    Metric,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    build_event,
    fold_all,
    parse_event,
)
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.encoder import to_status
from tools import chromium
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster

HOSTILE = '<img src=x onerror="window.pwned=1">'
GROUP, VERSION, PLURAL = "tidings.dev", "v1alpha1", "taskfeedbacks"


# --- the server and the browser --------------------------------------------------------------


class UiServer:
    """`tidings ui --port 0 --no-browser` as a child process, with a user's kubeconfig."""

    def __init__(self, kubeconfig: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [TIDINGS, "ui", "--port", "0", "--no-browser", *args, "--kubeconfig",
             str(kubeconfig)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in iter(
            self.proc.stdout.readline, "")], daemon=True).start()  # type: ignore[union-attr]
        threading.Thread(target=lambda: [self.err.append(x) for x in iter(
            self.proc.stderr.readline, "")], daemon=True).start()  # type: ignore[union-attr]
        try:
            first = lines.get(timeout=60)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"tidings ui printed no address; stderr={self.err}") from None
        assert first.startswith("tidings ui: serving http://"), first
        self.url = first.split()[3]
        self.host = self.url.removeprefix("http://").rstrip("/")

    def figures(self) -> dict[str, int]:
        """The server process's threads, open file descriptors and resident memory (KiB)."""
        pid = self.proc.pid
        rss = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
        return {"threads": len(os.listdir(f"/proc/{pid}/task")),
                "fds": len(os.listdir(f"/proc/{pid}/fd")), "rss_kib": int(rss.split()[1])}

    def ask(self, path: str, headers: dict[str, str] | None = None, until: str = "task"
            ) -> tuple[int, str, dict[str, str]]:
        """One GET with these headers; for an event stream, the status and what the server
        said up to its first ``until`` event (then the connection is closed)."""
        conn = http.client.HTTPConnection(self.host, timeout=30)
        try:
            headers = headers or {}
            conn.putrequest("GET", "/" + path, skip_host="Host" in headers)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            resp = conn.getresponse()
            if resp.getheader("content-type", "").startswith("text/event-stream"):
                text = ""
                while f"event: {until}" not in text:
                    line = resp.fp.readline().decode()
                    assert line, text
                    text += line
                text += resp.fp.readline().decode()  # the task event's data
            else:
                text = resp.read().decode()
            return resp.status, text, dict(resp.getheaders())
        finally:
            conn.close()

    def stop(self) -> int:
        return interrupt(self.proc, grace=15.0)


@pytest.fixture
def serve(control_plane: ControlPlane, crd: str) -> Iterator[Callable[..., UiServer]]:
    started: list[UiServer] = []

    def start(*args: str, user: str = "admin", kubeconfig: Path | None = None) -> UiServer:
        s = UiServer(kubeconfig or control_plane.kubeconfig(user), *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not chromium.CHROMIUM.exists():
        pytest.skip("Chromium is not installed (`make debs` installs Debian's chromium)")
    with chromium.browser() as context:
        yield context


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A tab that records what it tried to fetch elsewhere, dialogs, and page errors."""
    tab = browser.new_page()
    tab.outside, tab.dialogs, tab.errors = [], [], []

    def route(r: Any) -> None:
        if r.request.url.startswith(("http://127.0.0.1:", "data:")):
            r.continue_()
        else:
            tab.outside.append(r.request.url)
            r.abort()

    tab.route("**/*", route)
    tab.on("dialog", lambda d: (tab.dialogs.append(d.message), d.dismiss()))
    tab.on("pageerror", lambda e: tab.errors.append(str(e)))
    tab.set_default_timeout(30_000)
    yield tab
    tab.close()
    assert tab.outside == [], f"the page fetched from outside the server: {tab.outside}"
    assert tab.dialogs == [], f"a script ran: {tab.dialogs}"


# --- tasks as a watcher writes them ---------------------------------------------------------


def a_status(ns: str, task: str, payloads: list[Any], pods: int = 1,
             when: datetime | None = None) -> dict[str, Any]:
    """The status the watcher's fold would write for these facts, sent by `pods` pods."""
    status: dict[str, Any] = to_status(a_state(ns, task, payloads, pods, when))
    return status


def a_state(ns: str, task: str, payloads: list[Any], pods: int = 1,
            when: datetime | None = None) -> TaskState:
    """The state the watcher's fold makes of these facts, sent by `pods` pods."""
    ref = TaskRef(ns, task)
    when = when or datetime.now(UTC) - timedelta(seconds=30)
    events = []
    for n, p in enumerate(payloads):
        pod = n % pods
        body = build_event(task=ref, pod=PodRef(f"{task}-{pod}", f"uid-{pod}", ns), payload=p,
                           instance=f"i{pod}", seq=n, time=when + timedelta(seconds=n),
                           sender_proof=False)
        events.append(parse_event(body))
    return fold_all(ref, events)  # type: ignore[arg-type]


def write_task(admin: Any, ns: str, name: str, status: dict[str, Any],
               labels: dict[str, str] | None = None) -> None:
    from kubernetes import client

    api = client.CustomObjectsApi(admin)
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TaskFeedback",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"task": name}})
    except client.ApiException as err:
        if err.status != 409:
            raise
    patch_status(admin, ns, name, status)


def patch_status(admin: Any, ns: str, name: str, status: dict[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi(admin).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": status})


def training(ns: str, task: str, fraction: float = 0.4, message: str = "epoch 2 of 5"
             ) -> dict[str, Any]:
    return a_status(ns, task, [
        LogLink(name="dashboard", url="https://grafana.example/d/train?var=1"),
        DeckReady(name="report", uri="s3://bucket/report.html"),
        Metric(name="loss", value=0.42, step=200),
        SpanSummary(name="train_step", count=200, total_s=40.0, min_s=0.15, max_s=0.4,
                    first_start=time.time() - 60, last_end=time.time() - 20),
        SpanSummary(name="evaluate", count=2, total_s=6.0, min_s=2.5, max_s=3.5,
                    first_start=time.time() - 30, last_end=time.time() - 10),
        Progress(fraction=fraction, message=message),
        Progress(fraction=fraction / 2, message="worker 1 behind"),
    ], pods=2)


def text_of(tab: Any, selector: str) -> str:
    return str(tab.locator(selector).inner_text())


def train_with_a_pod(admin: Any, ns: str, tmp_path: Path, lines: list[str]) -> Path:
    """The task ``train`` as a watcher writes it, and its kwok pod ``train-0`` whose log
    holds ``lines`` (the file kwok follows, returned)."""
    write_task(admin, ns, "train", training(ns, "train"))
    log = write_cri_log(tmp_path / "train-0.log", lines)
    create_kwok_pod(admin, ns, "train-0", labels={"tidings.dev/task": "train"}, log_file=log)
    return log


# --- the tests --------------------------------------------------------------------------------


def test_the_list_shows_every_task_live_sorted_and_filtered(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str) -> None:
    status = training(namespace, "train-a", 0.4)
    write_task(admin, namespace, "train-a", status)
    write_task(admin, namespace, "train-b", a_status(namespace, "train-b", [
        Progress(fraction=1.0, message="done", final=True)]))
    server = serve()  # every namespace, the default
    page.goto(server.url)
    rows = page.locator(f"tr[data-namespace='{namespace}']")
    eventually(lambda: rows.count() == 2, what="both rows")
    a = page.locator(f"tr[id='row:{namespace}/train-a']")
    assert "Running" in a.inner_text() and "0/2" in a.inner_text()
    percent = status["progress"]["percent"]
    assert a.locator("progress").get_attribute("value") == str(percent)
    assert f"{percent}%" in a.inner_text()
    assert "Succeeded" in text_of(page, f"tr[id='row:{namespace}/train-b']")
    # Sorted by name, descending on a second click.
    page.fill("#filter", namespace)
    page.click("button[data-sort='name']")
    page.click("button[data-sort='name']")
    assert [r.get_attribute("data-name") for r in rows.all()] == ["train-b", "train-a"]
    page.fill("#filter", f"{namespace} succeeded")
    eventually(lambda: [r.get_attribute("data-name") for r in rows.all() if r.is_visible()]
               == ["train-b"], what="the filter")
    # A task created while the page is open appears without a reload.
    write_task(admin, namespace, "train-c", a_status(namespace, "train-c", [
        Progress(fraction=1.0, message="done", final=True)]))
    eventually(lambda: page.locator(f"tr[id='row:{namespace}/train-c']").is_visible(),
               what="the new task's row")
    assert page.errors == []


def test_a_label_selector_narrows_the_list(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str) -> None:
    for name, team in (("vision-1", "vision"), ("nlp-1", "nlp")):
        write_task(admin, namespace, name, a_status(namespace, name, [
            Progress(fraction=0.5, message="half")]), labels={"team": team})
    server = serve("-n", namespace, "-l", "team=vision")
    page.goto(server.url)
    eventually(lambda: page.locator(f"tr[id='row:{namespace}/vision-1']").is_visible(),
               what="the labelled task")
    assert page.locator("#tasks tbody tr").count() == 1
    assert "-l team=vision" in text_of(page, "header")


def test_a_task_page_shows_workers_metrics_links_timeline_lineage_and_logs(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        tmp_path: Path) -> None:
    train_with_a_pod(admin, namespace, tmp_path, ["step 1 loss 0.9", "step 2 loss 0.7"])
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/train")
    body = page.locator("#task-body")
    eventually(lambda: "epoch 2 of 5" in body.inner_text(), what="the task's status")
    text = body.inner_text()
    assert "0 of 2 final" in text
    assert "train-0" in text and "train-1" in text and "worker 1 behind" in text
    assert "loss" in text and "0.42" in text
    link = page.locator("a", has_text="https://grafana.example/d/train?var=1")
    assert link.get_attribute("href") == "https://grafana.example/d/train?var=1"
    assert "s3://bucket/report.html" in text
    timeline = page.locator("img.timeline")
    eventually(lambda: timeline.evaluate("i => i.complete && i.naturalWidth > 0"),
               what="the timeline image to load")
    eventually(lambda: "train-0" in text_of(page, "#lineage"), what="the lineage tree")
    eventually(lambda: "step 2 loss 0.7" in text_of(page, "#logs"), what="the log tail")
    assert "[train-0/main] step 1 loss 0.9" in text_of(page, "#logs")
    assert page.errors == []


def test_a_worker_oom_killed_without_a_word_counts_alike_in_the_row_the_page_and_the_cli(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        control_plane: ControlPlane) -> None:
    """One worker, OOM-killed before any final report: final by its pod's end and failed in
    the list's row (not 0/1), as on its page, in `tidings list -o wide` and `tidings state`."""
    from tidings.schemas.engine.observed import PodVerdict
    from tidings.schemas.engine.observing import observe

    state = a_state(namespace, "oom", [Progress(fraction=0.5, message="epoch 1")])
    (pod,) = state.workers
    status = to_status(observe(state, [PodVerdict(pod, "uid-0", "Failed", "OOMKilled", "",
                                                  137, datetime.now(UTC))]))
    write_task(admin, namespace, "oom", status)
    short, long = "1/1 1 failed", "1 of 1 final, 1 failed (1 by their pod's end)"
    server = serve("-n", namespace)
    page.goto(server.url)
    cell = page.locator(f"tr[id='row:{namespace}/oom'] td.workers")
    eventually(lambda: cell.count() == 1 and cell.inner_text() == short, what="the row")
    assert cell.locator(".bad").inner_text() == "1 failed"
    page.goto(f"{server.url}tasks/{namespace}/oom")
    dd = page.locator("#task-body dd.workers")
    eventually(lambda: dd.count() == 1 and dd.inner_text() == long, what="the page's count")
    listed = invoke(control_plane, "list", "oom", "-n", namespace, "-o", "wide").stdout
    head, row = listed.splitlines()
    at = head.index("WORKERS")
    assert row[at:head.index("HEALTH")].strip() == short, listed
    shown = invoke(control_plane, "state", "oom", "-n", namespace).stdout
    assert f"Workers     {long}" in shown, shown
    assert page.errors == []


def test_a_task_whose_pods_wait_shows_each_pod_its_reason_and_age_in_the_row_and_the_page(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        control_plane: ControlPlane) -> None:
    """Before any pod speaks: the list's row shows the first waiting reason, the page a
    row per waiting pod with its reason, message and age, as `tidings state` does."""
    from tidings.schemas.engine.observed import WAITING, PodVerdict
    from tidings.schemas.engine.observing import observe

    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    state = a_state(namespace, "stuck", [])
    status = to_status(observe(state, waiting=[
        PodVerdict("stuck-0", "uid-0", WAITING, "ImagePullBackOff",
                   'container main: ImagePullBackOff: Back-off pulling image "w:nope"', None,
                   since),
        PodVerdict("stuck-1", "uid-1", WAITING, "Unschedulable",
                   "0/2 nodes are available: 2 Insufficient cpu.", None, since)]))
    assert status["phase"] == "Pending", status
    write_task(admin, namespace, "stuck", status)
    server = serve("-n", namespace)
    page.goto(server.url)
    row = page.locator(f"tr[id='row:{namespace}/stuck']")
    eventually(lambda: row.count() == 1 and "ImagePullBackOff" in row.inner_text(),
               what="the row's reason")
    page.goto(f"{server.url}tasks/{namespace}/stuck")
    section = page.locator("#task-body section", has_text="Waiting pods")
    eventually(lambda: section.count() == 1, what="the waiting pods' table")
    rows = [r.split("\t") for r in section.locator("tbody tr").all_inner_texts()]
    assert [(r[0], r[1]) for r in rows] == [("stuck-0", "ImagePullBackOff"),
                                            ("stuck-1", "Unschedulable")], rows
    assert all(r[2].strip() in ("3m ago", "3m0s ago", "3m1s ago") or "3m" in r[2]
               for r in rows), rows
    assert 'Back-off pulling image "w:nope"' in rows[0][3]
    assert "Insufficient cpu" in rows[1][3]
    shown = invoke(control_plane, "state", "stuck", "-n", namespace).stdout
    assert "Waiting pods" in shown and "Insufficient cpu" in shown, shown
    assert page.errors == []


def test_a_task_page_draws_each_metrics_curve_and_a_lane_per_pod(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str) -> None:
    """Metric curves and span lanes on the page: a metric's sparkline with its exact min and max,
    from the one view model, and the timeline (`tidings timeline`'s SVG) with a lane per pod
    under a span name, the slow one marked."""
    now = time.time()
    write_task(admin, namespace, "curves", a_status(namespace, "curves", [
        # pod 0: the latest loss with the extremes and earlier points its emitter kept
        Metric(name="loss", value=0.42, step=200, min=0.3, max=2.5,
               points=((0, 2.5), (50, 1.1), (100, 0.3))),
        # pod 1, then pod 0 three times slower a step
        SpanSummary(name="train_step", count=100, total_s=10.0, min_s=0.05, max_s=0.2,
                    first_start=now - 60, last_end=now - 20),
        SpanSummary(name="train_step", count=100, total_s=30.0, min_s=0.2, max_s=0.5,
                    first_start=now - 60, last_end=now - 15),
        Progress(fraction=0.5, message="half way"),
    ], pods=2))
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/curves")
    row = page.locator("#task-body tr", has_text="loss")
    eventually(lambda: row.count() == 1, what="the metric's row")
    assert "0.42" in row.inner_text() and "min 0.3 max 2.5" in row.inner_text()
    spark = row.locator("svg.spark polyline")
    ys = [float(p.split(",")[1]) for p in str(spark.get_attribute("points")).split()]
    assert len(ys) == 4 and ys[0] == min(ys) and ys[2] == max(ys)  # 2.5, 1.1, 0.3, 0.42
    # Drawn, not hidden (laid out once the row is: a loaded machine may take a frame more).
    box = eventually(lambda: (b := row.locator("svg.spark").bounding_box()) and b["width"] > 0
                     and b["height"] > 0 and b, what="the sparkline laid out")
    assert box["width"] > 0 and box["height"] > 0
    timeline = page.locator("img.timeline")
    eventually(lambda: timeline.evaluate("i => i.complete && i.naturalWidth > 0"),
               what="the timeline image to load")
    svg = page.request.get(timeline.evaluate("i => i.src")).text()
    assert "train_step" in svg and ">curves-0<" in svg and ">curves-1<" in svg  # two lanes
    assert "#e8912d" in svg and "(slow)" in svg  # pod 0's lane, in orange
    assert page.errors == []


def test_a_curve_at_the_limits_of_a_double_draws_in_chromium(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str) -> None:
    """A metric from 1e308 to -1.8e308 (the range overflows) with a
    subnormal point drew ``points="0.0,nan …"``, which Chromium refuses; every point draws
    now, and the extremes print."""
    write_task(admin, namespace, "edges", a_status(namespace, "edges", [
        Metric(name="huge", value=v, step=n)
        for n, v in enumerate([1e308, -1.7976931348623157e308, 5e-324, 0.0, 1e308])]))
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/edges")
    row = page.locator("#task-body tr", has_text="huge")
    eventually(lambda: row.count() == 1, what="the metric's row")
    assert "min -1.798e+308 max 1e+308" in row.inner_text()
    line = row.locator("svg.spark polyline")
    assert line.evaluate("p => p.points.numberOfItems") == 5  # Chromium parsed every point
    ys = line.evaluate("p => Array.from(p.points, q => q.y)")
    assert ys[1] == max(ys) and ys[0] == ys[4] == min(ys)  # -1.8e308 lowest, 1e308 highest
    box = line.evaluate("p => { const b = p.getBBox(); return [b.width, b.height]; }")
    assert box[0] > 0 and box[1] > 0
    assert page.errors == []


def test_a_status_write_reaches_the_page_within_2s(
        serve: Callable[..., UiServer], browser: Any, page: Any, admin: Any,
        namespace: str) -> None:
    write_task(admin, namespace, "live", training(namespace, "live", 0.1, "start"))
    server = serve("-n", namespace)
    tabs = [page, browser.new_page()]
    try:
        tabs[0].goto(f"{server.url}tasks/{namespace}/live")
        tabs[1].goto(server.url)
        for tab in tabs:
            eventually(lambda tab=tab: "live" in tab.locator("main").inner_text(),
                       what="the page")
            # When each awaited text first shows, by the page's own clock.
            tab.evaluate("""() => {
                window.seen = {}; window.want = [];
                new MutationObserver(() => {
                    const text = document.querySelector('main').innerText;
                    for (const m of window.want)
                        if (!(m in window.seen) && text.includes(m)) window.seen[m] = Date.now();
                }).observe(document.body, {subtree: true, childList: true, characterData: true});
            }""")
        latencies: list[float] = []
        for n in range(5):
            fraction = 0.2 + n * 0.1
            message = f"step {n} of the live run"
            for tab in tabs:
                tab.evaluate("m => window.want.push(m)", message)
            # The list shows the percent, the task's page the message.
            status = training(namespace, "live", fraction, message)
            marks = [message, f"{status['progress']['percent']}%"]
            written = time.time()
            patch_status(admin, namespace, "live", status)
            for tab, mark in zip(tabs, marks, strict=True):
                if mark != message:
                    tab.evaluate("m => window.want.push(m)", mark)
                shown = tab.wait_for_function("m => window.seen[m]", arg=mark).json_value()
                latencies.append(shown / 1000 - written)
        print(f"status write to DOM: median {statistics.median(latencies):.3f}s, "
              f"max {max(latencies):.3f}s over {len(latencies)}")
        # Pushed, not polled: the median change reaches both tabs well within 2 s.
        assert statistics.median(latencies) < 2.0, latencies
    finally:
        tabs[1].close()


def test_hostile_names_stay_text_and_no_script_runs(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str) -> None:
    status = expanded(training(namespace, "evil"))  # entries as objects, to edit
    at = status["links"]["dashboard"]["at"]
    status["links"][HOSTILE] = {"url": "javascript:window.pwned=2", "at": at, "events": 1}
    status["links"]["upper"] = {"url": "JaVaScRiPt:window.pwned=3", "at": at, "events": 1}
    status["decks"][HOSTILE] = {"uri": "javascript:window.pwned=4", "at": at, "events": 1}
    status["metrics"][HOSTILE] = {"value": 1.0, "at": at, "events": 1}
    status["spans"][HOSTILE] = dict(status["spans"]["evaluate"])
    status["progress"]["message"] = f"{HOSTILE}<script>window.pwned=5</script>\x1b[31m"
    status["workers"][0]["message"] = HOSTILE
    status["conditions"] += [
        {"type": "Stalled", "status": "True", "reason": HOSTILE,
         "message": '"><script>window.pwned=6</script>',
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": HOSTILE, "status": "True", "reason": "R", "message": "M",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    write_task(admin, namespace, "evil", status)
    server = serve("-n", namespace)
    for url in (server.url, f"{server.url}tasks/{namespace}/evil"):
        page.goto(url)
        eventually(lambda: HOSTILE in page.locator("main").inner_text(),
                   what="the hostile name, shown as text")
        assert page.evaluate("() => window.pwned") is None
        assert page.evaluate("() => document.querySelectorAll('[onerror], script:not([src])')"
                             ".length") == 0
        hrefs = page.evaluate("() => Array.from(document.querySelectorAll('[href]'), "
                              "a => a.href)")
        assert all(h.startswith(("http://127.0.0.1:", "https://")) for h in hrefs), hrefs
    assert "javascript:window.pwned=2" in page.locator("#task-body").inner_text()
    assert page.errors == []


def test_the_users_rbac_applies_and_errors_say_what_the_cli_says(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        control_plane: ControlPlane) -> None:
    write_task(admin, namespace, "secret", training(namespace, "secret"))
    cli = invoke(control_plane, "list", "-n", namespace, user="alice")
    assert cli.exit_code == 4
    said = cli.output.strip().removeprefix("error: ")
    assert said == f"forbidden: cannot list taskfeedbacks.tidings.dev in namespace {namespace}"
    server = serve("-n", namespace, user="alice")
    page.goto(server.url)
    eventually(lambda: said in text_of(page, "#banner"), what="the CLI's words in the page")
    page.goto(f"{server.url}tasks/{namespace}/secret")
    eventually(lambda: said in text_of(page, "#task-body"), what="the task page's error")
    assert "epoch 2" not in page.content()
    # Granted, the same server and tab show it, with no restart or reload.
    grant(control_plane, namespace, "alice", [{"apiGroups": [GROUP], "resources": [PLURAL],
                                               "verbs": ["get", "list", "watch"]}])
    eventually(lambda: "epoch 2 of 5" in text_of(page, "#task-body"), timeout=90,
               what="the grant to apply")
    assert said not in text_of(page, "#banner")


def test_every_namespace_refused_narrows_to_the_contexts(
        serve: Callable[..., UiServer], page: Any) -> None:
    server = serve(user="bob")
    page.goto(server.url)
    eventually(lambda: "cannot list taskfeedbacks.tidings.dev in any namespace: showing "
               "namespace default" in text_of(page, "#banner"), what="the narrowing")
    eventually(lambda: "forbidden: cannot list taskfeedbacks.tidings.dev in namespace "
               "default" in text_of(page, "#banner"), what="the context namespace's answer")


def test_an_unreachable_cluster_and_a_missing_task_are_said_plainly(
        serve: Callable[..., UiServer], page: Any, namespace: str, tmp_path: Path) -> None:
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/ghost")
    eventually(lambda: f"not found: task 'ghost' in namespace {namespace}"
               in text_of(page, "#task-body"), what="not found")
    closed = tmp_path / "kubeconfig"
    closed.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    down = serve(kubeconfig=closed)
    page.goto(down.url)
    eventually(lambda: "cannot reach the cluster at https://127.0.0.1:9: connection refused"
               in text_of(page, "#banner"), what="the unreachable cluster")


def test_the_server_is_read_only_and_sends_its_policy(
        serve: Callable[..., UiServer], namespace: str) -> None:
    server = serve("-n", namespace)
    for path in ("", "events", f"tasks/{namespace}/x", "static/app.js"):
        with urllib.request.urlopen(server.url + path + ("?since=0" if path == "events"
                                                         else ""), timeout=10) as resp:
            csp = resp.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp, csp
            assert resp.headers["x-content-type-options"] == "nosniff"
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        req = urllib.request.Request(server.url + f"tasks/{namespace}/x", method=method,
                                     data=b"{}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 405
    # A page elsewhere that rebinds its name to 127.0.0.1 cannot read the cluster through
    # this server: the Host must name it.
    req = urllib.request.Request(server.url, headers={"Host": "attacker.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    # Ctrl-C ends it as it ends every command: exit 130, no traceback.
    assert server.stop() == 130
    assert not any("Traceback" in line for line in server.err), server.err


def test_a_screenshot_of_a_task_page_is_not_blank(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        tmp_path: Path) -> None:
    from PIL import Image

    write_task(admin, namespace, "shot", training(namespace, "shot"))
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/shot")
    eventually(lambda: "epoch 2 of 5" in text_of(page, "#task-body"), what="the page")
    eventually(lambda: page.locator("img.timeline").evaluate("i => i.naturalWidth > 0"),
               what="the timeline")
    png = page.screenshot(full_page=True)
    out = os.environ.get("TIDINGS_UI_SCREENSHOT")  # where a person wants to look at it
    (Path(out) if out else tmp_path / "task.png").write_bytes(png)
    image = Image.open(io.BytesIO(png)).convert("RGB")
    small = image.resize((image.width // 4, image.height // 4))
    raw = small.tobytes()
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    background = max(set(pixels), key=pixels.count)
    drawn = sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, background,
                                                                     strict=True)) > 60)
    assert image.width >= 1000 and image.height >= 600
    assert drawn / len(pixels) > 0.03, "the screenshot is (nearly) blank"
    assert len(set(pixels)) > 50  # text, bars, badges: not one flat colour


# --- the page cross-site, exposed, and bounded ----------------------

EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site",
        "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}


def idle(server: UiServer) -> dict[str, int]:
    """The server's figures once it has listed the tasks and settled."""
    eventually(lambda: server.ask("")[0] == 200, what="the server to answer")
    eventually(lambda: len(set(_three(server))) == 1, what="the server's threads to settle")
    return server.figures()


def _three(server: UiServer) -> list[int]:
    out = []
    for _ in range(3):
        out.append(server.figures()["threads"])
        time.sleep(0.2)  # (three readings a little apart: nothing is starting)
    return out


def test_cross_site_requests_are_refused_and_open_nothing(
        serve: Callable[..., UiServer], admin: Any, namespace: str, tmp_path: Path) -> None:
    """The issue's attack: 200 requests with Origin evil.example and Sec-Fetch-Site
    cross-site to /tasks/NS/NAME/events each got 200 and a log session (803 threads, 757
    fds, 115 MB). Now each is refused before any route runs: no thread, no descriptor, and a
    task that does not exist never gets a session, even from the page's own origin."""
    train_with_a_pod(admin, namespace, tmp_path, ["step 1"])
    server = serve("-n", namespace)
    before = idle(server)
    for i in range(200):
        name = "train" if i % 2 else f"ghost-{i}"  # a task that exists, and one that does not
        status, text, _ = server.ask(f"tasks/{namespace}/{name}/events", EVIL)
        assert status == 403 and text.startswith("cross-site request refused"), (status, text)
    # The same from curl (no browser's headers: served) to tasks that do not exist: each a
    # stream that says so, and no session.
    for i in range(200):
        status, text, _ = server.ask(f"tasks/{namespace}/ghost-{i}/events")
        assert status == 200 and f"not found: task &#39;ghost-{i}&#39;" in text, text
    after = server.figures()
    assert after["threads"] == before["threads"], (before, after)
    assert after["fds"] <= before["fds"] + 2, (before, after)
    # Every route, every page and asset: refused the same way.
    for path in ("", "events", f"tasks/{namespace}/train", f"tasks/{namespace}/train/"
                 "timeline.svg", "static/app.js"):
        assert server.ask(path, EVIL)[0] == 403, path
    # A task that exists, asked by its own page's origin, does get its session (the control).
    status, _, _ = server.ask(f"tasks/{namespace}/train/events",
                              {"Sec-Fetch-Site": "same-origin"})
    assert status == 200
    eventually(lambda: server.figures()["threads"] > before["threads"],
               what="the task's log session to start")


class _HostileSite:
    """A page on another origin of this host (127.0.0.1, another port: same-site, another
    origin), whose script attacks the tidings server from the visitor's browser."""

    def __init__(self, target: str, namespace: str, count: int) -> None:
        page = f"""<!doctype html><meta charset=utf-8><body><script>
        const target = {json.dumps(target)}, ns = {json.dumps(namespace)};
        window.settled = 0;
        for (let i = 0; i < {count}; i++) {{
          const task = i % 2 ? "train" : "ghost-" + i;
          const url = target + "tasks/" + ns + "/" + task + "/events";
          if (i % 3 === 0) {{
            const es = new EventSource(url);
            es.onerror = () => {{ if (es.readyState === 2) window.settled++; }};
          }} else if (i % 3 === 1) {{
            fetch(url, {{mode: "no-cors"}}).then(() => window.settled++,
                                               () => window.settled++);
          }} else {{
            const img = new Image();
            img.onload = img.onerror = () => window.settled++;
            img.src = url;
          }}
        }}
        </script>""".encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_hostile_page_in_a_real_browser_gets_nothing(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        tmp_path: Path) -> None:
    """A page the user merely visits, in Chromium: 60 event streams, fetches and images
    aimed at the server's task streams (a task that exists, with a pod's logs, and tasks that
    do not). Chromium sends its own Origin and Sec-Fetch-Site; the server opens nothing."""
    train_with_a_pod(admin, namespace, tmp_path, ["step 1"])
    server = serve("-n", namespace)
    before = idle(server)
    hostile = _HostileSite(server.url, namespace, 60)
    try:
        page.goto(hostile.url)
        eventually(lambda: page.evaluate("window.settled") == 60,
                   what="every hostile request to settle (refused)")
    finally:
        hostile.close()
    after = server.figures()
    assert after["threads"] == before["threads"], (before, after)
    # The server's own page in the same browser still works (and then follows the logs).
    page.goto(f"{server.url}tasks/{namespace}/train")
    eventually(lambda: "[train-0/main] step 1" in text_of(page, "#logs"), what="the log tail")
    assert page.errors == []


def test_event_streams_are_bounded_with_a_clear_503(
        serve: Callable[..., UiServer], page: Any, namespace: str) -> None:
    from tidings.ui.server import MAX_STREAMS

    server = serve("-n", namespace)
    idle(server)
    held = []
    try:
        for _ in range(MAX_STREAMS):
            conn = http.client.HTTPConnection(server.host, timeout=30)
            conn.request("GET", "/events")
            assert conn.getresponse().status == 200
            held.append(conn)
        status, text, headers = server.ask("events", until="banner")
        assert status == 503, (status, text)
        assert text.strip() == (f"too many open event streams on this server ({MAX_STREAMS}): "
                                "close some of its tabs")
        assert headers.get("retry-after") == "30"
        # A page still loads (only streams are bounded), and says its stream was refused.
        page.goto(server.url)
        eventually(lambda: "live updates refused by the server" in text_of(page, "#conn"),
                   what="the page to say so")
    finally:
        for conn in held:
            conn.close()
    # The closed tabs give their streams back.
    eventually(lambda: server.ask("events", until="banner")[0] == 200,
               what="a stream once the others closed")


def test_the_host_check_holds_off_the_default_address(
        serve: Callable[..., UiServer], namespace: str) -> None:
    """DNS rebinding where it matters: served on another address (here another loopback
    address, 127.0.0.2: this test listens on loopback only), a Host that is not the address,
    a loopback name or an --allowed-host is refused; those are served."""
    server = serve("-n", namespace, "--address", "127.0.0.2", "--allowed-host",
                   "ui.lab.example")
    assert server.url.startswith("http://127.0.0.2:")
    port = server.host.rsplit(":", 1)[1]
    for host, code in ((server.host, 200), (f"ui.lab.example:{port}", 200),
                       (f"localhost:{port}", 200), (f"attacker.example:{port}", 400),
                       (f"ui.lab.example.attacker.example:{port}", 400), ("", 400)):
        status, text, _ = server.ask("", {"Host": host})
        assert status == code, (host, status, text)
        if code == 400:
            assert "--allowed-host" in text
    bad = invoke_ui("--allowed-host", "a b")
    assert bad.returncode == 2 and "--allowed-host" in bad.stderr, bad.stderr


def _own_address() -> str | None:
    """This machine's address on the way out (a UDP socket's, connected, sends nothing),
    when it has one beyond loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def test_served_on_every_address_the_address_a_request_reaches_is_its_host(
        serve: Callable[..., UiServer], namespace: str) -> None:
    """`--address 0.0.0.0`: a person types the machine's own address, which no name in
    /etc/hosts need give; the address the request reached is served, a name still is not.
    (This test listens on every address for its few seconds, serving a throwaway cluster.)"""
    server = serve("-n", namespace, "--address", "0.0.0.0")
    port = int(server.host.rsplit(":", 1)[1])
    reached = ["127.0.0.2", *filter(None, [_own_address()])]
    for address in reached:
        for host, code in ((f"{address}:{port}", 200), (address, 200),
                           (f"attacker.example:{port}", 400), (f"192.0.2.254:{port}", 400)):
            conn = http.client.HTTPConnection(address, port, timeout=30)
            try:
                conn.putrequest("GET", "/", skip_host=True)
                conn.putheader("Host", host)
                conn.endheaders()
                resp = conn.getresponse()
                text = resp.read().decode()
            finally:
                conn.close()
            assert resp.status == code, (address, host, resp.status, text)
            if code == 200:
                assert f"namespace {namespace}" in text


def invoke_ui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TIDINGS, "ui", "--no-browser", *args], capture_output=True,
                          text=True, timeout=60)


def test_a_namespace_is_suggested_only_when_the_user_may_list_it(
        serve: Callable[..., UiServer], control_plane: ControlPlane, namespace: str) -> None:
    grant(control_plane, namespace, "alice", [{"apiGroups": [GROUP], "resources": [PLURAL],
                                               "verbs": ["get", "list", "watch"]}])
    alice = serve("-n", namespace, user="alice")
    _, text, _ = alice.ask("tasks/kube-system/secret")
    assert "namespace kube-system is outside this server&#39;s scope" in text, text
    assert "restart tidings ui" not in text and "-n kube-system" not in text
    admin = serve("-n", namespace)
    _, text, _ = admin.ask("tasks/kube-system/secret")
    assert "restart tidings ui with -n kube-system to see it" in text, text


def test_megabyte_log_lines_are_cut_and_bounded(
        serve: Callable[..., UiServer], page: Any, admin: Any, namespace: str,
        tmp_path: Path) -> None:
    """Item 6, with a real log stream from the control plane (kwok serves the file): a tqdm
    bar redrawn with \\r 20,000 times is one line of ~2 MB, and so is a line of 2 MB of
    text. The page shows the bar's last drawing and the text cut with its marker; no tab's
    message and no session holds megabytes."""
    from tidings.ui.logs import LINE_LIMIT

    bar = "".join(f"\r{p / 200:5.1f}%|{'#' * (p // 2000):10s}| {p}/20000 [00:{p % 60:02d}]"
                  for p in range(20001))
    log = train_with_a_pod(admin, namespace, tmp_path, ["step 1"])
    server = serve("-n", namespace)
    page.goto(f"{server.url}tasks/{namespace}/train")
    logs = page.locator("#logs")
    eventually(lambda: "step 1" in logs.inner_text(), what="the first line")
    before = server.figures()
    # The pod prints while the tab is open (kwok follows the file, as a kubelet its log).
    with log.open("a") as out:
        out.write(cri_log_line(bar))
        for i in range(30):
            out.write(cri_log_line(f"dump {i} " + "x" * 2_000_000))
        out.write(cri_log_line("step 2 after the flood"))
    eventually(lambda: "step 2 after the flood" in logs.inner_text(), timeout=120,
               what="the lines after the flood")
    lines = page.locator("#logs .line").all_inner_texts()
    assert "[train-0/main] 100.0%|##########| 20000/20000 [00:20]" in lines, lines[:3]
    cut = [line for line in lines if line.startswith("[train-0/main] dump ")]
    assert len(cut) == 30
    for line in cut:
        head = f"dump {line.split()[2]} "
        more = len(head) + 2_000_000 - LINE_LIMIT
        assert line.endswith(f" … [line cut: {more:,} more characters]"), line[-80:]
    assert max(len(line) for line in lines) < LINE_LIMIT + 200
    # 62 MB went through; what stays is bounded (a session keeps LOG_CHARS characters). The
    # growth measured was 12 MiB, the reading of one line at a time (60 MB before the bound).
    grew = server.figures()["rss_kib"] - before["rss_kib"]
    assert grew < 40 * 1024, (before, grew)
    assert page.errors == []
