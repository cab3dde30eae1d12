"""The status's records (schemas/wire/record.py): one string per entry that reads back to exactly
the fields it was written from, a strict reader for anything else, and a layout the CRD
documents field by field."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tidings.schemas.status.encoder import NAMED_FIELDS
from tidings.schemas.wire import history
from tidings.schemas.wire.history import Series
from tidings.schemas.wire.record import (
    POD_FIELDS,
    RECORD_LIMIT,
    SPAN_FIELDS,
    WORKER_FIELDS,
    FieldType,
    pack,
    types_of,
    unpack,
    without,
)

LAYOUT: dict[str, FieldType] = types_of((
    ("n", "int"), ("x", "float"), ("flag", "bool"), ("key", "str"), ("note", "text")))
_SAFE = st.text(st.characters(codec="utf-8", exclude_characters=";\x00"), max_size=40)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "n": st.integers(-(2**63), 2**63 - 1),
    "x": st.floats(allow_nan=False, allow_infinity=False),
    "flag": st.booleans(),
    "key": _SAFE,
    "note": st.text(max_size=200),  # anything, "; " and "=" included
}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(sorted(LAYOUT)), unique=True, min_size=1))
    return {k: draw(VALUES[k]) for k in keys}


@given(records())
def test_a_record_reads_back_to_exactly_its_fields(fields: dict[str, Any]) -> None:
    text = pack(fields, LAYOUT)
    back = unpack(text, LAYOUT)
    assert back == fields
    assert all(type(back[k]) is type(v) for k, v in fields.items())  # 1.0 stays a float
    assert [k for k in back if k != "note"] == [k for k in fields if k != "note"]


@given(records(), st.sampled_from(["x", "note", "flag"]))
def test_without_gives_up_a_field_and_what_follows(fields: dict[str, Any], key: str) -> None:
    text = pack(fields, LAYOUT)
    cut = unpack(without(text, key), LAYOUT) if without(text, key) else {}
    order = [k for k in fields if k != "note"] + (["note"] if "note" in fields else [])
    if key not in fields or order[0] == key:  # (never the first: no record is cut to nothing)
        assert without(text, key) == text
    else:
        assert list(cut) == order[: order.index(key)]


@pytest.mark.parametrize("bad", [
    "", "n", "n=", "n=1; ", "n=1;x=2", "n=1; n=2", "color=red", "n=01", "n=1.0", "n=+1",
    "n=1e3", "x=nan", "x=inf", "x=Infinity", "x=1e999", "x=0x10", "x=1_0", "x= 1", "x=.5",
    "flag=True", "flag=1", "=1", "n=1; =2", "x=-", "n=99999999999999999999",
    "x=" + "1" * 40, "note=x" + "y" * RECORD_LIMIT])
def test_anything_but_a_record_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        unpack(bad, LAYOUT)


@pytest.mark.parametrize("bad", [None, 1, 1.5, True, ["n=1"], {"n": 1}, b"n=1"])
def test_a_value_that_is_no_string_is_no_record(bad: object) -> None:
    with pytest.raises(ValueError):
        unpack(bad, LAYOUT)


def test_a_field_that_could_hold_the_separator_is_refused_when_written() -> None:
    with pytest.raises(ValueError):
        pack({"key": "a; b"}, LAYOUT)
    with pytest.raises(ValueError):
        pack({"x": math.nan}, LAYOUT)
    with pytest.raises(ValueError):
        pack({"color": "red"}, LAYOUT)
    with pytest.raises(ValueError):
        types_of((("a", "text"), ("b", "text")))


@given(st.lists(st.tuples(st.integers(0, 2**53), st.floats(-1e300, 1e300)), max_size=64),
       st.integers(0, 20))
def test_a_curve_reads_back_as_the_same_series(points: list[tuple[int, float]],
                                                shift: int) -> None:
    s = history.merge(None, None, None, points=points)
    if s.points:
        s = Series(s.lo, s.hi, *history.sample(s.points, max(s.shift, shift)))
    entry = history.to_status(s)
    if not s.points:
        assert "history" not in entry
        return
    text = entry["history"]
    assert isinstance(text, str) and "; " not in text
    assert history.from_status(entry) == history.from_status(
        {**entry, "history": {"shift": s.shift, "steps": s.steps, "values": s.values}}) == s


@pytest.mark.parametrize("bad", ["", "x 1:2", "100 1:2", "1 1", "1 1:", "1 :2", "1 1:2,",
                                 "1 -1:2", "1 1:nan", "1 1:2;3", "1 1:2,2", "1 " + "1:2," * 200
                                 + "1:2"])
def test_a_curve_that_does_not_read_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        history.from_status({"history": bad})


def _status_schema() -> dict[str, Any]:
    crd = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "crd.yaml").read_text())
    schema: dict[str, Any] = (crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                              ["properties"]["status"]["properties"])
    return schema


@pytest.mark.parametrize(("where", "layout"), [
    *((f"{section} additionalProperties", types) for section, types in NAMED_FIELDS.items()),
    ("spans additionalProperties", SPAN_FIELDS),
    ("spanLanes additionalProperties additionalProperties",
     {k: v for k, v in SPAN_FIELDS.items() if k not in ("unlaned", "pod")}),
    ("workers items", WORKER_FIELDS), ("pods items", POD_FIELDS)])
def test_the_crd_describes_every_field_of_each_record(where: str,
                                                      layout: dict[str, FieldType]) -> None:
    section, *path = where.split()
    node = _status_schema()[section]
    for step in path:
        node = node[step]
    text = " ".join(node["description"].split())
    assert text.startswith("A record")
    for key in layout:
        assert re.search(rf"\b{key}\b[^.;:]*?\(", text), (where, key)
    # Entries of layout 2 (objects) must survive the CRD's upgrade: only the new section,
    # spanLanes, can be typed.
    if section != "spanLanes":
        assert node.get("x-kubernetes-preserve-unknown-fields") is True and "type" not in node
