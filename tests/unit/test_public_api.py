"""The public API is visible: a package that loads its names lazily
(PEP 562 ``__getattr__``) still lists them to ``dir()``, ``help()`` and editors' completion
(a module ``__dir__``), without loading them."""

from __future__ import annotations

import ast
import importlib
import pydoc
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lazy_packages() -> list[str]:
    """Every package of ours whose ``__init__`` defines a module-level ``__getattr__``."""
    out = []
    for init in sorted(ROOT.glob("*/__init__.py")):
        tree = ast.parse(init.read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
            package = init.parent.name
            out.append("tidings" if package == "tidings" else f"tidings.{package}")
    return out


def test_the_lazy_packages_are_found() -> None:
    assert {"tidings", "tidings.schemas", "tidings.kube"} <= set(lazy_packages())


@pytest.mark.parametrize("name", lazy_packages())
def test_dir_lists_every_public_name_and_each_resolves(name: str) -> None:
    module = importlib.import_module(name)
    public = set(getattr(module, "__all__", ())) or {"__version__", "run"}
    listed = dir(module)
    assert public <= set(listed), sorted(public - set(listed))
    assert "__name__" in listed and listed == sorted(listed)
    for attr in public:
        getattr(module, attr)  # each listed name is really there


@pytest.mark.parametrize("name", ["tidings.schemas", "tidings.kube"])
def test_dir_loads_nothing(name: str) -> None:
    """Listing the names is not loading them: the emitter imports these packages light."""
    code = (f"import sys, {name} as m; before = set(sys.modules); names = dir(m); "
            "print(len(names), sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split(" ", 1)
    assert int(out[0]) > 30 and out[1].strip() == "[]", out


def test_help_documents_the_lazy_names() -> None:
    import tidings.schemas

    text = pydoc.render_doc(tidings.schemas, renderer=pydoc.plaintext)
    for name in ("TaskState", "fold", "build_event", "LogLink"):
        assert name in text, name
