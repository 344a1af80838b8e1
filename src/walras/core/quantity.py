"""Kubernetes resource quantities as floats: ``500m`` -> 0.5, ``2Gi`` -> 2147483648, ``1e3``.

The grammar of ``k8s.io/apimachinery/pkg/api/resource.Quantity``: a signed decimal number, then
either a binary suffix (``Ki`` .. ``Ei``), a decimal suffix (``n u m k M G T P E``) or a decimal
exponent (``e3``). A number too large for a float64 (``1e400``) is rejected here rather than
becoming ``inf`` (which later turns into an ``OverflowError`` wherever it meets ``int``).
"""

from __future__ import annotations

import math
import re

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_DECIMAL |= {"P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: object, default: float = 0.0) -> float:
    """A Kubernetes quantity as a finite float; ValueError when it is not one."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _QUANTITY.match(str(value).strip())
        if match is None:
            raise ValueError(f"not a quantity: {value!r}")
        try:
            number, suffix = float(match.group(1)), match.group(2)
        except ValueError:
            raise ValueError(f"not a quantity: {value!r}") from None
        if suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            number *= _DECIMAL[suffix]
        else:
            raise ValueError(f"unknown quantity suffix {suffix!r} in {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"quantity {value!r} is out of range")
    return number
