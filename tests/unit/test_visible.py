"""walras.operator.visible: a status value changes when it moves by more than one unit of its
last shown digit. Oracles: the units written out by hand for each case."""

from __future__ import annotations

import pytest

from walras.operator import visible


@pytest.mark.parametrize(
    ("old", "new", "key", "same"),
    [
        (1.23, 1.24, "price", True),  # one unit of 0.01: rounding noise
        (1.23, 1.25, "price", False),  # two units
        (1.0, 0.999, "price", True),  # the finer unit, 0.001, across the decade
        (1230.0, 1240.0, "price", True),  # three digits of 1230: unit 10
        (1230.0, 1250.0, "price", False),
        (0.51, 0.52, "cost", True),  # two digits: unit 0.01
        (0.51, 0.53, "cost", False),
        (0.52, 0.53, "fairShare", True),  # two decimals: unit 0.01
        (0.52, 0.54, "fairShare", False),
        (0.052, 0.053, "utilisation", True),  # three decimals: unit 0.001
        (0.052, 0.054, "utilisation", False),
        (0.052, 0.0525, "price", False),  # three digits of 0.052: unit 0.0001; moved 5 units
        (0.0, 0.0, "price", True),
        (0.0, 0.001, "price", False),
        (1200, 1201, "stepsDone", False),  # integers: exact
        ("v100", "k80", "gpuType", False),
        (["a100-0001"], ["a100-0002"], "nodes", False),  # names: exact
        (True, False, "x", False),
    ],
)
def test_values(old: object, new: object, key: str, same: bool) -> None:
    assert visible.same(new, old, key) is same


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ("share of v100 is 0.52 at price 1.23", "share of v100 is 0.53 at price 1.24", True),
        ("share of v100 is 0.52 at price 1.23", "share of v100 is 0.54 at price 1.23", False),
        ("expected throughput 1", "expected throughput 0.999", True),
        ("expected throughput 1", "expected throughput 1.02", False),
        ("gang of 1 pods x 1 nvidia.com/gpu", "gang of 2 pods x 1 nvidia.com/gpu", False),
        ("2 pods bound on n0, n1", "2 pods bound on n0, n2", False),
        ("share of v100 is 0.52", "share of k80 is 0.52", False),
        ("at price 1.2e+03", "at price 1.3e+03", True),  # unit 100
    ],
)
def test_messages(old: str, new: str, same: bool) -> None:
    assert visible.same(new, old, "message") is same
    assert visible.same(new, old, "reason") is (old == new)  # other text: exact
