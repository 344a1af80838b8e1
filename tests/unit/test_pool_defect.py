"""A ResourcePool its CRD schema refuses offers no GPUs, and says which field is wrong.

Such a pool can only exist if it was stored before the schema had the rule; the API server
rejects it today. Oracle: the field named by the schema (``spec.capacityOverride`` must be ≥ 0).
"""

from __future__ import annotations

from walras.core import model
from walras.core.snapshot import PoolState


def _pool(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "v100", "generation": 1}, "spec": spec}


def test_refused_pool_offers_nothing_and_names_the_field() -> None:
    pool = model.parse_pool(_pool({"gpuType": "v100", "capacityOverride": -3}))
    assert pool.capacity_override == 0
    assert pool.defect is not None
    assert pool.defect.startswith("spec.capacityOverride")


def test_valid_pool_has_no_defect() -> None:
    pool = model.parse_pool(_pool({"gpuType": "v100", "capacityOverride": 4}))
    assert pool.capacity_override == 4
    assert pool.defect is None


def test_empty_reason_names_the_refused_field() -> None:
    pool = model.parse_pool(_pool({"gpuType": "v100", "capacityOverride": -3}))
    state = PoolState(nodes=(), capacity=0, matching=0, not_ready=0, cordoned=0)
    assert state.why_empty(pool).startswith("invalid spec: spec.capacityOverride")
