"""A crash is an outcome: uncaught exceptions and ``with run():`` become a worker's final, and
``fail()`` keeps the progress made. Crashes run in real child processes (the hooks are the
interpreter's own)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_emitter_core import make
from tidings.emitter.outcome import CRASH_MESSAGE_LIMIT, crash_message
from tidings.schemas.payloads import Progress

REPO_ROOT = Path(__file__).resolve().parents[2]

# The child's preamble: a default Emitter whose transport appends each event to a file.
PREAMBLE = """
import json, sys, threading
import tidings
from tidings.emitter import Emitter, EmitterConfig, Identity, set_emitter
import tidings.emitter as bus

class FileTransport:
    sink = False
    def __init__(self, path):
        self.path = path
    def post(self, namespace, body):
        with open(self.path, "a") as f:
            f.write(json.dumps(body) + "\\n")
        return True

em = Emitter(EmitterConfig(retry_initial_s=0.01),
             identity=Identity("ml", "train-0", "0c4f-11", "run-7"),
             transport=FileTransport(sys.argv[1]))
set_emitter(em)
"""


def run_child(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    out = tmp_path / "events.jsonl"
    script = PREAMBLE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", script, str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    from tidings.schemas.event import ParsedEvent, parse_event

    events = [parse_event(json.loads(line)) for line in
              (out.read_text().splitlines() if out.exists() else [])]
    assert all(isinstance(e, ParsedEvent) for e in events), events
    return proc, [e.payload for e in events]  # type: ignore[union-attr]


def finals(payloads: list[Any]) -> list[Progress]:
    return [p for p in payloads if isinstance(p, Progress) and p.final]


# --- fail() keeps the progress made -------------------------------------------------------

def test_fail_keeps_the_progress_made_unless_told_otherwise() -> None:
    em, rec = make()
    em.progress(0.75, "epoch 3/4")
    em.progress(1.5, "a bad report")  # refused when sent: never what a failure keeps
    em.fail("CUDA out of memory")
    assert em.flush(5)
    (final,) = finals([p.payload for p in rec.parsed()])
    assert final.failed and final.fraction == 0.75 and final.message == "CUDA out of memory"

    em2, rec2 = make()
    em2.progress(0.75)
    em2.fail("restarting from scratch", 0.0)  # the caller says otherwise
    assert em2.flush(5)
    (final2,) = finals([p.payload for p in rec2.parsed()])
    assert final2.failed and final2.fraction == 0.0


def test_fail_before_any_progress_is_at_zero() -> None:
    em, rec = make()
    em.fail("bad config")
    assert em.flush(5)
    (final,) = finals([p.payload for p in rec.parsed()])
    assert final.failed and final.fraction == 0.0


# --- the crash message ----------------------------------------------------------------------

class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_crash_message_names_the_type_sanitised_and_bounded() -> None:
    assert crash_message(ValueError("bad shape")) == "ValueError: bad shape"
    assert crash_message(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert crash_message(Unprintable()).endswith("test_emitter_outcome.Unprintable")
    hostile = crash_message(RuntimeError("\x1b]8;;https://evil\x07click\u202e" + "x" * 10_000))
    assert len(hostile) <= CRASH_MESSAGE_LIMIT and hostile.endswith("…")
    assert "\x1b" not in hostile and "\u202e" not in hostile and "evil" not in hostile
    # Any text at all keeps within the bound and free of controls.
    for text in ["\n\r\t", "\ud800", "é" * 400, ""]:
        msg = crash_message(OSError(text))
        assert len(msg) <= CRASH_MESSAGE_LIMIT and msg.isprintable(), repr(msg)


# --- uncaught exceptions ---------------------------------------------------------------------

def test_an_uncaught_exception_is_a_failed_final_before_the_exit_flush(tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        bus.progress(0.5, "half way")
        raise ValueError("loss is nan\\x1b[31m at step 7" + "!" * 5000)
    """)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ValueError" in proc.stderr  # the old hook ran too
    (final,) = finals(payloads)
    assert final.failed and final.fraction == 0.5
    assert final.message.startswith("ValueError: loss is nan at step 7!!!")
    assert len(final.message) <= CRASH_MESSAGE_LIMIT and "\x1b" not in final.message


def test_hooks_are_installed_only_once_the_emitter_is_used(tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        assert sys.excepthook is sys.__excepthook__, "installed before any use"
        raise ValueError("before any fact")
    """)
    assert proc.returncode == 1 and "before any fact" in proc.stderr
    assert payloads == []  # a process that never used the emitter reports nothing


def test_a_crashed_worker_thread_fails_the_worker_a_daemon_helper_does_not(
        tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        bus.progress(0.25)
        def boom(): raise RuntimeError("helper died")
        d = threading.Thread(target=boom, name="flusher", daemon=True); d.start(); d.join()
        assert em.flush(5)
        w = threading.Thread(target=boom, name="loader"); w.start(); w.join()
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("helper died") == 2  # both tracebacks still printed
    (final,) = finals(payloads)
    assert final.failed and final.fraction == 0.25
    assert final.message == "thread loader: RuntimeError: helper died"


def test_run_reports_success_on_a_clean_exit(tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        with tidings.run():
            bus.progress(0.5)
    """)
    assert proc.returncode == 0, proc.stderr
    (final,) = finals(payloads)
    assert not final.failed and final.fraction == 1.0


def test_run_reports_a_crash_once_and_lets_it_propagate(tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        with tidings.run():
            bus.progress(0.75)
            raise MemoryError("CUDA out of memory")
    """)
    assert proc.returncode == 1 and "MemoryError" in proc.stderr
    (final,) = finals(payloads)  # run() and then the excepthook: one report, not two
    assert final.failed and final.fraction == 0.75
    assert final.message == "MemoryError: CUDA out of memory"


@pytest.mark.parametrize(("code", "failed"), [("0", False), ("None", False), ("3", True)])
def test_run_reads_sys_exit_by_its_code(tmp_path: Path, code: str, failed: bool) -> None:
    proc, payloads = run_child(tmp_path, f"""
        with tidings.run():
            sys.exit({code})
    """)
    assert proc.returncode == (3 if failed else 0)
    (final,) = finals(payloads)
    assert final.failed is failed
    if failed:
        assert final.message == "SystemExit: 3"
