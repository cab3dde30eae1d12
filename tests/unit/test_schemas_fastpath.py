"""The watcher's fast parse against the reference: the same WatchItem for every line, good or
bad (so every rejection keeps its reason and message), and byte-identical folded statuses."""

from __future__ import annotations

import copy
import subprocess
import sys
from datetime import timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit import reference_fold
from tests.unit.test_schemas_fold import PODS, T0, TASK, payloads
from tidings.schemas import (
    DeckReady,
    LogLink,
    ParsedEvent,
    Payload,
    Progress,
    Rejection,
    SpanSummaries,
    SpanSummary,
    TaskRef,
    TaskState,
    UnknownPayload,
    WatchItem,
    Window,
    build_event,
    fold_many,
    new_state,
    parse_watch_line,
)
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire import fastpath
from tidings.schemas.wire.fastpath import fast_watch_line
from tidings.schemas.wire.payloads import span_row

# Payloads the fast path handles, with the text and number shapes that make it hesitate.
texts = st.sampled_from(["a", "train_step", " padded ", "x" * 80, "naïve", "emoji 👩‍💻", "a\u200bb",
                         "tab\there", "\x1b[31mred", ""])
floats = st.sampled_from([0.0, 0.5, 1.0, 0.123456789, 1e-9, -0.0, 2.0])
fast_payloads: st.SearchStrategy[Payload] = st.one_of(
    payloads,
    st.builds(LogLink, name=st.sampled_from(["w", "grafana", "naïve"]),
              url=st.sampled_from(["https://x.y/a?b=c", "http://h:8080/p", "https://x.y/päth"])),
    st.builds(DeckReady, name=st.just("report"),
              uri=st.sampled_from(["s3://b/k.html", "abfss://c@acct.dfs/x", "hdfs://nn/p"])),
    st.builds(Progress, fraction=floats.filter(lambda f: 0 <= f <= 1),
              message=st.sampled_from(["", "naïve", "tab\there", "x" * 300]),
              final=st.just(True), failed=st.booleans(),
              workers=st.integers(0, 3)),
    st.builds(lambda n, base, k: SpanSummaries(base_us=base, spans=[
        span_row(f"{n}{j}", 2, 1.0, 0.5, 0.5, base / 1e6, base / 1e6 + 2, j % 2, base)
        for j in range(k)]), st.sampled_from(["s", "eval", "naïve", "with space"]),
        st.sampled_from([0, 1_700_000_000_000_000]),
        st.integers(1, 3)),
    st.builds(lambda msg, base, k, m, curve: Window.model_validate({
        "progress": {"fraction": 0.25, "message": msg, "workers": 2},
        "metrics": [[f"m{j}", 0.5 * j, None if j % 2 else j, *curve] for j in range(m)],
        "base_us": base, "spans": [
            span_row(f"s{j}", 2, 1.0, 0.5, 0.5, base / 1e6, base / 1e6 + 2, 0, base)
            for j in range(k)]}),
        st.sampled_from(["", "naïve", "step 3/10"]), st.sampled_from([0, 1_700_000_000_000_000]),
        st.integers(0, 2), st.integers(0, 2),
        # A metric's extremes and sample points, as many as the row takes.
        st.sampled_from([[], [None, None, []], [-1.5, 7.0, [0, 2.0, 8, 1.0]],
                         [None, 9.25, [3, 0.5]], [-0.0, None]])),
    st.builds(SpanSummary, name=st.sampled_from(["s", "eval"]), count=st.just(1),
              total_s=st.just(0.5), min_s=st.just(0.5), max_s=st.just(0.5),
              first_start=st.just(1.7e9), last_end=st.sampled_from([1.7e9 + 0.5, 1.7e9 + 1])),
)

# What a mutation writes: every JSON type, limits, invisible and non-ASCII text.
values = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2**63),
    st.sampled_from([0.5, 1e308, -1.0, 0.123456789, 1 / 3, 7.0]),
    texts, st.sampled_from(["x" * 300, "Event", "Pod", "v1", "TaskFeedback", "Normal",
                            "Warning", "tidings.dev/v1alpha1", "team-a", "train-42", "other"]),
    st.builds(list), st.builds(dict), st.builds(lambda: {"kind": "Pod"}),
    st.sampled_from(["https://é.example/x", "javascript:x", "s3://b/k", "https://u:p@h/"]),
)
TOP = ["apiVersion", "kind", "reportingController", "action", "eventTime", "type", "reason",
       "note", "metadata", "regarding", "related", "series"]
NESTED = {"metadata": ["name", "namespace", "resourceVersion", "creationTimestamp",
                       "annotations"],
          "regarding": ["kind", "apiVersion", "name", "namespace", "uid"],
          "related": ["kind", "apiVersion", "name", "namespace", "uid"]}
NOTE_KEYS = ["v", "t", "i", "s", "name", "url", "uri", "count", "total_s", "min_s", "max_s",
             "first_start", "last_end", "errors", "fraction", "message", "final", "failed",
             "workers", "base_us", "spans", "progress", "metrics", "extra"]
DELETE = object()


def like(old: Any) -> st.SearchStrategy[Any]:
    """Values of ``old``'s own JSON type."""
    if isinstance(old, bool):
        return st.booleans()
    if isinstance(old, int):
        return st.integers(-1, 2**64 - 1) | st.sampled_from([0, 1, 2**53, 2**53 + 1, 10_001])
    if isinstance(old, float):
        return st.floats(0, 1) | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
            [0.0, -0.0, 1.0, 0.123456789, 1 / 3, 1.00004, 9.0e9, 1.0e11 + 1])
    if isinstance(old, str):
        return texts | st.text(max_size=70) | st.just(old + " ") | st.just(old.upper())
    return values


def _raw(payload: Payload, seq: int, pod: int, warning: bool) -> dict[str, Any]:
    ev = build_event(task=TASK, pod=PODS[pod], payload=payload, instance=f"i-{pod}", seq=seq,
                     time=T0 + timedelta(seconds=seq), warning=warning)
    ev["metadata"].update({
        "uid": "0a0b0c0d-0000-4e0f-8a0b-000000000000", "resourceVersion": str(1000 + seq),
        "creationTimestamp": ev["eventTime"][:19] + "Z",
        "managedFields": [{"manager": "tidings-emitter", "fieldsV1": {"f:note": {}}}]})
    out: dict[str, Any] = orjson.loads(orjson.dumps(ev))
    return out


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is DELETE:
        obj.pop(key, None)
    else:
        obj[key] = value


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    ev = _raw(draw(fast_payloads), draw(st.integers(0, 50)), draw(st.integers(0, 2)),
              draw(st.booleans()))
    wtype: Any = draw(st.sampled_from(["ADDED"] * 6 + ["MODIFIED", "DELETED", "BOOKMARK",
                                                        "ERROR", "WHAT", 5]))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["top", "nested", "note", "note", "note", "annotation"]))
        value = draw(st.one_of(values, st.just(DELETE)))
        if where == "top":
            _set(ev, draw(st.sampled_from(TOP)), value)
        elif where == "nested":
            part = draw(st.sampled_from(sorted(NESTED)))
            if isinstance(ev.get(part), dict):
                _set(ev[part], draw(st.sampled_from(NESTED[part])), value)
        elif where == "note" and isinstance(ev.get("note"), str):
            try:
                note = orjson.loads(ev["note"])
            except orjson.JSONDecodeError:
                continue
            if isinstance(note, dict):
                # Mostly a key the note has, with a value of its own type (the edge cases the
                # fast path must judge alike), sometimes anything.
                key = draw(st.sampled_from(sorted(note) * 3 + NOTE_KEYS))
                _set(note, key, draw(like(note.get(key))) if draw(st.booleans()) else value)
                ev["note"] = orjson.dumps(note).decode()
        elif where == "annotation" and isinstance(ev.get("metadata"), dict):
            ann = ev["metadata"].setdefault("annotations", {})
            if isinstance(ann, dict):
                _set(ann, draw(st.sampled_from(["tidings.dev/sender-uid", "tidings.dev/seq",
                                                "tidings.dev/instance"])), value)
    line = orjson.dumps({"type": wtype, "object": ev})
    # Mostly whole lines: a broken line is judged before any field (one check, few cases).
    cut = draw(st.sampled_from(["none"] * 16 + ["truncate", "garbage", "utf8", "not-object"]))
    if cut == "truncate":
        line = line[: draw(st.integers(0, len(line) - 1))]
    elif cut == "garbage":
        line += b" x"
    elif cut == "utf8":
        at = line.find(b"tidings-emitter")
        line = line[:at] + b"\xff" + line[at:] if at >= 0 else line
    elif cut == "not-object":
        line = b"[" + line + b"]"
    return line


def assert_same(ref: WatchItem, fast: WatchItem) -> None:
    assert fast == ref
    a, b = ref.result, fast.result
    if isinstance(a, Rejection):
        assert isinstance(b, Rejection) and (b.reason, b.message) == (a.reason, a.message)
    if isinstance(a, ParsedEvent):
        assert isinstance(b, ParsedEvent)
        pa, pb = a.payload, b.payload
        assert type(pb) is type(pa)
        # Same values, same Python types (an int is not a float) and the same fields set.
        assert orjson.dumps(pb.model_dump()) == orjson.dumps(pa.model_dump())
        assert pb.model_fields_set == pa.model_fields_set
        assert pb.model_dump_json() == pa.model_dump_json()
        if not isinstance(pa, UnknownPayload):  # its raw dict makes it unhashable
            assert hash(pb) == hash(pa)


@given(lines())
@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_fast_parse_gives_the_reference_item_for_any_line(line: bytes) -> None:
    assert_same(parse_watch_line(line), fast_watch_line(line))


@given(st.lists(lines(), max_size=40), st.randoms(use_true_random=False))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_the_watchers_path_folds_to_the_references_statuses(stream: list[bytes],
                                                           rnd: Any) -> None:
    """The watcher's path (fast parse, one batch fold per task per read) against the
    reference (parse_watch_line, the per-event reference fold): byte-identical statuses, and
    the same rejections (reason and message) in the same order."""
    def reference() -> tuple[dict[TaskRef, bytes], list[tuple[str, str]]]:
        states: dict[TaskRef, TaskState] = {}
        refused = []
        for line in stream:
            ev = parse_watch_line(line).result
            if isinstance(ev, ParsedEvent):
                states[ev.task] = reference_fold.fold(states.get(ev.task) or new_state(ev.task),
                                                      ev)
            elif isinstance(ev, Rejection):
                refused.append((ev.reason.value, ev.message))
        return {t: orjson.dumps(to_status(s)) for t, s in states.items()}, refused

    def watcher() -> tuple[dict[TaskRef, bytes], list[tuple[str, str]]]:
        states: dict[TaskRef, TaskState] = {}
        refused = []
        i = 0
        while i < len(stream):  # socket reads of 1 to 8 lines
            read = stream[i : i + rnd.randint(1, 8)]
            i += len(read)
            groups: dict[TaskRef, list[ParsedEvent]] = {}
            for line in read:
                ev = fast_watch_line(line).result
                if isinstance(ev, ParsedEvent):
                    groups.setdefault(ev.task, []).append(ev)
                elif isinstance(ev, Rejection):
                    refused.append((ev.reason.value, ev.message))
            for task, evs in groups.items():
                states[task] = fold_many(states.get(task) or new_state(task), evs)
        return {t: orjson.dumps(to_status(s)) for t, s in states.items()}, refused

    assert watcher() == reference()


# Each value at or just past a bound the payload models check, or of another JSON type.
BOUNDS: list[Any] = [
    -1, 0, 1, 2, 10_000, 10_001, 2**31, 2**53, 2**53 + 1, 2**63, 10**17, 10**17 + 1,
    -1e-9, -0.0, 0.0, 0.5, 1.0, 1.00004, 1.00006, 9.0e9, 9.000001e9, 1.0e11, 1.0000001e11,
    True, False, None, "", " ", "x" * 300, "a\u200bb", "https://x.y/", "s3://b/k",
    "javascript:alert(1)", "https://h:65535/p?q#f", "https://h:65536/", "https://h:0/",
    "https://u@h/", "https://h:/", "HTTPS://h/", "https://h/ x", "https://h/%zz@x", "https://-/",
    "https://[::1]/", "http://h.", "s3://b", "s3:///k", "gs://b/k", "abfss://c@a/x",
    "hdfs://nn:8020/p", "https://h/" + "x" * 2100, "ftp://h/", "https:h", [], {},
    ["s", 1, 1, 1, 1, 0, 1, 0],
    [["s", 1, 1, 1, 1, 0, 1, 0]],
    [["s", 2, 1000, 500, 500, 0, 2_000_000, 3]], [["s", 1, 1, 1, 1, -1, 1, 0]],
]
BASES: list[Payload] = [
    LogLink(name="w", url="https://x.y/"), DeckReady(name="d", uri="s3://b/k"),
    Progress(fraction=0.5, message="m", final=True, workers=2),
    SpanSummary(name="s", count=2, total_s=1.0, min_s=0.5, max_s=0.5, first_start=1.7e9,
                last_end=1.7e9 + 2, errors=1),
    SpanSummaries(base_us=1_700_000_000_000_000, spans=[
        span_row("s", 2, 1.0, 0.5, 0.5, 1.7e9, 1.7e9 + 2, 0, 1_700_000_000_000_000)]),
    Window.model_validate({"progress": {"fraction": 0.5, "message": "m"},
                           "metrics": [["loss", 0.5, 3], ["lr", 1e-4, None]],
                           "base_us": 1_700_000_000_000_000, "spans": [
        span_row("s", 2, 1.0, 0.5, 0.5, 1.7e9, 1.7e9 + 2, 0, 1_700_000_000_000_000)]}),
]


def test_every_note_field_at_its_bounds_is_judged_alike() -> None:
    """Every key of each payload the fast path reads (and the envelope's), set to every
    boundary value in turn, or removed: the reference's verdict, exactly."""
    n = 0
    for payload in BASES:
        ev = _raw(payload, 1, 0, False)
        note = orjson.loads(ev["note"])
        for key in [*note, "errors", "message", "final", "failed", "workers", "extra"]:
            for value in [*BOUNDS, DELETE]:
                changed = dict(note)
                _set(changed, key, value)
                e = copy.deepcopy(ev)
                e["note"] = orjson.dumps(changed).decode()
                line = orjson.dumps({"type": "ADDED", "object": e})
                assert_same(parse_watch_line(line), fast_watch_line(line))
                n += 1
    assert n > 1000


# Values for the event's own fields: the right ones elsewhere, near misses, other types.
EVENT_VALUES: list[Any] = [
    *BOUNDS[BOUNDS.index(True):], 1, 0.5, "Event", "Pod", "v1", "Normal", "Warning", "Report",
    "tidings",
    "events.k8s.io/v1", "tidings.dev/v1alpha1", "TaskFeedback", "team-a", "team-b", "train-42",
    "worker-0", "uid-0", "LogLink", "Progress", "2026-11-30T03:00:01.000000Z",
    "2026-11-30T03:00:01Z", "2026-11-30T03:00:01+01:00", "2026-13-30T03:00:01Z",
    {"kind": "Pod"}, {"tidings.dev/sender-uid": "uid-0"}, {"tidings.dev/sender-uid": 5},
]


def test_every_event_field_is_judged_alike() -> None:
    """Every field the contract reads, top-level or nested, set to each value in turn (or
    removed), on events of each payload type: the reference's verdict, exactly."""
    for payload in BASES:
        ev = _raw(payload, 1, 0, False)
        places: list[tuple[str | None, str]] = [(None, k) for k in TOP]
        places += [(part, k) for part, keys in NESTED.items() for k in keys]
        places += [("metadata", "annotations")]
        for part, key in places:
            for value in [*EVENT_VALUES, DELETE]:
                e = copy.deepcopy(ev)
                _set(e if part is None else e[part], key, value)
                line = orjson.dumps({"type": "ADDED", "object": e})
                assert_same(parse_watch_line(line), fast_watch_line(line))


# A Window's metric row beside a good one: a metric's extremes and points
# at and past their bounds, of other JSON types, in other shapes.
METRIC_ROWS: list[Any] = [
    ["loss", 0.5, 3, 0.25], ["loss", 0.5, 3, 0.25, 1.0], ["loss", 0.5, 3, None, 1.0],
    ["loss", 0.5, 3, None, None, []], ["loss", 0.5, 3, 0.25, 1.0, [0, 1.0, 2, 0.75]],
    ["loss", 0.5, None, 0.25, 0.75, [0, 0.5]], ["loss", 0.5, 3, -0.0, 0.5, [0, -0.0]],
    ["loss", 0.5, 3, 0.5, 0.5], ["loss", 0.5, 3, 0.75], ["loss", 0.5, 3, None, 0.25],
    ["loss", 0.5, 3, 0, 1], ["loss", 0.5, 3, True], ["loss", 0.5, 3, "x"],
    ["loss", 0.5, 3, [0.1]], ["loss", 0.5, 3, -1e308, 1e308, [0, 1e308, 2**53, -1e308]],
    ["loss", 0.5, 3, None, None, [1, 2]], ["loss", 0.5, 3, None, None, [1]],
    ["loss", 0.5, 3, None, None, [-1, 0.5]], ["loss", 0.5, 3, None, None, [2**53 + 1, 0.5]],
    ["loss", 0.5, 3, None, None, [1.5, 0.5]], ["loss", 0.5, 3, None, None, [1, True]],
    ["loss", 0.5, 3, None, None, [1, "x"]], ["loss", 0.5, 3, None, None, [[0, 0.5]]],
    ["loss", 0.5, 3, None, None, [0, 0.5] * 32], ["loss", 0.5, 3, None, None, [0, 0.5] * 33],
    ["loss", 0.5, 3, None, None, None], ["loss", 0.5, 3, None, None, {}],
    ["loss", 0.5, 3, None, None, [0, 0.5], 7], ["loss", 0.5], ["lr", 0.5, 3, 0.25],
    ["loss", 1, 3, 0.25], ["loss", 0.5, 3.0, 0.25], ["naïve", 0.5, 3, 0.25], ["", 0.5, 3, 0.1],
    # a non-finite latest value beside the finite run's extremes and points
    ["loss", "NaN", 3, 0.25, 1.0, [0, 1.0]], ["loss", "-Infinity", 3, 0.25],
    ["loss", "Infinity", None, None, 9.0], ["loss", "NaN", 3, "NaN"], ["loss", "nan", 3, 0.25],
]


def test_every_metric_row_shape_is_judged_alike() -> None:
    ev = _raw(BASES[-1], 1, 0, False)
    note = orjson.loads(ev["note"])
    for row in METRIC_ROWS:
        for rows in ([row], [["lr", 1e-4, 3], row]):
            e = copy.deepcopy(ev)
            e["note"] = orjson.dumps({**note, "v": 2, "metrics": rows}).decode()
            line = orjson.dumps({"type": "ADDED", "object": e})
            assert_same(parse_watch_line(line), fast_watch_line(line))


def test_the_common_line_takes_the_fast_path() -> None:
    # Guards the speed claim: a plain event must not quietly fall back to the reference.
    for payload in (LogLink(name="w", url="https://x.y/"), DeckReady(name="d", uri="s3://b/k"),
                    Progress(fraction=0.5, message="m"),
                    SpanSummaries(base_us=1_700_000_000_000_000, spans=[
                        span_row("s", 2, 1.0, 0.5, 0.5, 1.7e9, 1.7e9 + 2, 0,
                                 1_700_000_000_000_000)]),
                    SpanSummary(name="s", count=2, total_s=1.0, min_s=0.5, max_s=0.5,
                                first_start=1.7e9, last_end=1.7e9 + 2),
                    BASES[-1], Window(progress=Progress(fraction=0.5)),
                    Window.model_validate({"metrics": [["loss", 0.5, 3, 0.25, 1.0, [0, 1.0]],
                                                       ["lr", 1e-4, 3, None, 2e-4]]})):
        line = orjson.dumps({"type": "ADDED", "object": _raw(payload, 1, 0, False)})
        item = fastpath._fast(line)
        assert item is not None, payload
        assert_same(parse_watch_line(line), item)


def test_a_str_line_and_other_buffers_agree_too() -> None:
    line = orjson.dumps({"type": "ADDED", "object": _raw(LogLink(name="w", url="https://x/"),
                                                         2, 1, True)})
    assert_same(parse_watch_line(line.decode()), fast_watch_line(line.decode()))
    assert_same(parse_watch_line(bytearray(line)), fast_watch_line(bytearray(line)))


def test_the_sender_cache_stays_bounded_and_keeps_no_long_strings() -> None:
    fastpath._REFS.clear()
    ev = _raw(LogLink(name="w", url="https://x.y/"), 3, 0, False)
    for i in range(fastpath._REFS_MAX + 10):
        e = copy.deepcopy(ev)
        e["related"]["uid"] = f"uid-{i}"
        fast_watch_line(orjson.dumps({"type": "ADDED", "object": e}))
    assert 0 < len(fastpath._REFS) <= fastpath._REFS_MAX
    fastpath._REFS.clear()
    e = copy.deepcopy(ev)
    e["related"]["name"] = "p" * 10_000
    line = orjson.dumps({"type": "ADDED", "object": e})
    assert_same(parse_watch_line(line), fast_watch_line(line))
    assert fastpath._REFS == {}


def test_the_one_known_difference_numbers_beyond_float_range_in_unread_fields() -> None:
    # The API server cannot write such a number (Go's encoder has no infinities); orjson
    # refuses the whole line, msgspec skips the field it never reads. Pinned so a change in
    # either library shows up here.
    ev = _raw(LogLink(name="w", url="https://x.y/"), 4, 0, False)
    line = orjson.dumps({"type": "ADDED", "object": ev}).replace(
        b'"managedFields":[', b'"managedFields":[1e999,')
    ref, fast = parse_watch_line(line), fast_watch_line(line)
    assert isinstance(ref.result, Rejection) and ref.result.reason == "malformed_json"
    assert isinstance(fast.result, ParsedEvent)


def test_schemas_and_the_emitter_import_without_msgspec() -> None:
    # msgspec comes with tidings[watcher] only: a workload's install never has it.
    code = ("import sys; sys.modules['msgspec'] = None\n"
            "import tidings.schemas, tidings.schemas.engine.state, tidings.emitter\n"
            "assert 'tidings.schemas.wire.fastpath' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
