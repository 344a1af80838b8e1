"""Whether a status change is one a user can see, at the precision each value is shown.

A status is rewritten only when a value moves by **more than one unit of its last shown digit**;
a move of at most one unit is rounding noise (a price of 1.2349 shown as 1.23 drifting to
1.2351, shown as 1.24) and is not written. Every other status change is compared exactly. So a
steady cluster whose prices and shares move in their last digits from round to round writes no
status at all, while any change of a figure by two units of its last digit, or of a word, is
written (with every value fresh).

The unit of the last shown digit:

- a share (``fairShare``, an allocation's ``fraction``: two decimals, as the messages show
  shares): 0.01; a pool's ``utilisation`` and ``allocated`` (three decimals): 0.001;
- any other float field (three significant digits, ``walras.core.conditions.num``; ``cost``
  two, as it is made of shares shown to two decimals; the printer columns show the stored
  number): ``10^(⌊log10 |x|⌋ − digits + 1)``, the smaller of the old and new value's (so
  0.999 → 1.00 is one unit, not a tenth);
- a number inside a condition's message (``share of v100 is 0.52 at price 1.23``) written with a
  decimal point or an exponent in either text: one unit of the finer of the two texts' last
  digit (``0.52`` → 0.01; ``1.2e+03`` → 100; ``1`` → ``0.999``: 0.001); two integers exactly;
  the rest of the message exactly;
- integers (step counts, GPU counts, generations, names such as ``v100``) and all other text
  (phases, GPU types, node names): exact.

Example: ``price`` 1.23 → 1.24 and its message ``at price 1.23`` → ``at price 1.24`` is not a
change; 1.23 → 1.25 is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

DECIMAL_UNITS: Final = {"fairShare": 0.01, "fraction": 0.01, "utilisation": 1e-3, "allocated": 1e-3}
"""Float fields rounded to a number of decimals, and the unit of their last shown digit."""

# A number in a message, not part of a name (``v100``, ``node-0001``, ``n0``): ``0.52``,
# ``1.2e+03``, ``7``. Two integers are compared exactly (gang sizes, counts); a number written
# with a decimal point or an exponent is a shown float (``1`` is 0.999 at three digits).
_NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.(\d+))?(?:[eE]([+-]?\d+))?(?!\w)(?!\.\d)")

# Float comparisons below are on values that were themselves rounded: allow for binary noise.
_SLACK: Final = 1e-9


SIGNIFICANT_DIGITS: Final = {"cost": 2}
"""Float fields shown to fewer than three significant digits."""


def _sig_unit(x: float, digits: int) -> float:
    return 10.0 ** (math.floor(math.log10(abs(x))) - (digits - 1)) if x else 0.0


def _float_unit(key: str, old: float, new: float) -> float:
    if key in DECIMAL_UNITS:
        return DECIMAL_UNITS[key]
    digits = SIGNIFICANT_DIGITS.get(key, 3)
    units = [u for u in (_sig_unit(old, digits), _sig_unit(new, digits)) if u > 0]
    return min(units) if units else 0.0


def _text_unit(match: re.Match[str]) -> float | None:
    """One unit of the number's last written digit; None for an integer."""
    if match.group(1) is None and match.group(2) is None:
        return None
    decimals = len(match.group(1) or "")
    exponent = int(match.group(2) or 0)
    return 10.0 ** (exponent - decimals)


def _same_number(old: float, new: float, unit: float) -> bool:
    return abs(new - old) <= unit * (1 + _SLACK) + _SLACK * max(abs(old), abs(new))


def _same_text(old: str, new: str) -> bool:
    if old == new:
        return True
    olds, news = list(_NUMBER.finditer(old)), list(_NUMBER.finditer(new))
    if len(olds) != len(news) or _NUMBER.sub("#", old) != _NUMBER.sub("#", new):
        return False
    for a, b in zip(olds, news, strict=True):
        units = [u for u in (_text_unit(a), _text_unit(b)) if u is not None]
        if not units:
            if a.group(0) != b.group(0):
                return False  # two integers: a count, exactly
            continue
        if not _same_number(float(a.group(0)), float(b.group(0)), min(units)):
            return False
    return True


def same(new: Any, old: Any, key: str = "") -> bool:
    """Whether ``new`` shows as ``old`` does (module docstring); ``key``: the field's name."""
    if isinstance(new, bool) or isinstance(old, bool):
        return new is old
    if isinstance(new, float) and isinstance(old, int | float):
        return _same_number(float(old), new, _float_unit(key, float(old), new))
    if isinstance(new, str) and isinstance(old, str):
        return _same_text(old, new) if key == "message" else new == old
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        if set(new) != set(old):
            return False
        return all(same(new[k], old[k], str(k)) for k in new)
    if isinstance(new, list | tuple) and isinstance(old, list | tuple):
        return len(new) == len(old) and all(same(a, b, key) for a, b in zip(new, old, strict=True))
    return bool(new == old)
