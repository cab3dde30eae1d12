"""Neutralise text before it can reach a terminal or a web UI.

Strips ANSI/ECMA-48 escape sequences, C0/C1 controls, bidi overrides and lone surrogates.
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
# C0, DEL, C1, bidi embeddings/overrides/isolates ("Trojan Source"), lone surrogates.
_DROP = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_ANY_BAD = _DROP


def sanitize_text(s: str) -> str:
    """Return ``s`` with control characters and escape sequences removed.

    Newlines, tabs and other line/paragraph separators become a single space each.
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
    return _DROP.sub("", s)


def is_continuation(ch: str) -> bool:
    """True when ``ch`` belongs to the preceding character's grapheme (so never cut before it)."""
    return (
        unicodedata.combining(ch) != 0
        or ch in "\u200d\ufe0e\ufe0f"
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # skin-tone modifiers
        or "\U000e0020" <= ch <= "\U000e007f"  # emoji tag sequences
        or unicodedata.category(ch) in ("Mn", "Me", "Mc")
    )
