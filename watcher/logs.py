"""The watcher's logs: text or JSON lines, a validated level, each rejection logged once per event.

Only the standard library is imported at module level: the CLI imports the enums here to build
`tidings watcher run --help`, which must stay fast.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Hashable
from typing import IO, TYPE_CHECKING

from tidings._compat import StrEnum

if TYPE_CHECKING:
    from tidings.schemas.wire.event import ParsedEvent, TaskRef
    from tidings.schemas.wire.rejection import Rejection

log = logging.getLogger("tidings.watcher")


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    text = "text"
    json = "json"  # one JSON object per line, for log collectors


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def level_number(level: str) -> int:
    """``"debug"``/``"INFO"``/... -> the logging level; ValueError names the choices."""
    try:
        return int(getattr(logging, LogLevel(level.lower()).value.upper()))
    except ValueError:
        choices = ", ".join(v.value for v in LogLevel)
        raise ValueError(f"unknown log level {level[:40]!r} (one of {choices})") from None


def formatter(fmt: LogFormat) -> logging.Formatter:
    """Text as before, or JSON objects with time, level, logger, message and every ``extra``
    field the call passed (task, namespace, reason, ...); a traceback stays inside its line."""
    if fmt is LogFormat.text:
        return logging.Formatter(TEXT_FORMAT)
    from pythonjsonlogger.orjson import OrjsonFormatter

    return OrjsonFormatter("%(levelname)s %(name)s %(message)s", timestamp="time",
                           rename_fields={"levelname": "level", "name": "logger",
                                          "exc_info": "traceback"})


def configure(level: str, fmt: LogFormat, stream: IO[str] | None = None) -> None:
    """Route every log record of the process to ``stream`` (stderr) in ``fmt``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_number(level))
    logging.captureWarnings(True)  # a Python warning is a record too, not a stray stderr line
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are ours to report


def announcer(fmt: LogFormat, stream: IO[str] | None = None) -> Callable[..., None]:
    """The process's status lines on stdout ("http on HOST:PORT", "leading as ...") in the
    same format as the logs, so that with JSON every line the watcher prints parses."""
    if fmt is LogFormat.text:
        return print
    form = formatter(fmt)

    def announce(message: str, flush: bool = True) -> None:
        record = logging.LogRecord("tidings.watcher", logging.INFO, __file__, 0, message,
                                   None, None)
        print(form.format(record), file=stream or sys.stdout, flush=flush)

    return announce


class OncePerEvent:
    """A bounded memo of the events already reported, so a relist (which delivers every event
    again) does not repeat a rejection's log line. Keys carry the resourceVersion: a changed
    event is reported again. Least recently seen keys go first beyond ``size``."""

    def __init__(self, size: int = 10_000) -> None:
        from cachetools import LRUCache

        self._seen: LRUCache[Hashable, bool] = LRUCache(maxsize=size)
        self._lock = threading.Lock()  # fold workers report concurrently

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is seen (while it stays in the memo)."""
        with self._lock:
            if key in self._seen:
                self._seen[key] = True  # refresh: a key seen at every relist stays remembered
                return False
            self._seen[key] = True
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


def task_fields(task: TaskRef) -> dict[str, str]:
    """The ``extra`` of a log line about one task (JSON lines carry them as fields)."""
    return {"namespace": task.namespace, "task": task.name}


def event_key(obj: object) -> tuple[str, str, str] | None:
    """(namespace, name, resourceVersion) of a raw Event object, or None without a name."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    return (str(meta.get("namespace") or ""), meta["name"], str(meta.get("resourceVersion") or ""))


class RejectionLog:
    """The watcher's word on a refused event: counted each time (``count``, the metric by
    reason), logged once per event (a relist delivers every event again)."""

    def __init__(self, count: Callable[[str], None]) -> None:
        self.count = count
        self.logged = OncePerEvent()

    def refused(self, task: TaskRef, ev: ParsedEvent, rejection: Rejection) -> bool:
        """Count and log a refused fact of ``task``; True the first time this event is
        refused (the task's status counts it once)."""
        self.count(rejection.reason.value)
        if not self.logged.first((task.namespace, ev.name, ev.resource_version)):
            return False
        log.info("rejected %s/%s: %s", task.namespace, ev.name, rejection.message,
                 extra={**task_fields(task), "event": ev.name, "reason": rejection.reason.value})
        return True

    def unparsed(self, rejection: Rejection, raw: object) -> None:
        """An event that did not parse, counted per delivery (as documented); logged once
        when it can be named (``raw``: the Event object or its watch line), while a nameless
        one is counted only, its reason being all there is to say."""
        self.count(rejection.reason.value)
        if isinstance(raw, bytes | str):
            import orjson

            try:
                raw = orjson.loads(raw).get("object")
            except Exception:  # not JSON, or not a watch event: nameless
                raw = None
        key = event_key(raw)
        if key is not None and self.logged.first(key):
            log.info("rejected %s/%s: %s: %s", key[0], key[1], rejection.reason.value,
                     rejection.message, extra={"namespace": key[0], "event": key[1],
                                               "reason": rejection.reason.value})
