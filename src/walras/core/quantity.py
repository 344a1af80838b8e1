"""Kubernetes resource quantities as floats: ``500m`` -> 0.5, ``2Gi`` -> 2147483648, ``1e3``.

The grammar of ``k8s.io/apimachinery/pkg/api/resource.Quantity``: a signed decimal number, then
either a binary suffix (``Ki`` .. ``Ei``), a decimal suffix (``n u m k M G T P E``) or a decimal
exponent (``e3``). The number times the suffix's factor is computed in decimal and rounded once
to float64 (``200e306n`` is 2e299, though ``200e306`` alone overflows a float). A value too large
for a float64 (``1e400``) is rejected here rather than becoming ``inf`` (which later turns into
an ``OverflowError`` wherever it meets ``int``).

Why not ``kubernetes.utils.parse_quantity``: the scheduling core, which parses every spec (in the
operator and in the simulator), must not import the kubernetes client (import contract: the core
never talks to Kubernetes), and a wrapper around the client's parser would still need this
module's checks, since the client parses through Python's ``Decimal`` and so accepts what the API
server rejects: ``1_000``, ``NaN``, ``Infinity``, ``True``, non-ASCII digits, and values beyond
float64. tests/unit/test_quantity_oracle.py holds this parser to ``parse_quantity`` as the oracle
over generated quantities of the grammar, and pins each of those differences.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal, InvalidOperation

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_FACTOR = {s: Decimal(2) ** e for s, e in _BINARY.items()} | {
    s: Decimal(10) ** e for s, e in _DECIMAL.items()
}
# ASCII digits only, spelled out: ``Decimal`` alone would also read other scripts' digits and "_".
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
# Products of a parsed number and a factor: 60 significant digits (more than any float64 needs, so
# the one rounding that matters is to float64) and an exponent range no written quantity reaches.
_EXACT = Context(prec=60, Emax=999_999, Emin=-999_999)


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
        digits, suffix = match.group(1), match.group(2)
        if suffix not in _FACTOR:
            raise ValueError(f"unknown quantity suffix {suffix!r} in {value!r}")
        try:
            exact = _EXACT.multiply(Decimal(digits), _FACTOR[suffix])
        except InvalidOperation:  # "1.2.3", "."
            raise ValueError(f"not a quantity: {value!r}") from None
        number = float(exact)
    if not math.isfinite(number):
        raise ValueError(f"quantity {value!r} is out of range")
    return number
