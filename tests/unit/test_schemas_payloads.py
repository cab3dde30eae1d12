"""Payload models: sanitising of text and vetting of URLs (hostile input is refused or defused)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

from tidings.schemas import (
    NAME_LIMIT,
    URL_LIMIT,
    DeckReady,
    LogLink,
    PodSpawned,
    Progress,
    SpanSummary,
    UnknownPayload,
    sanitize_text,
)

ESCAPES = [
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07",
    "\x1b]0;owned title\x1b\\",
    "\x1bP+q544e\x1b\\",
    "\x9b31mc1-csi",
    "\x9d0;c1 osc\x07",
    "bell\x07 back\x08space\x7f del",
    "\x1b(0line drawing\x1b(B",
    "\u202eevil\u202c bidi \u2066iso\u2069",
    "\x1b]52;c;Y2xpcGJvYXJk",  # unterminated OSC 52 (clipboard write)
]


@pytest.mark.parametrize("s", ESCAPES)
def test_sanitize_strips_escapes_and_controls(s: str) -> None:
    out = sanitize_text(s)
    assert "\x1b" not in out
    assert all(not (0 <= ord(c) < 32 or 0x7F <= ord(c) <= 0x9F) for c in out)
    assert not any(c in out for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def test_sanitize_keeps_words_apart_and_plain_text_intact() -> None:
    assert sanitize_text("a\nb\tc\r\nd") == "a b c  d"
    assert sanitize_text("\x1b[1mbold\x1b[0m text") == "bold text"
    plain = "épreuve — 進捗 👩‍💻 e\u0301"
    assert sanitize_text(plain) is plain


@given(st.text())
def test_sanitize_is_idempotent_and_clean(s: str) -> None:
    out = sanitize_text(s)
    assert sanitize_text(out) == out
    assert not any(0 <= ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in out)


def test_text_fields_are_sanitised() -> None:
    p = Progress(fraction=0.5, message="\x1b]8;;javascript:alert(1)\x07hi\x1b]8;;\x07\nthere")
    assert p.message == "hi there"
    # A name is a status key: kept whole or refused, never cleaned into another name.
    with pytest.raises(ValidationError, match="control characters"):
        LogLink(name="\x1b[2Jwandb\x00", url="https://wandb.ai/run/1")
    with pytest.raises(ValidationError, match="control characters"):
        SpanSummary(name="step\r\n", count=1, total_s=1, min_s=1, max_s=1, first_start=1,
                    last_end=2)


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "java\nscript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox",
        "https://user:pass@example.com/",
        "https://user@example.com/",
        "http://example.com\\@evil.com/",
        "ftp://example.com/file",
        "file:///etc/passwd",
        "//example.com/no-scheme",
        "/relative/path",
        "https://",
        "https://example.com:99999/",
        "https://exa mple.com/",
        'https://example.com/"onmouseover="x',
        "https://example.com/\x1b[31m",
        "https://example.com/\u202e",
        "https://" + "a" * URL_LIMIT + ".com/",
        "",
    ],
)
def test_log_link_rejects_hostile_urls(url: str) -> None:
    with pytest.raises(ValidationError):
        LogLink(name="x", url=url)


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)",
        "DATA:text/plain,hi",
        "vbscript:x",
        "s3://user:secret@bucket/key",
        "no-scheme",
        "gs://bucket/\x07bell",
    ],
)
def test_deck_rejects_hostile_uris(uri: str) -> None:
    with pytest.raises(ValidationError):
        DeckReady(name="d", uri=uri)


# An allow-list: schemes nobody thought of when writing a deny-list are refused too.
@pytest.mark.parametrize("uri", ["file:///tmp/d", "file://host/etc/passwd", "ms-msdt:/id x",
                                 "blob:https://example.com/uuid", "ms-msdt:id", "smb://h/s",
                                 "abfss://user:secret@acct.dfs.core.windows.net/p", "s3:///k",
                                 "search-ms:query=x", "jar:http://h/x!/"])
def test_deck_uris_are_an_allow_list_of_storage_schemes(uri: str) -> None:
    with pytest.raises(ValidationError):
        DeckReady(name="d", uri=uri)


@pytest.mark.parametrize(
    "uri", ["s3://bucket/report.html", "gs://b/k", "https://example.com/deck",
            "abfss://decks@acct.dfs.core.windows.net/run/7.html", "hdfs://nn:8020/d/x.html"]
)
def test_deck_accepts_storage_uris(uri: str) -> None:
    assert DeckReady(name="d", uri=uri).uri == uri


def test_urls_accept_normal_links_and_encode_non_ascii_paths() -> None:
    u = "https://wandb.ai/team/proj/runs/abc?workspace=user-x#chart"
    assert LogLink(name="w", url=u).url == u
    assert (
        LogLink(name="w", url="https://example.com/été").url == "https://example.com/%C3%A9t%C3%A9"
    )
    with pytest.raises(ValidationError):
        LogLink(name="w", url="https://exämple.com/")  # IDN hosts must arrive as punycode


def test_models_are_strict_frozen_and_closed() -> None:
    with pytest.raises(ValidationError):
        Progress(fraction="0.5")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Progress(fraction=1.5)
    with pytest.raises(ValidationError):
        Progress(fraction=float("nan"))
    with pytest.raises(ValidationError):
        Progress.model_validate({"fraction": 0.1, "extra": 1})
    with pytest.raises(ValidationError):
        SpanSummary(name="s", count=0, total_s=0, min_s=0, max_s=0, first_start=0, last_end=0)
    with pytest.raises(ValidationError):
        SpanSummary(name="s", count=1, total_s=1, min_s=2, max_s=1, first_start=0, last_end=0)
    with pytest.raises(ValidationError):
        PodSpawned(pod_name="Not_A_Pod", pod_uid="u", app="a")
    with pytest.raises(ValidationError):
        LogLink(name="\x1b[0m", url="https://example.com/")  # nothing left of the name
    p = Progress(fraction=0.1)
    with pytest.raises(ValidationError):
        p.fraction = 0.2  # type: ignore[misc]


def test_long_names_are_refused_whole_never_cut() -> None:
    """Two names that differ after the 63rd character must not collapse
    into one cut key; a name is kept whole up to NAME_LIMIT and refused beyond."""
    base = "x" * 63
    with pytest.raises(ValidationError, match="more than 64") as err:
        LogLink(name=base + "AAAAA", url="https://e.com/1")
    assert err.value.errors()[0]["type"] == "name_too_long"
    assert LogLink(name="n" * NAME_LIMIT, url="https://e.com/").name == "n" * NAME_LIMIT
    for model, extra in ((DeckReady, {"uri": "s3://b/k"}),
                         (PodSpawned, {"pod_name": "p", "pod_uid": "u"})):
        key = "app" if model is PodSpawned else "name"
        with pytest.raises(ValidationError, match="never cut"):
            model(**{key: "n" * (NAME_LIMIT + 1)}, **extra)
    with pytest.raises(ValidationError, match="leading or trailing whitespace"):
        LogLink(name="wandb ", url="https://e.com/")


def test_unknown_payload_is_sanitised_and_type_checked() -> None:
    u = UnknownPayload(type="Future", version=2, raw={"k\x1b[1m": ["\x07x", {"y": 1}]})
    assert u.raw == {"k": ["x", {"y": 1}]}
    with pytest.raises(ValidationError):
        UnknownPayload(type="bad type!", version=2, raw={})


def test_printable_text_is_never_changed_by_sanitize() -> None:
    """sanitize_text returns printable text untouched without running its regexes; that is
    only sound if no printable character is one the regexes strip or replace."""
    from tidings.schemas.wire import text

    printable = "".join(c for c in map(chr, range(0x110000)) if c.isprintable())
    for pattern in (text._ESC_SEQ, text._SPACE_LIKE, text._DROP, text._ANY_BAD):
        assert pattern.search(printable) is None, pattern.pattern
    assert "\u2028" not in printable and "\u2029" not in printable


# The 66 noncharacters: U+FDD0-U+FDEF and the last two code points of every plane.
NONCHARACTERS = [chr(c) for c in range(0xFDD0, 0xFDF0)] + [
    chr(plane | low) for plane in range(0, 0x110000, 0x10000) for low in (0xFFFE, 0xFFFF)]


def test_noncharacters_are_stripped() -> None:
    """XML 1.0 forbids U+FFFE and U+FFFF: a span named 'step\\uffff' made the timeline SVG
    unreadable. No noncharacter is text, so none survives."""
    assert len(NONCHARACTERS) == 66
    assert sanitize_text("step\uffff") == "step"
    assert sanitize_text("a" + "".join(NONCHARACTERS) + "b") == "ab"
    # A name is kept whole or refused: one holding a noncharacter is
    # refused, so it never reaches a file either.
    with pytest.raises(ValidationError, match="control characters"):
        SpanSummary(name="step\ufffe", count=1, total_s=1, min_s=1, max_s=1, first_start=1,
                    last_end=2)


@example("step\uffff\ufffe\ud800")
@given(st.text(st.characters(exclude_categories=())))
def test_sanitized_text_is_legal_xml(s: str) -> None:
    import xml.etree.ElementTree as ET
    from xml.sax.saxutils import escape

    out = sanitize_text(s)
    assert not any(c in out for c in NONCHARACTERS)
    ET.fromstring(f"<a>{escape(out)}</a>".encode())


def test_the_precomputed_format_characters_are_the_unicode_database_s() -> None:
    """schemas/wire/text.py keeps the Cf ranges instead of walking every code point at import:
    they must be exactly what the walk finds, for this Python's Unicode version (a version
    without a table walks at import, so it is right by construction)."""
    import unicodedata

    from tidings.schemas.wire import text

    assert text.format_ranges() == text.format_ranges_computed()
    if unicodedata.unidata_version in text._FORMAT_RANGES:
        assert text._FORMAT_RANGES[unicodedata.unidata_version] == \
            text.format_ranges_computed()
    # And the class built from the ranges removes every one of them, and nothing next to them.
    for a, b in text.format_ranges():
        for c in {a, b, (a + b) // 2}:
            assert text.sanitize_text(f"x{chr(c)}y") == "xy", hex(c)
        for c in (a - 1, b + 1):
            if unicodedata.category(chr(c)) in ("Lu", "Ll", "Lo", "Nd", "Mn", "So"):
                assert text.sanitize_text(f"x{chr(c)}y") == f"x{chr(c)}y", hex(c)
