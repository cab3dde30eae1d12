"""A status the previous watcher wrote (layout 2: every entry a JSON object) is still read, as
fully as main's reader read it: ``data/status_v2.json`` holds statuses main's encoder wrote (a
real training run's, the bench's typical one, seeded random states with every part of the
status, hand-damaged copies), each with what main's reader rebuilt from it
(``status_canon.canon``): the statuses recorded once at main's c9a6993 when the layout
changed, what main's reader rebuilt recorded again at 5db8595 (which widens a metric's
extremes over its history points)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from tidings.schemas import Limits, TaskRef
from tidings.schemas.status.decoder import expanded, read_status
from tidings.schemas.status.encoder import STATUS_VERSION, to_status

from .status_canon import canon, subset_diff

RECORDED = json.loads((Path(__file__).parent / "data" / "status_v2.json").read_text())["statuses"]
_DURATIONS = ("clock_skew", "event_ttl", "ttl_margin")


def _limits(raw: dict[str, Any]) -> Limits:
    return Limits(**{k: timedelta(seconds=v) if k in _DURATIONS else v for k, v in raw.items()})


def test_the_recorded_statuses_are_layout_2_and_cover_its_entries() -> None:
    assert STATUS_VERSION == 3
    statuses = [c["status"] for c in RECORDED]
    assert all(s["schemaVersion"] == 2 for s in statuses)
    # Every kind of entry the layout change touched, as layout 2 wrote it.
    for section in ("links", "decks", "metrics", "spans"):
        assert any(isinstance(v, dict) and s.get(section) for s in statuses
                   for v in s.get(section, {}).values()), section
    assert any(isinstance(w, dict) for s in statuses for w in s.get("workers", []))
    assert any(isinstance(p, dict) for s in statuses for p in s.get("pods", []))
    assert any("pods" in e for s in statuses for e in s.get("spans", {}).values())
    assert any("pod" in e for s in statuses for e in s.get("spans", {}).values())
    assert any("history" in e for s in statuses for e in s.get("metrics", {}).values())
    assert any("nonFinite" in e for s in statuses for e in s.get("metrics", {}).values())


@pytest.mark.parametrize("case", RECORDED, ids=[c["name"] for c in RECORDED])
def test_a_layout_2_status_reads_as_main_read_it(case: dict[str, Any]) -> None:
    task = TaskRef(*case["task"])
    got = read_status(task, case["status"], _limits(case["limits"]))
    assert subset_diff(case["state"], canon(got.state)) == []
    assert list(got.unread.problems) == case["problems"]
    assert got.unread.partial == case["partial"]


@pytest.mark.parametrize("case", RECORDED, ids=[c["name"] for c in RECORDED])
def test_a_layout_2_status_is_written_again_in_layout_3_and_reads_the_same(
        case: dict[str, Any]) -> None:
    """What the watcher does with it: the next write is layout 3 (every entry a record), with
    the entries that did not read kept as they were; reading that gives the same state."""
    task, limits = TaskRef(*case["task"]), _limits(case["limits"])
    first = read_status(task, case["status"], limits)
    if first.unread.partial:
        return  # (never written over: the writer refuses it)
    written = orjson.loads(orjson.dumps(first.unread.merge_into(
        to_status(first.state), first.state)))
    assert written["schemaVersion"] == 3
    for section in ("links", "decks", "metrics", "spans"):
        kept = first.unread.entries.get(section, {})
        assert all(isinstance(v, str) for k, v in written.get(section, {}).items()
                   if k not in kept), section
    again = read_status(task, written, limits)
    assert canon(again.state) == canon(first.state)
    assert {k: set(v) for k, v in again.unread.entries.items()} == \
        {k: set(v) for k, v in first.unread.entries.items()}


@pytest.mark.parametrize("case", RECORDED, ids=[c["name"] for c in RECORDED])
def test_expanded_shows_each_record_as_its_fields_and_reads_the_same(
        case: dict[str, Any]) -> None:
    """What ``tidings state -o json`` prints: every record of a layout 3 status as the object
    of its fields (layout 2's shape), which reads back to the same state."""
    task, limits = TaskRef(*case["task"]), _limits(case["limits"])
    first = read_status(task, case["status"], limits)
    if first.unread:
        return  # (a damaged copy: its unreadable entries stay as they were, tested above)
    written = orjson.loads(orjson.dumps(to_status(first.state)))
    shown = expanded(written)
    for section in ("links", "decks", "metrics", "spans"):
        assert all(isinstance(v, dict) for v in shown.get(section, {}).values()), section
    assert all(isinstance(w, dict) for w in shown.get("workers", []))
    assert all(isinstance(h, dict) for m in shown.get("metrics", {}).values()
               if (h := m.get("history")) is not None)
    assert "spanLanes" not in shown
    if "spanLanes" in written:
        assert all(set(shown["spans"][k]["pods"]) == set(v)
                   for k, v in written["spanLanes"].items())
    assert canon(read_status(task, shown, limits).state) == canon(first.state)
