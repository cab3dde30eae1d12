"""mypy --strict over the installed names (tidings.schemas, tidings.kube, ...), from the checkout.

pyproject's package-dir maps the top-level folders (schemas/, kube/, ...) onto tidings.*; no
static tool reads that mapping (the editable install is an import hook), so mypy would see
`tidings.schemas` as missing. This builds build/typecheck/tidings/ as symlinks to those
folders (generated, never committed) and points mypy_path at it: the folders stay as they are
and every module is checked under its real name.

    python tools/typecheck.py            # the packages `make lint` checks
    python tools/typecheck.py watcher    # or name some
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
# Checked by `make lint` and tests/unit/test_static_checks.py.
CHECKED = ("schemas", "kube", "emitter", "watcher", "cli", "integrations")
# The checkout's own tools, checked too (by their own names: tools.devcluster, ...).
TOOLS = ("tools.devcluster", "tools.typecheck")


def package_dirs() -> dict[str, str]:
    """pyproject's [tool.setuptools.package-dir]: installed name -> folder."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^"([\w.]+)"\s*=\s*"([\w/]+)"', section, re.M))


def build_tree() -> Path:
    if TREE.exists():
        shutil.rmtree(TREE)
    top = TREE / "tidings"
    top.mkdir(parents=True)
    for f in (ROOT / "tidings").glob("*.py"):
        (top / f.name).symlink_to(f)
    for name, folder in package_dirs().items():
        if name != "tidings":
            (top / name.split(".", 1)[1]).symlink_to(ROOT / folder, target_is_directory=True)
    (TREE / "tools").symlink_to(ROOT / "tools", target_is_directory=True)
    return TREE


def main(argv: list[str]) -> int:
    build_tree()
    args = [sys.executable, "-m", "mypy", "--strict"]
    for p in argv or CHECKED:
        args += ["-p", f"tidings.{p}"]
    for m in () if argv else TOOLS:
        args += ["-m", m]
    return subprocess.run(args, cwd=ROOT, env={**os.environ, "MYPYPATH": str(TREE)}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
