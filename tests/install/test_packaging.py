"""The plain install is the workload library: build the wheel once, install it into fresh
venvs (Python 3.10 and 3.13 where pyenv has them, and this one), check what it pulled in,
that the library imports, that the console script answers with a hint instead of a
traceback, that the wheel holds no dev control plane, and that pip resolves it beside kfp
2.17 (which pins kubernetes<31).

These install from PyPI (the wheel's dependencies), so they carry the ``pypi`` marker.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYENV = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
# What a workload image must never get from `pip install tidings`.
HEAVY = {"kubernetes", "typer", "rich", "prometheus-client", "click", "opentelemetry-sdk",
         "msgspec", "torch", "transformers", "lightning", "flytekit", "wandb", "mlflow",
         "starlette", "uvicorn", "sse-starlette", "jinja2", "playwright"}

pytestmark = pytest.mark.pypi


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not pypi_reachable():
        pytest.skip("PyPI is not reachable (the installs need the dependencies' wheels)")
    out = tmp_path_factory.mktemp("wheelhouse")
    build = tmp_path_factory.mktemp("build")
    src = build / "src"
    # Build from a copy: a build in the checkout would leave build/ and *.egg-info behind.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".cache", ".git", "__pycache__", "*.egg-info", "build", ".*_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    assert len(list(out.glob("tidings-*.whl"))) == 1
    return out


def venv(where: Path, python: str) -> Path:
    subprocess.run([python, "-m", "venv", str(where)], check=True, capture_output=True)
    return where / "bin"


def pip(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "python"), "-m", "pip",
                           "--disable-pip-version-check", *args],
                          check=True, capture_output=True, text=True, timeout=600)


def interpreters() -> list[pytest.param]:  # type: ignore[valid-type]
    out = [pytest.param(sys.executable, id="this")]
    for version in ("3.10", "3.13"):
        found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
        out.append(pytest.param(str(found[-1]) if found else None, id=version))
    return out


@pytest.mark.parametrize("python", interpreters())
def test_plain_install_is_the_light_workload_library(python: str | None, wheelhouse: Path,
                                                     tmp_path: Path) -> None:
    if python is None:
        pytest.skip("this Python version is not installed (pyenv)")
    bin_dir = venv(tmp_path / "venv", python)
    pip(bin_dir, "install", "-q", "--find-links", str(wheelhouse), "tidings")
    listed = json.loads(pip(bin_dir, "list", "--format", "json").stdout)
    names = {p["name"].lower().replace("_", "-") for p in listed}
    assert "tidings" in names
    assert names & HEAVY == set(), names
    code = ("import sys, tidings, tidings.emitter as t, tidings.kube, tidings.integrations.report\n"
            "t.log_link('wandb', 'https://wandb.ai/x')\n"
            "assert t.stats()['sunk'] == 0\n"
            "print(tidings.__version__, sorted(m for m in ('kubernetes', 'typer', 'rich',"
            " 'prometheus_client') if m in sys.modules))")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no cluster: the log sink
    out = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True,
                         text=True, env=env, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0.1.0", "[]"]
    cli = subprocess.run([str(bin_dir / "tidings"), "state", "t"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert cli.returncode == 1 and cli.stdout == ""
    assert cli.stderr.count("\n") == 1 and "pip install 'tidings[cli]'" in cli.stderr
    version = subprocess.run([str(bin_dir / "tidings"), "--version"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert version.stdout == "tidings 0.1.0\n"


def test_the_wheel_holds_no_dev_control_plane(wheelhouse: Path) -> None:
    # The launcher and its kwok stages are checkout tools (tools/devcluster.py); workload and
    # watcher images built from the wheel never carry them. `tidings dev` ships, to say so.
    import zipfile

    names = zipfile.ZipFile(next(wheelhouse.glob("tidings-*.whl"))).namelist()
    assert [n for n in names if "devcluster" in n or n.startswith("tools/")] == []
    assert "tidings/cli/dev.py" in names
    assert {n.split("/")[0] for n in names} == {"tidings", "tidings-0.1.0.dist-info"}


def test_the_wheel_holds_the_pages_assets(wheelhouse: Path) -> None:
    # `tidings ui` works without any network: its templates, script and style ship inside
    # the package, as the checkout has them.
    import zipfile

    names = set(zipfile.ZipFile(next(wheelhouse.glob("tidings-*.whl"))).namelist())
    assets = sorted(p.relative_to(ROOT).as_posix() for d in ("templates", "static")
                    for p in (ROOT / "ui" / d).iterdir())
    assert assets and {"ui/static/app.js", "ui/static/app.css"} <= set(assets)
    assert [a for a in assets if f"tidings/{a}" not in names] == []


def test_resolves_beside_kfp(wheelhouse: Path, tmp_path: Path) -> None:
    bin_dir = venv(tmp_path / "venv", sys.executable)
    report = tmp_path / "report.json"
    pip(bin_dir, "install", "-q", "--dry-run", "--ignore-installed", "--report", str(report),
        "--find-links", str(wheelhouse), "tidings", "kfp==2.17.*")
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"]
              for i in json.loads(report.read_text())["install"]}
    assert "tidings" in chosen and chosen["kfp"].startswith("2.17.")
    assert int(chosen["kubernetes"].split(".")[0]) < 31  # kfp's pin, untouched by tidings
