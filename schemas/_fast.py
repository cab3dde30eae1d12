"""Fast positional constructors for the frozen, slotted dataclasses on the hot path.

A frozen dataclass's ``__init__`` assigns each field through ``object.__setattr__`` (to get
past its own frozen ``__setattr__``), which costs about as much as the rest of a fold step.
The constructor built here stores the fields through the slot descriptors instead: the object
is the same (same type, same fields, equal and hashing the same), only built faster. It is
used only for classes without ``__post_init__``, defaults or validation in ``__init__``.
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
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for n in names:
        env[f"_set_{n}"] = cls.__dict__[n].__set__
    body = "".join(f"    _set_{n}(o, {n})\n" for n in names)
    # Generated source, as dataclasses itself does: one flat function, no loop per call.
    src = f"def make({', '.join(names)}):\n    o = _new(_cls)\n{body}    return o\n"
    exec(src, env)
    make: Callable[..., T] = env["make"]
    make.__qualname__ = f"{cls.__name__}._fast_new"
    return make
