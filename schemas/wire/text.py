"""Neutralise text before it can reach a terminal or a web UI.

Strips ANSI/ECMA-48 escape sequences, C0/C1 controls, bidi controls, the
66 Unicode noncharacters (U+FDD0-U+FDEF and U+xFFFE/U+xFFFF of every plane; XML forbids
U+FFFE/U+FFFF, so one would make an SVG or XML file unreadable) and every other invisible
format character (Unicode category Cf: zero-width space and joiners,
U+2060-U+2064, U+FEFF, U+061C, U+00AD, tag characters U+E0000-U+E007F, ...), so two strings
that differ only by what cannot be seen never look identical on a screen.

Text that was not valid UTF-8 is made valid first (``valid_text``): each lone surrogate, what
Python makes of an invalid byte in ``argv`` or a file read with ``errors="surrogateescape"``,
becomes U+FFFD, as the API server's own JSON decoder does with invalid UTF-8.
"""

from __future__ import annotations

import re
import unicodedata

# OSC/DCS/SOS/PM/APC strings run to a terminator; an unterminated one swallows the rest,
# exactly as a terminal would, so nothing after it can smuggle a payload through.
_ESC_SEQ = re.compile(
    r"""
    \x1b[\]PX^_] .*? (?:\x07|\x1b\\|\x9c|$)     # 7-bit OSC/DCS/SOS/PM/APC
  | [\x9d\x90\x98\x9e\x9f] .*? (?:\x07|\x1b\\|\x9c|$)   # 8-bit forms of the same
  | \x1b\[ [0-?]* [ -/]* [@-~]?                 # 7-bit CSI
  | \x9b [0-?]* [ -/]* [@-~]?                   # 8-bit CSI
  | \x1b [ -/]* [0-~]?                          # any other escape (nF, Fp, Fe, Fs)
    """,
    re.VERBOSE | re.DOTALL,
)
# Whitespace controls become a space so words stay apart; the rest simply disappear.
_SPACE_LIKE = re.compile(r"[\t\n\r\x0b\x0c\x85\u2028\u2029]")
# C0, DEL, C1, bidi embeddings/overrides/isolates ("Trojan Source") and
# the format characters (category Cf) of this Python's Unicode database, so the set is
# complete for its Unicode version, not a hand-kept list. Walking all 1.1 million code points
# at import costs a quarter of a second, so the ranges of the Unicode versions we know are
# kept here (tests/unit check them against the walk); any other version is walked once.
# The zero-width joiner is kept only inside an emoji sequence (👩‍💻), where it is visible as
# the glyph it builds; anywhere else it is as invisible as the rest.
_FORMAT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "14.0.0": ((0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F),
               (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200C),
               (0x200E, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F),
               (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
               (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
               (0xE0001, 0xE0001), (0xE0020, 0xE007F)),
}


def format_ranges_computed() -> tuple[tuple[int, int], ...]:
    """The category Cf code points above U+007F except U+200D, as inclusive ranges, from this
    Python's Unicode database (the walk the table above saves)."""
    ranges: list[tuple[int, int]] = []
    for c in range(0x80, 0x110000):
        if unicodedata.category(chr(c)) == "Cf" and c != 0x200D:
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1] = (ranges[-1][0], c)
            else:
                ranges.append((c, c))
    return tuple(ranges)


def format_ranges() -> tuple[tuple[int, int], ...]:
    known = _FORMAT_RANGES.get(unicodedata.unidata_version)
    return known if known is not None else format_ranges_computed()


_FORMAT = "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "")
                  for a, b in format_ranges())
_EMOJI = "\U0001f000-\U0001faff\u2600-\u27bf"
_LONE_ZWJ = f"(?<![{_EMOJI}\ufe0f])\u200d|\u200d(?![{_EMOJI}])"
# Noncharacters are never text ("permanently reserved for internal use"), and XML 1.0 refuses
# U+FFFE and U+FFFF outright.
_NONCHARACTERS = "\ufdd0-\ufdef" + "".join(
    re.escape(chr(plane | 0xFFFE)) + re.escape(chr(plane | 0xFFFF))
    for plane in range(0, 0x110000, 0x10000))
_DROP = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_NONCHARACTERS}{_FORMAT}]|{_LONE_ZWJ}")
_SURROGATE = re.compile("[\\ud800-\\udfff]")
_ANY_BAD = re.compile(f"{_DROP.pattern}|{_SURROGATE.pattern}")
REPLACEMENT = "\ufffd"


def valid_text(s: str) -> str:
    """``s`` as valid Unicode text: each lone surrogate (U+D800-U+DFFF, never a character:
    UTF-8 cannot encode it, so no JSON encoder takes it) becomes U+FFFD, one per surrogate,
    the rest unchanged. The one rule for text that was not valid UTF-8, at every entry
    (the emitter's calls, every text field of the payloads, ``sanitize_text``): made
    valid, never refused, so a fact is not lost for a stray byte."""
    if s.isascii():  # the fast path: almost all text, one C loop
        return s
    return _SURROGATE.sub(REPLACEMENT, s)


def sanitize_text(s: str) -> str:
    """Return ``s`` with control characters and escape sequences removed.

    Newlines, tabs and other line/paragraph separators become a single space each, and each
    lone surrogate U+FFFD (``valid_text``).
    Idempotent: ``sanitize_text(sanitize_text(s)) == sanitize_text(s)``.
    """
    # Fast paths: the overwhelming majority of text has nothing to strip. Every character
    # stripped or replaced below is a control, format, separator or surrogate character,
    # none of which is printable, so printable text (one C loop, no regex) is returned as is.
    if s.isprintable():
        return s
    if _ANY_BAD.search(s) is None and "\u2028" not in s and "\u2029" not in s:
        return s
    s = _ESC_SEQ.sub("", s)
    s = _SPACE_LIKE.sub(" ", s)
    return valid_text(_DROP.sub("", s))


_INVISIBLE = re.compile(f"[{_FORMAT}]|{_LONE_ZWJ}")


def has_invisible(s: str) -> bool:
    """True when ``s`` holds an invisible format character (category Cf: zero-width, bidi,
    tags, ...). Controls are not counted here: ``sanitize_text`` turns them into spaces."""
    return not s.isprintable() and _INVISIBLE.search(s) is not None


def is_continuation(ch: str) -> bool:
    """True when ``ch`` belongs to the preceding character's grapheme (so never cut before it)."""
    return (
        unicodedata.combining(ch) != 0
        or ch in "\u200d\ufe0e\ufe0f"
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # skin-tone modifiers
        or "\U000e0020" <= ch <= "\U000e007f"  # emoji tag sequences
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )


ELLIPSIS = "…"


def cut_text(s: str, limit: int) -> str:
    """Shorten ``s`` to at most ``limit`` characters, ending in ``…`` when cut.

    The cut never separates a base character from its combining marks or joiners.
    """
    if len(s) <= limit:
        return s
    if limit <= 0:
        return ""
    k = limit - 1
    # s[k] is the first dropped character; a joiner glues it to what precedes it.
    while k > 0 and (is_continuation(s[k]) or s[k - 1] == "\u200d"):
        k -= 1
    return s[:k] + ELLIPSIS
