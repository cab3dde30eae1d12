"""The note codec: every note fits 1024 bytes, round-trips when unshrunk, and decoding is total."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.schemas import (
    NAME_LIMIT,
    NOTE_LIMIT,
    SCHEMA_VERSION,
    URL_LIMIT,
    DeckReady,
    LogLink,
    Metric,
    Metrics,
    Payload,
    PodSpawned,
    Progress,
    Rejection,
    RejectReason,
    SpanSummary,
    UnknownPayload,
    decode_note,
    encode_note,
    encode_note_bytes,
)
from tidings.schemas.wire.note import NoteTooLarge
from tidings.schemas.wire.payloads import name_error

# Text that is worst-case for a byte budget: 3- and 4-byte characters, combining marks,
# zero-width joiners, and characters that double in size when JSON-escaped.
HEAVY = st.sampled_from(
    ["進", "😀", "e\u0301", "\u0301", "👩\u200d💻", '"', "\\", "a", " ", "\x1b[1m"]
)
heavy_text = st.lists(HEAVY, max_size=3000).map("".join) | st.text(max_size=3000)
instances = st.from_regex(r"\A[a-z0-9][a-z0-9.:-]{0,63}\Z")
seqs = st.integers(0, 2**63 - 1)
url_path = st.text(alphabet="abcdefghij0123456789/-_.~%", max_size=URL_LIMIT)
web_urls = url_path.map(lambda p: ("https://e.example/" + p)[:URL_LIMIT])
finite = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


def _span(name: str, count: int, a: float, b: float, t0: float, dt: float, errors: int) -> Payload:
    # Consistent aggregates of `count` spans (SpanSummary refuses any other).
    lo, hi = sorted((a, b))
    if count == 1 or lo * (count - 1) + hi > 9e9:
        lo = hi if count == 1 else 0.0
    return SpanSummary(
        name=name,
        count=count,
        total_s=hi + lo * (count - 1),
        min_s=lo,
        max_s=hi,
        first_start=t0,
        last_end=t0 + max(dt, hi),
        errors=min(errors, count),
    )


def _valid(build: st.SearchStrategy[Payload]) -> st.SearchStrategy[Payload]:
    return build


# Names are kept whole or refused (never cut or cleaned): valid ones are at most NAME_LIMIT
# characters of visible text, heavy ones included.
HEAVY_NAME = st.sampled_from(["進", "😀", "e\u0301", "👩\u200d💻", '"', "\\", "a", " "])
names = (st.lists(HEAVY_NAME, min_size=1, max_size=NAME_LIMIT).map("".join)
         | st.text(min_size=1, max_size=NAME_LIMIT)).map(
    lambda s: s[:NAME_LIMIT]).filter(lambda s: name_error(s) is None)
payloads: st.SearchStrategy[Payload] = st.one_of(
    st.builds(LogLink, name=names, url=web_urls),
    st.builds(DeckReady, name=names, uri=url_path.map(lambda p: ("s3://bucket/" + p)[:URL_LIMIT])),
    st.builds(
        _span,
        names,
        st.integers(1, 2**53),
        finite,
        finite,
        st.floats(0, 2e9),
        finite,
        st.integers(0, 2**53),
    ),
    st.builds(Progress, fraction=st.floats(0, 1), message=heavy_text, final=st.booleans()),
    st.builds(
        PodSpawned,
        pod_name=st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,200}[a-z0-9])?\Z"),
        pod_uid=st.uuids().map(str),
        app=names,
        role=st.just("") | names,  # roles group rows too
        attempt=st.integers(0, 2**31),
    ),
    st.builds(
        UnknownPayload,
        type=st.from_regex(r"\A[A-Z][A-Za-z0-9]{0,127}\Z"),
        version=st.integers(2, 2**31),
        raw=st.dictionaries(
            st.text(max_size=20), heavy_text | st.integers(-(2**63), 2**63), max_size=4
        ),
    ),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(payloads, st.one_of(st.none(), st.tuples(instances, seqs)))
def test_notes_always_fit_and_always_decode(p: Payload, key: tuple[str, int] | None) -> None:
    kw = {} if key is None else {"instance": key[0], "seq": key[1]}
    try:
        note = encode_note(p, **kw)  # type: ignore[arg-type]
    except NoteTooLarge:
        # Only a name beside a URL can leave no room, and only when the whole note is over.
        assert isinstance(p, LogLink | DeckReady) and len(_unshrunk(p)) > NOTE_LIMIT - 100
        return
    assert len(note.encode()) <= NOTE_LIMIT
    assert encode_note_bytes(p, **kw) == note.encode()  # type: ignore[arg-type]
    back = decode_note(note)
    assert not isinstance(back, Rejection), back
    assert type(back) is type(p)
    if len(orjson.dumps(p.model_dump())) < 600:  # certainly unshrunk
        assert back == p


def _unshrunk(p: Payload) -> bytes:
    if isinstance(p, UnknownPayload):
        return orjson.dumps({"v": p.version, "t": p.type, **p.raw})
    return orjson.dumps({"v": 1, "t": p.TYPE, **p.model_dump(exclude_defaults=True)})


@settings(max_examples=400)
@given(payloads)
def test_roundtrip_exact_whenever_it_fits_unshrunk(p: Payload) -> None:
    plain = _unshrunk(p)
    if len(plain) <= NOTE_LIMIT:
        note = encode_note(p)
        assert note.encode() == plain
        assert decode_note(note) == p
    elif isinstance(p, LogLink | DeckReady):  # nothing of theirs is cut: refused whole
        with pytest.raises(NoteTooLarge):
            encode_note(p)
    else:
        assert len(encode_note(p).encode()) <= NOTE_LIMIT


def test_ten_kb_multibyte_message_is_shrunk_not_rejected() -> None:
    for chunk in ["😀", "進", "e\u0301", '"', "\\", "👩\u200d💻"]:
        msg = chunk * (10_000 // len(chunk.encode()))
        note = encode_note(Progress(fraction=0.3, message=msg, final=True), instance="i", seq=7)
        assert len(note.encode()) <= NOTE_LIMIT
        back = decode_note(note)
        assert isinstance(back, Progress) and back.final and back.fraction == 0.3
        assert back.message.endswith("…") and msg.startswith(back.message[:-1])
        assert len(note.encode()) > NOTE_LIMIT - 16  # shrinking keeps as much as fits
        assert not back.message[:-1].endswith("\u200d")


def test_longest_url_fits_with_a_full_ascii_name_and_a_heavier_name_is_refused_whole() -> None:
    url = "https://e.example/" + "x" * (URL_LIMIT - len("https://e.example/"))
    p = LogLink(name="n" * NAME_LIMIT, url=url)
    note = encode_note(p, instance="i" * 64, seq=2**63 - 1)
    assert len(note.encode()) <= NOTE_LIMIT
    back = decode_note(note)
    assert back == p  # name and URL whole
    with pytest.raises(NoteTooLarge, match="does not fit in a 1024-byte note"):
        encode_note(LogLink(name='"' * 64, url=url), instance="i" * 64, seq=2**63 - 1)


def test_unknown_type_and_newer_version_are_kept() -> None:
    u = decode_note('{"v":1,"t":"Checkpoint","step":3}')
    assert u == UnknownPayload(type="Checkpoint", version=1, raw={"step": 3})
    newer = decode_note(f'{{"v":{SCHEMA_VERSION + 1},"t":"LogLink","name":"a",'
                        '"url":"https://x.y/","color":"red"}')
    assert isinstance(newer, UnknownPayload) and newer.type == "LogLink"
    assert newer.version == SCHEMA_VERSION + 1


def test_a_note_carries_the_oldest_version_that_reads_it() -> None:
    """Only a metric report with extremes or points needs version 2: a watcher of version 1
    keeps such a note as an unknown payload (counted), and reads every other note as before."""
    plain = Metrics(metrics=[Metric(name="loss", value=0.5, step=3)])
    assert orjson.loads(encode_note(plain))["v"] == 1
    assert orjson.loads(encode_note(LogLink(name="a", url="https://x.y/")))["v"] == 1
    rich = Metrics(metrics=[Metric(name="loss", value=0.5, step=3),
                            Metric(name="lr", value=0.1, step=3, max=0.2)])
    note = encode_note(rich)
    assert orjson.loads(note)["v"] == 2 and decode_note(note) == rich
    old_reader = orjson.loads(note)
    old_reader["v"] = SCHEMA_VERSION + 1  # what a version-1 reader sees in a version-2 note
    assert isinstance(decode_note(orjson.dumps(old_reader)), UnknownPayload)


def _reason(note: object) -> RejectReason:
    r = decode_note(note)  # type: ignore[arg-type]
    assert isinstance(r, Rejection), r
    return r.reason


def test_bad_notes_are_rejected_with_reasons() -> None:
    assert _reason("{") == RejectReason.MALFORMED_JSON
    assert _reason(b"\xff\xfe") == RejectReason.MALFORMED_JSON
    assert _reason("[1,2]") == RejectReason.INVALID_PAYLOAD
    assert _reason('{"t":"LogLink"}') == RejectReason.MISSING_FIELD
    assert _reason('{"v":true,"t":"LogLink"}') == RejectReason.INVALID_PAYLOAD
    assert _reason('{"v":1,"t":"LogLink","name":"a","url":"javascript:alert(1)"}') == (
        RejectReason.INVALID_PAYLOAD
    )
    assert _reason('{"v":1,"t":"LogLink","name":"a","url":"https://u:p@x.y/"}') == (
        RejectReason.INVALID_PAYLOAD
    )
    assert _reason('{"v":1,"t":"Progress","fraction":0.1,"extra":1}') == (
        RejectReason.INVALID_PAYLOAD
    )
    assert _reason('{"v":1,"t":"Progress","fraction":"0.1"}') == RejectReason.INVALID_PAYLOAD
    assert _reason('{"v":1,"t":"bad type"}') == RejectReason.INVALID_PAYLOAD
    assert _reason('{"v":1,"t":"Progress","fraction":0.1,"i":"","s":1}') == (
        RejectReason.INVALID_PAYLOAD
    )
    assert _reason("x" * 2000) == RejectReason.NOTE_TOO_LARGE
    assert _reason("進" * 400) == RejectReason.NOTE_TOO_LARGE
    assert _reason(42) == RejectReason.INVALID_PAYLOAD


def test_rejection_messages_do_not_echo_hostile_input() -> None:
    r = decode_note('{"v":1,"t":"LogLink","name":"a","url":"javascript:\\u001b[31mx"}')
    assert isinstance(r, Rejection) and "\x1b" not in r.message and "javascript" not in r.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)
note_like = st.fixed_dictionaries(
    {"v": st.integers(-2, 3) | json_values, "t": st.sampled_from(["LogLink", "Progress", "X"])},
    optional={"name": json_values, "url": json_values, "fraction": json_values, "s": json_values},
)


@settings(max_examples=500)
@given(
    st.binary(max_size=1200)
    | st.text(max_size=1200)
    | json_values.map(json.dumps)
    | note_like.map(json.dumps)
)
def test_decode_never_raises(note: bytes | str) -> None:
    r = decode_note(note)
    assert isinstance(
        r, Rejection | LogLink | DeckReady | SpanSummary | Progress | PodSpawned | UnknownPayload
    )
    if isinstance(r, Rejection):
        assert r.reason in set(RejectReason)
