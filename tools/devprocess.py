"""The local plane's processes: one binary run in its own session with its log in the state dir,
polled until a condition holds, stopped with its whole process group; and the one error type
the launchers raise (tools/devcluster.py, tools/devnode.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class ControlPlaneError(RuntimeError):
    """A one-line, user-facing reason why the control plane cannot start or be reached."""


class BinariesMissing(ControlPlaneError):
    """The built binaries are not where the launcher looks (e.g. after a pip install)."""


def wait_for(condition: Callable[[], bool], timeout: float, what: str,
             proc: Process | None = None) -> None:
    """Poll a condition until it holds; fail fast if the process it depends on died."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise ControlPlaneError(f"{proc.name} exited while waiting for {what}: {proc.tail()}")
        with contextlib.suppress(Exception):
            if condition():
                return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Process:
    """One control-plane binary run in its own session, logging to a file in the state dir."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    env: dict[str, str] | None = None  # None: this process's environment
    # cgroup.procs files it joins before it runs (a real node's, which tracks its children).
    cgroup_procs: list[Path] = field(default_factory=list)

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=self.env,
                preexec_fn=self._join_cgroups if self.cgroup_procs else None,
            )
        self.pid = self.popen.pid

    def _join_cgroups(self) -> None:
        # In the child before exec: whatever it forks is then in the cgroups too.
        for procs in self.cgroup_procs:
            procs.write_text(str(os.getpid()))

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.pid is None or not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.popen is not None:
                self.popen.wait(timeout=5)
        if self.popen is not None:
            self.popen.poll()

    def tail(self, lines: int = 3) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return "(no log)"
        return " | ".join(text)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): reap it if it is ours; one that is not (a process of an
    # earlier `tidings dev up`) has exited all the same, however late its parent reaps it.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
