"""One container's log, like stern's tail: the query (first request or resume), reading
with resume that repeats no line, the final drain of a pod that ended, and the printer and
flags the lines go through.

A tail never asks the API server about its pod itself: when its stream ends it asks the
PodView (logtargets.py), which answers many tails from one list of the app's pods.
"""

from __future__ import annotations

import calendar
import contextlib
import re
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson
from urllib3.response import BaseHTTPResponse

from tidings.cli.common import CliError, safe
from tidings.cli.kube import Action, ApiError, Kube, lines
from tidings.cli.logtargets import PodView, Target
from tidings.kube.flowcontrol import Backoff
from tidings.schemas.wire.contract import TERMINAL_PHASES, pods_path

# stern-like palette: distinct, readable on dark and light terminals.
_PALETTE = (31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96)
_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                 r"(Z|[+-]\d\d:\d\d)$")
# orjson leaves DEL and the C1 controls raw; a terminal may act on them, so they are escaped.
_C1 = re.compile("[\x7f-\x9f]")


def ts_key(stamp: str) -> int | None:
    """RFC 3339(Nano) -> integer nanoseconds since the epoch (exact; strings do not sort)."""
    m = _TS.match(stamp)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    frac = int((m.group(7) or "0").ljust(9, "0"))
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    zone = m.group(8)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        secs -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return secs * 1_000_000_000 + frac


def since_time(key: int) -> str:
    """The sinceTime for a resume: the second of `key` (the kubelet has second precision)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(key // 1_000_000_000))


@dataclass
class Dedup:
    """Which lines of a stream were already shown, so a resumed stream repeats none.

    Keeps the newest timestamp shown and how many lines carried exactly it; after a
    reconnect, lines older than it are skipped, and so are that many lines equal to it."""

    last: int | None = None
    at_last: int = 0
    _skip: int = 0

    def reconnect(self) -> None:
        self._skip = self.at_last

    def admit(self, key: int | None) -> bool:
        if key is None or self.last is None or key > self.last:
            if key is not None:
                self.last, self.at_last, self._skip = key, 1, 0
            return True
        if key < self.last:
            return False
        if self._skip > 0:
            self._skip -= 1
            return False
        self.at_last += 1
        return True


class Printer:
    """Serialises output from many streams: whole lines, one writer at a time."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None,
                 color: bool = False, timestamps: bool = False, prefix: bool = True,
                 jsonl: bool = False) -> None:
        self.out = out
        self.err = err
        self.color = color
        self.timestamps = timestamps
        self.prefix = prefix
        self.jsonl = jsonl  # one JSON object per line: pod, container, time (if known), line
        self.lock = threading.Lock()

    def _prefix(self, pod: str, container: str) -> str:
        text = f"[{safe(pod)}/{safe(container)}]"
        if not self.color:
            return text
        code = _PALETTE[zlib.crc32(pod.encode()) % len(_PALETTE)]
        return f"\x1b[{code}m{text}\x1b[0m"

    def line(self, pod: str, container: str, stamp: str, text: str) -> None:
        if self.jsonl:
            obj = {"pod": pod, "container": container, **({"time": stamp} if stamp else {}),
                   "line": text}
            out = _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", orjson.dumps(obj).decode()) + "\n"
        else:
            shown = f"{stamp} " if self.timestamps and stamp else ""
            head = f"{self._prefix(pod, container)} " if self.prefix else ""
            out = f"{head}{shown}{safe(text)}\n"
        with self.lock:
            stream = self.out or sys.stdout
            stream.write(out)
            stream.flush()

    def note(self, message: str) -> None:
        with self.lock:
            stream = self.err or sys.stderr
            stream.write(f"{safe(message)}\n")
            stream.flush()


@dataclass
class Options:
    follow: bool = False
    since_seconds: int | None = None
    container: str | None = None
    max_streams: int = 16
    poll_interval: float = 2.0  # how often -f lists the app's pods to see which finished
    tail: int | None = None  # tailLines of each stream's first request (not of a resume)
    since_time: str | None = None  # RFC 3339; the first request's sinceTime
    previous: bool = False  # the previous instance of each container (never followed)
    include: tuple[re.Pattern[str], ...] = ()  # a line is shown when it matches one of these
    exclude: tuple[re.Pattern[str], ...] = ()  # ... and none of these

    def shows(self, text: str) -> bool:
        if self.include and not any(r.search(text) for r in self.include):
            return False
        return not any(r.search(text) for r in self.exclude)


_RETRY_CAP = 5.0


@dataclass
class Tail:
    """The log stream of one target; ``run`` returns why it ended ("" for a plain end)."""

    target: Target
    dedup: Dedup = field(default_factory=Dedup)
    # The open response, shut down by the mux to end or wake the read.
    resp: BaseHTTPResponse | None = None
    final_pass: bool = False  # the pod finished: one last read, then done
    started: float = 0.0  # when the current response was opened (monotonic)

    def query(self, opt: Options, follow: bool) -> dict[str, Any]:
        """The first request honours --since/--since-time/--tail; a resume starts at the
        second of the newest line shown (Dedup skips what was already printed)."""
        query: dict[str, Any] = {"container": self.target.container, "timestamps": "true",
                                 "follow": "true" if follow else None,
                                 "previous": "true" if opt.previous else None}
        if self.dedup.last is not None:
            query["sinceTime"] = since_time(self.dedup.last)
        else:
            if opt.since_time:
                query["sinceTime"] = opt.since_time
            elif opt.since_seconds:
                query["sinceSeconds"] = opt.since_seconds
            if opt.tail is not None:
                query["tailLines"] = opt.tail
        return query

    def run(self, kube: Kube, ns: str, opt: Options, printer: Printer, pods: PodView,
            stopped: threading.Event) -> str:
        t = self.target
        path = pods_path(ns, t.pod) + "/log"
        action = Action("get", "pods/log", ns, t.pod)
        backoff = Backoff(base=0.2, cap=_RETRY_CAP, jitter=0.0)
        while not stopped.is_set():
            follow = opt.follow and not self.final_pass and not opt.previous
            broken = False
            self.started = time.monotonic()
            try:
                self.resp = kube.stream(path, self.query(opt, follow), action=action,
                                        read_timeout=30.0 if follow else 60.0)
            except ApiError as err:
                if err.denied:
                    raise
                if err.not_found:
                    return "pod gone"
                if err.bad_request and opt.previous:
                    why = err.message.removeprefix("invalid input: ")
                    return f"no logs: no previous instance ({why})"
                if not err.bad_request and not follow:
                    raise
                # 400: the container is not running yet (Pending) or already gone.
                broken = True
            except CliError:
                if not follow:
                    raise
                broken = True  # the cluster is unreachable for now; keep trying
            if self.resp is not None:
                self.dedup.reconnect()
                try:
                    for raw in lines(self.resp):
                        self._emit(raw, opt, printer)
                except Exception:
                    broken = True  # connection reset, read timeout, shutdown by the mux
                finally:
                    _release(self.resp)
                    self.resp = None
                if time.monotonic() - self.started > 5.0:
                    backoff.reset()
            if stopped.is_set():
                return ""
            if self.final_pass:
                return "finished"
            if not follow and not broken:
                return ""
            # Ended or broken while following: is this still our pod, and still running?
            gone, phase = pods.check(t, since=self.started)
            if gone:
                return gone
            if phase in TERMINAL_PHASES:
                self.final_pass = True  # drain what was written before it ended
                continue
            if not follow:
                if phase == "Running":  # running, and has written nothing (yet)
                    return "no logs: the container has written none (pod Running)"
                return f"no logs: container not running (pod {phase or 'Unknown'})"
            stopped.wait(backoff.next())
        return ""

    def _emit(self, raw: bytes, opt: Options, printer: Printer) -> None:
        text = raw.decode("utf-8", "replace")
        stamp, sep, rest = text.partition(" ")
        key = ts_key(stamp) if sep else None
        if key is None:
            stamp, rest = "", text
        if self.dedup.admit(key) and opt.shows(rest):
            printer.line(self.target.pod, self.target.container, stamp, rest)


def shutdown(resp: BaseHTTPResponse | None) -> None:
    """End a response another thread reads (its read raises, and the reader decides)."""
    if resp is None:
        return
    with contextlib.suppress(Exception):
        resp.shutdown()


def _release(resp: BaseHTTPResponse) -> None:
    with contextlib.suppress(Exception):
        resp.release_conn()
