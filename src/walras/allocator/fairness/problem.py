"""The PS-DSF problem: nodes, tenants, resources, and the per-node quantities derived from them.

Notation (docs/algorithms.md#ps-dsf): nodes ``i = 0..K-1`` with capacity ``c[i, r]``, tenants
``n = 0..N-1`` with per-task demand ``d[n, r]``, weight ``φ_n > 0``, eligibility ``δ[n, i]``, an
optional demand cap ``D_n`` (the most tasks the tenant can use) and, for the GPU extension, a
per-node throughput ``t[n, i]``. Derived here:

- monopoly tasks ``γ[n, i] = δ[n, i] · min_{r: d[n,r] > 0} c[i, r] / d[n, r]`` (times ``t[n, i]``
  when throughput is given, so that γ counts work per unit time);
- dominant resource ``ρ[n, i] = argmax_r d[n, r] / c[i, r]`` (lowest index on ties, ``-1`` where
  the tenant cannot run on the node).

Worked example: a node with ``c = (8 GPU, 64 cores)`` and a tenant asking ``d = (1, 16)`` per task
can run ``min(8/1, 64/16) = 4`` tasks alone, so ``γ = 4`` and its dominant resource is cpu.

Validation policy (who raises, who is merely ineligible):

- **Raises** ``InvalidProblem`` at construction, naming the tenant/node/resource: wrong shapes,
  NaN or infinity, negative capacity/demand/cap/throughput, non-positive weight, a tenant whose
  demand is all zero (it would fit infinitely often), duplicate names.
- **Depends on ``strict``** (checked by :func:`screen`, called by ``solve``): a tenant that demands
  a resource no node has, or that has no eligible node at all (placement constraints, nothing
  fits, zero throughput everywhere). ``strict=True`` raises naming the tenant; ``strict=False``
  gives the tenant 0 tasks and lists it with a reason in ``FairnessResult.ineligible``.
- **Always ineligible, never raises:** a tenant with cap 0 (no active replicas is a normal state).

Called by ``fairness.solver``, ``fairness.distributed``, ``fairness.baselines``, the ``walras
fairshare`` command, and the operator's ``psdsf_problem`` snapshot builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from walras.allocator.errors import InvalidProblem

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def _as_array(value: object, name: str, ndim: int) -> FloatArray:
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidProblem(f"{name} is not numeric: {exc}", field=name) from exc
    if arr.ndim != ndim:
        raise InvalidProblem(
            f"{name} must be {ndim}-dimensional, got shape {arr.shape}", field=name
        )
    arr.setflags(write=False)
    return arr


def _names(given: Sequence[str] | None, count: int, prefix: str, name: str) -> tuple[str, ...]:
    if given is None:
        return tuple(f"{prefix}{k}" for k in range(count))
    names = tuple(str(s) for s in given)
    if len(names) != count:
        raise InvalidProblem(f"{name} has {len(names)} entries, expected {count}", field=name)
    if len(set(names)) != len(names):
        raise InvalidProblem(f"{name} contains duplicates", field=name)
    return names


@dataclass(frozen=True, eq=False)
class FairnessProblem:
    """One PS-DSF instance (immutable; arrays are converted to read-only float64 copies).

    Args:
        capacity: ``(K, M)`` node capacities ``c``.
        demand: ``(N, M)`` per-task demand ``d``.
        weight: ``(N,)`` weights ``φ > 0`` (default ones).
        eligible: ``(N, K)`` placement mask ``δ`` (default all true).
        cap: ``(N,)`` most tasks (work units with ``throughput``) each tenant can use; ``inf``
            means unbounded (default).
        throughput: ``(N, K)`` per-task throughput for the GPU extension; ``γ`` and ``x`` are
            then in work units per unit time.
        tenant_names, node_names, resource_names: labels used in error messages and output.
    """

    capacity: FloatArray
    demand: FloatArray
    weight: FloatArray | None = None
    eligible: BoolArray | None = None
    cap: FloatArray | None = None
    throughput: FloatArray | None = None
    tenant_names: Sequence[str] | None = None
    node_names: Sequence[str] | None = None
    resource_names: Sequence[str] | None = None
    # Filled in __post_init__: the defaulted, validated views every algorithm uses.
    phi: FloatArray = field(init=False, repr=False)
    delta: BoolArray = field(init=False, repr=False)
    caps: FloatArray = field(init=False, repr=False)
    tenants: tuple[str, ...] = field(init=False, repr=False)
    nodes: tuple[str, ...] = field(init=False, repr=False)
    resources: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        capacity = _as_array(self.capacity, "capacity", 2)
        demand = _as_array(self.demand, "demand", 2)
        K, M = capacity.shape
        N = demand.shape[0]
        if demand.shape[1] != M:
            raise InvalidProblem(
                f"demand has {demand.shape[1]} resources but capacity has {M}", field="demand"
            )
        tenants = _names(self.tenant_names, N, "tenant", "tenant_names")
        nodes = _names(self.node_names, K, "node", "node_names")
        resources = _names(self.resource_names, M, "resource", "resource_names")
        set_ = object.__setattr__
        set_(self, "capacity", capacity)
        set_(self, "demand", demand)
        set_(self, "tenants", tenants)
        set_(self, "nodes", nodes)
        set_(self, "resources", resources)

        for i, r in zip(*np.nonzero(~np.isfinite(capacity) | (capacity < 0)), strict=True):
            raise InvalidProblem(
                f"node {nodes[i]!r}: capacity of {resources[r]!r} is {capacity[i, r]} "
                "(must be finite and >= 0)",
                field="capacity",
                index=int(i),
            )
        for n, r in zip(*np.nonzero(~np.isfinite(demand) | (demand < 0)), strict=True):
            raise InvalidProblem(
                f"tenant {tenants[n]!r}: demand for {resources[r]!r} is {demand[n, r]} "
                "(must be finite and >= 0)",
                field="demand",
                index=int(n),
            )
        for n in np.nonzero(~(demand > 0).any(axis=1))[0]:
            raise InvalidProblem(
                f"tenant {tenants[n]!r} demands nothing per task (all-zero demand)",
                field="demand",
                index=int(n),
            )

        if self.weight is None:
            phi = np.ones(N)
            phi.setflags(write=False)
        else:
            phi = _as_array(self.weight, "weight", 1)
            if phi.shape != (N,):
                raise InvalidProblem(
                    f"weight must have shape ({N},), got {phi.shape}", field="weight"
                )
            for n in np.nonzero(~np.isfinite(phi) | (phi <= 0))[0]:
                raise InvalidProblem(
                    f"tenant {tenants[n]!r}: weight is {phi[n]} (must be finite and > 0)",
                    field="weight",
                    index=int(n),
                )
        set_(self, "weight", phi)
        set_(self, "phi", phi)

        if self.eligible is None:
            delta = np.ones((N, K), dtype=bool)
        else:
            raw = np.array(self.eligible)
            if raw.shape != (N, K):
                raise InvalidProblem(
                    f"eligible must have shape ({N}, {K}), got {raw.shape}", field="eligible"
                )
            if raw.dtype != np.bool_:
                as_float = _as_array(raw, "eligible", 2)
                bad = ~np.isin(as_float, (0.0, 1.0))
                for n, i in zip(*np.nonzero(bad), strict=True):
                    raise InvalidProblem(
                        f"tenant {tenants[n]!r}: eligible[{nodes[i]!r}] is {as_float[n, i]} "
                        "(must be 0/1 or bool)",
                        field="eligible",
                        index=int(n),
                    )
                raw = as_float > 0.5
            delta = np.array(raw, dtype=bool)
        delta.setflags(write=False)
        set_(self, "eligible", delta)
        set_(self, "delta", delta)

        if self.cap is None:
            caps = np.full(N, np.inf)
            caps.setflags(write=False)
        else:
            caps = _as_array(self.cap, "cap", 1)
            if caps.shape != (N,):
                raise InvalidProblem(f"cap must have shape ({N},), got {caps.shape}", field="cap")
            # +inf is allowed and means "no cap"; NaN and negatives are not.
            for n in np.nonzero(np.isnan(caps) | (caps < 0))[0]:
                raise InvalidProblem(
                    f"tenant {tenants[n]!r}: cap is {caps[n]} (must be >= 0 or inf)",
                    field="cap",
                    index=int(n),
                )
        set_(self, "cap", caps)
        set_(self, "caps", caps)

        if self.throughput is not None:
            tput = _as_array(self.throughput, "throughput", 2)
            if tput.shape != (N, K):
                raise InvalidProblem(
                    f"throughput must have shape ({N}, {K}), got {tput.shape}", field="throughput"
                )
            for n, i in zip(*np.nonzero(~np.isfinite(tput) | (tput < 0)), strict=True):
                raise InvalidProblem(
                    f"tenant {tenants[n]!r}: throughput on node {nodes[i]!r} is {tput[n, i]} "
                    "(must be finite and >= 0)",
                    field="throughput",
                    index=int(n),
                )
            set_(self, "throughput", tput)

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(N tenants, K nodes, M resources)``."""
        return self.demand.shape[0], self.capacity.shape[0], self.capacity.shape[1]


def fit_counts(capacity: FloatArray, demand: FloatArray) -> FloatArray:
    """``(N, K)`` tasks of each tenant that fit on each node alone: ``min_r c[i,r] / d[n,r]``.

    Resources a tenant does not demand (``d = 0``) do not limit it. Loops over the (few)
    resources so that the temporaries stay ``N × K``, never ``N × K × M``.
    """
    N, K = demand.shape[0], capacity.shape[0]
    fit = np.full((N, K), np.inf)
    for r in range(capacity.shape[1]):
        d = demand[:, r]
        pos = d > 0
        if pos.any():
            fit[pos] = np.minimum(fit[pos], capacity[None, :, r] / d[pos, None])
    return fit


def monopoly_tasks(problem: FairnessProblem) -> FloatArray:
    """``γ (N, K)``: tasks (work units with throughput) tenant ``n`` gets monopolising node ``i``.

    ``γ = δ · min_{r: d_r > 0} c_{i,r} / d_{n,r}`` (× throughput). Zero means "not eligible".
    """
    gamma = fit_counts(problem.capacity, problem.demand)
    gamma = np.where(problem.delta, gamma, 0.0)
    if problem.throughput is not None:
        gamma = gamma * problem.throughput
    gamma.setflags(write=False)
    return gamma


def dominant_resources(problem: FairnessProblem, *, gamma: FloatArray | None = None) -> IntArray:
    """``ρ (N, K)``: index of ``argmax_r d[n,r] / c[i,r]``; ``-1`` where ``γ[n,i] = 0``.

    Ties go to the lowest resource index (deterministic). A demanded resource the node lacks has
    an infinite share, so it is dominant, and then γ is 0 and the entry is ``-1``. ``gamma``
    (the problem's :func:`monopoly_tasks`, when the caller already has it) saves recomputing it.
    """
    N, K, M = problem.shape
    # One resource at a time (temporaries stay N × K); strict ">" keeps the lowest index on ties.
    rho: IntArray = np.zeros((N, K), dtype=np.int64)
    best = np.full((N, K), -np.inf)
    for r in range(M):
        d = problem.demand[:, r, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(d > 0, d / problem.capacity[None, :, r], 0.0)
        better = share > best
        rho[better] = r
        best = np.where(better, share, best)
    rho[(monopoly_tasks(problem) if gamma is None else gamma) <= 0] = -1
    return rho


def screen(
    problem: FairnessProblem, gamma: FloatArray, *, strict: bool
) -> tuple[tuple[tuple[int, str], ...], BoolArray]:
    """Tenants that cannot take part, with reasons; raises instead when ``strict`` says so.

    Returns ``(ineligible, active)`` where ``active[n]`` is false for every listed tenant.
    """
    N = problem.shape[0]
    total_capacity = problem.capacity.sum(axis=0)
    reasons: list[tuple[int, str]] = []
    for n in range(N):
        name = problem.tenants[n]
        missing = [
            problem.resources[r]
            for r in range(problem.shape[2])
            if problem.demand[n, r] > 0 and total_capacity[r] <= 0
        ]
        if missing:
            reason = f"demands {', '.join(missing)}, which no node has"
            if strict:
                raise InvalidProblem(f"tenant {name!r} {reason}", field="demand", index=n)
            reasons.append((n, reason))
        elif problem.caps[n] <= 0:
            reasons.append((n, "cap is 0 (no active tasks)"))
        elif not (gamma[n] > 0).any():
            reason = "has no eligible node (placement constraints, or its task fits nowhere)"
            if strict:
                raise InvalidProblem(f"tenant {name!r} {reason}", field="eligible", index=n)
            reasons.append((n, reason))
    active = np.ones(N, dtype=bool)
    for n, _ in reasons:
        active[n] = False
    return tuple(reasons), active
