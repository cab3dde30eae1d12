"""Text that is not valid UTF-8: a lone surrogate, what Python makes of an
invalid byte in argv or of a file read with errors="surrogateescape", is made valid (U+FFFD)
in every text field of every kind, at the emitter's call, in the payload models, the note
codec and the fold; it is never lost on the sender thread."""

from __future__ import annotations

import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from tests.unit.test_emitter_core import make, unpack
from tidings._compat import UTC
from tidings.emitter import Emitter
from tidings.emitter.spans import Span
from tidings.schemas import (
    ParsedEvent,
    PodRef,
    TaskRef,
    build_event,
    fold,
    new_state,
    parse_event,
)
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.kinds import KNOWN_PAYLOADS
from tidings.schemas.wire.note import decode_note, decode_obj, encode_note
from tidings.schemas.wire.payloads import (
    DeckReady,
    LogLink,
    Metric,
    Metrics,
    PodSpawned,
    Progress,
    SpanSummaries,
    SpanSummary,
    UnknownPayload,
    Window,
    span_row,
)
from tidings.schemas.wire.text import REPLACEMENT, sanitize_text, valid_text

SURROGATES = ["\udcc3", "\ud800", "\udfff", "\ud83d\ude00", "\udc80\udcff"]
# Any character at all (surrogates are excluded by default), plus strings sure to hold one.
ANY_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=12), st.sampled_from(SURROGATES),
              st.text(max_size=12)),
)
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
BASE_US = 1_700_000_000_000_000


def is_valid(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def test_the_rule_one_replacement_per_surrogate() -> None:
    assert valid_text("\udcc3 step") == "\ufffd step"
    assert valid_text("a\ud83d\ude00b") == "a\ufffd\ufffdb"  # a pair of halves is no character
    assert valid_text("plain ascii") == "plain ascii"
    assert valid_text("déjà vu 👩‍💻") == "déjà vu 👩‍💻"
    assert sanitize_text("\x1b[31m\udcc3\x00 x") == "\ufffd x"


# ---- the emitter's calls: every text argument, arbitrary strings -------------------------

# Each call hands the emitter one fact whose text is ``t`` in one field.
CALLS: dict[str, Callable[[Emitter, str], None]] = {
    "log_link.name": lambda em, t: em.log_link(t, "https://wandb.example/run"),
    "log_link.url": lambda em, t: em.log_link("wandb", t),
    "log_link.url_path": lambda em, t: em.log_link("wandb", "https://wandb.example/" + t),
    "deck_ready.name": lambda em, t: em.deck_ready(t, "s3://bucket/deck.html"),
    "deck_ready.uri": lambda em, t: em.deck_ready("deck", "s3://bucket/" + t),
    "progress.message": lambda em, t: em.progress(0.5, t),
    "progress.final_message": lambda em, t: em.progress(1.0, t, final=True),
    "fail.message": lambda em, t: em.fail(t),
    "metric.name": lambda em, t: em.metric(t, 0.5, step=3),
    "record_span.name": lambda em, t: em.record_span(t, 1.7e9, 1.7e9 + 1),
    "span.name": lambda em, t: Span(em, t).end(),
    "pod_spawned.pod_name": lambda em, t: em.pod_spawned(t, "u-1", app="run-7"),
    "pod_spawned.pod_uid": lambda em, t: em.pod_spawned("p-1", t, app="run-7"),
    "pod_spawned.app": lambda em, t: em.pod_spawned("p-1", "u-1", app=t),
    "pod_spawned.role": lambda em, t: em.pod_spawned("p-1", "u-1", app="run-7", role=t),
    "pod_spawned.app_kind": lambda em, t: em.pod_spawned(
        "p-1", "u-1", app="job-1", app_kind=t, app_api_version="batch/v1"),
    "emit.unknown": lambda em, t: em.emit(UnknownPayload(type="FutureKind", version=1,
                                                          raw={"text": t, t: 1})),
}
# Free text (a message) is never refused: made valid and sanitised, it is delivered.
FREE_TEXT = {"progress.message", "progress.final_message", "fail.message"}


def folded(body: dict[str, Any]) -> list[Any]:
    """The event as the API server returns it (JSON), parsed by the watcher's parser and
    folded; returns the facts it carried."""
    wire = orjson.loads(orjson.dumps(body))
    assert is_valid(wire["note"])
    ev = parse_event(wire)
    assert isinstance(ev, ParsedEvent), ev
    state = fold(new_state(ev.task), ev)
    status = to_status(state)
    orjson.dumps(status)  # (raises on a surrogate)
    return unpack(ev.payload)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(call="progress.message", text="\udcc3 step")
@example(call="metric.name", text="loss\udcc3")
@example(call="record_span.name", text="\ud800")
@example(call="log_link.name", text="wandb\udcc3")
@given(call=st.sampled_from(sorted(CALLS)), text=ANY_TEXT)
def test_every_text_argument_is_delivered_or_counted_never_lost_on_the_thread(
        call: str, text: str) -> None:
    em, rec = make()
    CALLS[call](em, text)
    em.flush(10)
    em.close(0)
    stats = em.stats()
    assert stats["internal_errors"] == 0, stats
    facts = [fact for body in rec.bodies for fact in folded(body)]
    # One fact offered: delivered, or refused with a reason (counted); nothing else. (A
    # metric whose name is refused is counted once per window its curve is retold in.)
    assert len(facts) <= 1
    assert bool(facts) != bool(stats["invalid"] + stats["unaddressable"]), (facts, stats)
    if call in FREE_TEXT:
        (fact,) = facts
        assert isinstance(fact, Progress)
        expected = sanitize_text(valid_text(text))
        assert fact.message == expected or fact.message.endswith("…")
    if any(s in text for s in SURROGATES) and facts and call.endswith("name"):
        assert REPLACEMENT in orjson.dumps(rec.bodies[-1]["note"]).decode()


def test_the_commands_message_from_invalid_utf8_is_delivered_made_valid() -> None:
    """The shape of `tidings emit progress 0.5 --message "$(printf '\\xc3 step')"`: argv's
    invalid byte arrives as a surrogate (surrogateescape)."""
    argv_text = b"\xc3 step".decode("utf-8", "surrogateescape")
    em, rec = make()
    em.progress(0.5, argv_text)
    em.metric(argv_text, 1.0)
    assert em.flush(10)
    facts = [fact for body in rec.bodies for fact in folded(body)]
    (progress,) = [f for f in facts if isinstance(f, Progress)]
    (metric,) = [f for f in facts if isinstance(f, Metric)]
    assert progress.message == "\ufffd step" and metric.name == "\ufffd step"


# ---- the payload models, the note codec and the fold: every text field of every kind ------

def text_fields(model: type[BaseModel]) -> set[str]:
    """The fields of ``model`` that hold text (a str, however annotated)."""
    out = set()
    for name, info in model.model_fields.items():
        ann = info.annotation
        if ann is str or (typing.get_origin(ann) is typing.Union and str in typing.get_args(ann)):
            out.add(name)
    return out


# Every text field of every payload kind, as a payload built with ``t`` in that field. A
# batch kind (Metrics, SpanSummaries, Window) carries its rows' names.
BUILDERS: dict[tuple[str, str], Callable[[str], Any]] = {
    ("LogLink", "name"): lambda t: {"name": t, "url": "https://x.example/r"},
    ("LogLink", "url"): lambda t: {"name": "n", "url": "https://x.example/" + t},
    ("DeckReady", "name"): lambda t: {"name": t, "uri": "s3://b/d.html"},
    ("DeckReady", "uri"): lambda t: {"name": "n", "uri": "gs://b/" + t},
    ("Metric", "name"): lambda t: {"name": t, "value": 1.0, "step": 2},
    ("Metrics", "metrics"): lambda t: {"metrics": [[t, 1.0, 2]]},
    ("SpanSummary", "name"): lambda t: {"name": t, "count": 1, "total_s": 1.0, "min_s": 1.0,
                                        "max_s": 1.0, "first_start": 1.7e9,
                                        "last_end": 1.7e9 + 1},
    ("SpanSummaries", "spans"): lambda t: {"base_us": BASE_US, "spans": [
        span_row(t, 1, 1.0, 1.0, 1.0, 1.7e9, 1.7e9 + 1, 0, BASE_US)]},
    ("Progress", "message"): lambda t: {"fraction": 0.5, "message": t},
    ("Window", "progress"): lambda t: {"progress": {"fraction": 0.5, "message": t},
                                       "metrics": [[t, 1.0, 1]], "base_us": BASE_US,
                                       "spans": [span_row(t, 1, 1.0, 1.0, 1.0, 1.7e9,
                                                          1.7e9 + 1, 0, BASE_US)]},
    ("Quiet", "reason"): lambda t: {"seconds": 60.0, "reason": t},
    ("PodSpawned", "pod_name"): lambda t: {"pod_name": t, "pod_uid": "u", "app": "a"},
    ("PodSpawned", "pod_uid"): lambda t: {"pod_name": "p", "pod_uid": t, "app": "a"},
    ("PodSpawned", "app"): lambda t: {"pod_name": "p", "pod_uid": "u", "app": t},
    ("PodSpawned", "role"): lambda t: {"pod_name": "p", "pod_uid": "u", "app": "a", "role": t},
    ("Unknown", "type"): lambda t: {"type": t, "version": 1},
    ("Unknown", "raw"): lambda t: {"type": "FutureKind", "version": 1, "raw": {"k": t, t: [t]}},
}
MODELS: dict[str, type[BaseModel]] = {**KNOWN_PAYLOADS, "Unknown": UnknownPayload}


def test_the_builders_cover_every_text_field_of_every_kind() -> None:
    """A kind or a text field added later fails here until the property below feeds it."""
    for kind, model in MODELS.items():
        assert text_fields(model) <= {f for k, f in BUILDERS if k == kind}, kind
    assert {k for k, _ in BUILDERS} == set(MODELS)
    assert {Metrics, SpanSummaries, Window, Metric, SpanSummary, LogLink, DeckReady,
            Progress, PodSpawned} <= set(MODELS.values())


def every_string(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*every_string(k), *every_string(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in every_string(v)]
    if isinstance(value, BaseModel):
        return every_string(dict(value))
    return []


@settings(max_examples=600, deadline=None)
@example(field=("Progress", "message"), text="\udcc3 step")
@example(field=("LogLink", "name"), text="wandb\udcc3")
@example(field=("Window", "progress"), text="\ud800")
@given(field=st.sampled_from(sorted(BUILDERS)), text=ANY_TEXT)
def test_every_text_field_through_the_models_the_codec_and_the_fold(
        field: tuple[str, str], text: str) -> None:
    model = MODELS[field[0]]
    fields = BUILDERS[field](text)
    try:
        payload = model.model_validate(fields)
    except ValidationError:
        # Refused with a reason; never for the surrogates alone: the same text made valid
        # is refused as well.
        with pytest.raises(ValidationError):
            model.model_validate(BUILDERS[field](valid_text(text)))
        return
    # A surrogate is never a reason to refuse, nor kept: the model holds valid text only.
    assert all(is_valid(s) for s in every_string(payload)), payload
    assert model.model_validate(BUILDERS[field](valid_text(text))) == payload
    note = encode_note(payload, instance="i" * 32, seq=1)
    assert is_valid(note)
    decoded = decode_note(note)
    assert not isinstance(decoded, Exception) and type(decoded) is type(payload), decoded
    # A JSON parser that lets lone surrogate escapes through (Python's json) gives the codec
    # the raw object: it takes it, never raises, and holds valid text only.
    raw = {"v": 1, "t": field[0] if field[0] != "Unknown" else "FutureKind", **fields}
    res = decode_obj(raw)
    if isinstance(res, tuple):
        assert all(is_valid(s) for s in every_string(res[0]))
    if isinstance(decoded, UnknownPayload | PodSpawned):
        return  # (an unknown kind is only counted; lineage folds into the app's own state)
    body = build_event(task=TaskRef("ml", "run-7"), pod=PodRef("train-0", "u-0"),
                       payload=decoded, instance="i" * 32, seq=1, time=T0)
    ev = parse_event(orjson.loads(orjson.dumps(body)))
    assert isinstance(ev, ParsedEvent), ev
    status = to_status(fold(new_state(ev.task), ev))
    assert all(is_valid(s) for s in every_string(status))
