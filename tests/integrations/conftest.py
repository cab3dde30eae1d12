"""tests/integrations runs in the frameworks' own venv (``make integrations-venv``; ``make
test`` runs it there): the workload processes it starts are that venv's python, the watcher is
the project venv's ``tidings`` (tests/cluster/support_watcher.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import REPO_ROOT
from tests.cluster.test_watcher import crd, start_watcher, watchers  # noqa: F401 - fixtures
from tests.support import create_kwok_pod
from tidings.schemas.wire.constants import TASK_LABEL

FRAMEWORKS = ("transformers", "lightning", "flytekit", "mlflow", "wandb", "torch")
WORKLOADS = Path(__file__).with_name("workloads.py")


def pytest_configure(config: pytest.Config) -> None:
    missing = [m for m in FRAMEWORKS if importlib.util.find_spec(m) is None]
    if missing:
        raise pytest.UsageError(
            f"tests/integrations needs the frameworks' venv ({', '.join(missing)} missing "
            f"from {sys.executable}): make integrations-venv, then run its bin/pytest")


def workload_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a workload process: ours, minus anything that would configure the
    emitter or the trackers behind the test's back, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TIDINGS_", "POD_", "WANDB_", "MLFLOW_", "KUBECONFIG"))}
    env.update({"PYTHONPATH": str(REPO_ROOT), "TOKENIZERS_PARALLELISM": "false",
                "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true"})
    env.update(extra)
    return env


def run_workload(framework: str, tmp_path: Path, env: dict[str, str], *args: str,
                 timeout: float = 300) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Train with the real framework in a child process; its result file (None when it died)."""
    import json

    out = tmp_path / f"{framework}-{uuid.uuid4().hex[:6]}.json"
    proc = subprocess.run([sys.executable, str(WORKLOADS), framework, "--out", str(out), *args],
                          env=workload_env(env), cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


@pytest.fixture
def kubeconfig(control_plane: Any) -> Path:
    return Path(control_plane.kubeconfig("admin"))


TaskPod = Callable[[], tuple[str, dict[str, str]]]


@pytest.fixture
def task_pod(admin: Any, namespace: str, kubeconfig: Path) -> TaskPod:
    """A task and its (kwok) pod; the identity env a workload in that pod would have."""
    def make() -> tuple[str, dict[str, str]]:
        task = f"train-{uuid.uuid4().hex[:8]}"
        pod = create_kwok_pod(admin, namespace, f"{task}-0", labels={TASK_LABEL: task})
        return task, {"POD_NAME": pod["name"], "POD_NAMESPACE": namespace,
                      "POD_UID": pod["uid"], "TIDINGS_TASK": task,
                      "KUBECONFIG": str(kubeconfig)}

    return make
