"""Whatever the status decoder accepts, the encoder writes back: an entry a person with status
rights edited in (or an older writer left) either reads, is written again and reads back the
same, or does not read and is kept verbatim beside the state (counted among the unread), so
no stored value can make every later status write fail."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.schemas import ParsedEvent, PodRef, TaskRef, build_event, fold, parse_event
from tidings.schemas.status.decoder import StatusRead, expanded, read_status
from tidings.schemas.status.encoder import NAMED_FIELDS, to_status
from tidings.schemas.wire import record
from tidings.schemas.wire.kinds import NAMED_KINDS
from tidings.schemas.wire.payloads import Progress
from tidings.schemas.wire.record import POD_FIELDS, SPAN_FIELDS, WORKER_FIELDS, FieldType
from tidings.watcher.writer import status_body

from .status_canon import canon
from .test_status_v2 import RECORDED, _limits

_CASE = next(c for c in RECORDED if c["name"] == "seed-193")
TASK = TaskRef(*_CASE["task"])
LIMITS = _limits(_CASE["limits"])
NOW = datetime(2026, 11, 30, 3, 20, tzinfo=UTC)


def _base(layout: int) -> dict[str, Any]:
    """The recorded layout 2 status (every record section filled), or as layout 3 wrote it."""
    status = copy.deepcopy(_CASE["status"])
    if layout == 3:
        first = read_status(TASK, status, LIMITS)
        status = orjson.loads(orjson.dumps(to_status(first.state)))
    return status


def _written_back(status: dict[str, Any]) -> tuple[StatusRead, dict[str, Any], StatusRead]:
    """What the watcher does with a stored status: read it, write it (the writer's own body,
    unread entries kept as they were), and what reading that write gives."""
    first = read_status(TASK, status, LIMITS)
    assert not first.unread.partial
    body = orjson.loads(orjson.dumps(status_body(first.state, None, first.unread, now=NOW)))
    return first, body, read_status(TASK, body, LIMITS)


def test_a_layout_2_worker_whose_pod_holds_the_separator_does_not_freeze_the_writes() -> None:
    status = _base(2)
    ghost = {"pod": "ghost; final=true", "fraction": 0.5, "at": status["workers"][0]["at"],
             "events": 1}
    status["workers"].append(ghost)
    first, body, again = _written_back(status)
    # Not read (a record cannot hold it), kept verbatim, described among the unread.
    assert "ghost; final=true" not in first.state.workers
    assert first.unread.items["workers"] == (ghost,)
    assert any("ghost" in p for p in first.unread.problems)
    assert ghost in body["workers"]
    assert canon(again.state) == canon(first.state)
    assert again.unread.items == first.unread.items
    # The worker's final folds onto what was read and is written, the edit kept beside it.
    final = parse_event(orjson.loads(orjson.dumps(build_event(
        task=TASK, pod=PodRef("w-0", "uid-w-0"), instance="00c1ffff" + "a" * 24, seq=1,
        time=NOW, payload=Progress(fraction=1.0, message="done", final=True)))))
    assert isinstance(final, ParsedEvent)
    folded = fold(first.state, final)
    written = orjson.loads(orjson.dumps(status_body(folded, None, first.unread, now=NOW)))
    assert "final=true" in next(w for w in written["workers"]
                                if isinstance(w, str) and w.startswith("pod=w-0; "))
    assert ghost in written["workers"]


def test_a_layout_2_sender_pod_whose_uid_holds_the_separator_is_kept_unread() -> None:
    status = _base(2)
    bad = {"name": "w-9", "uid": "u; events=999", "events": 1}
    status["pods"].append(bad)
    first, body, again = _written_back(status)
    assert ("w-9", "u; events=999") not in first.state.pod_events
    assert bad in body["pods"]
    assert canon(again.state) == canon(first.state)


def test_a_span_sent_by_one_pod_whose_name_holds_the_separator_is_written_back() -> None:
    """A layout 3 status whose span name has one lane, under a key holding ``"; "``: the
    entry would name it as its ``pod`` field, which a record cannot hold."""
    status = _base(3)
    name = next(iter(status["spans"]))
    entry = record.without(record.without(status["spans"][name], "pod"), "unlaned")
    status["spans"][name] = entry
    status["spanLanes"] = {**status.get("spanLanes", {}), name: {"x; count=1": entry}}
    first, body, again = _written_back(status)
    assert not first.unread
    assert body["spanLanes"][name] == {"x; count=1": entry}
    assert canon(again.state) == canon(first.state)
    assert not again.unread


def test_a_link_too_long_for_a_record_is_kept_unread_not_written_unreadable() -> None:
    """A layout 2 link of a 9,000-character URL would be written as a record longer than a
    reader reads: it is kept as it was instead."""
    status = _base(2)
    key = next(iter(status["links"]))
    status["links"][key] = {**status["links"][key], "url": "https://x/" + "a" * 9000}
    first, body, again = _written_back(status)
    assert key not in first.state.named.get("links", {})
    assert body["links"][key] == status["links"][key]
    assert canon(again.state) == canon(first.state)


# --- any entry, in either layout, in every record section ---

# Text a person with status rights might put in any field: the record's separator, a forged
# field, ``=``, line breaks, terminal escapes, bidirectional overrides, markup, far too much.
_HOSTILE = st.lists(st.one_of(
    st.sampled_from(["; ", "ghost; final=true", "; history=", "; pod=x", "=", "a=b", ";",
                     "\n", "\r\n", "\x1b[31m", "\x1b]8;;http://x\x07", "\u202e", "\u200b",
                     "<script>alert(1)</script>", "w-0", "2026-11-30T03:00:00Z", "1e5",
                     "NaN", "-1", " ", "x" * 300, "y" * 9000]),
    st.text(max_size=12)), max_size=4).map("".join)
_VALUES = st.one_of(_HOSTILE, st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
                    st.booleans(), st.none(), st.just({"a": 1}), st.just([1, "; "]))
_MAP_SECTIONS = (*(k.section for k in NAMED_KINDS), "spans")
_SECTIONS = (*_MAP_SECTIONS, "lanes", "workers", "pods")
_TYPES: dict[str, dict[str, FieldType]] = {
    **NAMED_FIELDS, "spans": SPAN_FIELDS, "lanes": SPAN_FIELDS, "workers": WORKER_FIELDS,
    "pods": POD_FIELDS}


def _spelled(fields: dict[str, Any]) -> str:
    """A record spelled from ``fields`` whatever they hold, as a hand edit would (no check)."""
    def text(v: Any) -> str:
        return v if isinstance(v, str) else orjson.dumps(v).decode()
    return "; ".join(f"{k}={text(v)}" for k, v in fields.items())


@st.composite
def _edited(draw: st.DrawFn) -> dict[str, Any]:
    """The recorded status, in layout 2 or 3, with one entry of one record section edited:
    a field set to any value, a field removed, or the entry's key (a name) replaced."""
    layout = draw(st.sampled_from((2, 3)))
    status = _base(layout)
    # (The sections whose records hold names, where a separator was once taken in, twice.)
    section = draw(st.sampled_from((*_SECTIONS, "lanes", "workers", "pods")))
    types = _TYPES[section]
    if section == "lanes":
        holder = status["spans"] if layout == 2 else status.setdefault("spanLanes", {})
        name = draw(st.sampled_from(sorted(status["spans"])))
        if layout == 2:
            entry = holder[name]
            if not isinstance(entry.get("pods"), dict):
                entry.pop("pod", None)
                entry["pods"] = {"w-0": {k: v for k, v in entry.items() if k != "pods"}}
            where: dict[str, Any] = entry["pods"]
        else:
            if name not in holder:
                solo = record.without(record.without(status["spans"][name], "pod"), "unlaned")
                status["spans"][name] = solo
                holder[name] = {"w-0": solo}
            where = holder[name]
    elif section in _MAP_SECTIONS:
        where = status[section]
    else:
        items = status[section]
        i = draw(st.integers(0, len(items) - 1))
        fields = dict(expanded({section: [items[i]]})[section][0])
        fields = _edit(draw, fields, types)
        items[i] = fields if layout == 2 else draw(st.sampled_from((_spelled(fields),
                                                                    draw(_HOSTILE))))
        return status
    key = draw(st.sampled_from(sorted(where)))
    raw = where[key]
    fields = dict(raw) if isinstance(raw, dict) else dict(record.unpack(raw, types))
    fields = _edit(draw, fields, types)
    if draw(st.booleans()):
        key_new = draw(_HOSTILE)
        del where[key]
        key = key_new
    where[key] = fields if layout == 2 else draw(st.sampled_from((_spelled(fields),
                                                                  draw(_HOSTILE))))
    return status


def _edit(draw: st.DrawFn, fields: dict[str, Any], types: dict[str, FieldType]
          ) -> dict[str, Any]:
    if draw(st.booleans()):  # (text in a field of text: the edit most likely to be read)
        field = draw(st.sampled_from(sorted(k for k, t in types.items() if t in ("str", "text"))))
        fields[field] = draw(_HOSTILE)
        return fields
    field = draw(st.sampled_from(sorted({*types, *fields})))
    if draw(st.integers(0, 5)) == 0:
        fields.pop(field, None)
    else:
        fields[field] = draw(_VALUES)
    return fields


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_edited())
def test_any_edited_entry_is_written_back_and_reads_the_same(status: dict[str, Any]) -> None:
    first, _, again = _written_back(status)
    assert canon(again.state) == canon(first.state)
    assert {k: set(v) for k, v in again.unread.entries.items()} == \
        {k: set(v) for k, v in first.unread.entries.items()}
    assert again.unread.items == first.unread.items


def test_a_record_that_grows_past_the_limit_when_written_again_is_kept_unread() -> None:
    """A layout 3 link of a URL just short of the record limit, whose time is spelled short
    (``...03:00:00Z``): written again in full (``...03:00:00.000000Z``), it would be too long
    to read, so it is not read in the first place."""
    status = _base(3)
    at = "2026-11-30T03:00:00Z 00c10000aaaaaaaaaaaaaaaaaaaaaaaa 1"
    head = f"at={at}; events=1; url=https://x/"
    raw = head + "a" * (record.RECORD_LIMIT - len(head))
    assert len(raw) == record.RECORD_LIMIT and record.unpack(raw, NAMED_FIELDS["links"])
    status["links"]["long"] = raw
    first, body, again = _written_back(status)
    assert "long" not in first.state.named.get("links", {})
    assert body["links"]["long"] == raw
    assert canon(again.state) == canon(first.state)
