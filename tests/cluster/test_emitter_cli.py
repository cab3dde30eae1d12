"""`tidings emit ...` against the real control plane: exit 0 only when delivered; 2 invalid
input, 3 not delivered, 4 forbidden; errors are one line on stderr."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.cluster.test_emitter import TASK, parsed_events, workload
from tidings.cli.main import app
from tidings.schemas.wire.payloads import DeckReady, LogLink, Progress, Window, span_summaries
from tools.devcluster import ControlPlane

TIDINGS = str(Path(sys.executable).parent / "tidings")


def env_for(control_plane: ControlPlane, admin: Any, namespace: str,
            user: str = "admin") -> dict[str, str]:
    me = workload(admin, namespace)
    return {"KUBECONFIG": str(control_plane.kubeconfig(user)), "POD_NAME": me.pod_name,
            "POD_UID": me.pod_uid, "POD_NAMESPACE": namespace, "TIDINGS_TASK": TASK}


def test_cli_runner_delivers_each_kind(control_plane: ControlPlane, admin: Any,
                                       namespace: str) -> None:
    runner = CliRunner()
    env = env_for(control_plane, admin, namespace)
    for args in (["log-link", "--name", "wandb", "--url", "https://wandb.ai/acme/runs/3"],
                 ["deck-ready", "--name", "report", "--uri", "s3://bucket/deck.html"],
                 ["progress", "1.0", "--message", "done", "--final"],
                 ["span", "download", "--start", "2026-11-30T04:00:00Z",
                  "--end", "1796011230.5", "--error"]):
        result = runner.invoke(app, ["emit", *args], env=env)
        assert result.exit_code == 0, (args, result.output)
    payloads = {type(p.payload): p.payload for p in parsed_events(admin, namespace)}
    assert payloads[LogLink].url == "https://wandb.ai/acme/runs/3"  # type: ignore[union-attr]
    assert payloads[DeckReady].uri == "s3://bucket/deck.html"  # type: ignore[union-attr]
    assert payloads[Progress].final  # type: ignore[union-attr]
    (span,) = span_summaries(payloads[Window])  # a span leaves in its window
    assert (span.count, span.errors, span.total_s) == (1, 1, 30.5)


def test_flags_override_the_environment(control_plane: ControlPlane, admin: Any,
                                        namespace: str) -> None:
    env = env_for(control_plane, admin, namespace)
    result = CliRunner().invoke(app, ["emit", "progress", "0.5", "--task", "other-task"], env=env)
    assert result.exit_code == 0, result.output
    (event,) = parsed_events(admin, namespace)
    assert event.task.name == "other-task"


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "POD_NAME", "POD_UID", "POD_NAMESPACE", "TIDINGS_TASK")}
    return subprocess.run([TIDINGS, "emit", *args], env={**base, **env}, capture_output=True,
                          text=True, timeout=60)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_subprocess_exit_codes(control_plane: ControlPlane, admin: Any, namespace: str,
                               tmp_path: Path) -> None:
    env = env_for(control_plane, admin, namespace)
    ok = run(["log-link", "--name", "logs", "--url", "https://grafana.example/d/1"], env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""

    bad = run(["log-link", "--name", "x", "--url", "javascript:alert(1)"], env)
    assert bad.returncode == 2
    assert "http and https" in one_line(bad.stderr)

    no_task = run(["progress", "0.5"], {**env, "TIDINGS_TASK": ""})
    assert no_task.returncode == 2
    assert "--task" in one_line(no_task.stderr)

    bad_time = run(["span", "s", "--start", "yesterday", "--end", "1"], env)
    assert bad_time.returncode == 2
    assert "--start" in one_line(bad_time.stderr)

    alice = run(["deck-ready", "--name", "d", "--uri", "s3://b/d"],
                {**env, "KUBECONFIG": str(control_plane.kubeconfig("alice"))})
    assert alice.returncode == 4
    assert one_line(alice.stderr).startswith("error: forbidden")

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = control_plane.write_kubeconfig(tmp_path / "dead.yaml", "admin",
                                          control_plane.tokens["admin"])
    dead.write_text(dead.read_text().replace(control_plane.server, f"https://127.0.0.1:{port}"))
    down = run(["progress", "0.5", "--timeout", "1", "--kubeconfig", str(dead)], env)
    assert down.returncode == 3
    assert "not delivered" in one_line(down.stderr)

    nowhere = run(["progress", "0.5"], {**env, "KUBECONFIG": str(tmp_path / "missing.yaml"),
                                        "HOME": str(tmp_path)})
    assert nowhere.returncode == 3
    assert "no cluster configured" in one_line(nowhere.stderr)

    events = parsed_events(admin, namespace)
    assert [p.reason for p in events] == ["LogLink"]  # only the delivered one


def test_invalid_utf8_in_argv_is_delivered_made_valid(control_plane: ControlPlane, admin: Any,
                                                      namespace: str) -> None:
    """`tidings emit progress 0.5 --message "$(printf '\\xc3 step')"` was
    "not delivered within 15s: timed out" (the sender thread failed on the lone surrogate
    Python makes of the byte). Every text argument is made valid (U+FFFD) and delivered."""
    env = env_for(control_plane, admin, namespace)
    base = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "POD_NAME", "POD_UID", "POD_NAMESPACE", "TIDINGS_TASK")}

    def emit(*args: str | bytes) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TIDINGS, "emit", *args], env={**base, **env},
                              capture_output=True, text=True, timeout=60)

    for args in (("progress", "0.5", "--message", b"\xc3 step"),
                 ("metric", b"loss\xff", "0.25", "--step", "3"),
                 ("log-link", "--name", b"w\xc3andb", "--url", b"https://wandb.example/r\xe9"),
                 ("span", b"load\xc3", "--start", "1796011200", "--end", "1796011201"),
                 ("fail", "--message", b"disk \xff\xfe full", "--fraction", "0.5")):
        done = emit(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert done.stderr == ""
    # A name still refused for what it is (a control character) says so in one line.
    bad = emit("log-link", "--name", b"a\x01\xc3", "--url", "https://x.example")
    assert bad.returncode == 2 and "name holds control" in one_line(bad.stderr)
    facts = [f for ev in parsed_events(admin, namespace)
             for f in ((*([ev.payload.progress] if ev.payload.progress else []),
                        *ev.payload.metrics, *ev.payload.spans)
                       if isinstance(ev.payload, Window) else (ev.payload,))]
    texts = {getattr(f, "message", None) or getattr(f, "name", None) for f in facts}
    assert {"\ufffd step", "loss\ufffd", "w\ufffdandb", "load\ufffd",
            "disk \ufffd\ufffd full"} <= texts, texts
    (link,) = [f for f in facts if isinstance(f, LogLink)]
    assert link.url == "https://wandb.example/r%EF%BF%BD"


@pytest.mark.parametrize("module", ["tidings.cli.emit", "tidings.cli.main"])
def test_the_cli_module_imports_no_heavy_dependencies(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('kubernetes', 'tidings.emitter') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
