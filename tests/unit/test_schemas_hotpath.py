"""Parse fast paths: the task and pod caches stay bounded and never change a verdict."""

from __future__ import annotations

import orjson

from tests.unit.test_schemas_fold import PODS, T0, TASK
from tidings.schemas import (
    LogLink,
    ParsedEvent,
    PodRef,
    Rejection,
    RejectReason,
    build_event,
    parse_event,
)
from tidings.schemas.wire import event as event_mod


def _raw(pod: PodRef, seq: int) -> dict[str, object]:
    ev = build_event(
        task=TASK,
        pod=pod,
        payload=LogLink(name="w", url="https://x.y/"),
        instance="i",
        seq=seq,
        time=T0,
    )
    out: dict[str, object] = orjson.loads(orjson.dumps(ev))
    return out


def test_huge_names_are_refused_without_entering_the_caches() -> None:
    ok = parse_event(_raw(PODS[0], 1))
    assert isinstance(ok, ParsedEvent)
    senders, subjects = event_mod._sender.cache_info(), event_mod._subject.cache_info()
    raw = _raw(PODS[0], 2)
    raw["related"] = {**raw["related"], "name": "a" * 100_000}  # type: ignore[dict-item]
    res = parse_event(raw)
    assert isinstance(res, Rejection) and res.reason is RejectReason.BAD_RELATED
    raw = _raw(PODS[0], 3)
    raw["regarding"] = {**raw["regarding"], "name": "t" * 100_000}  # type: ignore[dict-item]
    res = parse_event(raw)
    assert isinstance(res, Rejection) and res.reason is RejectReason.BAD_REGARDING
    assert event_mod._sender.cache_info().currsize == senders.currsize
    assert event_mod._subject.cache_info().currsize == subjects.currsize


def test_cached_refs_are_interned_and_bad_pods_stay_bad() -> None:
    a, b = parse_event(_raw(PODS[1], 1)), parse_event(_raw(PODS[1], 2))
    assert isinstance(a, ParsedEvent) and isinstance(b, ParsedEvent)
    assert a.task is b.task and a.sender is b.sender
    bad = PodRef("Not_A_Pod", PODS[1].uid)
    for _ in range(2):  # the second verdict comes from the cache
        res = parse_event(_raw(bad, 3))
        assert isinstance(res, Rejection) and res.reason is RejectReason.BAD_RELATED
