"""walras.core.quantity against ``kubernetes.utils.parse_quantity`` as the oracle.

The core keeps its own parser (the core must not import kubernetes; see the module docstring);
these tests hold it to the Kubernetes client's parser over generated quantities of the grammar
``[+-]digits[.digits][e[+-]digits][suffix]``, and pin the places where ours is deliberately
stricter than the client's (which parses through Python's ``Decimal``).

Tolerance, derived: both multiply the number by the suffix's factor in decimal, then round to
float64 (relative error ≤ u = 2⁻⁵³ each). The oracle first rounds the product to Decimal's default
28 significant digits (≤ 5·10⁻²⁸ relative; ours keeps 60, ≤ 5·10⁻⁶⁰), which matters for long
digit strings times 2⁶⁰. So they differ by < 2u + 10⁻²⁷ < 3u relative: ``rel_tol=3u`` (for normal
floats, hence the exponent range; near float64's largest value a 3u zone is left undecided).
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from walras.core.quantity import quantity

U = 2.0**-53
SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantities(draw: st.DrawFn, min_exp: int = -250, max_exp: int = 250) -> str:
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text("0123456789", min_size=0, max_size=12))
    frac = draw(st.one_of(st.none(), st.text("0123456789", min_size=0, max_size=12)))
    if not whole and not frac:  # "" and "." are not numbers (both parsers reject them)
        whole = "0"
    number = whole if frac is None else f"{whole}.{frac}"
    exponent = draw(st.one_of(st.none(), st.integers(min_exp, max_exp)))
    if exponent is not None:
        number += draw(st.sampled_from(["e", "E"])) + str(exponent)
    return sign + number + draw(st.sampled_from(SUFFIXES))


@given(quantities())
def test_agrees_with_parse_quantity(text: str) -> None:
    expected = float(parse_quantity(text))
    assert math.isclose(quantity(text), expected, rel_tol=3 * U, abs_tol=0.0)


@given(quantities(min_exp=300, max_exp=400))
def test_out_of_float_range_is_rejected_not_inf(text: str) -> None:
    exact = abs(parse_quantity(text))
    # Ours overflows somewhere within 3u of float64's largest value (see the tolerance above);
    # decided cases only: clearly inside or clearly outside.
    largest = Decimal(sys.float_info.max)
    if exact < largest * Decimal(1 - 3 * U):
        assert math.isclose(abs(quantity(text)), float(exact), rel_tol=3 * U)
    elif exact > largest * Decimal(1 + 3 * U):
        with pytest.raises(ValueError, match="out of range"):
            quantity(text)


@given(st.text("0123456789.+-eEkKMGTPinum ", max_size=10))
def test_never_accepts_what_the_client_rejects(text: str) -> None:
    """Over arbitrary strings of the grammar's characters: ours accepts a subset of the client's
    strings, with the same values."""
    try:
        ours = quantity(text)
    except ValueError:
        return
    expected = float(parse_quantity(text))
    assert math.isclose(ours, expected, rel_tol=3 * U, abs_tol=0.0)


@pytest.mark.parametrize(
    "text",
    [
        "1_000",  # Decimal's digit separators: not Kubernetes grammar
        "NaN",
        "Infinity",  # not a finite quantity
        "1 k",  # a space inside
        "١",  # a non-ASCII digit Decimal reads as 1
        True,  # a YAML boolean is not a number of GPUs
    ],
)
def test_stricter_than_the_client_where_the_api_server_is(text: object) -> None:
    parse_quantity(text)  # the client accepts it ...
    with pytest.raises(ValueError):
        quantity(text)  # ... the API server's grammar (and ours) does not


@pytest.mark.parametrize("text", ["1ki", "1mi", "1e", "1.2.3", "0x10", "1Ki5", ""])
def test_both_reject(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(ValueError):
        quantity(text)
