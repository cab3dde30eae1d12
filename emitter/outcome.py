"""A crash is an outcome: a process that used the emitter and dies of an uncaught exception
reports a failed final for its worker (before the exit flush). ``with tidings.run():`` (the
package's ``run``) builds on the same report. This module knows no Emitter registry: whoever
installs the hooks says which Emitters a crash reports through.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from tidings.schemas.text import cut_text, sanitize_text

if TYPE_CHECKING:
    from .core import Emitter

#: A crash message's bound: the type and the start of its text say what happened; the
#: traceback belongs in the logs.
CRASH_MESSAGE_LIMIT = 300

# An exception already reported (by run(), a framework callback) carries this attribute, so
# the excepthook that sees it next does not send a second failure.
_REPORTED = "_tidings_reported"

_install_lock = threading.Lock()
_installed = False
# The Emitters a crash reports through when no one Emitter is named: set by the first install.
_started: Callable[[], Iterable[Emitter]] = list


def crash_message(exc: BaseException) -> str:
    """``"<Type>: <message>"``, sanitised and bounded (an exception's text is arbitrary)."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}")
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not cost the report
        text = ""
    return cut_text(sanitize_text(f"{name}: {text}" if text else name).strip(),
                    CRASH_MESSAGE_LIMIT)


def report_failure(exc: BaseException, emitter: Emitter | None = None, *,
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


def install_crash_hooks(started: Callable[[], Iterable[Emitter]]) -> None:
    """Chain ``sys.excepthook`` and ``threading.excepthook`` (once per process; the Emitter
    calls this when it is first used), reporting through the Emitters ``started()`` lists.
    The hooks that were there are called after ours, with the same arguments, so tracebacks
    and other tools' hooks behave as before."""
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
            thread = args.thread
            if args.exc_value is not None and thread is not None and not thread.daemon:
                report_failure(args.exc_value, where=f"thread {thread.name}")
            previous_thread_hook(args)

        threading.excepthook = thread_excepthook
