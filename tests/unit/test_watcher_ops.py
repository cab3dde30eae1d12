"""The watcher's operations, pure parts: log formats and level validation, the once-per-event
memo of rejections, build info and the emit-to-status latency (which facts, which clock)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest
from typer.testing import CliRunner

from tidings.cli.main import app
from tidings.schemas import (
    DeckReady,
    LogLink,
    PodRef,
    Progress,
    SpanSummary,
    TaskRef,
    build_event,
    parse_event,
)
from tidings.schemas.engine.folding import fold
from tidings.schemas.status.encoder import to_status
from tidings.schemas.wire.event import ParsedEvent
from tidings.watcher.coalesce import fact_kind
from tidings.watcher.logs import LogFormat, OncePerEvent, announcer, configure, level_number
from tidings.watcher.metrics import Metrics
from tidings.watcher.store import Store

TASK = TaskRef("ns", "t")


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure() owns the root logger: put pytest's handlers and level back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(fmt: LogFormat, level: str = "info") -> list[str]:
    out = io.StringIO()
    configure(level, fmt, stream=out)
    log = logging.getLogger("tidings.watcher.test")
    log.debug("hidden at info")
    log.info("rejected %s/%s: %s", "ns", "ev-1", "no such pod\nsecond line",
             extra={"namespace": "ns", "task": "t", "reason": "spoofed_sender"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("fold of ns/t failed")
    return out.getvalue().splitlines()


def test_json_lines_are_one_object_each_with_time_level_logger_message_and_fields(
        root_logging: None) -> None:
    lines = _lines(LogFormat.json)
    assert len(lines) == 2, lines  # debug filtered; the traceback stays inside its line
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "tidings.watcher.test"
    assert first["message"] == "rejected ns/ev-1: no such pod\nsecond line"
    assert (first["namespace"], first["task"], first["reason"]) == ("ns", "t", "spoofed_sender")
    when = datetime.fromisoformat(first["time"])
    assert when.tzinfo is not None and abs(datetime.now(UTC) - when) < timedelta(minutes=1)
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["traceback"]


def test_text_lines_keep_the_classic_format(root_logging: None) -> None:
    lines = _lines(LogFormat.text, level="DEBUG")
    assert lines[0].endswith(" DEBUG tidings.watcher.test: hidden at info")
    assert " INFO tidings.watcher.test: rejected ns/ev-1: no such pod" in lines[1]
    assert not any(line.startswith("{") for line in lines)


def test_json_status_lines_parse_and_keep_their_text() -> None:
    out = io.StringIO()
    announcer(LogFormat.json, stream=out)("tidings watcher: http on 127.0.0.1:8080")
    line = json.loads(out.getvalue())
    assert line["message"] == "tidings watcher: http on 127.0.0.1:8080"
    assert line["level"] == "INFO" and "time" in line
    assert announcer(LogFormat.text) is print


@pytest.mark.parametrize("text,level", [("debug", logging.DEBUG), ("INFO", logging.INFO),
                                        ("Warning", logging.WARNING), ("error", logging.ERROR)])
def test_log_levels_are_case_insensitive(text: str, level: int) -> None:
    assert level_number(text) == level


@pytest.mark.parametrize("text", ["verbose", "warn", "critical", "10", "", "info "])
def test_unknown_log_levels_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        level_number(text)


@pytest.mark.parametrize("args,env,needle", [
    (["--log-level", "verbose"], {}, "'verbose' is not one of"),
    ([], {"TIDINGS_LOG_LEVEL": "loud"}, "'loud' is not one of"),
    (["--log-format", "xml"], {}, "'xml' is not one of"),
])
def test_a_bad_log_flag_is_one_line_exit_2_before_anything_runs(
        args: list[str], env: dict[str, str], needle: str, tmp_path: Any) -> None:
    res = CliRunner().invoke(app, ["watcher", "run", "--kubeconfig", str(tmp_path / "absent"),
                                   *args], env=env)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert needle in res.stderr and "Traceback" not in res.output


def test_a_good_log_level_in_any_case_gets_past_validation(tmp_path: Any,
                                                           root_logging: None) -> None:
    res = CliRunner().invoke(app, ["watcher", "run", "--kubeconfig", str(tmp_path / "absent"),
                                   "--log-level", "DEBUG", "--log-format", "JSON"])
    # Validation passed: the next thing to fail is the (absent) kubeconfig.
    assert res.exit_code == 2 and "cannot load Kubernetes configuration" in res.stderr


def test_the_rejection_memo_says_first_once_per_key_and_stays_bounded() -> None:
    memo = OncePerEvent(size=3)
    assert memo.first(("ns", "e1", "10")) and not memo.first(("ns", "e1", "10"))
    assert memo.first(("ns", "e1", "11"))  # a changed event (new resourceVersion) is new
    for i in range(10):
        memo.first(("ns", f"x{i}", "1"))
    assert len(memo) == 3
    assert memo.first(("ns", "e1", "10"))  # forgotten beyond the bound: logged again, once


def test_a_key_seen_at_every_relist_stays_remembered() -> None:
    memo = OncePerEvent(size=2)
    memo.first("old")
    memo.first("b")
    assert not memo.first("old")  # seen again (a relist): now the most recent
    memo.first("c")  # evicts "b", the least recently seen
    assert not memo.first("old") and memo.first("b")


# --- metrics --------------------------------------------------------------------------------


def _event(payload: Any, seq: int = 1, when: datetime | None = None,
           warning: bool = False) -> ParsedEvent:
    ev = parse_event(build_event(task=TASK, pod=PodRef("p", "u1", "ns"), payload=payload,
                                 instance="i1", seq=seq, time=when or datetime.now(UTC),
                                 warning=warning))
    assert isinstance(ev, ParsedEvent), ev
    return ev


SPAN = SpanSummary(name="s", count=1, total_s=0.1, min_s=0.1, max_s=0.1, first_start=1.0,
                   last_end=1.1, errors=0)


def test_links_decks_final_progress_and_failures_are_critical_spans_and_steps_are_not() -> None:
    assert fact_kind(_event(LogLink(name="l", url="https://example.com/"))) == "critical"
    assert fact_kind(_event(DeckReady(name="d", uri="s3://b/d.html"))) == "critical"
    assert fact_kind(_event(Progress(fraction=1.0, final=True))) == "critical"
    assert fact_kind(_event(Progress(fraction=0.5, message="oom"), warning=True)) == "critical"
    assert fact_kind(_event(Progress(fraction=0.5))) == "coalescible"
    assert fact_kind(_event(SPAN)) == "coalescible"


def _samples(m: Metrics) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def test_latency_is_from_the_senders_event_time_and_a_clock_ahead_counts_as_zero() -> None:
    m = Metrics()
    now = datetime.now(UTC)
    m.saved([_event(LogLink(name="l", url="https://example.com/"), when=now - timedelta(seconds=4)),
             _event(SPAN, when=now + timedelta(seconds=30))],  # the sender's clock runs ahead
            now=now.timestamp())
    s = _samples(m)
    h = "tidings_watcher_emit_to_status_seconds"
    assert s[f'{h}_count{{kind="critical"}}'] == 1
    assert s[f'{h}_sum{{kind="critical"}}'] == pytest.approx(4.0, abs=0.01)
    assert s[f'{h}_bucket{{kind="critical",le="3.0"}}'] == 0
    assert s[f'{h}_bucket{{kind="critical",le="5.0"}}'] == 1
    assert s[f'{h}_count{{kind="coalescible"}}'] == 1
    assert s[f'{h}_sum{{kind="coalescible"}}'] == 0
    assert s[f'{h}_bucket{{kind="coalescible",le="0.05"}}'] == 1


def test_the_registry_carries_process_platform_and_build_info() -> None:
    s = _samples(Metrics())
    assert s["process_cpu_seconds_total{}"] > 0 and s["process_resident_memory_bytes{}"] > 0
    assert any(k.startswith("python_info{") for k in s)
    (info,) = [k for k in s if k.startswith("tidings_watcher_build_info{")]
    assert s[info] == 1 and 'version="' in info and 'python="3.' in info
    assert 'version="unknown"' not in info  # the test venv has the distribution installed


def test_each_written_event_is_reported_once_at_the_write_that_first_holds_it() -> None:
    saved: list[list[int]] = []
    store = Store(on_saved=lambda evs: saved.append([e.seq for e in evs]))
    store.load(TASK, None, exists=False)
    link = LogLink(name="l", url="https://example.com/")
    e1, e2, e3 = (_event(link, seq=i) for i in (1, 2, 3))
    base, _ = store.take(TASK)
    v1 = store.put(TASK, fold(fold(base, e1), e2), base=base, events=[e1, e2])
    base, _ = store.take(TASK)
    store.put(TASK, fold(base, e3), base=base, events=[e3])  # while v1's write was in flight
    store.written(TASK, v1, rv="5")
    assert saved == [[1, 2]]  # e3 is not in that write
    store.written(TASK, v1, rv="5")  # an answer seen twice reports nothing more
    assert saved == [[1, 2]]
    state = store.get(TASK)
    assert state is not None
    # The write of e3 landed but its answer was lost; the re-read shows it: reported then.
    store.rebase(TASK, to_status(state), rv="6")
    assert saved == [[1, 2], [3]]
