"""Python 3.10 stand-ins for the few 3.11 names the code uses (workload images often run
3.10): ``StrEnum``, ``UTC`` and a ``fromisoformat`` that reads RFC 3339 ("Z", any number of
fraction digits) as 3.11's does."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from enum import Enum

UTC = timezone.utc

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:
    class StrEnum(str, Enum):
        """An Enum whose members are their string values (``str()`` and ``format()``)."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)

_ISO = re.compile(r"(\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(?::\d\d)?)(?:[.,](\d+))?"
                  r"(Z|[+-]\d\d(?::?\d\d)?)?", re.ASCII)


def fromisoformat_py310(s: str) -> datetime:
    """3.10's fromisoformat takes neither "Z" nor other than 3 or 6 fraction digits: rewrite
    those RFC 3339 forms into what it takes (checked against 3.11's by a property test)."""
    m = _ISO.fullmatch(s)
    if m is None:
        return datetime.fromisoformat(s)
    base, frac, zone = m.groups()
    if frac:
        base += "." + frac[:6].ljust(6, "0")
    if zone == "Z":
        zone = "+00:00"
    elif zone and ":" not in zone:
        zone = zone[:3] + ":" + (zone[3:] or "00")
    return datetime.fromisoformat(base + (zone or ""))


fromisoformat = datetime.fromisoformat if sys.version_info >= (3, 11) else fromisoformat_py310

__all__ = ["UTC", "StrEnum", "fromisoformat"]
