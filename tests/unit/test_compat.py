"""The Python 3.10 stand-ins behave like the 3.11 originals they replace."""

from __future__ import annotations

import sys
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings._compat import StrEnum, fromisoformat_py310

needs_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="compares with 3.11's parser")


@st.composite
def rfc3339(draw: st.DrawFn) -> str:
    t = draw(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
    text = (f"{t.year:04d}-{t.month:02d}-{t.day:02d}{draw(st.sampled_from('Tt '))}"
            f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}")
    digits = draw(st.integers(0, 12))
    if digits:
        text += "." + "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=digits,
                                            max_size=digits)))
    zone = draw(st.sampled_from(["", "Z", "+00:00", "-07:30", "+0530", "+14:00"]))
    return text + zone


@needs_311
@given(rfc3339())
def test_the_310_parser_reads_rfc3339_as_311_does(text: str) -> None:
    assert fromisoformat_py310(text) == datetime.fromisoformat(text)


@needs_311
@pytest.mark.parametrize("text", ["x", "2026-13-01T00:00:00Z", "2026-11-30T25:00:00Z", ""])
def test_the_310_parser_refuses_what_311_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        datetime.fromisoformat(text)
    with pytest.raises(ValueError):
        fromisoformat_py310(text)


def test_str_enum_members_are_their_values() -> None:
    class Color(StrEnum):
        RED = "red"

    assert str(Color.RED) == "red" and f"{Color.RED:>4}" == " red" and Color.RED == "red"
