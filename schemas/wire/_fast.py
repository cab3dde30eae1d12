"""Fast constructors for the frozen, slotted dataclasses on the hot path.

A frozen dataclass's ``__init__`` assigns each field through ``object.__setattr__`` (to get
past its own frozen ``__setattr__``), which costs about as much as the rest of a fold step.
The constructor built here fills an instance of a plain twin class with the same slots (plain
attribute stores, the fastest Python has) and then gives it the dataclass as its class; the
layouts are identical, so Python allows the switch. The object is the same (same type, same
fields, equal and hashing the same), only built about three times faster. It is used only for
classes without ``__post_init__`` or validation in ``__init__``; its parameters are the
class's own, defaults included, so a call is type-checked like a call of the class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def slot_constructor(cls: Callable[P, T]) -> Callable[P, T]:
    """``make(...)`` equivalent to ``cls(...)``: the same parameters (names, order, defaults),
    so mypy checks a call of it as it checks a call of the class."""
    params = getattr(cls, "__dataclass_params__", None)
    if not isinstance(cls, type) or params is None or not params.frozen \
            or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls} is not a frozen slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__; its constructor must run")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    if tuple(cls.__dict__["__slots__"]) != tuple(names) or cls.__bases__ != (object,):
        raise TypeError(f"{cls.__name__}'s slots are not exactly its fields")
    if any(f.kw_only or not f.init for f in fields):
        raise TypeError(f"{cls.__name__} has a keyword-only or non-init field")
    env: dict[str, Any] = {"_cls": cls, "_new": object.__new__, "_MISSING": dataclasses.MISSING}
    args, factories = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            args.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_MISSING")
            factories.append(f"    if {f.name} is _MISSING:\n        {f.name} = _f_{f.name}()\n")
        else:
            args.append(f.name)
    # Generated source, as dataclasses itself does: one flat function (one frame: the twin
    # has no __init__ to call), no loop per call.
    stores = "".join(f"    o.{n} = {n}\n" for n in names)
    src = (f"class _Twin:\n    __slots__ = {tuple(names)!r}\n"
           f"def make({', '.join(args)}):\n{''.join(factories)}"
           f"    o = _new(_Twin)\n{stores}    o.__class__ = _cls\n    return o\n")
    exec(src, env)
    make: Callable[P, T] = env["make"]
    make.__qualname__ = f"{cls.__name__}._fast_new"
    return make
