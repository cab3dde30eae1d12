"""Fast positional constructors for the frozen, slotted dataclasses on the hot path.

A frozen dataclass's ``__init__`` assigns each field through ``object.__setattr__`` (to get
past its own frozen ``__setattr__``), which costs about as much as the rest of a fold step.
The constructor built here fills an instance of a plain twin class with the same slots (plain
attribute stores, the fastest Python has) and then gives it the dataclass as its class; the
layouts are identical, so Python allows the switch. The object is the same (same type, same
fields, equal and hashing the same), only built about three times faster. It is used only for
classes without ``__post_init__``, defaults or validation in ``__init__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def slot_constructor(cls: type[T]) -> Callable[..., T]:
    """``make(*fields)`` equivalent to ``cls(*fields)`` (all fields positional, in order)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__; its constructor must run")
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    if tuple(cls.__dict__["__slots__"]) != tuple(names) or cls.__bases__ != (object,):
        raise TypeError(f"{cls.__name__}'s slots are not exactly its fields")
    # Generated source, as dataclasses itself does: one flat function (one frame: the twin
    # has no __init__ to call), no loop per call.
    stores = "".join(f"    o.{n} = {n}\n" for n in names)
    src = (f"class _Twin:\n    __slots__ = {tuple(names)!r}\n"
           f"def make({', '.join(names)}):\n"
           f"    o = _new(_Twin)\n{stores}    o.__class__ = _cls\n    return o\n")
    env: dict[str, Any] = {"_cls": cls, "_new": object.__new__}
    exec(src, env)
    make: Callable[..., T] = env["make"]
    make.__qualname__ = f"{cls.__name__}._fast_new"
    return make
