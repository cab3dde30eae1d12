"""The code-quality bar is part of the suite: ruff everywhere, mypy --strict on schemas/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", "schemas", "emitter", "watcher", "cli", "tests",
                 "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean_on_schemas() -> None:
    result = run(str(BIN / "mypy"), "--strict", "schemas")
    assert result.returncode == 0, result.stdout + result.stderr


def test_schemas_import_nothing_else_of_ours() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in (ROOT / "schemas").rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("import ", "from "))
        and (any(f"tidings.{part}" in line for part in ("emitter", "watcher", "cli"))
             or "kubernetes" in line)
    ]
    assert offenders == []
