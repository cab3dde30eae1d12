"""The pure trust rules: the task-id rule, invisible characters, the deck URI
allow-list and SpanSummary consistency (properties, with hypothesis)."""

from __future__ import annotations

import logging
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.emitter import Emitter, EmitterConfig, Identity
from tidings.emitter.transport import LogSink
from tidings.schemas import Rejection, RejectReason, sanitize_text
from tidings.schemas.wire.names import (
    task_id_error,
    valid_namespace,
    valid_object_name,
    valid_task_id,
)
from tidings.schemas.wire.note import decode_obj
from tidings.schemas.wire.payloads import DECK_SCHEMES, span_inconsistency
from tidings.schemas.wire.text import has_invisible

# The two Kubernetes rules a task id must meet at once (apimachinery's validation regexes).
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")

ids = st.text(alphabet="abcXYZ019-._/ ,=\u00e9", max_size=70) | st.from_regex(
    r"\A[a-z0-9][a-z0-9.\-]{0,70}\Z")


@given(ids)
def test_a_task_id_is_exactly_an_object_name_that_is_also_a_label_value(s: str) -> None:
    both = bool(s) and len(s) <= 253 and bool(SUBDOMAIN.match(s)) \
        and len(s) <= 63 and bool(LABEL_VALUE.match(s))
    assert valid_task_id(s) is both
    err = task_id_error(s)
    assert (err is None) is both
    if err is not None:
        assert "\n" not in err and len(err) < 400 and "'_'" not in err.split(" is not valid")[1]


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


@given(ids)
def test_a_namespace_name_is_exactly_a_dns_label(s: str) -> None:
    assert valid_namespace(s) is (len(s) <= 63 and bool(DNS_LABEL.match(s)))


@given(ids | st.from_regex(r"\A[a-z0-9][a-z0-9.\-]{240,260}\Z"))
def test_every_dns_subdomain_is_an_object_name_and_nothing_else_is(s: str) -> None:
    # The rule is the subdomain's alphabet and ends, a little looser inside ("a..b" passes):
    # the API server has the last word, the rule keeps ',', '=' and oddities off the wire.
    if len(s) <= 253 and SUBDOMAIN.match(s):
        assert valid_object_name(s)
    if valid_object_name(s):
        assert 1 <= len(s) <= 253 and set(s) <= set("abcdefghijklmnopqrstuvwxyz0123456789.-")
        assert s[0] not in ".-" and s[-1] not in ".-"
    if valid_task_id(s):  # a task id is a TaskFeedback name
        assert valid_object_name(s)


@pytest.mark.parametrize("task", ["Train_42", "train_42", "UPPER", "a" * 64, "-x", "x-", "",
                                  "a..b", "a.-b", "train-42\n"])
def test_ids_the_issue_names_are_refused(task: str) -> None:
    assert not valid_task_id(task) and task_id_error(task)


def test_the_library_counts_and_logs_a_bad_task_id_once(caplog: pytest.LogCaptureFixture) -> None:
    em = Emitter(EmitterConfig(), identity=Identity("ns", "p", "u", "Train_42"),
                 transport=LogSink())
    with caplog.at_level(logging.WARNING, "tidings.emitter"):
        em.log_link("w", "https://w.ai/")  # never raises into the workload
        em.progress(1.0, final=True)
        assert not em.flush(5)  # both dropped: flush does not report success
    stats = em.stats()
    assert (stats["unaddressable"], stats["delivered"]) == (2, 0)
    assert [r.getMessage() for r in caplog.records if "task id" in r.getMessage()] == [
        "tidings: events cannot be sent: task id 'Train_42' is not valid: lowercase letters, "
        "digits, '-' and '.', at most 63 characters, starting and ending with a letter or digit"]
    em.close(0)


# --- invisible characters -----------------------------------------------------------------

FORMAT = [chr(c) for c in (0x200B, 0x200C, 0x200D, 0x200E, 0x200F, 0x2060, 0x2061, 0x2062,
                           0x2063, 0x2064, 0xFEFF, 0x061C, 0x00AD, 0x202E, 0x2066, 0xE0001,
                           0xE0041, 0xE007F)]


@pytest.mark.parametrize("ch", FORMAT)
def test_lookalike_names_cannot_show_as_two_rows(ch: str) -> None:
    assert sanitize_text("wandb" + ch) == "wandb" == sanitize_text(ch + "wan" + ch + "db")
    assert has_invisible("wandb" + ch)
    got = decode_obj({"v": 1, "t": "LogLink", "name": "wandb" + ch, "url": "https://w.ai/"})
    assert isinstance(got, Rejection) and got.reason is RejectReason.INVISIBLE_TEXT


@given(st.text(max_size=50))
def test_sanitised_text_holds_no_invisible_format_character(s: str) -> None:
    out = sanitize_text(s)
    assert not has_invisible(out)
    assert all(unicodedata.category(c) != "Cf" or c == "\u200d" for c in out)
    assert sanitize_text(out) == out


def test_emoji_joiners_still_join() -> None:
    for s in ("\U0001f469\u200d\U0001f4bb", "\u2764\ufe0f\u200d\U0001f525"):
        assert sanitize_text(s) == s and not has_invisible(s)


# --- deck URIs: an allow-list ----------------------------------------------------------------


@given(st.from_regex(r"\A[a-z][a-z0-9+.\-]{0,10}\Z"))
def test_any_scheme_outside_the_allow_list_is_refused(scheme: str) -> None:
    got = decode_obj({"v": 1, "t": "DeckReady", "name": "d", "uri": f"{scheme}://host/x"})
    assert isinstance(got, Rejection) is (scheme not in DECK_SCHEMES)


# --- SpanSummary consistency --------------------------------------------------------------

spans = st.lists(st.tuples(st.floats(1.6e9, 1.8e9), st.floats(0, 1e4), st.booleans()),
                 min_size=1, max_size=50)


def _aggregate(items: list[tuple[float, float, bool]]) -> dict[str, float | int]:
    """What the emitter sends for these spans (the same arithmetic as emitter/aggregate.py)."""
    total = 0.0
    for _, d, _ in items:
        total += d
    return {"count": len(items), "total_s": total, "min_s": min(d for _, d, _ in items),
            "max_s": max(d for _, d, _ in items), "first_start": min(s for s, _, _ in items),
            "last_end": max(s + d for s, d, _ in items),
            "errors": sum(1 for *_, e in items if e)}


@given(spans)
def test_summaries_of_real_spans_are_consistent(items: list[tuple[float, float, bool]]) -> None:
    a = _aggregate(items)
    assert span_inconsistency(**a) is None  # type: ignore[arg-type]
    got = decode_obj({"v": 1, "t": "SpanSummary", "name": "s", **a})
    assert not isinstance(got, Rejection), got


@given(spans, st.sampled_from(["errors", "total_low", "total_high", "min_max", "window"]))
def test_impossible_summaries_are_refused_with_their_reason(
        items: list[tuple[float, float, bool]], fault: str) -> None:
    a = _aggregate(items)
    n = int(a["count"])
    if fault == "errors":
        a["errors"] = n + 1
    elif fault == "total_low":
        a["max_s"] = float(a["max_s"]) + 1.0
        a["total_s"] = float(a["max_s"]) - 0.5
        a["min_s"] = min(float(a["min_s"]), float(a["total_s"]) / n)
        a["last_end"] = float(a["first_start"]) + float(a["max_s"]) + 1
    elif fault == "total_high":
        a["total_s"] = float(a["max_s"]) * n + 1.0
    elif fault == "min_max":
        a["min_s"] = float(a["max_s"]) + 1.0
    else:
        a["last_end"] = float(a["first_start"]) + float(a["max_s"]) - 0.5
        if float(a["last_end"]) < float(a["first_start"]):
            a["last_end"] = float(a["first_start"]) - 1.0
    got = decode_obj({"v": 1, "t": "SpanSummary", "name": "s", **a})
    assert isinstance(got, Rejection) and got.reason is RejectReason.INCONSISTENT_SPAN, (fault, a)
