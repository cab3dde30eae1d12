"""The README's demo command runs end to end and shows the expected state."""

from __future__ import annotations

import os
import re
import subprocess

from tools.devcluster import REPO_ROOT, ControlPlane


def test_demo_exits_zero_and_shows_the_folded_task(control_plane: ControlPlane) -> None:
    env = {**os.environ, "TIDINGS_BIN_DIR": str(control_plane.bin_dir), "COLUMNS": "120"}
    run = subprocess.run([str(REPO_ROOT / "deploy/demo.sh")], env=env, capture_output=True,
                         text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    state = out.split("6. tidings state train-42")[1].split("tidings lineage")[0]
    assert "100.0%" in state and re.search(r"Phase\s+Succeeded", state)
    for text in ("wandb-train-42-0", "wandb-train-42-1", "report-train-42-1", "epoch", "batch"):
        assert text in state, text
    # The spoofed sender is refused by the admission policy, not by luck.
    assert "ValidatingAdmissionPolicy 'tidings-sender-identity'" in out
    lineage = out.split("tidings lineage train-42")[1].split("tidings logs")[0]
    assert "train-42-0" in lineage and "train-42-1" in lineage and "debug" not in lineage
    logs = out.split("tidings logs train-42")[1].split("tidings timeline")[0]
    assert "[train-42-0/main] train-42-0 starting" in logs
    assert "train-42-debug starting" not in logs  # the prefix look-alike never streams
    timeline = out.split("tidings timeline train-42")[1].split("kubectl describe")[0]
    assert "Timeline of demo/train-42" in timeline and "evaluate" in timeline
    # Pre-created by the launcher, so its pods carried the uid: describe lists the bus events.
    described = out.split("kubectl describe taskfeedback train-42")[1].split("demo finished")[0]
    assert "Events:" in described and "<none>" not in described
    for reason in ("LogLink", "DeckReady", "Progress"):
        assert reason in described, reason
    # Spans, metrics and non-final progress travel in one Window event per window.
    assert "Window" in described, described
    # A Job's pods with no env wiring: the task is the Job, owned by it, complete after both
    # completions; each fact is about its pod (kubectl describe pod lists it).
    job = out.split("7. a Job's pods report with no wiring")[1].split("demo finished")[0]
    assert "owned by: Job/etl-3" in job
    assert "job.batch/etl-3 condition met" in job  # the Job controller completed it
    state = job.split("tidings state etl-3")[1].split("kubectl describe pod")[0]
    assert "100.0%" in state and re.search(r"Phase\s+Succeeded", state), state
    assert "shard-0" in state and "shard-1" in state
    described = job.split("kubectl describe pod etl-3-0-")[1]
    assert "LogLink" in described and "Progress" in described, described
    assert "demo finished" in out
