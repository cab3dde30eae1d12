"""A status is read entry by entry: one hand-edited entry (a link whose
``at`` is no order key, which the CRD accepts) used to blank the whole task, so readers showed
Pending and the watcher's next write erased the run's links and metrics. Now every readable
entry is kept, an unreadable entry is kept verbatim and written back as it was, and a part
that is not an entry makes the read *partial* (never written over)."""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import expanded
from tests.unit.test_schemas_fold import PODS, T0, TASK, make_event
from tidings.schemas import (
    DeckReady,
    LogLink,
    Metrics,
    Progress,
    SpanSummary,
    TaskState,
    UnknownPayload,
    fold_all,
)
from tidings.schemas.status.decoder import NOTHING_UNREAD, StatusRead, read_status
from tidings.schemas.status.encoder import to_status

MAP_SECTIONS = ("links", "decks", "metrics", "spans", "unknownTypes")


def _fields(item: Any) -> dict[str, Any]:
    """A record's fields as text, leniently (a damaged one too), or an object as it is."""
    if isinstance(item, str):
        return dict(p.partition("=")[::2] for p in item.split("; "))
    return item if isinstance(item, dict) else {}


LIST_SECTIONS: dict[str, Callable[[Any], Any]] = {
    "workers": lambda w: _fields(w).get("pod"),
    "pods": lambda p: (_fields(p).get("name"), _fields(p).get("uid"))}
# Parts that are not entries: an unreadable one makes the read partial.
PARTS = ("applied", "roster", "counters", "firstEventTime", "lastEventTime", "compactedBefore",
         "schemaVersion")


def running_state() -> TaskState:
    """Two workers at 60 %, with links, decks, metrics, spans, pods and an unknown type."""
    evs = []
    for i, pod in enumerate(PODS[:3]):
        t = T0 + timedelta(seconds=i)
        evs += [make_event(LogLink(name=f"link-{i}", url=f"https://x.y/{i}"), f"i-{i}", 0, t,
                           pod=pod),
                make_event(DeckReady(name=f"deck-{i}", uri=f"s3://b/{i}"), f"i-{i}", 1, t,
                           pod=pod),
                make_event(Metrics(metrics=[[f"m-{i}", 0.5 + i, i], [f"n-{i}", -1.0, None]]),
                           f"i-{i}", 2, t, pod=pod),
                make_event(SpanSummary(name=f"s-{i}", count=2, total_s=3.0, min_s=1.0,
                                       max_s=2.0, first_start=1.7e9, last_end=1.7e9 + 5,
                                       errors=0), f"i-{i}", 3, t, pod=pod),
                make_event(Progress(fraction=0.2, message="warming up"), f"i-{i}", 4, t,
                           pod=pod),
                make_event(Progress(fraction=0.6, message=f"step {i}"), f"i-{i}", 5,
                           t + timedelta(seconds=30), pod=pod),
                make_event(UnknownPayload(type=f"Future{i}", version=2), f"i-{i}", 6, t,
                           pod=pod)]
    s = fold_all(TASK, evs)
    assert s.phase == "Running" and to_status(s)["progress"]["percent"] == 60
    return s


BASE = running_state()
STATUS = orjson.loads(orjson.dumps(to_status(BASE)))


def written(read: StatusRead) -> dict[str, Any]:
    """What the watcher would write for this read (nothing folded since)."""
    return read.unread.merge_into(to_status(read.state), read.state)


def test_a_status_the_fold_wrote_reads_whole() -> None:
    read = read_status(TASK, STATUS)
    assert read.state == BASE and read.unread is NOTHING_UNREAD and not read.unread


HAND_MADE_LINKS = [
    "at=by hand; events=1; url=https://wiki.example/runbook",  # as this layout writes them
    {"url": "https://wiki.example/runbook", "at": "by hand", "events": 1}]  # as layout 2 did


@pytest.mark.parametrize("hand_made", HAND_MADE_LINKS)
def test_the_admins_hand_edited_link_blanks_nothing(hand_made: Any) -> None:
    """The issue's edit: a link added by hand with an ``at`` that is no order key."""
    edited = copy.deepcopy(STATUS)
    edited["links"]["runbook"] = hand_made
    read = read_status(TASK, edited)
    s = read.state
    assert s.phase == "Running" and to_status(s)["progress"]["percent"] == 60
    assert s.named == BASE.named and s.workers == BASE.workers and s.roster == BASE.roster
    assert read.unread.entries == {"links": {"runbook": edited["links"]["runbook"]}}
    assert not read.unread.partial
    assert read.unread.problems == ("links/runbook: bad order key",)
    out = written(read)
    assert out["links"] == edited["links"] and out["linkCount"] == 4
    # A fact about that name replaces the hand-made entry.
    fact = make_event(LogLink(name="runbook", url="https://x.y/rb"), "i-9", 0, T0, pod=PODS[0])
    later = fold_all(TASK, [fact])
    merged = read.unread.merge_into(to_status(later), later)
    assert expanded(merged)["links"]["runbook"]["url"] == "https://x.y/rb"


def test_a_part_that_is_not_an_entry_makes_the_read_partial() -> None:
    for part, bad in [("applied", "i=5-1"), ("roster", {"reporting": 1, "final": 0,
                                                        "marks": "x"}),
                      ("schemaVersion", 99), ("schemaVersion", "two"),
                      ("firstEventTime", "yesterday"), ("counters", {"eventsApplied": -1})]:
        edited = {**copy.deepcopy(STATUS), part: bad}
        read = read_status(TASK, edited)
        assert read.unread.partial, part
        assert read.unread.problems and read.unread.problems[0].startswith(part)
        if part != "schemaVersion":  # (another layout: nothing of it is read)
            assert read.state.named == BASE.named and read.state.workers == BASE.workers


def test_an_older_layout_and_an_empty_status_read_as_fresh_and_writable() -> None:
    for status in [None, {}, {"schemaVersion": 1, "schema_version": 1}]:
        read = read_status(TASK, status)
        assert read.state.phase == "Pending" and read.unread is NOTHING_UNREAD


# --- any mutation keeps every valid entry -------------------------------------------------

garbage = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**63), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.lists(st.integers(-2**63, 2**63 - 1), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2))


def _item_key(section: str, item: Any) -> str:
    """An item's key, as text (a damaged key may be any JSON)."""
    return repr(LIST_SECTIONS[section](item)) if isinstance(item, str | dict) else ""


def _damage(draw: st.DrawFn, record: str) -> str:
    """``record`` with one field's value replaced by garbage's text, or removed."""
    parts = record.split("; ")
    i = draw(st.integers(0, len(parts) - 1))
    if draw(st.booleans()):
        parts[i] = f"{parts[i].partition('=')[0]}={draw(garbage)}"
    else:
        del parts[i]
    return "; ".join(parts)


@st.composite
def mutations(draw: st.DrawFn) -> tuple[dict[str, Any], set[tuple[str, Any]]]:
    """A copy of STATUS with a few entries damaged, removed or added by hand, and the
    (section, key) of each entry touched."""
    status = copy.deepcopy(STATUS)
    touched: set[tuple[str, Any]] = set()
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from([*MAP_SECTIONS, *LIST_SECTIONS]))
        if section in MAP_SECTIONS:
            entries = status[section]
            key = draw(st.sampled_from([*entries, "hand-made", ""]))
            if key in entries and isinstance(entries[key], str) and draw(st.booleans()):
                entries[key] = _damage(draw, entries[key])
            else:
                entries[key] = draw(garbage)
            touched.add((section, key))
        else:
            items = status[section]
            i = draw(st.integers(0, len(items)))
            item = _damage(draw, items[i] if i < len(items) else "pod=hand-made")
            if i < len(items):
                touched.add((section, _item_key(section, items[i])))
                items[i] = item
            else:
                items.append(item)
            touched.add((section, _item_key(section, item)))
    return status, touched


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_any_mutation_of_a_valid_status_keeps_every_valid_entry(
        mutated: tuple[dict[str, Any], set[tuple[str, Any]]]) -> None:
    status, touched = mutated
    read = read_status(TASK, status)
    out = written(read)
    assert orjson.loads(orjson.dumps(out)) == out  # still JSON
    for section in MAP_SECTIONS:
        for key, entry in STATUS[section].items():
            if (section, key) not in touched:  # every entry nobody touched: read, unchanged
                assert out[section][key] == entry, (section, key)
        for key, entry in status.get(section, {}).items():  # nothing written less
            assert key in out.get(section, {}), (section, key)
            if key in read.unread.entries.get(section, {}):
                assert out[section][key] == entry  # verbatim
    for section in LIST_SECTIONS:
        kept = {_item_key(section, i) for i in out.get(section, [])}
        for item in STATUS[section]:
            if (section, _item_key(section, item)) not in touched:
                assert item in out[section], (section, item)
        for item in status[section]:  # nothing written less: verbatim, or its key's entry
            assert item in out[section] or _item_key(section, item) in kept, (section, item)
    # Entries alone never make the read partial, and the readable workers keep the task's
    # progress as the roster says.
    assert not read.unread.partial
    assert read.state.roster == BASE.roster


def shown(status: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What `tidings state` prints for a TaskFeedback with this status, and its -o json."""
    from rich.console import Console

    from tidings.cli.snapshot import cr_snapshot
    from tidings.cli.taskrender import render

    snap = cr_snapshot(TASK, status, "7")
    out = io.StringIO()
    Console(file=out, width=150).print(render(snap))
    return out.getvalue(), snap.to_data()


def test_state_shows_what_the_status_says_and_what_it_could_not_read() -> None:
    edited = copy.deepcopy(STATUS)
    edited["links"]["runbook"] = HAND_MADE_LINKS[0]
    text, data = shown(edited)
    assert "Running" in text and "60.0%" in text and "Pending" not in text
    assert "link-2" in text and "m-1" in text and "21 events applied" in text
    assert "links/runbook" in text and "bad order key" in text
    # -o json: the status as written, each record as its fields (a script reads fields)
    assert data["status"] == expanded(edited) != edited
    assert data["status"]["workers"][0]["pod"] == "worker-0"
    assert data["unreadable"] == {"entries": ["links/runbook: bad order key"], "partial": False}

    broken = {**copy.deepcopy(STATUS), "roster": {"reporting": 3, "final": 3, "marks": "x"},
              "phase": "Running"}
    text, data = shown(broken)
    assert "partly unreadable" in text and "roster" in text
    assert "Running" in text and "60% step 2" in text  # the watcher's word, as written
