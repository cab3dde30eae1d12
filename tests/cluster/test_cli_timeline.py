"""`tidings timeline` against the real control plane: the terminal chart, the SVG file, the
machine outputs and the error cases."""

from __future__ import annotations

import json
import xml.dom.minidom
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_cli import (
    HOSTILE,
    assert_harmless,
    closed_port_kubeconfig,
    emit,
    invoke,
    task_pod,
    write_status,
)
from tidings.schemas import Progress, SpanSummary
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.payloads import Window, span_row
from tools.devcluster import ControlPlane

pytestmark = pytest.mark.cluster


def _spans(admin: Any, ns: str, task: str) -> None:
    t0 = datetime.now(UTC).timestamp() - 100
    spans = [("load", 0, 10, 1, 0), ("epoch", 10, 40, 4, 0), ("epoch", 80, 95, 1, 0),
             ("eval", 90, 100, 2, 1)]
    for seq, (name, a, b, count, errors) in enumerate(spans):
        emit(admin, ns, task, SpanSummary(name=name, count=count, total_s=float(b - a),
                                          min_s=(b - a) / count, max_s=float(b - a),
                                          first_start=t0 + a, last_end=t0 + b,
                                          errors=errors), seq)


def test_timeline_draws_the_spans(control_plane: ControlPlane, admin: Any, namespace: str,
                                  tmp_path: Path) -> None:
    _spans(admin, namespace, "fit")
    out_file = tmp_path / "fit.svg"
    res = invoke(control_plane, "timeline", "fit", "-n", namespace, "--svg", str(out_file),
                 "--width", "40")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "3 names, 8 spans over 100.00s" in lines[0]
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in
            (["load"], ["epoch"], ["eval"])}
    assert list(rows) == ["load", "epoch", "eval"]  # ordered by first start
    assert rows["load"].index("█") < rows["epoch"].index("█") < rows["eval"].index("█")
    assert " 5 " in rows["epoch"]  # the two windows of "epoch" are one aggregate row ...
    bars = rows["epoch"].split()[1:-4]
    assert len(bars) == 2, rows["epoch"]  # ... drawn where they ran: two marks, a gap between
    assert "wrote" in res.stderr

    doc = xml.dom.minidom.parseString(out_file.read_text())
    # background + one mark per window: load, epoch twice, eval
    assert len(doc.getElementsByTagName("rect")) == 1 + 4
    assert "epoch" in out_file.read_text()

    data = json.loads(invoke(control_plane, "timeline", "fit", "-n", namespace,
                             "-o", "json").stdout)
    assert [s["name"] for s in data["spans"]] == ["load", "epoch", "eval"]
    epoch = data["spans"][1]
    assert epoch["count"] == 5 and epoch["duration_s"] == pytest.approx(85, abs=0.01)
    assert data["spans"][2]["errors"] == 1


@pytest.mark.parametrize("packed", [False, True], ids=["summaries", "windows"])
def test_timeline_has_a_lane_per_pod_and_marks_the_slow_one(
        control_plane: ControlPlane, admin: Any, namespace: str, tmp_path: Path,
        crd: str, packed: bool) -> None:
    """Two workers run train_step, one three times slower; under the span
    name each pod has its own lane, in the terminal, the SVG and -o json, the slow one
    marked, while the name's totals count both. ``windows``: each summary in a Window
    event, as the emitter sends a callback's spans: the lane is the Window's sender's."""
    from tests.support import create_kwok_pod

    task = "ddp-windows" if packed else "ddp"
    pods = [task_pod(admin, namespace, task)]
    made = create_kwok_pod(admin, namespace, f"{task}-worker-1",
                           labels={"tidings.dev/task": task})
    pods.append((made["name"], made["uid"]))
    t0 = datetime.now(UTC).timestamp() - 60
    for i, (pod, seconds) in enumerate(zip(pods, (0.2, 0.6), strict=True)):
        for k in range(3):
            first, last = t0 + 10 * k, t0 + 10 * k + 10 * seconds
            payload: Any = SpanSummary(
                name="train_step", count=10, total_s=10 * seconds, min_s=seconds,
                max_s=seconds, first_start=first, last_end=last)
            if packed:
                base = int(first * 1e6)
                payload = Window.model_validate({"base_us": base, "spans": [span_row(
                    "train_step", 10, 10 * seconds, seconds, seconds, first, last, 0, base)]})
            emit(admin, namespace, task, payload, k, instance=f"inst-{i}", pod=pod)
    res = invoke(control_plane, "timeline", task, "-n", namespace, "--width", "30",
                 "--svg", str(tmp_path / "ddp.svg"))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert "1 name, 60 spans, 2 pods" in lines[0], lines[0]
    lanes = [ln for ln in lines if ln.split()[:1] in ([pods[0][0]], [pods[1][0]])]
    assert [ln.split()[0] for ln in lanes] == [pods[0][0], pods[1][0]], res.stdout
    assert "slow" in lanes[1] and "slow" not in lanes[0]
    assert " 30 " in lanes[0] and " 30 " in lanes[1]
    svg_text = (tmp_path / "ddp.svg").read_text()
    assert pods[1][0] in svg_text and "#e8912d" in svg_text and "(slow)" in svg_text
    xml.dom.minidom.parseString(svg_text)
    (span,) = json.loads(invoke(control_plane, "timeline", task, "-n", namespace,
                                "-o", "json").stdout)["spans"]
    assert span["count"] == 60 and [p["name"] for p in span["pods"]] == [p for p, _ in pods]
    assert [p["slow"] for p in span["pods"]] == [False, True]
    assert span["pods"][1]["mean_s"] == pytest.approx(0.6)
    # As a watcher writes it: the lanes survive the CRD's structural schema (nothing of them
    # pruned), and the timeline read from the status shows them the same.
    status = json.loads(invoke(control_plane, "state", task, "-n", namespace, "--from-events",
                               "-o", "json").stdout)["status"]
    assert sorted(status["spans"]["train_step"]["pods"]) == [p for p, _ in pods]
    write_status(control_plane, namespace, task, status)
    stored = json.loads(control_plane.kubectl_run(
        "get", "taskfeedback", task, "-n", namespace, "-o", "json"))["status"]
    assert stored["spans"] == status["spans"]
    again = json.loads(invoke(control_plane, "timeline", task, "-n", namespace,
                              "-o", "json").stdout)["spans"]
    assert again[0]["pods"] == span["pods"]


def test_timeline_hostile_names_and_no_spans(control_plane: ControlPlane, admin: Any,
                                             namespace: str, tmp_path: Path) -> None:
    t = datetime.now(UTC).timestamp()
    # Names are kept whole or refused: one with controls never reaches a
    # view, while one with markup is kept, and every view must make it harmless.
    for seq, name in enumerate(("<b>" + HOSTILE[:50], "<b>a & 'b' \"c\"</b>")):
        emit(admin, namespace, "odd", SpanSummary(name="x", count=1, total_s=1, min_s=1,
                                                  max_s=1, first_start=t - 1, last_end=t), seq,
             note={"v": 1, "t": "SpanSummary", "i": "inst-1", "s": seq,
                   "name": name, "count": 1, "total_s": 1.0, "min_s": 1.0,
                   "max_s": 1.0, "first_start": t - 1, "last_end": t})
    svg_file = tmp_path / "odd.svg"
    for fmt in ("table", "json", "yaml"):
        res = invoke(control_plane, "timeline", "odd", "-n", namespace, "-o", fmt,
                     "--svg", str(svg_file))
        assert res.exit_code == 0, res.output
        assert_harmless(res.output)
    text = svg_file.read_text()
    assert_harmless(text)
    assert "&lt;b&gt;" in text
    xml.dom.minidom.parseString(text)

    emit(admin, namespace, "no-spans", Progress(fraction=0.5), 0)
    res = invoke(control_plane, "timeline", "no-spans", "-n", namespace)
    assert res.exit_code == 0 and "no spans recorded" in res.stdout


def test_timeline_errors(control_plane: ControlPlane, admin: Any, namespace: str, crd: str,
                         tmp_path: Path) -> None:
    res = invoke(control_plane, "timeline", "ghost", "-n", namespace)
    assert res.exit_code == 5 and res.stderr.startswith("error: not found: task 'ghost'")
    res = invoke(control_plane, "timeline", "ghost", "-n", namespace, user="alice")
    assert res.exit_code == 4 and res.stderr.startswith("error: forbidden: cannot list events")
    res = invoke(control_plane, "timeline", "ghost", "-n", namespace,
                 "--svg", str(tmp_path / "no" / "such" / "dir.svg"))
    assert res.exit_code == 2 and res.stderr.startswith("error: invalid input: --svg")
    from typer.testing import CliRunner

    from tidings.cli.main import app

    closed = closed_port_kubeconfig(control_plane, tmp_path)
    res = CliRunner().invoke(app, ["timeline", "x", "--kubeconfig", str(closed)])
    assert res.exit_code == 3 and "cannot reach the cluster" in res.stderr


NONCHARACTER_NAMES = ["step\uffff", "\ufffeload", "ev\ufdd0al", "x\U0010ffff"]


def test_span_names_xml_forbids_still_make_a_readable_svg(
        control_plane: ControlPlane, admin: Any, namespace: str, crd: str,
        tmp_path: Path) -> None:
    """The attacker's side of invisible names: a sender names its spans with U+FFFF, U+FFFE
    and other noncharacters. The events are folded by the CLI (no watcher here), and the
    status a watcher (or anyone with status rights) wrote is read back: the SVG, the JSON and
    the terminal output all stay well-formed, the names shown without the noncharacters."""
    from tidings.schemas import TaskRef, fold_all, parse_event
    from tidings.schemas.wire.event import PodRef, build_event

    t = datetime.now(UTC).timestamp()
    for seq, name in enumerate(NONCHARACTER_NAMES):
        emit(admin, namespace, "odd", SpanSummary(name="x", count=1, total_s=1, min_s=1,
                                                  max_s=1, first_start=t - 1, last_end=t), seq,
             note={"v": 1, "t": "SpanSummary", "i": "inst-1", "s": seq, "name": name,
                   "count": 1, "total_s": 1.0, "min_s": 1.0, "max_s": 1.0,
                   "first_start": t - 4 + seq, "last_end": t - 3 + seq})
    # Such names are refused whole now (a name is kept whole or refused,
    # so "step\uffff" cannot become a second "step"); a plain one beside them is kept.
    emit(admin, namespace, "odd", SpanSummary(name="ok", count=1, total_s=1, min_s=1, max_s=1,
                                              first_start=t - 1, last_end=t), 9)
    # A status holding the names raw (an older watcher did not strip them).
    ref = TaskRef(namespace, "odd-status")
    bodies = [build_event(task=ref, pod=PodRef("p", "uid-p", namespace),
                          payload=SpanSummary(name=f"n{i}", count=1, total_s=1, min_s=1,
                                              max_s=1, first_start=t - 1, last_end=t),
                          instance="i", seq=i, time=datetime.now(UTC), sender_proof=False)
              for i in range(len(NONCHARACTER_NAMES))]
    status = to_status(fold_all(ref, [parse_event(b) for b in bodies]))
    status["spans"] = {raw: status["spans"][f"n{i}"]
                       for i, raw in enumerate(NONCHARACTER_NAMES)}
    write_status(control_plane, namespace, "odd-status", status)

    for task, names in (("odd", {"ok"}), ("odd-status", {"step", "load", "eval", "x"})):
        svg_file = tmp_path / f"{task}.svg"
        res = invoke(control_plane, "timeline", task, "-n", namespace, "--svg", str(svg_file))
        assert res.exit_code == 0, res.output
        text = svg_file.read_text(encoding="utf-8")
        doc = xml.dom.minidom.parseString(text.encode("utf-8"))  # expat refuses U+FFFF
        shown = {t.firstChild.data for t in doc.getElementsByTagName("title")
                 if t.parentNode.getAttribute("class") == "label"}
        assert shown == names, shown
        for out in (text, res.stdout):
            assert not any(c in out for c in "\uffff\ufffe\ufdd0\U0010ffff")
        data = json.loads(invoke(control_plane, "timeline", task, "-n", namespace,
                                 "-o", "json").stdout)
        assert {s["name"] for s in data["spans"]} == names
