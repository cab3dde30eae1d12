"""A status entry as one string, a *record*: ``key=value`` fields joined by ``"; "`` (pure).

Why: the API server's CPU per status write follows the JSON values it validates against the
CRD's schema, an object and each of its fields costing far more than the bytes of a string
(bench/bench_status_shape.py), so an entry of many numbers (a metric with its curve, a span's
aggregate, a worker's progress) is written as one string, still readable field by field in
``kubectl get -o yaml``::

    value=0.4543; step=300; at=2026-09-21T14:13:19.999994Z b5b5...ce54 32; events=31

A record holds the fields its entry had as a JSON object (the same keys, in the same order),
each value as text: an integer in decimal, a number as the shortest text that reads back to
the same float (``repr``), ``true``/``false``, a string as it is. No value holds ``"; "``
except the record's *text* field (a URL, a message), which is always last and runs to the end
of the string, whatever it holds. ``pack`` writes one, ``unpack`` is the one reader, strict:
every key known and once, every value of its key's type, else ValueError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

# A value's type in a record: "text" is the free string that ends the record.
FieldType = Literal["int", "float", "bool", "str", "text"]
Value = int | float | bool | str

SEP: Final = "; "
# The longest record read: a metric with 32 points of its curve is ~1 kB, a link's URL 2 kB.
RECORD_LIMIT: Final = 8192
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,18})\Z")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_KEY = re.compile(r"[a-zA-Z]{1,32}\Z")


def value_text(v: Value) -> str:
    """A field's value as a record writes it (a float must be finite)."""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is float:
        if not math.isfinite(v):
            raise ValueError("a record's number must be finite")
        return repr(v)
    return str(v)


def pack(fields: Mapping[str, Value], types: Mapping[str, FieldType]) -> str:
    """The record of ``fields`` (in their order, the text field last), each key one of
    ``types`` (an encoder's layout)."""
    parts = []
    text = ""
    for k, v in fields.items():
        kind = types.get(k)
        if kind is None:
            raise ValueError(f"{k} is no field of this record")
        if kind == "text":
            text = f"{k}={v}"
            continue
        s = value_text(v)
        if SEP in s:  # (an encoder bug: only the text field may hold it)
            raise ValueError(f"{k} holds {SEP!r}")
        parts.append(f"{k}={s}")
    if text:
        parts.append(text)
    return SEP.join(parts)


def unpack(record: object, types: Mapping[str, FieldType]) -> dict[str, Value]:
    """The fields of ``record`` (a string ``pack`` wrote), each of its type in ``types``;
    raises ValueError for anything else (a key not in ``types`` or repeated, a value that is
    not of its type)."""
    if not isinstance(record, str) or not record or len(record) > RECORD_LIMIT:
        raise ValueError("not a record")
    out: dict[str, Value] = {}
    rest = record
    while rest:
        key, eq, after = rest.partition("=")
        kind = types.get(key)
        if not eq or kind is None or key in out:
            raise ValueError(f"bad record field {key[:32]!r}")
        if kind == "text":
            value, rest = after, ""
        else:
            value, sep, rest = after.partition(SEP)
            if sep and not rest:
                raise ValueError("bad record end")
        out[key] = _value(value, kind)
    return out


def _value(text: str, kind: FieldType) -> Value:
    if kind == "int":
        return integer(text)
    if kind == "float":
        return number(text)
    if kind == "bool":
        if text not in ("true", "false"):
            raise ValueError("bad record flag")
        return text == "true"
    return text


def integer(text: str) -> int:
    """An integer as a record writes it (decimal, at most 19 digits); else ValueError."""
    if _INT.match(text) is None:
        raise ValueError("bad record integer")
    return int(text)


def number(text: str) -> float:
    """A finite number as a record writes it (JSON's syntax); else ValueError."""
    v = float(text) if len(text) <= 32 and _NUMBER.match(text) else math.nan
    if not math.isfinite(v):
        raise ValueError("bad record number")
    return v


def without(record: str, key: str) -> str:
    """``record`` without its field ``key`` and the fields after it (the budget gives up an
    entry's last field: a metric's history, a worker's message)."""
    head, sep, _ = record.partition(f"{SEP}{key}=")
    return head if sep else record


def types_of(keys: Iterable[tuple[str, FieldType]]) -> dict[str, FieldType]:
    """A record's field types (checked: at most one text field, keys of letters)."""
    out = dict(keys)
    if sum(t == "text" for t in out.values()) > 1 or not all(_KEY.match(k) for k in out):
        raise ValueError("bad record layout")
    return out


# --- the status's records (schemas/status/encoder.py writes them, status_decoder.py reads) ---

# A span name's aggregate (``spans``; each lane of ``spanLanes`` the same, without ``unlaned``
# and ``pod``): ``pod`` names the one pod that sent every summary (its lane is the entry).
SPAN_FIELDS: Final = types_of((
    ("count", "int"), ("totalNs", "int"), ("minS", "float"), ("maxS", "float"),
    ("firstStart", "float"), ("lastEnd", "float"), ("errors", "int"), ("events", "int"),
    ("windows", "str"), ("unlaned", "int"), ("pod", "str")))
# A worker's progress (``workers``), its message last.
WORKER_FIELDS: Final = types_of((
    ("pod", "str"), ("fraction", "float"), ("message", "text"), ("final", "bool"),
    ("failed", "bool"), ("workers", "int"), ("at", "str"), ("events", "int"),
    ("firstAt", "str"), ("firstFraction", "float")))
# A sender pod (``pods``).
POD_FIELDS: Final = types_of((("name", "str"), ("uid", "str"), ("events", "int")))


def fields_of(entry: object, types: Mapping[str, FieldType]) -> Mapping[str, Any]:
    """An entry's fields, whichever layout wrote it: a record (layout 3) unpacked, or the
    JSON object layout 2 wrote (the same keys), as it is. Raises ValueError otherwise."""
    if isinstance(entry, Mapping):
        return entry
    return unpack(entry, types)
