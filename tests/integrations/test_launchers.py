"""The real Trainers started as each launcher starts them: two processes in
one pod are one worker whose local rank 0 reports, so the task completes at 100 % under
torchrun, accelerate launch, DeepSpeed's launcher and MPI (Open MPI's mpirun, MPICH's Hydra),
not at 50 % for ever. The launchers that run on CPU here run for real; DeepSpeed's is not
installed (it needs its own ops and accelerator), so its two processes are started with
exactly the environment deepspeed/launcher/launch.py gives them (cited there and in
integrations/report.py). Lightning runs under torchrun and DeepSpeed's environment (under
mpirun its MPIEnvironment needs mpi4py, which the frameworks' venv does not hold)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support_watcher import task_status
from tests.integrations.conftest import WORKLOADS, TaskPod, workload_env
from tests.support import eventually

BIN = Path(sys.executable).parent  # the frameworks' venv: torchrun, accelerate


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def need(program: str, package: str) -> str:
    found = shutil.which(program)
    if found is None:
        pytest.skip(f"{program} is not installed (Debian package {package}; make debs)")
    return found


def launch(launcher: str, framework: str, tmp_path: Path, env: dict[str, str], *args: str
           ) -> tuple[list[subprocess.CompletedProcess[str]], dict[str, Any]]:
    """Start the workload's two processes as ``launcher`` does; their results, and global
    rank 0's result file."""
    out = tmp_path / f"{launcher}-{uuid.uuid4().hex[:6]}.json"
    script = [str(WORKLOADS), framework, "--out", str(out), "--devices", "2", *args]
    port = free_port()
    rendezvous = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    cmds: list[tuple[list[str], dict[str, str]]]
    if launcher == "torchrun":
        cmds = [([str(BIN / "torchrun"), "--nnodes", "1", "--nproc-per-node", "2",
                  "--master-addr", "127.0.0.1", "--master-port", port, *script], env)]
    elif launcher == "accelerate":
        # accelerate's multi-process launch on CPU is MPI: `accelerate launch --cpu` with a
        # hostfile runs `mpirun --hostfile H --npernode 2 -n 2` (accelerate/utils/launch.py).
        need("mpirun.openmpi", "openmpi-bin")
        hostfile = tmp_path / "hostfile"
        hostfile.write_text("localhost slots=2\n")
        root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        cmds = [([str(BIN / "accelerate"), "launch", "--cpu", "--num_processes", "2",
                  "--num_machines", "1", "--mpirun_hostfile", str(hostfile),
                  "--main_process_port", port, *script], env | root)]
    elif launcher == "deepspeed":
        # deepspeed/launcher/launch.py, per local process: MASTER_ADDR, MASTER_PORT,
        # WORLD_SIZE, CROSS_RANK, CROSS_SIZE, LOCAL_SIZE, RANK, LOCAL_RANK, the visible
        # devices, and `--local_rank=N` after the script (python -u).
        cmds = [([sys.executable, "-u", *script, f"--local_rank={rank}"],
                 env | rendezvous | {"WORLD_SIZE": "2", "CROSS_RANK": "0", "CROSS_SIZE": "1",
                                     "LOCAL_SIZE": "2", "RANK": str(rank),
                                     "LOCAL_RANK": str(rank), "CUDA_VISIBLE_DEVICES": "0,1"})
                for rank in range(2)]
    elif launcher == "openmpi":
        mpirun = need("mpirun.openmpi", "openmpi-bin")
        cmds = [([mpirun, "--allow-run-as-root", "-n", "2", "-x", "MASTER_ADDR", "-x",
                  "MASTER_PORT", sys.executable, *script], env | rendezvous)]
    else:  # MPICH (and Intel MPI): Hydra
        mpiexec = need("mpiexec.hydra", "mpich")
        cmds = [([mpiexec, "-n", "2", sys.executable, *script], env | rendezvous)]
    procs = [subprocess.Popen(cmd, env=workload_env(e), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for cmd, e in cmds]
    done = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return done, (json.loads(out.read_text()) if out.exists() else {})


HF_LAUNCHERS = ["torchrun", "accelerate", "deepspeed", "openmpi", "mpich"]


def over(status: dict[str, Any] | None) -> bool:
    return bool(status and status.get("phase") in ("Succeeded", "Failed"))


@pytest.mark.cluster
@pytest.mark.parametrize(("framework", "launcher"),
                         [("hf", name) for name in HF_LAUNCHERS]
                         + [("lightning", "torchrun"), ("lightning", "deepspeed")])
def test_two_processes_in_a_pod_are_one_worker_that_completes(
        framework: str, launcher: str, tmp_path: Path, admin: Any, namespace: str,
        task_pod: TaskPod, start_watcher: Callable[..., Any]) -> None:
    start_watcher()
    task, env = task_pod()
    procs, result = launch(launcher, framework, tmp_path, env, "--steps", "4")
    for p in procs:
        assert p.returncode == 0, (p.args, p.stderr[-3000:])
    assert result["world_size"] == 2, result  # a real two-process run, not two runs
    assert len(list(tmp_path.glob("*.json.rank1"))) == 1
    status = eventually(lambda: (s := task_status(admin, namespace, task)) and over(s) and s,
                        60, f"{task} over")
    assert status["phase"] == "Succeeded", status
    assert status["progress"]["percent"] == 100
    (worker,) = status["workers"]  # local rank 0 speaks for the pod ...
    assert worker["pod"] == env["POD_NAME"] and worker["final"] and worker["workers"] == 1
    assert status["roster"]["reporting"] == status["roster"]["final"] == 1  # ... and is all
