"""The Event contract: build_event/parse_event agree, and parsing any input never raises."""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings._compat import UTC
from tidings.schemas import (
    API_VERSION,
    BUS_CONTROLLER,
    INSTANCE_ANNOTATION,
    KIND,
    NOTE_LIMIT,
    SEQ_ANNOTATION,
    DeckReady,
    LogLink,
    ObjectRef,
    ParsedEvent,
    PodRef,
    PodSpawned,
    Progress,
    Rejection,
    RejectReason,
    SpanSummary,
    TaskRef,
    UnknownPayload,
    build_event,
    event_name,
    parse_event,
    parse_watch_line,
)

TASK = TaskRef("team-a", "train-42")
POD = PodRef("train-42-worker-0", "6f1c2a9e-0000-4000-8000-000000000001")
T0 = datetime(2026, 11, 30, 3, 55, 49, 123456, tzinfo=UTC)
DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _event(payload: Any = None, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "task": TASK,
        "pod": POD,
        "payload": payload or LogLink(name="wandb", url="https://wandb.ai/r/1"),
        "instance": "inst-1",
        "seq": 7,
        "time": T0,
    }
    args.update(kw)
    return build_event(**args)


def test_build_event_follows_the_contract() -> None:
    ev = _event(warning=True)
    assert ev["apiVersion"] == "events.k8s.io/v1" and ev["kind"] == "Event"
    assert ev["metadata"]["namespace"] == "team-a"
    assert ev["metadata"]["name"] == event_name("train-42", "inst-1", 7)
    assert ev["metadata"]["annotations"] == {INSTANCE_ANNOTATION: "inst-1", SEQ_ANNOTATION: "7",
                                             "tidings.dev/sender-uid": POD.uid}
    assert ev["eventTime"] == "2026-11-30T03:55:49.123456Z"
    assert ev["reportingController"] == BUS_CONTROLLER
    assert ev["reportingInstance"] == POD.name
    assert ev["action"] == "Report" and ev["reason"] == "LogLink" and ev["type"] == "Warning"
    assert ev["regarding"] == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "namespace": "team-a",
        "name": "train-42",
    }
    assert ev["related"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-a",
        "name": POD.name,
        "uid": POD.uid,
    }
    assert len(ev["note"].encode()) <= NOTE_LIMIT
    assert len(orjson.dumps(ev)) < 2048


@pytest.mark.parametrize(
    "payload",
    [
        LogLink(name="wandb", url="https://wandb.ai/r/1"),
        DeckReady(name="report", uri="s3://bucket/deck.html"),
        SpanSummary(
            name="epoch",
            count=2,
            total_s=3.5,
            min_s=1.5,
            max_s=2.0,
            first_start=1.7e9,
            last_end=1.7e9 + 4,
            errors=1,
        ),
        Progress(fraction=1.0, message="done", final=True),
        UnknownPayload(type="Checkpoint", version=3, raw={"step": 10}),
    ],
)
def test_parse_inverts_build(payload: Any) -> None:
    ev = _event(payload, time=T0.astimezone(timezone(timedelta(hours=5))))
    parsed = parse_event(json.loads(json.dumps(ev)))
    assert isinstance(parsed, ParsedEvent), parsed
    assert parsed.payload == payload
    assert parsed.task == TASK
    assert parsed.sender == PodRef(POD.name, POD.uid, "team-a")
    assert (parsed.instance, parsed.seq) == ("inst-1", 7)
    assert parsed.event_time == T0 and parsed.event_time.tzinfo is UTC
    assert parsed.order_key == (T0, "inst-1", 7)
    assert parsed.regarding_kind == KIND and not parsed.warning
    assert parsed.name == ev["metadata"]["name"]


def test_lineage_event_regards_the_app() -> None:
    app = ObjectRef("apps/v1", "Deployment", "web", uid="1234")
    spawned = PodSpawned(pod_name="web-abc", pod_uid="9999", app="web", role="server", attempt=1)
    ev = _event(spawned, task=TaskRef("team-a", "web"), regarding=app)
    assert ev["regarding"]["kind"] == "Deployment"
    parsed = parse_event(ev)
    assert isinstance(parsed, ParsedEvent)
    assert parsed.task == TaskRef("team-a", "web") and parsed.regarding_kind == "Deployment"
    assert parsed.payload == spawned


def test_lineage_may_come_from_a_controller_in_another_namespace() -> None:
    # Controllers usually run in their own namespace; workloads report about their own task.
    controller = PodRef("launcher-0", "6f1c2a9e-0000-4000-8000-00000000abcd", "platform")
    spawned = PodSpawned(pod_name="web-abc", pod_uid="9999", app="web")
    ev = _event(spawned, task=TaskRef("team-a", "web"), pod=controller,
                regarding=ObjectRef("apps/v1", "Deployment", "web"))
    parsed = parse_event(ev)
    assert isinstance(parsed, ParsedEvent), parsed
    assert parsed.sender == controller and parsed.task.namespace == "team-a"
    assert _reason(_event(pod=controller)) == RejectReason.BAD_RELATED


def test_dedup_key_survives_either_carrier() -> None:
    ev = _event()
    del ev["metadata"]["annotations"]
    assert isinstance(parse_event(ev), ParsedEvent)
    ev = _event()
    ev["note"] = '{"v":1,"t":"LogLink","name":"wandb","url":"https://wandb.ai/r/1"}'
    parsed = parse_event(ev)
    assert isinstance(parsed, ParsedEvent) and (parsed.instance, parsed.seq) == ("inst-1", 7)
    del ev["metadata"]["annotations"]
    assert _reason(ev) == RejectReason.MISSING_FIELD


@given(st.text(max_size=400), st.from_regex(r"\A[a-z0-9]{1,64}\Z"), st.integers(0, 2**63 - 1))
def test_event_name_is_a_dns_subdomain(task: str, inst: str, seq: int) -> None:
    name = event_name(task, inst, seq)
    assert len(name) <= 253 and DNS.match(name)
    assert name == event_name(task, inst, seq)
    assert name != event_name(task, inst, seq + 1 if seq < 2**63 - 1 else 0)


def _reason(obj: Any) -> RejectReason:
    r = parse_event(obj)
    assert isinstance(r, Rejection), r
    return r.reason


def _mutate(path: str, value: Any, payload: Any = None) -> dict[str, Any]:
    ev = _event(payload)
    *parents, leaf = path.split(".")
    node = ev
    for p in parents:
        node = node[p]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return ev


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("reportingController", "kubelet", RejectReason.NOT_A_BUS_EVENT),
        ("apiVersion", "v1", RejectReason.NOT_A_BUS_EVENT),
        ("action", "Scrape", RejectReason.NOT_A_BUS_EVENT),
        ("metadata.name", _DELETE, RejectReason.MISSING_FIELD),
        ("metadata.name", "train-42.0000000000000000", RejectReason.BAD_NAME),
        ("eventTime", _DELETE, RejectReason.MISSING_FIELD),
        ("eventTime", "yesterday", RejectReason.BAD_TIME),
        ("note", _DELETE, RejectReason.MISSING_FIELD),
        ("note", "{nope", RejectReason.MALFORMED_JSON),
        ("note", "x" * 1100, RejectReason.NOTE_TOO_LARGE),
        ("reason", "DeckReady", RejectReason.INVALID_PAYLOAD),
        ("type", "Fatal", RejectReason.INVALID_PAYLOAD),
        ("regarding", _DELETE, RejectReason.BAD_REGARDING),
        ("regarding.kind", "Pod", RejectReason.BAD_REGARDING),
        ("regarding.namespace", "other-team", RejectReason.BAD_REGARDING),
        ("regarding.name", "train-42\x1b[2J", RejectReason.BAD_REGARDING),
        ("related", _DELETE, RejectReason.BAD_RELATED),
        ("related.kind", "Node", RejectReason.BAD_RELATED),
        ("related.uid", "", RejectReason.BAD_RELATED),
        ("related.namespace", "other-team", RejectReason.BAD_RELATED),
        ("related.name", POD.name + "\n", RejectReason.BAD_RELATED),
        ("related.uid", POD.uid + "\n", RejectReason.BAD_RELATED),
    ],
)
def test_bad_events_are_rejected_with_a_reason(path: str, value: Any, reason: RejectReason) -> None:
    assert _reason(_mutate(path, value)) == reason


def test_hostile_note_in_event_is_rejected() -> None:
    ev = _event()
    ev["note"] = ev["note"].replace("https://wandb.ai/r/1", "javascript:alert(1)")
    assert _reason(ev) == RejectReason.INVALID_PAYLOAD


def test_rejection_reasons_are_stable_snake_case() -> None:
    for r in RejectReason:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", r.value) and r.value == r.name.lower()


json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=5)
    ),
    max_leaves=30,
)
FIELDS = [
    "apiVersion",
    "kind",
    "metadata",
    "eventTime",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "type",
    "regarding",
    "related",
    "note",
]


@settings(max_examples=300)
@given(json_values)
def test_parse_event_is_total_on_arbitrary_json(obj: Any) -> None:
    r = parse_event(obj)
    assert isinstance(r, Rejection) and r.reason in set(RejectReason)


@settings(max_examples=500)
@given(st.data())
def test_parse_event_is_total_on_mutated_events(data: st.DataObject) -> None:
    ev = copy.deepcopy(_event())
    for _ in range(data.draw(st.integers(1, 4))):
        target = data.draw(st.sampled_from(FIELDS))
        if isinstance(ev.get(target), dict) and data.draw(st.booleans()):
            sub = ev[target]
            key = data.draw(st.sampled_from([*sub, "uid", "name"]))
            sub[key] = data.draw(json_values)
        else:
            ev[target] = data.draw(json_values)
    r = parse_event(ev)
    assert isinstance(r, ParsedEvent | Rejection)


def test_watch_line_added_bookmark_error() -> None:
    ev = _event()
    ev["metadata"]["resourceVersion"] = "1234"
    item = parse_watch_line(orjson.dumps({"type": "ADDED", "object": ev}))
    assert item.type == "ADDED" and item.resource_version == "1234"
    assert isinstance(item.result, ParsedEvent)
    bm = parse_watch_line(
        b'{"type":"BOOKMARK","object":{"kind":"Event","metadata":{"resourceVersion":"99"}}}'
    )
    assert bm.type == "BOOKMARK" and bm.resource_version == "99" and bm.result is None
    gone = parse_watch_line(
        b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",'
        b'"message":"too old resource version: 1 (5)\\u001b[2J"}}'
    )
    assert gone.type == "ERROR" and gone.code == 410 and gone.result is None
    assert "\x1b" not in gone.message
    other = parse_watch_line(orjson.dumps({"type": "ADDED", "object": {"kind": "Event"}}))
    assert other.type == "ADDED" and isinstance(other.result, Rejection)


@settings(max_examples=500)
@given(
    st.binary(max_size=3000)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda t, o: json.dumps({"type": t, "object": o}).encode(),
        st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "WHAT"])
        | json_values,
        json_values,
    )
)
def test_parse_watch_line_is_total(line: bytes) -> None:
    item = parse_watch_line(line)
    assert isinstance(item.type, str) and isinstance(item.resource_version, str)
    if item.type == "":
        assert isinstance(item.result, Rejection) and item.result.reason in set(RejectReason)
