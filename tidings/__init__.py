"""tidings: a feedback bus on Kubernetes Events. This top-level module only names the
version and, lazily, ``tidings.run``; the parts are ``tidings.emitter`` (in workloads),
``tidings.integrations`` (framework callbacks), ``tidings.schemas``, ``tidings.kube``,
``tidings.watcher``, ``tidings.cli`` and ``tidings.ui`` (the last three need the ``watcher``,
``cli`` and ``ui`` extras)."""

from __future__ import annotations

import os
import sys
from typing import Any

# The parts live in their own top-level folders of the checkout (see pyproject's package-dir);
# pkgutil-style, so a checkout's tidings/ on sys.path (python run from the repository root)
# still finds the installed tidings.emitter and the rest. What pkgutil.extend_path does for a
# plain folder, without importing pkgutil (a tenth of the emitter's import time).
__path__ += [p for p in dict.fromkeys(os.path.abspath(os.path.join(e, __name__))
                                       for e in sys.path)
             if p not in map(os.path.abspath, __path__) and os.path.isdir(p)]


def __getattr__(name: str) -> Any:
    # Lazy: every `import tidings.x` runs this module, and reading the installed metadata
    # costs milliseconds that `tidings --help` and workloads should not pay.
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("tidings")
        except metadata.PackageNotFoundError:  # a checkout that was never installed
            return "0+unknown"
    if name == "run":  # `with tidings.run():` around a worker's work (tidings.emitter.run)
        from tidings.emitter import run

        return run
    raise AttributeError(f"module 'tidings' has no attribute {name!r}")


def __dir__() -> list[str]:
    # dir() and completion see the lazy names (__getattr__) without loading them.
    return sorted({*globals(), "__version__", "run"})
