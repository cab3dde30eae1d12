"""The fold: order-insensitive, idempotent, bounded, total; status round-trips.

Equality used by the permutation/duplication property: the whole ``to_status()`` dict, except
``counters.duplicates``, which by definition counts re-deliveries (applications minus distinct
events) and so legitimately depends on how many duplicates a delivery contained. A separate
assertion checks that it equals exactly that number.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from datetime import datetime, timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings._compat import UTC
from tidings.schemas import (
    NAME_LIMIT,
    URL_LIMIT,
    DeckReady,
    Limits,
    LogLink,
    Metric,
    Metrics,
    ParsedEvent,
    Payload,
    PodRef,
    PodSpawned,
    Progress,
    Quiet,
    SpanSummary,
    TaskRef,
    TaskState,
    UnknownPayload,
    VersionVector,
    build_event,
    fold,
    fold_all,
    fold_lineage,
    new_state,
    parse_event,
)
from tidings.schemas.status.decoder import decode_status
from tidings.schemas.status.encoder import (
    BUDGET_DROP_ORDER,
    DETAIL_BUDGET,
    STATUS_BUDGET,
    to_status,
)

TASK = TaskRef("team-a", "train-42")
T0 = datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC)
PODS = [PodRef(f"worker-{i}", f"uid-{i}") for i in range(5)]
SMALL = Limits(links=3, decks=2, spans=4, pods=3, unknown_types=2, span_lanes=3)


def make_event(
    payload: Payload,
    instance: str,
    seq: int,
    t: datetime,
    pod: PodRef = PODS[0],
    warning: bool = False,
    task: TaskRef = TASK,
) -> ParsedEvent:
    raw = build_event(
        task=task, pod=pod, payload=payload, instance=instance, seq=seq, time=t, warning=warning
    )
    ev = parse_event(orjson.loads(orjson.dumps(raw)))
    assert isinstance(ev, ParsedEvent), ev
    return ev


names = st.sampled_from(["a", "b", "c", "d", "e", "f"])
small_floats = st.sampled_from([0.0, 0.1, 0.25, 1.0 / 3, 2.5, 7.0, 1e-9])
payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(LogLink, name=names, url=st.sampled_from(["https://x.y/1", "https://x.y/2"])),
    st.builds(DeckReady, name=names, uri=st.sampled_from(["s3://b/1", "gs://b/2"])),
    st.builds(Metric, name=names, value=st.sampled_from([-1.5, 0.0, 0.25, 1e300]),
              step=st.none() | st.integers(0, 5)),
    st.builds(lambda a, b: Metrics(metrics=[["m-" + a, 1.0, None], ["m-" + a + b, -2.0, 3]]),
              names, names),
    st.builds(
        lambda n, c, a, b, s, e: SpanSummary(  # consistent aggregates of c spans
            name=n,
            count=c,
            total_s=max(a, b) + (max(a, b) if c == 1 else min(a, b)) * (c - 1),
            min_s=max(a, b) if c == 1 else min(a, b),
            max_s=max(a, b),
            first_start=1.7e9 + s,
            last_end=1.7e9 + s + 10,
            errors=min(e, c),
        ),
        names,
        st.integers(1, 5),
        small_floats,
        small_floats,
        small_floats,
        st.integers(0, 2),
    ),
    st.builds(
        Progress, fraction=st.sampled_from([0.0, 0.5, 1.0]), message=names, final=st.booleans()
    ),
    st.builds(PodSpawned, pod_name=st.sampled_from(["p-1", "p-2"]), pod_uid=names, app=names),
    st.builds(Quiet, seconds=st.sampled_from([0.5, 120.0, 86_400.0]), reason=names),
    st.builds(UnknownPayload, type=st.sampled_from(["Foo", "Bar", "Baz"]), version=st.just(2)),
)


@st.composite
def event_sets(draw: st.DrawFn, instances: int = 3, created: bool = False
               ) -> list[ParsedEvent]:
    """Distinct events of ``instances`` emitter instances; with ``created``, each has its
    API server creation time (what compaction goes by), seconds apart."""
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from([f"i-{chr(97 + k)}" for k in range(instances)]),
                      st.integers(0, 12)),
            unique=True,
            max_size=30,
        )
    )
    out = []
    for inst, seq in keys:
        t = T0 + timedelta(seconds=draw(st.integers(0, 3)))  # ties exercise the tiebreak
        ev = make_event(
            draw(payloads),
            inst,
            seq,
            t,
            pod=draw(st.sampled_from(PODS)),
            warning=draw(st.booleans()),
        )
        out.append(dataclasses.replace(ev, created=t) if created else ev)
    return out


def without_duplicates(status: dict[str, Any]) -> dict[str, Any]:
    s = json.loads(json.dumps(status))
    s.get("counters", {}).pop("duplicates", None)
    if s.get("counters") == {}:
        del s["counters"]
    return s


# Order never matters, at any size: more emitter instances (6) than the dedup keeps (2), so
# compaction raises the watermark while a batch is folded.
PAST_THE_CAP = Limits(links=3, decks=2, spans=4, pods=3, unknown_types=2, span_lanes=3,
                      max_instances=2)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.one_of(st.tuples(event_sets(), st.sampled_from([SMALL, Limits()])),
                 st.tuples(event_sets(instances=6, created=True), st.just(PAST_THE_CAP))),
       st.randoms(use_true_random=False))
def test_any_permutation_and_duplication_folds_to_the_same_state(
    drawn: tuple[list[ParsedEvent], Limits], rnd: random.Random
) -> None:
    events, limits = drawn
    base = fold_all(TASK, events, limits)
    shuffled = events[:]
    rnd.shuffle(shuffled)
    assert to_status(fold_all(TASK, shuffled, limits)) == to_status(base)

    dups = [rnd.choice(events) for _ in range(rnd.randint(0, 20))] if events else []
    delivered = shuffled + dups
    rnd.shuffle(delivered)
    again = fold_all(TASK, delivered, limits)
    assert without_duplicates(to_status(again)) == without_duplicates(to_status(base))
    assert again.counters["duplicates"] == len(dups)
    assert again.counters["events_applied"] == len(events)
    assert again.counters["late_skipped"] == 0  # compaction past the cap skipped none
    assert again.counters["fold_errors"] == 0


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event_sets(), st.randoms(use_true_random=False))
def test_resume_from_status_equals_folding_everything(
    events: list[ParsedEvent], rnd: random.Random
) -> None:
    """A restarted watcher (state rebuilt from .status) that sees a relist with overlap ends
    in the same state as one that never stopped."""
    cut = rnd.randint(0, len(events))
    first = fold_all(TASK, events[:cut], SMALL)
    status = json.loads(json.dumps(to_status(first)))
    restored = decode_status(TASK, status, SMALL)
    assert restored == first and to_status(restored) == to_status(first)
    relist = events[:]
    rnd.shuffle(relist)
    resumed = restored
    for ev in relist:
        resumed = fold(resumed, ev)
    full = fold_all(TASK, events, SMALL)
    assert without_duplicates(to_status(resumed)) == without_duplicates(to_status(full))


def test_fold_is_idempotent_and_pure() -> None:
    ev = make_event(LogLink(name="w", url="https://x.y/"), "i", 1, T0)
    s0 = new_state(TASK)
    before = to_status(s0)
    s1 = fold(s0, ev)
    assert to_status(s0) == before  # the input state is untouched
    s2 = fold(s1, ev)
    assert without_duplicates(to_status(s2)) == without_duplicates(to_status(s1))
    assert s2.counters["duplicates"] == 1 and s1.links == {"w": "https://x.y/"}


def test_last_writer_wins_by_time_then_instance_then_seq() -> None:
    a = make_event(LogLink(name="w", url="https://x.y/old"), "i-a", 5, T0)
    b = make_event(LogLink(name="w", url="https://x.y/new"), "i-a", 1, T0 + timedelta(seconds=1))
    c = make_event(LogLink(name="w", url="https://x.y/tie"), "i-b", 0, T0 + timedelta(seconds=1))
    for order in ([a, b, c], [c, b, a], [b, c, a]):
        assert fold_all(TASK, order).links == {"w": "https://x.y/tie"}


def test_terminal_progress_wins_and_completes() -> None:
    done = make_event(Progress(fraction=1.0, message="done", final=True), "i", 1, T0)
    late = make_event(Progress(fraction=0.9, message="stale"), "i", 2, T0 + timedelta(seconds=5))
    for order in ([done, late], [late, done]):
        s = fold_all(TASK, order)
        assert s.completed and s.progress is not None and s.progress.message == "done"
        status = to_status(s)
        assert status["phase"] == "Succeeded" and status["progress"] == {
            "percent": 100, "percentText": "100%", "message": "done"}
        completed = {c["type"]: c for c in status["conditions"]}["Completed"]
        assert completed["status"] == "True" and completed["reason"] == "Succeeded"
        assert completed["lastTransitionTime"] == "2026-11-30T03:00:00Z"  # the final's time


def test_spans_aggregate_exactly() -> None:
    evs = [
        make_event(
            SpanSummary(
                name="step",
                count=c,
                total_s=t,
                min_s=lo,
                max_s=hi,
                first_start=1.7e9 + i,
                last_end=1.7e9 + i + 1,
                errors=e,
            ),
            "i",
            i,
            T0,
        )
        for i, (c, t, lo, hi, e) in enumerate(
            [(1, 0.1, 0.1, 0.1, 0), (3, 0.7, 0.1, 0.4, 1), (2, 0.2, 0.05, 0.15, 0)]
        )
    ]
    span = fold_all(TASK, evs).spans["step"]
    assert (span.count, span.errors, span.events) == (6, 1, 3)
    assert span.total_ns == 1_000_000_000 and span.total_s == 1.0
    assert (span.min_s, span.max_s, span.first_start, span.last_end) == (
        0.05,
        0.4,
        1.7e9,
        1.7e9 + 3,
    )


def test_caps_keep_smallest_names_and_count_the_rest_in_any_order() -> None:
    evs = [
        make_event(LogLink(name=f"link-{i:03d}", url=f"https://x.y/{i}"), "i", i, T0)
        for i in range(100)
    ] + [make_event(LogLink(name="link-099", url="https://x.y/again"), "i", 100, T0)]
    for _ in range(5):
        random.shuffle(evs)
        s = fold_all(TASK, evs)
        assert sorted(s.links) == [f"link-{i:03d}" for i in range(64)]
        assert s.counters["links_capped"] == 37  # 36 names beyond the cap, one of them twice


def test_wrong_task_is_not_applied() -> None:
    ev = make_event(LogLink(name="w", url="https://x.y/"), "i", 1, T0, task=TaskRef("x", "y"))
    s = fold(new_state(TASK), ev)
    assert s.links == {} and s.counters["wrong_task"] == 1 and s.counters["events_applied"] == 0


def test_from_status_is_tolerant() -> None:
    fresh = to_status(new_state(TASK))
    for garbage in [
        None,
        1,
        "x",
        [],
        {},
        {"schemaVersion": "one"},
        {"links": 5},
        {"schemaVersion": 2, "applied": "i=5-1"},
        {"schemaVersion": 2, "applied": {"i": [[1, 5]]}},
        {"schemaVersion": 2, "links": {"w": {"url": "https://x.y/", "at": [1, 2, 3]}}},
        {"schemaVersion": 1, "schema_version": 1},  # the old snake_case layout
        {"schemaVersion": 99},
    ]:
        assert to_status(decode_status(TASK, garbage)) == fresh


def _fill_to_caps() -> TaskState:
    heavy = "😀" * (NAME_LIMIT - 3)  # 4 UTF-8 bytes, 12 bytes as a JSON \\u escape pair
    # Names are kept whole (never cut), so beside the longest URL only an ASCII name fits
    # a note: the heaviest link or deck that can exist.
    wide = "n" * (NAME_LIMIT - 2)
    url = "https://e.example/" + "&" * (URL_LIMIT - len("https://e.example/"))
    uri = "s3://bucket/" + "&" * (URL_LIMIT - len("s3://bucket/"))
    lim = Limits()
    evs: list[ParsedEvent] = []
    seq = 0

    def add(p: Payload, pod: PodRef = PODS[0]) -> None:
        nonlocal seq
        evs.append(make_event(p, "i" * 64, 2**62 + seq * 2, T0, pod=pod))  # gaps: worst VV too
        seq += 1

    for i in range(lim.links):
        add(LogLink(name=f"{i:02d}" + wide, url=url))
    for i in range(lim.decks):
        add(DeckReady(name=f"{i:02d}" + wide, uri=uri))
    for i in range(lim.metrics):
        add(Metric(name=f"{i:02d}" + heavy, value=-2.2250738585072014e-308, step=2**53))
    for i in range(lim.spans):
        add(
            SpanSummary(
                name=f"{i:03d}" + heavy,
                count=2**53,
                total_s=9e9,
                min_s=1e-9 / 3,
                max_s=9e9,
                first_start=1e11 / 3,
                last_end=1e11,
                errors=2**53,
            )
        )
    for i in range(lim.pods):
        add(Progress(fraction=1 / 3, message=heavy * 20), PodRef(f"{i:03d}" + "p" * 250, "u" * 64))
    for i in range(lim.unknown_types):
        add(UnknownPayload(type=f"T{i:02d}" + "x" * 120, version=2))
    return fold_all(TASK, evs)


def test_status_stays_far_below_the_object_limit_at_every_cap() -> None:
    s = _fill_to_caps()
    full_status = to_status(s)
    full = len(orjson.dumps(full_status))
    status = to_status(s, budget=STATUS_BUDGET)
    # Over budget at every cap: detail went in the fixed order, and was counted.
    dropped = status["budgetDropped"]
    assert full > DETAIL_BUDGET and list(dropped) == [
        k for k in BUDGET_DROP_ORDER if k in dropped]
    *whole, last = dropped
    assert all(k not in status for k in whole if k != "workerMessages")  # earlier: all gone
    assert dropped["pods"] == 128 and len(status.get(last, ())) + dropped[last] == len(
        to_status(s)[last])
    assert len(status["workers"]) == 64 and status["applied"] == s.applied.to_text()
    assert status["phase"] == full_status["phase"] and "progress" in status
    utf8 = len(orjson.dumps(status))
    ascii_escaped = len(json.dumps(status))
    # The API server's encoder also escapes & < > as \\u0026 (6 bytes): the adversarial bound.
    html_escaped = ascii_escaped + 5 * sum(json.dumps(status).count(c) for c in "&<>")
    print(
        f"\nstatus at caps: {utf8} B utf-8, {ascii_escaped} B ascii-escaped, "
        f"{html_escaped} B html-escaped (worst case)"
    )
    # Stored size is UTF-8 (plus HTML escapes); the client's ASCII-escaped wire form is larger.
    assert utf8 <= DETAIL_BUDGET <= STATUS_BUDGET  # (a small roster: all of it detail)
    assert ascii_escaped < 512 * 1024
    assert html_escaped < 1024 * 1024  # below 1.5 MB even with every URL made of '&'


def _deep_size(o: Any, seen: set[int] | None = None) -> int:
    seen = set() if seen is None else seen
    if id(o) in seen:
        return 0
    seen.add(id(o))
    size = sys.getsizeof(o)
    if isinstance(o, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in o.items())
    elif isinstance(o, list | tuple | set | frozenset):
        size += sum(_deep_size(x, seen) for x in o)
    elif hasattr(o, "__slots__"):
        size += sum(_deep_size(getattr(o, a), seen) for a in o.__slots__ if hasattr(o, a))
    return size


def test_version_vector_is_bounded_for_contiguous_sequences() -> None:
    instances = [f"emitter-{i}" for i in range(4)]
    evs = [
        make_event(
            SpanSummary(
                name=f"s{seq % 8}",
                count=1,
                total_s=0.5,
                min_s=0.5,
                max_s=0.5,
                first_start=1.7e9 + seq,
                last_end=1.7e9 + seq + 1,
            ),
            inst,
            seq,
            T0 + timedelta(milliseconds=seq),
            pod=PODS[k],
        )
        for k, inst in enumerate(instances)
        for seq in range(2500)
    ]
    rnd = random.Random(7)
    rnd.shuffle(evs)
    s = fold_all(TASK, evs + evs[:500])
    assert s.counters["events_applied"] == 10_000 and s.counters["duplicates"] == 500
    assert len(s.applied) == 4  # one range per instance, however the events arrived
    assert to_status(s)["applied"] == " ".join(f"{i}=0-2499" for i in instances)
    status_bytes = len(orjson.dumps(to_status(s)))
    vv_bytes = len(orjson.dumps(s.applied.to_json()))
    mem = _deep_size(s)
    print(
        f"\n10,000 events / 4 instances: status {status_bytes} B, version vector {vv_bytes} B,"
        f" in-memory state ~{mem} B"
    )
    assert status_bytes < 8 * 1024 and vv_bytes < 256 and mem < 64 * 1024


def test_version_vector_ranges() -> None:
    vv = VersionVector()
    for seq in [5, 1, 3, 2, 9, 4, 7]:
        vv = vv.add("i", seq)
    assert vv.ranges("i") == ((1, 5), (7, 7), (9, 9))
    vv = vv.add("i", 8)
    assert vv.ranges("i") == ((1, 5), (7, 9))
    assert vv.contains("i", 4) and not vv.contains("i", 6) and not vv.contains("j", 1)
    assert vv.add("i", 4) is vv
    assert VersionVector.from_json(vv.to_json()) == vv
    assert VersionVector.from_json({"i": [[3, 4], [1, 2], [4, 9]]}).ranges("i") == ((1, 9),)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 40))))
def test_version_vector_matches_a_set(pairs: list[tuple[str, int]]) -> None:
    vv = VersionVector()
    for inst, seq in pairs:
        vv = vv.add(inst, seq)
    ref = set(pairs)
    assert all(vv.contains(i, s) == ((i, s) in ref) for i in "abc" for s in range(-1, 42))
    assert vv.count() == len(ref)
    for inst in "abc":
        rs = vv.ranges(inst)
        assert all(rs[k][1] + 1 < rs[k + 1][0] for k in range(len(rs) - 1))  # disjoint, merged


def test_lineage_dedups_by_uid_and_sorts() -> None:
    app_task = TaskRef("team-a", "web")
    spawn = [
        make_event(
            PodSpawned(pod_name="web-b", pod_uid="u2", app="web"), "c", 1, T0, task=app_task
        ),
        make_event(
            PodSpawned(pod_name="web-a", pod_uid="u1", app="web", role="server"),
            "c",
            2,
            T0,
            task=app_task,
        ),
        make_event(
            PodSpawned(pod_name="web-a", pod_uid="u1", app="web", role="server"),
            "c",
            3,
            T0 + timedelta(seconds=9),
            task=app_task,
        ),
        make_event(
            PodSpawned(pod_name="web-c", pod_uid="u3", app="web", attempt=1),
            "c",
            4,
            T0 - timedelta(seconds=1),
            task=app_task,
        ),
        make_event(LogLink(name="w", url="https://x.y/"), "c", 5, T0),
    ]
    for _ in range(4):
        random.shuffle(spawn)
        lin = fold_lineage(spawn)
        assert [(e.pod.name, e.pod.uid) for e in lin] == [
            ("web-c", "u3"),
            ("web-a", "u1"),
            ("web-b", "u2"),
        ]
        assert lin[1].event_time == T0 and lin[1].role == "server" and lin[0].attempt == 1
