"""The engine of `tidings logs`, shaped like stern: targets (logtargets.py: which pod and
container, confirmed by name, uid and label), tails (logtail.py: one container's stream with
resume and drain) and this bounded mux, which runs at most --max-streams tails at once and,
with -f, lists the app's pods once per tick to end the tails whose pod finished or left.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from tidings.cli import lineage as lin
from tidings.cli.common import EXIT_ERROR, CliError
from tidings.cli.kube import Kube
from tidings.cli.logtail import Dedup, Options, Printer, Tail, shutdown, since_time, ts_key
from tidings.cli.logtargets import PodView, Target, targets
from tidings.schemas import TASK_LABEL, LineageEntry
from tidings.schemas.wire.contract import TERMINAL_PHASES

__all__ = ["Dedup", "LogMux", "Options", "Printer", "Target", "since_time", "ts_key"]


class LogMux:
    """Starts and bounds the tails; follow mode also watches their pods end."""

    def __init__(self, kube: Kube, namespace: str, options: Options, printer: Printer,
                 app: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.app = app  # every streamed pod carries tidings.dev/task=<app> (see logtargets)
        self.opt = options
        self.printer = printer
        self.pods = PodView(kube, namespace, app)
        self.stopped = threading.Event()
        self.fatal: CliError | None = None
        self._slots = threading.BoundedSemaphore(max(1, options.max_streams))
        self._lock = threading.Lock()
        self._seen: set[str] = set()  # pod uids taken care of
        self._active: dict[Target, Tail] = {}
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

    def spawn(self, target: Callable[..., Any], *args: Any) -> None:
        t = threading.Thread(target=self._guard, args=(target, *args), daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _guard(self, target: Callable[..., Any], *args: Any) -> None:
        try:
            target(*args)
        except CliError as err:
            self._stop_with(err)
        except Exception as err:  # a bug in one stream must not kill the others silently
            self._stop_with(CliError(
                f"internal error in a log stream: {type(err).__name__}: {err}", EXIT_ERROR))

    def _stop_with(self, err: CliError) -> None:
        with self._lock:
            if self.fatal is None:
                self.fatal = err
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        with self._lock:
            tails = list(self._active.values())
        for s in tails:
            shutdown(s.resp)

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

    def start(self, found: lin.Found) -> None:
        """Stream the pods ``found`` (lineage.discover) and, when following, the pods that
        appear later, by their lineage records and by their labels (a record never hides
        them): `tidings logs` and the page of a task (tidings.ui) start the same way."""
        k, ns, app = self.kube, self.ns, self.app
        if found.key_rvs:  # the task keys that found its pods: the monitor lists by those
            self.pods.keys = tuple(found.key_rvs)
        if not found.entries:
            self.printer.note(f"waiting for pods of app {app!r} in namespace {ns} ...")
        self.add(found.entries)
        if not self.opt.follow:
            return
        self.start_monitor()
        self.spawn(lambda: self.add(lin.follow(k, ns, app, found.events_rv, self.stopped)))
        # By the keys that found pods, else by tidings.dev/task.
        for key, rv in (found.key_rvs or {TASK_LABEL: found.pods_rv}).items():
            self.spawn(lambda key=key, rv=rv: self.add(
                lin.follow_labelled(k, ns, app, rv, self.stopped, key)))

    # -- per pod, per tail ----------------------------------------------------------------

    def _start_pod(self, entry: LineageEntry) -> None:
        for t in targets(self.kube, self.ns, entry, self.opt, self.printer, self.stopped):
            self.spawn(self._run_tail, Tail(t))

    def _run_tail(self, s: Tail) -> None:
        t = s.target
        if not self._slots.acquire(blocking=False):
            with self._lock:
                self._waiting += 1
                waiting = self._waiting
            self.printer.note(
                f"! --max-streams={self.opt.max_streams} reached: [{t.pod}/{t.container}] "
                f"waits for a stream to end ({waiting} waiting); raise --max-streams to see "
                "it now")
            while not self._slots.acquire(timeout=0.2):
                if self.stopped.is_set():
                    return
            with self._lock:
                self._waiting -= 1
        try:
            with self._lock:
                self._active[t] = s
            if self.opt.follow:  # stern-style lifecycle notes, on stderr
                self.printer.note(f"+ [{t.pod}/{t.container}]")
            why = s.run(self.kube, self.ns, self.opt, self.printer, self.pods, self.stopped)
            if why and (self.opt.follow or why.startswith("no logs")):
                self.printer.note(f"- [{t.pod}/{t.container}] {why}")
        finally:
            with self._lock:
                self._active.pop(t, None)
            self._slots.release()

    # -- follow: notice pods that end -----------------------------------------------------

    def _monitor(self) -> None:
        """One list of the app's labelled pods per tick (not a GET per stream): a tail whose
        pod is not in it (gone, replaced, label removed) or has finished is shut down; it
        wakes, reads the same list (logtargets.PodView) and drains or ends."""
        while not self.stopped.wait(self.opt.poll_interval):
            with self._lock:
                tails = [s for s in self._active.values()
                         if s.resp is not None and not s.final_pass]
            if not tails:
                continue
            if self.pods.may_list:
                phases = self.pods.refresh()
                if phases is None:
                    continue  # unreachable or forbidden for now: the next tick asks again
                ended = [s for s in tails
                         if phases.get(s.target.uid, "Succeeded") in TERMINAL_PHASES]
            else:  # allowed to get pods but not to list them: one GET per stream
                ended = [s for s in tails if _ended(self.pods.check(s.target, s.started))]
            for s in ended:
                shutdown(s.resp)


def _ended(check: tuple[str, str]) -> bool:
    gone, phase = check
    return bool(gone) or phase in TERMINAL_PHASES
