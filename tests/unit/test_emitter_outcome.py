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
from tidings.schemas.wire.payloads import Progress

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
    from tidings.schemas.wire.event import ParsedEvent, parse_event

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
        assert final.message == "exit code 3"


# --- exits (SystemExit bypasses sys.excepthook) ------------------------

@pytest.mark.parametrize(("body", "code", "message"), [
    ("sys.exit(3)", 3, "exit code 3"),
    ("sys.exit('bad config: no data dir')", 1, "exit code 1: bad config: no data dir"),
    ("exit(5)", 5, "exit code 5"),  # the site builtin
    ("import argparse\n"
     "argparse.ArgumentParser().add_argument('--n', required=True) or "
     "argparse.ArgumentParser(prog='train').parse_args([])", 0, ""),
    ("import argparse\np = argparse.ArgumentParser(prog='train')\n"
     "p.add_argument('--n', required=True)\np.parse_args([])", 2, "exit code 2"),
    ("def main():\n    return 4\nsys.exit(main())", 4, "exit code 4"),
    ("import contextlib\n@contextlib.contextmanager\ndef wrapped():\n    yield\n"
     "with wrapped():\n    sys.exit(6)", 6, "exit code 6"),  # a cycle on Python 3.10
])
def test_a_non_zero_exit_is_a_failed_final_with_its_code_or_message(
        tmp_path: Path, body: str, code: int, message: str) -> None:
    proc, payloads = run_child(tmp_path, "bus.progress(0.5, 'half way')\n" + body)
    assert proc.returncode == code, proc.stderr
    if not code:
        assert finals(payloads) == []  # a clean exit without a final: as before
        return
    (final,) = finals(payloads)
    assert final.failed and final.fraction == 0.5 and final.message == message


@pytest.mark.parametrize("body", [
    "sys.exit(0)",
    "sys.exit()",
    # Caught: not the process's exit.
    "try:\n    sys.exit(1)\nexcept SystemExit:\n    pass",
    "def f():\n    try:\n        sys.exit(2)\n    except SystemExit as e:\n        return e\n"
    "kept = f()",
    # A thread's sys.exit ends the thread only (and prints nothing, as before).
    "t = threading.Thread(target=sys.exit, args=(7,))\nt.start()\nt.join()",
])
def test_an_exit_that_does_not_end_the_process_with_an_error_reports_nothing(
        tmp_path: Path, body: str) -> None:
    proc, payloads = run_child(tmp_path, "bus.progress(0.5)\n" + body)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert finals(payloads) == []


def test_an_exit_after_the_workers_own_final_adds_nothing(tmp_path: Path) -> None:
    proc, payloads = run_child(tmp_path, """
        bus.progress(1.0, "done", final=True)
        sys.exit(9)
    """)
    assert proc.returncode == 9
    (final,) = finals(payloads)
    assert not final.failed and final.message == "done"


def test_a_tracked_exit_is_a_plain_system_exit(tmp_path: Path) -> None:
    proc, _ = run_child(tmp_path, """
        bus.progress(0.1)
        try:
            sys.exit(3)
        except SystemExit as e:
            assert type(e) is SystemExit and e.code == 3 and e.args == (3,)
        try:
            exit("bye")
        except SystemExit as e:
            assert type(e) is SystemExit and e.code == "bye"
        assert repr(exit).startswith("Use exit()")
    """)
    assert proc.returncode == 0, proc.stderr


# --- SIGTERM ----------------------------------------------------------------------------

SLOW = """
import time
class SlowTransport(FileTransport):
    def post(self, namespace, body):
        time.sleep(0.3)  # an API server under load: facts are still queued at SIGTERM
        return super().post(namespace, body)
em = Emitter(EmitterConfig(retry_initial_s=0.01), identity=em.identity,
             transport=SlowTransport(sys.argv[1]))
set_emitter(em)
"""


def sigterm_child(tmp_path: Path, body: str, *, env: dict[str, str] | None = None
                  ) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    """Run ``body`` (which prints "ready" once its facts are emitted), SIGTERM it then."""
    import os
    import signal

    out = tmp_path / "events.jsonl"
    script = PREAMBLE + SLOW + textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", script, str(out)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n", proc.stderr and proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    from tidings.schemas.wire.event import ParsedEvent, parse_event

    events = [parse_event(json.loads(line)) for line in
              (out.read_text().splitlines() if out.exists() else [])]
    assert all(isinstance(e, ParsedEvent) for e in events), events
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return done, [e.payload for e in events]  # type: ignore[union-attr]


def test_sigterm_flushes_what_is_queued_then_dies_of_the_signal(tmp_path: Path) -> None:
    proc, payloads = sigterm_child(tmp_path, """
        bus.progress(0.4, "step 40")
        for i in range(5):
            bus.log_link(f"ckpt-{i}", f"https://x.example/{i}")
        print("ready", flush=True)
        time.sleep(60)
    """)
    assert proc.returncode == -15, proc.stderr  # killed by SIGTERM, as without the emitter
    links = sorted(p.name for p in payloads if type(p).__name__ == "LogLink")
    assert links == [f"ckpt-{i}" for i in range(5)]  # queued at the signal, all delivered
    (final,) = finals(payloads)
    assert final.failed and final.fraction == 0.4 and final.message == "terminated by SIGTERM"


@pytest.mark.parametrize("when", ["before", "after"])
def test_sigterm_runs_a_frameworks_own_handler(tmp_path: Path, when: str) -> None:
    """A framework's handler, installed before the emitter starts (chained) or after it
    (it replaces ours), still runs and decides: here a graceful exit 0."""
    install = """
import signal
def graceful(signum, frame):
    print("checkpointed", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, graceful)
"""
    body = f"""
        {install.strip() if when == "before" else ""}
        bus.progress(0.4, "step 40")
        bus.log_link("ckpt", "https://x.example/ckpt")
        {install.strip() if when == "after" else ""}
        print("ready", flush=True)
        time.sleep(60)
    """
    proc, payloads = sigterm_child(tmp_path, "\n".join(
        line if not line.startswith(("import", "def", "    print", "    sys", "signal."))
        else "        " + line for line in body.splitlines()))
    assert proc.returncode == 0 and "checkpointed" in proc.stdout, proc.stderr
    assert [p.name for p in payloads if type(p).__name__ == "LogLink"] == ["ckpt"]
    assert finals(payloads) == []  # the framework exited cleanly: not a failure


def test_sigterm_handler_is_not_installed_when_opted_out_ignored_or_off_the_main_thread(
        tmp_path: Path) -> None:
    probe = """
        import signal
        {setup}
        {start}
        print(signal.getsignal(signal.SIGTERM) {cmp}, file=sys.stderr)
    """
    cases = [
        ("", "bus.progress(0.1); em.flush(5)", "is signal.SIG_DFL", {}, "False"),
        ("", "bus.progress(0.1); em.flush(5)", "is signal.SIG_DFL",
         {"TIDINGS_EMIT_SIGTERM_FLUSH_S": "0"}, "True"),
        ("signal.signal(signal.SIGTERM, signal.SIG_IGN)", "bus.progress(0.1); em.flush(5)",
         "is signal.SIG_IGN", {}, "True"),
        ("", "t = threading.Thread(target=lambda: (bus.progress(0.1), em.flush(5))); "
             "t.start(); t.join()", "is signal.SIG_DFL", {}, "True"),
    ]
    import os

    for setup, start, cmp, env, expect in cases:
        script = (PREAMBLE.replace("em = Emitter(EmitterConfig(retry_initial_s=0.01),",
                                   "em = Emitter(EmitterConfig.from_env(),")
                  + textwrap.dedent(probe.format(setup=setup, start=start, cmp=cmp)))
        proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "e.jsonl")],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})
        assert proc.returncode == 0 and proc.stderr.strip() == expect, (env, start, proc.stderr)
