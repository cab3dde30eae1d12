"""The health registry (schemas/status/health.py, ``HEALTH``) is the one list of health conditions:
these tests walk it and fail when a condition is missing anywhere one must be known: its
example (a state where it holds), the status (its condition, its list in ``status.health``,
the summary), the CRD and the chart's copy, the watcher's flags, bounds and gauge, the alert,
the chart's values, and the view (the terminal and the page show it, and the flag of each
worker it names). Adding a condition means adding its entry and its example here, and its
``status.health`` list to the CRD (ARCHITECTURE.md, "Adding a health condition")."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pytest
import yaml
from typer.testing import CliRunner

from tidings._compat import UTC
from tidings.schemas import ParsedEvent, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.engine.state import TaskState
from tidings.schemas.status.encoder import to_status
from tidings.schemas.status.health import (
    DEFAULT_HEALTH,
    HEALTH,
    HEALTH_CONDITIONS,
    THRESHOLDS,
    HealthCondition,
    HealthSettings,
    Threshold,
    judge,
)
from tidings.schemas.view.model import task_view
from tidings.schemas.wire.payloads import Metric, Payload, Progress
from tidings.watcher.metrics import Metrics
from tidings.watcher.settings import Options, health_settings, options, problems

ROOT = Path(__file__).resolve().parents[2]
CRDS = [ROOT / "deploy" / "crd.yaml",
        ROOT / "deploy" / "chart" / "crds" / "taskfeedbacks.tidings.dev.yaml"]
CHART = ROOT / "deploy" / "chart"
ALERTS = ROOT / "deploy" / "monitoring" / "alerts.yaml"
TASK = TaskRef("team-a", "health-1")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)


def event(payload: Payload, pod: int, seq: int, at: float) -> ParsedEvent:
    raw = build_event(task=TASK, pod=PodRef(f"w-{pod}", f"uid-{pod}"), payload=payload,
                      instance=f"inst-{pod}", seq=seq, time=T0 + timedelta(seconds=at))
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def reports(pod: int, times: list[float], pace: float = 0.01) -> list[ParsedEvent]:
    """Progress of ``w-<pod>`` at each of ``times``, ``pace`` a second."""
    return [event(Progress(fraction=min(1.0, pace * t)), pod, seq, t)
            for seq, t in enumerate(times)]


class Example(NamedTuple):
    """A state in which the condition holds: its events, when it is judged (seconds after
    T0) and what the condition names (its ``status.health`` list)."""

    events: Callable[[], list[ParsedEvent]]
    at: float
    named: list[str]


EVERY_10S = [0.0, 10.0, 20.0, 30.0]
# One example per condition of the registry: a condition missing here fails
# test_every_condition_has_an_example (adding a condition means adding its example).
EXAMPLES: dict[str, Example] = {
    # w-0 went silent at 9 s while w-1 kept reporting: by 200 s w-0 is far past 60 s.
    "Stalled": Example(lambda: reports(0, [float(t) for t in range(10)])
                       + reports(1, [float(t) for t in range(0, 201, 5)]), 200, ["w-0"]),
    "NonFiniteMetrics": Example(lambda: [
        *reports(0, EVERY_10S), event(Metric(name="loss", value=math.nan, step=3), 0, 10, 30)],
        31, ["loss"]),
    # Three workers at about 1 %/s and one at 0.3 %/s.
    "Straggling": Example(lambda: [ev for pod, pace in enumerate((0.01, 0.01, 0.011, 0.003))
                                   for ev in reports(pod, EVERY_10S, pace)], 31, ["w-3"]),
}
# Every worker reporting, every 10 s, at one pace, every metric finite: no condition holds.
HEALTHY = Example(lambda: [ev for pod in range(4) for ev in reports(pod, EVERY_10S)]
                  + [event(Metric(name="loss", value=0.5), 0, 10, 30)], 31, [])


def judged(example: Example) -> tuple[TaskState, dict[str, Any]]:
    state = fold_all(TASK, example.events())
    now = T0 + timedelta(seconds=example.at)
    return state, to_status(state, health=judge(state, now, DEFAULT_HEALTH))


def condition_of(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    found = [c for c in status["conditions"] if c["type"] == ctype]
    assert len(found) == 1, (ctype, status["conditions"])
    return found[0]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def kebab(camel_name: str) -> str:
    """Sprig's ``kebabcase`` (the chart's template) of a camelCase value name."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", camel_name).lower()


by_type = pytest.mark.parametrize("c", HEALTH, ids=lambda c: c.type)
workers = pytest.mark.parametrize("c", [c for c in HEALTH if c.subject == "worker"],
                                  ids=lambda c: c.type)
thresholds = pytest.mark.parametrize("t", list(THRESHOLDS.values()), ids=lambda t: t.name)


def test_every_condition_has_an_example_and_its_own_names() -> None:
    assert set(EXAMPLES) == set(HEALTH_CONDITIONS)
    for field in ("type", "names"):
        values = [getattr(c, field) for c in HEALTH]
        assert len(set(values)) == len(values), field
    flags = [c.flag for c in HEALTH if c.subject == "worker"]
    assert all(flags) and len(set(flags)) == len(flags)
    names = [t.name for c in HEALTH for t in c.thresholds]
    assert len(set(names)) == len(names) == len(THRESHOLDS)


@by_type
def test_each_condition_holds_in_its_example_and_says_what_it_names(c: HealthCondition
                                                                     ) -> None:
    _, status = judged(EXAMPLES[c.type])
    cond = condition_of(status, c.type)
    assert cond["status"] == "True", cond
    assert status["health"][c.names] == EXAMPLES[c.type].named
    assert c.type in status["health"]["summary"].split(",")
    for name in EXAMPLES[c.type].named:
        assert name in cond["message"]


@by_type
def test_each_condition_is_false_with_its_own_reason_in_a_healthy_task(c: HealthCondition
                                                                       ) -> None:
    _, status = judged(HEALTHY)
    cond = condition_of(status, c.type)
    assert cond["status"] == "False" and cond["reason"] and cond["message"], cond
    assert c.names not in status["health"] and status["health"]["summary"] == "Healthy"


@by_type
@pytest.mark.parametrize("crd", CRDS, ids=lambda p: p.parent.name)
def test_each_condition_is_in_the_crd_and_the_charts_copy(c: HealthCondition,
                                                          crd: Path) -> None:
    doc = yaml.safe_load(crd.read_text())
    version = doc["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    listed = status["health"]["properties"][c.names]
    assert listed["type"] == "array" and listed["items"] == {"type": "string"}
    assert listed["description"]
    assert c.type in status["conditions"]["items"]["properties"]["type"]["description"]
    health_column = [col for col in version["additionalPrinterColumns"]
                     if col["name"] == "Health"]
    assert c.type in health_column[0]["description"]


@thresholds
def test_each_threshold_is_a_flag_of_watcher_run_with_its_default_and_bounds(
        t: Threshold) -> None:
    from tidings.cli.main import app

    shown = " ".join(CliRunner().invoke(app, ["watcher", "run", "--help"],
                                        terminal_width=200).stdout.split())
    assert t.flag in shown and t.env in shown and " ".join(t.help.split()) in shown
    assert DEFAULT_HEALTH[t.name] == t.default
    value = t.minimum + 1 if t.maximum is None else t.maximum
    assert health_settings(options(**{t.name: value}))[t.name] == value
    assert problems(Options(health={t.name: value})) == []
    low = problems(Options(health={t.name: t.minimum - 1}))
    assert len(low) == 1 and low[0].startswith(t.flag), low
    if t.maximum is not None:
        assert problems(Options(health={t.name: t.maximum + 1}))[0].startswith(t.flag)


def test_a_threshold_no_condition_declares_is_refused() -> None:
    with pytest.raises(TypeError, match="stall_facter"):
        HealthSettings(stall_facter=3)


@thresholds
def test_the_chart_passes_each_threshold_as_its_flag(t: Threshold) -> None:
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    health = schema["properties"]["watcher"]["properties"]["health"]
    assert re.fullmatch(health["propertyNames"]["pattern"], camel(t.name))
    assert health["additionalProperties"]["minimum"] <= t.minimum
    assert "--" + kebab(camel(t.name)) == t.flag
    template = (CHART / "templates" / "deployment.yaml").read_text()
    assert "range $name, $value := .Values.watcher.health" in template
    assert "- --{{ kebabcase $name }}" in template


def test_the_gauge_has_a_series_per_condition_and_the_alert_covers_them_all() -> None:
    labels = {s.labels["condition"] for fam in Metrics().registry.collect()
              if fam.name == "tidings_watcher_tasks_unhealthy" for s in fam.samples}
    assert labels == set(HEALTH_CONDITIONS)
    doc = yaml.safe_load(ALERTS.read_text())
    exprs = [str(rule["expr"]) for group in doc["groups"] for rule in group["rules"]
             if "tidings_watcher_tasks_unhealthy" in str(rule["expr"])]
    # One rule, by condition, that picks none: a condition the registry adds alerts as is.
    assert len(exprs) == 1 and "by (condition)" in exprs[0] and "condition=" not in exprs[0]


@by_type
def test_the_terminal_and_the_page_show_each_condition_and_each_workers_flag(
        c: HealthCondition) -> None:
    from rich.console import Console

    from tidings.cli.snapshot import SOURCE_CR, Snapshot
    from tidings.cli.taskrender import render

    state, status = judged(EXAMPLES[c.type])
    view = task_view(state, status)
    assert c.type in [cond.type for cond in view.health]
    flagged = sorted(w.pod for w in view.workers if c.flag and c.flag in w.flags)
    assert flagged == (EXAMPLES[c.type].named if c.subject == "worker" else [])
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(
        render(Snapshot(state, SOURCE_CR, status=status)))
    lines = out.getvalue().splitlines()
    assert any(line.startswith(c.type) for line in lines), out.getvalue()
    for pod in flagged:
        assert any(pod in line and c.flag in line for line in lines), out.getvalue()
    pytest.importorskip("jinja2", reason="the ui extra (tidings[ui]) is not installed")
    from tidings.ui import pages

    html = pages.task_body({"metadata": {"name": TASK.name, "namespace": TASK.namespace},
                            "status": status})
    assert f">{c.type}<" in html
    for pod in flagged:
        row = re.search(rf"<td>{pod}(.*?)</td>", html)
        assert row is not None and f">{c.flag}<" in row.group(1), html
