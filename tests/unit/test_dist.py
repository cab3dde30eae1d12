"""`make dist`, the build command docs/development.md gives: one pure-Python wheel of the
tidings.* packages, nothing of the checkout's tools or tests, and no staging left behind that a
later build could ship stale files from."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_dist_builds_the_wheel(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    # -o: this venv is what the suite runs in; the test must not reinstall it.
    res = subprocess.run(["make", "-s", "-o", f"{venv}/.installed", "dist", f"DIST={tmp_path}",
                          f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    wheel = tmp_path / "tidings-0.1.0-py3-none-any.whl"
    assert res.stdout.strip().splitlines()[-1] == str(wheel)
    names = zipfile.ZipFile(wheel).namelist()
    for package in ("schemas", "kube", "emitter", "watcher", "cli"):
        assert f"tidings/{package}/__init__.py" in names
    assert not [n for n in names if n.startswith(("tools/", "tests/", "deploy/", "bench/"))]
    entry_points = zipfile.ZipFile(wheel).read("tidings-0.1.0.dist-info/entry_points.txt")
    assert b"tidings = tidings.__main__:main" in entry_points
    assert b"kubectl-tidings = tidings.__main__:main" in entry_points
    assert not (ROOT / "build" / "lib").exists()


def test_the_docs_name_the_build_command() -> None:
    development = (ROOT / "docs" / "development.md").read_text()
    assert "make dist" in development
