"""A crash is an outcome: a process that used the emitter and dies of an uncaught exception,
exits with a non-zero code through ``sys.exit`` (argparse, ``sys.exit(main())``, click) or
dies of SIGTERM reports a failed final for its worker (before the exit flush), unless the
worker already sent a final of its own. ``with tidings.run():`` (the package's ``run``)
builds on the same report. On SIGTERM the queued facts are flushed within a deadline before
the previous handler runs (the default one: the process still dies of the signal). This
module knows no Emitter registry: whoever installs the hooks says which Emitters a crash
reports through, each one a ``Reporter`` (the Emitter of core.py is one; this module does
not import it).
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any, NoReturn, Protocol

from tidings.schemas.wire.text import cut_text, sanitize_text


class _FlushSettings(Protocol):
    @property
    def sigterm_flush_s(self) -> float: ...


class Reporter(Protocol):
    """What a crash is reported through (core.py's Emitter)."""

    @property
    def config(self) -> _FlushSettings: ...

    @property
    def final_sent(self) -> bool: ...

    def fail(self, message: str = "") -> None: ...

    def flush(self, timeout: float = 5.0) -> bool: ...


#: A crash message's bound: the type and the start of its text say what happened; the
#: traceback belongs in the logs.
CRASH_MESSAGE_LIMIT = 300

# An exception already reported (by run(), a framework callback) carries this attribute, so
# the excepthook that sees it next does not send a second failure.
_REPORTED = "_tidings_reported"

_install_lock = threading.Lock()
_installed = False
# The Emitters a crash reports through when no one Emitter is named: set by the first install.
_started: Callable[[], Iterable[Reporter]] = list


def exit_message(code: object) -> str | None:
    """What a ``SystemExit`` with ``code`` says, as Python exits with it: None for a clean exit
    (None, 0), ``"exit code N"`` for an int, ``"exit code 1: <text>"`` for anything else
    (Python prints it and exits 1); sanitised and bounded."""
    if code is None or (isinstance(code, int) and code == 0):
        return None
    if isinstance(code, int):
        return f"exit code {int(code)}"
    try:
        text = str(code)
    except Exception:  # a broken __str__ must not cost the report
        text = type(code).__name__
    return cut_text(sanitize_text(f"exit code 1: {text}").strip(), CRASH_MESSAGE_LIMIT)


def crash_message(exc: BaseException) -> str:
    """``"<Type>: <message>"`` (a non-zero ``SystemExit``: ``exit_message``), sanitised and
    bounded (an exception's text is arbitrary)."""
    if isinstance(exc, SystemExit):
        said = exit_message(exc.code)
        if said is not None:
            return said
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}")
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not cost the report
        text = ""
    return cut_text(sanitize_text(f"{name}: {text}" if text else name).strip(),
                    CRASH_MESSAGE_LIMIT)


def report_failure(exc: BaseException, emitter: Reporter | None = None, *,
                   where: str = "") -> None:
    """Send a failed final naming ``exc`` from ``emitter`` (default: every started Emitter of
    this process, as the hooks' installer listed them), once per exception. Never raises."""
    try:
        if getattr(exc, _REPORTED, False):
            return
        message = crash_message(exc)
        if where:
            message = cut_text(f"{sanitize_text(where)}: {message}", CRASH_MESSAGE_LIMIT)
        for em in [emitter] if emitter is not None else _started():
            em.fail(message)
        # An exception type that refuses attributes would be reported again: harmless.
        with contextlib.suppress(Exception):
            setattr(exc, _REPORTED, True)
    except Exception:
        pass


def install_crash_hooks(started: Callable[[], Iterable[Reporter]]) -> None:
    """Chain ``sys.excepthook`` and ``threading.excepthook`` and track ``sys.exit`` (once per
    process; the Emitter calls this when it is first used), reporting through the Emitters
    ``started()`` lists. The hooks that were there are called after ours, with the same
    arguments, so tracebacks and other tools' hooks behave as before; a tracked exit is a
    SystemExit like any other to everything that catches one."""
    global _installed, _started
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        _installed = True
        _started = started
        previous_hook = sys.excepthook

        def excepthook(kind: type[BaseException], exc: BaseException,
                       tb: TracebackType | None) -> None:
            report_failure(exc)
            previous_hook(kind, exc, tb)

        sys.excepthook = excepthook
        previous_thread_hook = threading.excepthook

        def thread_excepthook(args: threading.ExceptHookArgs) -> None:
            # A non-daemon thread is work the process waits for; a daemon thread is a helper
            # (a logger's flusher, a progress bar) whose death does not end the work.
            # (A thread's SystemExit ends that thread only: Python ignores it too.)
            thread, exc = args.thread, args.exc_value
            if exc is not None and thread is not None and not thread.daemon \
                    and not isinstance(exc, SystemExit):
                report_failure(exc, where=f"thread {thread.name}")
            previous_thread_hook(args)

        threading.excepthook = thread_excepthook
        _track_exits()


# --- exits ------------------------------------------------------------------------------
# SystemExit bypasses sys.excepthook, and the interpreter tells nobody the code it exits
# with. So ``sys.exit`` (and the ``exit``/``quit`` builtins) raise a plain SystemExit that
# carries an ``_ExitMark``: the mark is dropped with the exception, and when that happens at
# the top of the main thread with no Python frame left, the interpreter has just taken the
# exception as the process's exit status (one that was caught is dropped inside running
# code). On Python 3.10 a ``@contextmanager`` around the exit keeps the exception in a
# reference cycle until after the exit flush began: the flush then collects it once, and
# the latest exit of the main thread found to be garbage is the one that ended the process.
# A bare ``raise SystemExit(...)`` is not seen; the pod's exit code still tells the watcher.


class _ExitMark:
    """Rides on a tracked SystemExit; reports its code when it is dropped as the exit."""

    __slots__ = ("code", "main", "seq")

    def __init__(self, code: object) -> None:
        global _last_seq
        self.code = code
        self.main = threading.current_thread() is threading.main_thread()
        self.seq = next(_seqs)
        _live.add(self.seq)
        if self.main:
            _last_seq = self.seq

    def __del__(self) -> None:
        global _exit_seen
        try:
            _live.discard(self.seq)
            if not self.main or _exit_seen:
                return
            if _collecting:
                # (A collected object's weak references are gone by now: marks go by seq.)
                if self.seq != _last_seq:
                    return  # an earlier exit, caught (a later one followed)
            else:
                if _exiting:
                    return
                try:
                    sys._getframe(1)
                    return  # dropped inside running code: caught, not the process's exit
                except ValueError:
                    pass
            _exit_seen = True
            report_exit(self.code)
        except Exception:
            pass


_seqs = itertools.count(1)
_live: set[int] = set()  # the marks not dropped yet
_last_seq = 0  # the main thread's latest exit
_exiting = False  # the exit flush has begun
_collecting = False  # ... and collects the garbage an exit may be caught in
_exit_seen = False  # the exit that ends the process was reported (or found clean)


def _marked(exc: SystemExit) -> SystemExit:
    # (No local variable holds the exception where it is raised: that frame, in the
    # exception's traceback, would make a cycle and delay the mark's drop.)
    exc._tidings_exit = _ExitMark(exc.code)  # type: ignore[attr-defined]
    return exc


def report_exit(code: object) -> None:
    """A non-zero exit is each started Emitter's failed final (unless it sent a final
    already: the worker's own word stands). Never raises."""
    try:
        message = exit_message(code)
        if message is None:
            return
        for em in _started():
            if not em.final_sent:
                em.fail(message)
    except Exception:
        pass


def exit_flush_begins() -> None:
    """Called by the exit flush before it flushes: an exit still held in a reference cycle
    is collected now (and reported if it is the main thread's latest); exits dropped from
    now on come too late to report."""
    global _collecting, _exiting
    try:
        if not _exit_seen and _last_seq in _live:
            _collecting = True
            try:
                gc.collect()
            finally:
                _collecting = False
    finally:
        _exiting = True


def _tracked_exit(code: object = None, /) -> NoReturn:
    """``sys.exit``, tracked."""
    raise _marked(SystemExit(code))


class _TrackedQuitter:
    """The ``exit``/``quit`` builtins (site's Quitter: close stdin, then exit), tracked."""

    def __init__(self, quitter: Any) -> None:
        self._quitter = quitter

    def __repr__(self) -> str:
        return repr(self._quitter)

    def __call__(self, code: object = None) -> None:
        with contextlib.suppress(Exception):
            sys.stdin.close()
        raise _marked(SystemExit(code))


def _track_exits() -> None:
    sys.exit = _tracked_exit
    for name in ("exit", "quit"):
        found = getattr(builtins, name, None)
        if found is not None and type(found).__name__ == "Quitter":
            setattr(builtins, name, _TrackedQuitter(found))


# --- SIGTERM ---------------------------------------------------------------------------

_sigterm_lock = threading.Lock()
_sigterm_installed = False


def install_sigterm_flush(started: Callable[[], Iterable[Reporter]], deadline_s: float) -> bool:
    """On SIGTERM (eviction, preemption, the pod's deletion) flush every started Emitter
    within ``deadline_s`` seconds, then run the handler that was there: the default one (the
    process dies of SIGTERM, after each worker without a final reported "terminated by
    SIGTERM"), or a framework's own (called with the same arguments; it decides what
    happens next). Installed once per process, and only from the main thread, when
    ``deadline_s`` > 0 (``TIDINGS_EMIT_SIGTERM_FLUSH_S=0`` opts out), and only over the
    default handler or one installed from Python (an ignored SIGTERM stays ignored; a C
    handler cannot be chained, so it is left alone). A handler installed after this one
    replaces it and runs as before. Returns whether it is installed."""
    global _sigterm_installed
    if _sigterm_installed or deadline_s <= 0:
        return _sigterm_installed
    if threading.current_thread() is not threading.main_thread():
        return False  # (signal.signal works only there; a later call from it installs)
    with _sigterm_lock:
        if _sigterm_installed:
            return True
        try:
            previous = signal.getsignal(signal.SIGTERM)
        except (AttributeError, ValueError):  # no SIGTERM on this platform
            return False
        if previous is None or previous == signal.SIG_IGN:
            return False

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            default = previous == signal.SIG_DFL
            ems = [em for em in started()]
            if default:
                for em in ems:
                    if not em.final_sent:
                        em.fail("terminated by SIGTERM")
            end = time.monotonic() + max((em.config.sigterm_flush_s for em in ems),
                                         default=deadline_s)
            for em in ems:
                with contextlib.suppress(Exception):
                    em.flush(max(0.0, end - time.monotonic()))
            if default:
                # Die of the signal, as without us (exit status 143 / killed by signal 15).
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)
            elif callable(previous):
                previous(signum, frame)

        try:
            signal.signal(signal.SIGTERM, on_sigterm)
        except (ValueError, OSError):
            return False
        _sigterm_installed = True
        return True
