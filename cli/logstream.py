"""The engine of `tidings logs`: one stream per (lineage pod, container), bounded in number,
prefixed and coloured per pod like stern, resumed with sinceTime without repeating lines.

Pods are identified by name AND uid (from their PodSpawned record, the TaskFeedback status or
the label list); a pod that now carries the name under another uid is someone else and is never
streamed, nor is one without the label tidings.dev/task=<app>. With -f, one list of the app's
labelled pods per tick tells which streams' pods went away or finished.
"""

from __future__ import annotations

import calendar
import contextlib
import re
import sys
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from tidings.cli.common import EXIT_ERROR, EXIT_NOT_FOUND, CliError, safe
from tidings.cli.kube import Action, ApiError, Kube, lines
from tidings.cli.lineage import vouches
from tidings.schemas import TASK_LABEL, LineageEntry
from tidings.schemas.contract import TERMINAL_PHASES, pod_selector

# stern-like palette: distinct, readable on dark and light terminals.
_PALETTE = (31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96)
_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?"
                 r"(Z|[+-]\d\d:\d\d)$")
_RETRY_CAP = 5.0
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


@dataclass
class Stream:
    pod: str
    uid: str
    container: str
    dedup: Dedup = field(default_factory=Dedup)
    resp: Any = None
    final_pass: bool = False  # the pod finished: one last read, then done


class LogMux:
    """Starts and bounds the streams; follow mode also watches pods finish."""

    def __init__(self, kube: Kube, namespace: str, options: Options, printer: Printer,
                 app: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.app = app  # every streamed pod carries tidings.dev/task=<app> (see _start_pod)
        self.opt = options
        self.printer = printer
        self.stopped = threading.Event()
        self.fatal: CliError | None = None
        self._slots = threading.BoundedSemaphore(max(1, options.max_streams))
        self._lock = threading.Lock()
        self._seen: set[str] = set()  # pod uids taken care of
        self._active: dict[tuple[str, str], Stream] = {}
        self._waiting = 0
        self._threads: list[threading.Thread] = []

    # -- lifecycle ------------------------------------------------------------------------

    def add(self, entries: Iterable[LineageEntry]) -> None:
        for entry in entries:
            with self._lock:
                if entry.pod.uid in self._seen:
                    continue
                self._seen.add(entry.pod.uid)
            self.spawn(self._start_pod, entry)

    def spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=self._guard, args=(target, *args), daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _guard(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except CliError as err:
            self._fail(err)
        except Exception as err:  # a bug in one stream must not kill the others silently
            self._fail(CliError(f"internal error in a log stream: {type(err).__name__}: {err}",
                                EXIT_ERROR))

    def _fail(self, err: CliError) -> None:
        with self._lock:
            if self.fatal is None:
                self.fatal = err
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            streams = list(self._active.values())
        for s in streams:
            _shutdown(s.resp)

    def wait(self) -> None:
        """Until every stream has ended (without -f) or stop() (with -f)."""
        while not self.stopped.is_set():
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive and not self.opt.follow:
                break
            self.stopped.wait(0.1)
        if self.fatal is not None:
            raise self.fatal

    def start_monitor(self) -> None:
        self.spawn(self._monitor)

    # -- per pod ----------------------------------------------------------------------------

    def _start_pod(self, entry: LineageEntry) -> None:
        name, uid = entry.pod.name, entry.pod.uid
        delay, deadline = 0.2, time.monotonic() + 30.0
        while True:
            pod = self.kube.get_pod(self.ns, name)
            if pod is not None:
                break
            if not self.opt.follow or time.monotonic() > deadline or self.stopped.is_set():
                self.printer.note(f"- {name}: gone (uid {uid[:8]}), no logs")
                return
            self.stopped.wait(delay)  # the record may arrive before the pod is visible
            delay = min(delay * 2, 2.0)
        current = str((pod.get("metadata") or {}).get("uid") or "")
        if current != uid:
            self.printer.note(f"- {name}: replaced (recorded uid {uid[:8]}, now {current[:8]}); "
                              "not streaming the new pod, it is not in the lineage")
            return
        if not vouches(entry, pod):  # the record's word is not enough (cli/lineage.py)
            self.printer.note(f"- {name}: not labelled {TASK_LABEL}={entry.subject.name}; "
                              "not streaming a pod that does not confirm the lineage record")
            return
        spec = pod.get("spec") or {}
        names = [str(c.get("name")) for c in spec.get("containers") or [] if c.get("name")]
        if self.opt.container is not None:
            if self.opt.container not in names:  # like kubectl: an error, not silence
                raise CliError(f"not found: container {self.opt.container!r} in pod {name} "
                               f"(its containers: {', '.join(names) or 'none'})",
                               EXIT_NOT_FOUND)
            names = [self.opt.container]
        for c in names:
            self.spawn(self._run_stream, Stream(name, uid, c))

    def _run_stream(self, s: Stream) -> None:
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self._waiting += 1
                waiting = self._waiting
            self.printer.note(
                f"! --max-streams={self.opt.max_streams} reached: [{s.pod}/{s.container}] waits "
                f"for a stream to end ({waiting} waiting); raise --max-streams to see it now")
            while not self._slots.acquire(timeout=0.2):
                if self.stopped.is_set():
                    return
            with self._lock:
                self._waiting -= 1
        try:
            with self._lock:
                self._active[(s.uid, s.container)] = s
            if self.opt.follow:  # stern-style lifecycle notes, on stderr
                self.printer.note(f"+ [{s.pod}/{s.container}]")
            why = self._stream_loop(s)
            if why and (self.opt.follow or why.startswith("no logs")):
                self.printer.note(f"- [{s.pod}/{s.container}] {why}")
        finally:
            with self._lock:
                self._active.pop((s.uid, s.container), None)
            self._slots.release()

    def _stream_loop(self, s: Stream) -> str:
        path = f"/api/v1/namespaces/{self.ns}/pods/{s.pod}/log"
        action = Action("get", "pods/log", self.ns, s.pod)
        backoff = 0.2
        while not self.stopped.is_set():
            follow = self.opt.follow and not s.final_pass and not self.opt.previous
            query: dict[str, Any] = {"container": s.container, "timestamps": "true",
                                     "follow": "true" if follow else None,
                                     "previous": "true" if self.opt.previous else None}
            if s.dedup.last is not None:
                query["sinceTime"] = since_time(s.dedup.last)
            else:
                if self.opt.since_time:
                    query["sinceTime"] = self.opt.since_time
                elif self.opt.since_seconds:
                    query["sinceSeconds"] = self.opt.since_seconds
                if self.opt.tail is not None:
                    query["tailLines"] = self.opt.tail
            broken = False
            try:
                s.resp = self.kube.stream(path, query, action=action,
                                          read_timeout=30.0 if follow else 60.0)
            except ApiError as err:
                if err.status in (401, 403):
                    raise
                if err.status == 404:
                    return "pod gone"
                if err.status == 400 and self.opt.previous:
                    why = err.message.removeprefix("invalid input: ")
                    return f"no logs: no previous instance ({why})"
                if err.status != 400 and not follow:
                    raise
                # 400: the container is not running yet (Pending) or already gone.
                broken = True
            except CliError:
                if not follow:
                    raise
                broken = True  # the cluster is unreachable for now; keep trying
            if s.resp is not None:
                s.dedup.reconnect()
                started = time.monotonic()
                try:
                    for raw in lines(s.resp):
                        self._emit(s, raw)
                except Exception:
                    broken = True  # connection reset, read timeout, shutdown by the monitor
                finally:
                    _release(s.resp)
                    s.resp = None
                if time.monotonic() - started > 5.0:
                    backoff = 0.2
            if self.stopped.is_set():
                return ""
            if s.final_pass:
                return "finished"
            if not follow and not broken:
                return ""
            # Ended or broken while following: is this still our pod, and still running?
            try:
                pod = self.kube.get_pod(self.ns, s.pod)
            except ApiError as err:
                if err.status in (401, 403):
                    raise
                pod = {}
            except CliError:
                pod = {}
            if pod is None:
                return "pod gone"
            if pod and str((pod.get("metadata") or {}).get("uid") or "") != s.uid:
                return "pod replaced"
            if pod and ((pod.get("metadata") or {}).get("labels") or {}).get(TASK_LABEL) \
                    != self.app:  # it no longer confirms it belongs to the app
                return f"pod no longer labelled {TASK_LABEL}={self.app}"
            phase = str((pod.get("status") or {}).get("phase") or "")
            if phase in TERMINAL_PHASES:
                s.final_pass = True  # drain what was written before it ended
                continue
            if not follow:
                return f"no logs: container not running (pod {phase or 'Unknown'})"
            self.stopped.wait(backoff)
            backoff = min(backoff * 2, _RETRY_CAP)
        return ""

    def _emit(self, s: Stream, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        stamp, sep, rest = text.partition(" ")
        key = ts_key(stamp) if sep else None
        if key is None:
            stamp, rest = "", text
        if s.dedup.admit(key) and self.opt.shows(rest):
            self.printer.line(s.pod, s.container, stamp, rest)

    # -- follow: notice pods that finish ----------------------------------------------------

    def _monitor(self) -> None:
        """One list of the app's labelled pods per tick (not a GET per stream): a stream whose
        pod is not in it (gone, replaced, label removed) or has finished is shut down; its
        reader wakes, reads that one pod to find out why, and drains or ends."""
        path = f"/api/v1/namespaces/{self.ns}/pods"
        query = {"labelSelector": pod_selector(self.app)}
        action = Action("list", "pods", self.ns)
        may_list = True
        while not self.stopped.wait(self.opt.poll_interval):
            with self._lock:
                streams = [s for s in self._active.values()
                           if s.resp is not None and not s.final_pass]
            if not streams:
                continue
            try:
                if may_list:
                    pods, _ = self.kube.list_all(path, query, action=action)
                else:  # allowed to get pods but not to list them: one GET per stream
                    pods = [p for p in (self.kube.get_pod(self.ns, s.pod) for s in streams)
                            if p is not None]
            except ApiError as err:
                may_list = may_list and err.status != 403
                continue
            except CliError:
                continue  # unreachable for now: the next tick asks again
            phases = {str((p.get("metadata") or {}).get("uid") or ""):
                      str((p.get("status") or {}).get("phase") or "") for p in pods}
            for s in streams:
                if phases.get(s.uid, "Succeeded") in TERMINAL_PHASES:
                    _shutdown(s.resp)


def _shutdown(resp: Any) -> None:
    if resp is None:
        return
    with contextlib.suppress(Exception):
        resp.shutdown()


def _release(resp: Any) -> None:
    with contextlib.suppress(Exception):
        resp.release_conn()
