"""A package's front door that loads each name's module on first use (PEP 562), so that
importing a package costs nothing until one of its names is read: the emitter's workload
thread imports ``tidings.schemas`` and ``tidings.kube`` without their payload models, fold or
HTTP client."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], homes: Mapping[str, str],
                 public: Iterable[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose module ``namespace`` (its
    ``globals()``) gains each name of ``homes`` (name -> its module, relative to the package)
    when first read; ``public`` is what ``dir()`` and editors' completion list, unloaded."""
    listed = frozenset(public)

    def __getattr__(name: str) -> Any:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        namespace[name] = value  # read once: later reads are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *listed})

    return __getattr__, __dir__
