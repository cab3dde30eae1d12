"""The live parts of a task's page that are not its status: the lineage tree and the log tail
of its pods, found and streamed exactly as `tidings lineage` and `tidings logs -f` do
(cli/lineage.py; the targets, tails and mux of cli/logstream.py), once per task however many
tabs show it, and stopped a little after the last of them closes.

Bounded: at most MAX_SESSIONS sessions per server; a session keeps at most LOG_LINES lines and
LOG_CHARS characters, and a line is shown as a terminal would show it (a progress bar redrawn
with carriage returns as its last drawing) and cut at LINE_LIMIT characters, with a visible
marker, so one pod printing megabyte lines costs neither the server nor a tab more."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from dataclasses import dataclass

from tidings.cli import lineage as lin
from tidings.cli.common import CliError, safe
from tidings.cli.kube import Kube
from tidings.cli.logstream import LogMux, Options, Printer
from tidings.ui.hub import Key, Subscriber

# One count for every session: a tab that comes back to a task whose session was reaped and
# started again never mistakes the new lines for ones it saw.
_LINE_NUMBERS = itertools.count(1)
LOG_LINES = 1000  # lines kept for a tab that opens later (the page keeps as many)
LOG_CHARS = 512 * 1024  # ... and at most this many characters of them
LINE_LIMIT = 4096  # characters of one line shown (a tab's SSE message is about as large)
MAX_SESSIONS = 16  # tasks whose logs one server follows at once (a thread and streams each)
TAIL = 100  # each container's last lines, as `tidings logs --tail 100 -f`
MAX_STREAMS = 16
LINEAGE_EVERY = 10.0  # seconds between two reads of the lineage while a tab is open
IDLE_GRACE = 30.0  # a reload must not restart the streams


def shown_line(text: str) -> str:
    """What the page shows of a log line: what a terminal would leave of it (text after a
    carriage return overwrites what came before: a progress bar's last drawing), at most
    LINE_LIMIT characters, cut with a marker that says how much was left out."""
    if "\r" in text:  # (a CRLF line's \r, and blank drawings after the last, are whitespace)
        text = text.rstrip().rpartition("\r")[2]
    if len(text) <= LINE_LIMIT:
        return text
    cut = len(text) - LINE_LIMIT
    return f"{text[:LINE_LIMIT]} … [line cut: {cut:,} more characters]"


@dataclass(frozen=True, slots=True)
class LogLine:
    seq: int
    text: str
    note: bool  # the mux's own words (a pod started, ended, an error), not a log line


class _PagePrinter(Printer):
    """The mux's output into the session rather than a terminal."""

    def __init__(self, session: TaskSession) -> None:
        super().__init__()
        self.session = session

    def line(self, pod: str, container: str, stamp: str, text: str) -> None:
        self.session.add_line(f"[{pod}/{container}] {shown_line(text)}", note=False)

    def note(self, message: str) -> None:
        self.session.add_line(message, note=True)


class TaskSession:
    """The lineage and logs of one task, shared by the tabs showing it."""

    def __init__(self, kube: Kube, key: Key, loop: asyncio.AbstractEventLoop) -> None:
        self.kube, self.key, self.loop = kube, key, loop
        self.lines: deque[LogLine] = deque(maxlen=LOG_LINES)
        self.chars = 0  # the characters of the lines kept
        self.log_seq = 0
        self.fates: list[lin.PodFate] | None = None  # None: not read yet
        self.lineage_error = ""
        self.lineage_seq = 0
        self.subscribers: set[Subscriber] = set()
        self.users = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._mux: LogMux | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"tidings-ui-task-{self.key[1]}",
                         daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        if self._mux is not None:
            self._mux.stop()

    def lines_after(self, seq: int) -> list[LogLine]:
        with self._lock:
            return [line for line in self.lines if line.seq > seq]

    def add_line(self, text: str, note: bool) -> None:
        line_text = safe(text[:LINE_LIMIT * 2])  # (a note is short; a log line is cut already)
        with self._lock:
            self.log_seq = next(_LINE_NUMBERS)
            lines = self.lines
            if len(lines) == lines.maxlen:
                self.chars -= len(lines[0].text)
            lines.append(LogLine(self.log_seq, line_text, note))
            self.chars += len(line_text)
            while self.chars > LOG_CHARS and len(lines) > 1:
                self.chars -= len(lines.popleft().text)
        self._wake()

    def _wake(self) -> None:
        if not self._stopped.is_set():
            self.loop.call_soon_threadsafe(self._wake_tabs)

    def _wake_tabs(self) -> None:
        for sub in self.subscribers:
            sub.wake.set()

    def _read_lineage(self) -> lin.Found | None:
        ns, name = self.key
        try:
            found = lin.discover(self.kube, ns, name, must_exist=False)
            fates = [f for f in lin.fates(self.kube, found) if f.state != "disowned"]
            error = ""
        except CliError as err:
            found, fates, error = None, [], err.message
        with self._lock:
            changed = (fates != self.fates if self.fates is not None else True) \
                or error != self.lineage_error
            self.fates, self.lineage_error = fates, error
            if changed:
                self.lineage_seq += 1
        if changed:
            self._wake()
        return found

    def _run(self) -> None:
        ns, name = self.key
        found = self._read_lineage()
        while found is None and not self._stopped.wait(LINEAGE_EVERY):
            found = self._read_lineage()  # forbidden or unreachable: the tree says why
        if found is None:
            return
        mux = LogMux(self.kube, ns, Options(follow=True, tail=TAIL, max_streams=MAX_STREAMS),
                     _PagePrinter(self), name)
        self._mux = mux
        if self._stopped.is_set():
            return
        try:
            mux.start(found)
        except CliError as err:
            mux.fatal = err
        told = False
        while not self._stopped.wait(LINEAGE_EVERY):
            if mux.fatal is not None and not told:
                told = True
                self.add_line(f"error: {mux.fatal.message}", note=True)
            self._read_lineage()
        mux.stop()


class Sessions:
    """The open tasks' sessions, one per task."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.open_sessions: dict[Key, TaskSession] = {}

    def open(self, key: Key) -> TaskSession | None:
        """The task's session, started when it has none; None when MAX_SESSIONS are open
        and every one of them has a tab (an idle one, kept for a reload, makes room)."""
        session = self.open_sessions.get(key)
        if session is None:
            if len(self.open_sessions) >= MAX_SESSIONS:
                idle = next((s for s in self.open_sessions.values() if s.users <= 0), None)
                if idle is None:
                    return None
                del self.open_sessions[idle.key]
                idle.stop()
            session = TaskSession(self.kube, key, asyncio.get_running_loop())
            self.open_sessions[key] = session
            session.start()
        session.users += 1
        return session

    def close(self, session: TaskSession) -> None:
        session.users -= 1
        if session.users <= 0:
            asyncio.get_running_loop().call_later(IDLE_GRACE, self._reap, session)

    def _reap(self, session: TaskSession) -> None:
        if session.users <= 0 and self.open_sessions.get(session.key) is session:
            del self.open_sessions[session.key]
            session.stop()

    def stop_all(self) -> None:
        for session in self.open_sessions.values():
            session.stop()
        self.open_sessions.clear()
