"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1e3``) as exact decimals.

Written here because neither Kubernetes client for asyncio ships a parser, and
the controller needs exact sums (gang-scheduling ``minResources``) and GPU and
CPU counts (``numProcPerNode: auto``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse(value: str | int | float) -> Decimal:
    """The quantity as a Decimal; raises ValueError naming the bad value."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _PATTERN.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 2, 500m, 4Gi)")
    try:
        return Decimal(match[1]) * _SUFFIXES[match[2]]
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc


def ceil(value: str | int | float) -> int:
    """Rounded up to a whole unit, as Kubernetes' ``Quantity.Value()`` does."""
    return math.ceil(parse(value))


def render(value: Decimal) -> str:
    """A canonical quantity string: whole units when exact, else milli-units."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{math.ceil(value * 1000)}m"


def total(values: list[str | int | float]) -> str:
    """The sum of quantities, rendered."""
    return render(sum((parse(v) for v in values), Decimal(0)))
