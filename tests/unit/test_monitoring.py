"""deploy/monitoring: every metric the alerts and the dashboard use is one the watcher serves
(its own registry, watcher/metrics.py), and both files are well formed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tidings.watcher.metrics import Metrics

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
METRIC = re.compile(r"\b(tidings_[a-z0-9_]+)")


SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def served() -> set[str]:
    """Every series name the watcher can expose, by metric type (a labelled counter has no
    sample before its first increment, so the samples alone would miss it)."""
    return {family.name + suffix for family in Metrics().registry.collect()
            for suffix in SUFFIXES[family.type]}


def alert_rules() -> list[dict[str, object]]:
    doc = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def used(exprs: list[str]) -> set[str]:
    return {m for e in exprs for m in METRIC.findall(e)}


def test_the_alerts_use_only_served_metrics() -> None:
    names = used([str(rule["expr"]) for rule in alert_rules()])
    assert names and names <= served(), names - served()


def test_the_dashboard_uses_only_served_metrics() -> None:
    names = used(dashboard_exprs())
    assert names and names <= served(), names - served()


def test_the_check_would_catch_a_misspelt_metric() -> None:
    assert used(["rate(tidings_watcher_events_sean_total[5m])"]) - served() == {
        "tidings_watcher_events_sean_total"}


def test_every_alert_is_actionable() -> None:
    rules = alert_rules()
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule  # type: ignore[index]
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule  # type: ignore[index]
        assert re.fullmatch(r"\d+[smh]", str(rule["for"])), rule


def test_the_dashboard_is_importable() -> None:
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    assert dash["uid"] == "tidings-watcher" and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(set(ids)) == len(ids)
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]


def test_a_late_fact_from_the_watch_alerts() -> None:
    """A late event from the watch is a fact lost; the late events of a list are not."""
    late = [r for r in alert_rules() if 'cause="late"' in str(r["expr"])]
    assert [r["alert"] for r in late] == ["TidingsFactsSkippedLate"]
    assert "late_relisted" not in str(late[0]["expr"])
