"""The kind registry (schemas/wire/kinds.py) is the one list of kinds of fact: these tests walk it
and fail when a kind is missing anywhere a kind must be known: the CRD and the chart's copy,
the status codec, the CLI's rendering, the reference fold (the oracle of the fold) and the
write urgency."""

from __future__ import annotations

import inspect
import io
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from pydantic import BaseModel

from tests.unit import reference_fold
from tidings._compat import UTC
from tidings.cli.snapshot import SOURCE_CR, Snapshot
from tidings.cli.taskrender import render
from tidings.schemas import ParsedEvent, PodRef, TaskRef, build_event, parse_event
from tidings.schemas.engine.apply import APPLY
from tidings.schemas.engine.folding import fold_all
from tidings.schemas.engine.state import COUNTER_NAMES, Limits
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import BUDGET_DROP_ORDER, named_fields, to_status
from tidings.schemas.wire.kinds import (
    COALESCIBLE,
    CRITICAL,
    KINDS,
    KNOWN_PAYLOADS,
    NAMED_KINDS,
    SHRINKABLE,
    Kind,
    urgency,
)
from tidings.schemas.wire.payloads import (
    NON_FINITE,
    DeckReady,
    LogLink,
    Metric,
    Metrics,
    Payload,
    PodSpawned,
    Progress,
    Quiet,
    SpanSummaries,
    SpanSummary,
    UnknownPayload,
    Window,
    span_row,
)

ROOT = Path(__file__).resolve().parents[2]
CRDS = [ROOT / "deploy" / "crd.yaml", ROOT / "deploy" / "chart" / "crds" /
        "taskfeedbacks.tidings.dev.yaml"]
TASK = TaskRef("team-a", "kinds-1")
POD = PodRef("worker-0", "uid-0")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)

# One example fact per payload model of every kind, each with a text the CLI must show for
# it (a kind without a status section: its counter's name). A model missing here fails
# test_every_payload_model_has_an_example: adding a kind means adding its example.
EXAMPLES: dict[type[BaseModel], tuple[Payload, str]] = {
    LogLink: (LogLink(name="wandb-ex", url="https://wandb.example/run"), "wandb-ex"),
    DeckReady: (DeckReady(name="deck-ex", uri="s3://bucket/deck.html"), "deck-ex"),
    Metric: (Metric(name="loss-ex", value=-0.25, step=7, min=-0.5, max=0.25,
                    points=[(1, 0.125), (4, -0.5)]), "loss-ex"),
    Metrics: (Metrics(metrics=[["lr-ex", 3e-4, 7], ["acc-ex", 0.5, None]]), "acc-ex"),
    SpanSummary: (SpanSummary(name="span-ex", count=2, total_s=3.0, min_s=1.0, max_s=2.0,
                              first_start=1.7e9, last_end=1.7e9 + 5), "span-ex"),
    SpanSummaries: (SpanSummaries(base_us=1_700_000_000_000_000, spans=[
        span_row("rows-ex", 1, 1.0, 1.0, 1.0, 1.7e9, 1.7e9 + 1, 0, 1_700_000_000_000_000),
        span_row("rows-ex2", 1, 1.0, 1.0, 1.0, 1.7e9, 1.7e9 + 1, 0, 1_700_000_000_000_000)]),
        "rows-ex2"),
    Progress: (Progress(fraction=0.5, message="progress-ex"), "progress-ex"),
    Window: (Window.model_validate({
        "progress": {"fraction": 0.25, "message": "window-ex"}, "metrics": [["wm-ex", 1.5, 3]],
        "base_us": 1_700_000_000_000_000, "spans": [
            span_row("ws-ex", 1, 1.0, 1.0, 1.0, 1.7e9, 1.7e9 + 1, 0, 1_700_000_000_000_000)]}),
        "window-ex"),
    Quiet: (Quiet(seconds=300.0, reason="checkpoint-ex"), "quiet_declared"),
    PodSpawned: (PodSpawned(pod_name="p-1", pod_uid="u-1", app=TASK.name), "pods_spawned"),
    UnknownPayload: (UnknownPayload(type="FutureKind", version=1), "FutureKind"),
}


def event_of(payload: Payload, seq: int = 1, warning: bool = False, pod: PodRef = POD
             ) -> ParsedEvent:
    raw = build_event(task=TASK, pod=pod, payload=payload, instance="i" * 32, seq=seq,
                      time=T0, warning=warning)
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def status_schema(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    version = doc["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def models() -> list[tuple[Kind, type[BaseModel]]]:
    return [(k, m) for k in KINDS for m in k.models]


def test_every_payload_model_has_an_example_and_one_kind() -> None:
    assert set(EXAMPLES) == {m for _, m in models()}
    assert len(models()) == len({m for _, m in models()})  # no model in two kinds
    assert len({k.name for k in KINDS}) == len(KINDS)


def test_the_registry_is_what_the_codec_and_the_fold_know() -> None:
    assert set(KNOWN_PAYLOADS.values()) | {UnknownPayload} == {m for _, m in models()}
    assert set(APPLY) == {m for _, m in models()}
    for kind, model in models():
        for field in SHRINKABLE.get(getattr(model, "TYPE", ""), ()):
            assert field in model.model_fields and field in kind.shrink


@pytest.mark.parametrize("crd", CRDS, ids=lambda p: p.name)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_is_in_the_crd_and_the_charts_copy(kind: Kind, crd: Path) -> None:
    status = status_schema(crd)["properties"]
    counters = status["counters"]["properties"]
    for name in (kind.capped, *kind.counters):
        if name:
            assert camel(name) in counters, f"{crd.name}: counters.{camel(name)}"
            assert counters[camel(name)].get("description")
    if not kind.section:
        return
    section = status.get(kind.section)
    assert section is not None, f"{crd.name}: status.{kind.section} is missing"
    assert section.get("description"), f"{crd.name}: status.{kind.section} has no description"
    if kind.drop_rank is not None:
        assert kind.budget_section in status["budgetDropped"]["properties"]
    if kind.detail_rank is not None:
        assert kind.detail_drop in status["budgetDropped"]["properties"]
    if kind.family == "named":
        # Each entry a record (schemas/wire/record.py) whose description names every field, its
        # value fields' first; a value that may not be finite goes under its non_finite key.
        entry = section["additionalProperties"]
        text = " ".join(entry["description"].split())
        assert entry.get("x-kubernetes-preserve-unknown-fields") is True, crd.name
        layout = named_fields(kind)
        assert {"at", "events"} | {f.attr for f in kind.values} <= set(layout)
        for key in layout:
            assert re.search(rf"\b{key}\b[^.;:]*?\(", text), f"{crd.name}: {kind.section}.{key}"
        for f in kind.values:
            if f.non_finite:
                assert all(token in text for token in NON_FINITE), f.non_finite
        if kind.report is not None:  # a curve: its extremes and history
            assert {"min", "max", "history"} <= set(layout)
            assert list(layout)[-1] == kind.detail == "history"  # last: the budget cuts it


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_every_kind_folds_as_the_reference_fold_and_round_trips(
        kind: Kind, model: type[BaseModel]) -> None:
    payload, _ = EXAMPLES[model]
    ev = event_of(payload)
    engine = fold_all(TASK, [ev])
    reference = reference_fold.fold(decode_status(TASK, {}), ev)
    assert to_status(engine) == to_status(reference)
    assert engine == reference
    status = to_status(engine)
    if kind.section:
        assert kind.section in status, f"{model.__name__} left no status.{kind.section}"
    for name in kind.counters:
        if name != "pods_spawned" or kind.family == "lineage":
            assert status["counters"].get(camel(name)), name
    assert decode_status(TASK, status) == engine


def capped(with_cap: bool) -> list[tuple[Kind, type[BaseModel]]]:
    return [(k, m) for k, m in models() if bool(k.cap) == with_cap]


@pytest.mark.parametrize("kind, model", capped(True), ids=lambda x: getattr(x, "__name__", ""))
def test_every_kind_is_capped_and_counted_like_the_reference(
        kind: Kind, model: type[BaseModel]) -> None:
    payload, _ = EXAMPLES[model]
    lim = Limits(**{kind.cap: 0})
    ev = event_of(payload)
    engine = fold_all(TASK, [ev], lim)
    reference = reference_fold.fold(decode_status(TASK, {}, lim), ev)
    assert to_status(engine) == to_status(reference)
    assert kind.section not in to_status(engine)
    assert engine.counters[kind.capped] >= 1


@pytest.mark.parametrize("kind, model", capped(False), ids=lambda x: getattr(x, "__name__", ""))
def test_a_kind_without_a_cap_is_bounded_by_its_parts_caps_or_keeps_only_a_count(
        kind: Kind, model: type[BaseModel]) -> None:
    """No cap of its own is no bound missing: a window's rows are each its part's kind
    (progress, metrics, spans), every one of them capped by that kind's cap and counted; a
    lineage record leaves a count in the status, nothing that grows with the records."""
    payload, _ = EXAMPLES[model]
    ev = event_of(payload)
    if kind.family == "window":
        filled = [k for k in KINDS if k.cap and k.section in to_status(fold_all(TASK, [ev]))]
        assert {k.name for k in filled} == {"progress", "metrics", "spans"}
        lim = Limits(**{k.cap: 0 for k in KINDS if k.cap})
        engine = fold_all(TASK, [ev], lim)
        reference = reference_fold.fold(decode_status(TASK, {}, lim), ev)
        assert to_status(engine) == to_status(reference)
        for k in filled:
            assert k.section not in to_status(engine), k.name
            assert engine.counters[k.capped] >= 1, k.capped
    elif kind.family == "lineage":
        one = to_status(fold_all(TASK, [ev]))
        events = [event_of(PodSpawned(pod_name=f"p-{n}", pod_uid=f"u-{n}", app=TASK.name),
                           seq=n + 1) for n in range(200)]
        many = to_status(fold_all(TASK, events))
        assert many["counters"][camel(kind.counters[0])] == 200
        # The same parts, a few bytes more: the counts' digits.
        assert set(many) == set(one)
        assert len(orjson.dumps(many)) - len(orjson.dumps(one)) <= 16
    else:
        pytest.fail(f"kind {kind.name!r} has no cap, and no rule here says what bounds it")


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_the_cli_shows_every_kind(kind: Kind, model: type[BaseModel]) -> None:
    from rich.console import Console

    payload, marker = EXAMPLES[model]
    # Two workers: the table view lists workers (and their messages) from two on.
    other = event_of(Progress(fraction=0.1, message="other"), seq=2,
                     pod=PodRef("worker-1", "uid-1"))
    state = decode_status(TASK, to_status(fold_all(TASK, [event_of(payload), other])))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render(Snapshot(state, SOURCE_CR)))
    assert marker in out.getvalue(), f"the CLI does not show {model.__name__}"


@pytest.mark.parametrize("kind", [k for k in NAMED_KINDS if k.command], ids=lambda k: k.name)
def test_emit_sends_each_named_kind_through_its_emitter_method(
        kind: Kind, monkeypatch: pytest.MonkeyPatch) -> None:
    # `tidings emit`'s sub-commands of named kinds are built from the registry: each takes
    # the example's key and values, checks them with the kind's model and calls the Emitter
    # method of the same name with them.
    from typer.testing import CliRunner

    from tidings.cli import emit
    from tidings.emitter import Emitter

    payload, _ = EXAMPLES[kind.models[0]]
    fields = {f: getattr(payload, f) for f in (kind.key, *(v.attr for v in kind.values))}
    method = kind.command.replace("-", "_")
    inspect.signature(getattr(Emitter, method)).bind(None, **fields)  # the method takes them
    calls: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            return lambda **kw: calls.append((name, kw))

    monkeypatch.setattr(emit, "_deliver", lambda send, to: send(Recorder()))
    argv = [kind.command]
    for v in (kind.key, *(v.attr for v in kind.values)):
        if fields[v] is None:
            continue
        optional = v != kind.key and next(f for f in kind.values if f.attr == v).optional
        argv += ([str(fields[v])] if kind.arguments and not optional
                 else [f"--{v}", str(fields[v])])
    res = CliRunner().invoke(emit.app, argv)
    assert res.exit_code == 0, res.output
    assert calls == [(method, fields)]


def test_budget_order_and_counters_come_from_the_registry() -> None:
    for kind in KINDS:
        if kind.drop_rank is not None:
            assert kind.budget_section in BUDGET_DROP_ORDER
        if kind.detail_rank is not None:
            # A detail goes before its entries themselves.
            assert kind.detail_drop in BUDGET_DROP_ORDER
            assert kind.drop_rank is None or kind.detail_rank < kind.drop_rank
        for name in (kind.capped, *kind.counters):
            if name:
                assert name in COUNTER_NAMES
    assert len(set(COUNTER_NAMES)) == len(COUNTER_NAMES)


# The payloads the watcher's fast parse (schemas/wire/fastpath.py) leaves to the reference parse,
# each with why that costs nothing worth its code. Every other kind must take the fast path:
# a kind added to the registry without a decoder there fails the test below (it would parse
# several times slower, silently), until it gets one or a reason here.
REFERENCE_PARSE_ONLY: dict[type[BaseModel], str] = {
    Metric: "the emitter sends its metrics in Windows; a lone Metric is `tidings emit metric`",
    Metrics: "as Metric: the emitter packs metric rows into Windows",
    PodSpawned: "lineage: one record per pod spawned, not per step",
    Quiet: "one per checkpoint or evaluation a worker declares, not per step",
    UnknownPayload: "a type this version does not know is the reference's to keep and count",
}


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_every_kind_takes_the_watchers_fast_parse_or_says_why_not(
        kind: Kind, model: type[BaseModel]) -> None:
    pytest.importorskip("msgspec", reason="the watcher extra (tidings[watcher]) is not installed")
    from tidings.schemas.wire import fastpath
    from tidings.schemas.wire.event import parse_watch_line

    payload, _ = EXAMPLES[model]
    raw = build_event(task=TASK, pod=POD, payload=payload, instance="i" * 32, seq=1, time=T0)
    line = orjson.dumps({"type": "ADDED", "object": raw})
    try:
        fast = fastpath._fast(line)
    except Exception:  # (what the fast path cannot decode, fast_watch_line hands on)
        fast = None
    assert fastpath.fast_watch_line(line) == parse_watch_line(line)
    if model in REFERENCE_PARSE_ONLY:
        assert fast is None, f"{model.__name__} takes the fast path: drop it from the list"
    else:
        assert fast == parse_watch_line(line), (
            f"{model.__name__} takes the reference parse: give it a decoder in "
            "schemas/wire/fastpath.py, or a reason in REFERENCE_PARSE_ONLY")


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_every_kind_has_its_declared_urgency(kind: Kind, model: type[BaseModel]) -> None:
    payload, _ = EXAMPLES[model]
    assert urgency(payload) == kind.urgency
    assert urgency(payload, warning=True) == CRITICAL  # a failure report is never delayed
    assert kind.urgency in (CRITICAL, COALESCIBLE)


def test_a_final_progress_is_critical_and_a_running_one_coalescible() -> None:
    assert urgency(Progress(fraction=1.0, final=True)) == CRITICAL
    assert urgency(Progress(fraction=0.3, final=True, failed=True)) == CRITICAL
    assert urgency(Progress(fraction=0.3)) == COALESCIBLE


@pytest.mark.parametrize("kind, model", models(), ids=lambda x: getattr(x, "__name__", ""))
def test_the_write_scheduler_takes_each_kinds_urgency(kind: Kind,
                                                      model: type[BaseModel]) -> None:
    """The watcher's write urgency is the kind's, for every kind (a
    multi-name SpanSummaries window was taken for a critical fact and written at once)."""
    from tidings.watcher.coalesce import fact_kind

    payload, _ = EXAMPLES[model]
    assert fact_kind(event_of(payload)) == kind.urgency
    assert fact_kind(event_of(payload, warning=True)) == CRITICAL


def test_state_says_what_its_warnings_are() -> None:
    """A bare "Warnings 2" left people guessing: the row says they are failure reports."""
    from rich.console import Console

    failed = event_of(Progress(fraction=0.3, message="oom", final=True, failed=True),
                      warning=True)
    state = decode_status(TASK, to_status(fold_all(TASK, [failed])))
    assert state.warnings == 1
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render(Snapshot(state, SOURCE_CR)))
    (row,) = [line for line in out.getvalue().splitlines() if "Warnings" in line]
    assert "1 failure report (events of type Warning" in row, row
