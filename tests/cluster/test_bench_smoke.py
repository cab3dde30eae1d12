"""Every benchmark under bench/ runs: each with ``--smoke`` (a few iterations, figures
meaningless) against the session's control plane, so a bench that the code moved away from
fails here instead of rotting until someone wants its figures. No timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.devcluster import ControlPlane

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
# The benches of the real node (they say NEEDS_REAL_NODE) run in tests/node, on its node.
SCRIPTS = sorted(p for p in BENCH.glob("bench_*.py") if "NEEDS_REAL_NODE" not in p.read_text())


def frameworks_venv() -> bool:
    """The frameworks' venv (make integrations-venv) that bench_events_per_pod trains in."""
    return bool(os.environ.get("TIDINGS_INTEGRATIONS_PYTHON")) or any(
        (REPO / ".cache" / "integrations").glob("*/.complete"))

pytestmark = pytest.mark.cluster


def test_every_bench_is_found() -> None:
    assert len(SCRIPTS) >= 10, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_bench_smoke(script: Path, control_plane: ControlPlane) -> None:
    run_smoke(script, control_plane)


def run_smoke(script: Path, control_plane: ControlPlane) -> None:
    """``script --smoke`` against ``control_plane``; it must succeed and print a table."""
    source = script.read_text()
    # (--smoke: its own, or with --control-plane from bench/support.py)
    assert "--smoke" in source or "add_control_plane_arg" in source, \
        f"{script.name} has no --smoke run"
    if "frameworks_python" in source and not frameworks_venv():
        pytest.skip("needs the frameworks' venv with transformers (make integrations-venv)")
    argv = [sys.executable, str(script), "--smoke"]
    # The cluster benches measure the session's plane instead of starting their own.
    if "add_control_plane_arg" in source:
        argv += ["--control-plane", str(control_plane.state_dir)]
    elif '"--kubeconfig"' in source:
        argv += ["--kubeconfig", str(control_plane.kubeconfig("admin"))]
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir)}
    done = subprocess.run(argv, cwd=BENCH, capture_output=True, text=True, timeout=420, env=env)
    assert done.returncode == 0, f"{script.name} --smoke failed:\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{script.name} printed no table"
