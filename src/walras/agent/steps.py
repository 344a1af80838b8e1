"""One agent step of distributed, asynchronous PS-DSF (docs/algorithms.md#distributed-ps-dsf).

Called by the node agent (``walras.agent.runner``) every τ seconds and by the simulator
(``walras.agent.simulate``). Pure: numpy plus the allocator's ``fairness.node_update``.

Node ``i`` knows its own column of the tenant model (capacity ``c_i``, demands ``d_n``, weights
``φ_n``, eligibility ``δ_{n,i}``, caps ``D_n``, throughputs), the published tenant totals ``x_n``
and its own previous allocation ``x_{·,i}``. With ``b_n = x_n − x_{n,i}`` (the tenant's tasks on
other nodes) the server procedure returns the best response ``x̂_{·,i}`` (a water-fill). The agent
then moves part of the way::

    x_{·,i} ← x_{·,i} + θ (x̂_{·,i} − x_{·,i})                         (damping)
    x_{·,i} ← min(s · x_{·,i}, max(x_{·,i}^{old}, x̂_{·,i}))            (refill, s ≥ 1)

**Why damping, and how much.** Nodes that update on the same published totals each see a starved
tenant as starved and all raise it: a Jacobi step on ``c`` concurrent nodes multiplies a tenant's
deviation from its fair share by ``1 − c θ`` (for two tenants sharing ``K`` equal nodes the
undamped gain is ``−(K − 1)``), so a fixed θ oscillates once ``c θ > 2``. The concurrency is
estimated from data every agent already reads, at a cost independent of the number of nodes: the
aggregator publishes, per tenant, how many nodes it is eligible on (``K_n``) and its own publish
period ``T``; agents step once per τ, so about ``c = max_n K_n · min(1, (T + L) / τ)`` of them act
on one snapshot, ``L`` being the agent's own read-to-write latency (it grows under load). The
effective damping is ``θ = min(1, θ₀ / c)`` with the base ``θ₀`` (``--damping``,
default 1.0): the split between tenants then contracts by about ``1 − θ₀ α`` per aggregation,
``α ≤ 1`` being how strongly a node's best response reacts to the tenant's total.

**Which settings oscillate** (``tests/unit/test_agent_dynamics.py``, 20 and 100 simulated nodes,
6 tenants, τ = 1 s): a *fixed* θ does once ``c θ`` is large — θ = 1 or 0.5 with a 0.5 s aggregator
on 20 nodes (c ≈ 10), θ = 1 with a 0.1 s aggregator on 100 nodes — the totals then cycle with
relative errors of 0.1–2.5 instead of settling. The adaptive rule converged in every simulated
case with θ₀ ≤ 4 and jitter 0 or 0.2; θ₀ = 1 is shipped to keep a factor-2 margin on the
concurrency estimate (``θ₀ c_true / c ≤ 2``). Larger θ₀ converges faster on large clusters
(100 nodes: ≈ 22 s at θ₀ = 2, ≈ 10 s at θ₀ = 4, against > 40 s at θ₀ = 1, in simulation); jitter
matters less than damping once the aggregator is fast.

**Why damping made convergence grow with the number of nodes.** θ = θ₀/c damps the *whole*
move of a node, but only the part that shifts the tenant totals overshoots when nodes act
together. The other part — which tenants a node serves, how a tenant is spread over nodes —
has no such coupling, yet it also advances only θ per step, i.e. one e-fold per ``c τ`` seconds
with ``c`` growing like ``K (T + L)/τ``. Simulated (6 tenants, τ = 1 s, 0.1 s aggregator), the
damped method took 2–9 s on 20 nodes, 33–50 s on 100 and on 300 nodes 66 s or not within
90 s (3 random instances; one 500-node instance happened to need 3.7 s); the support of the
allocation was what lagged, the totals were near for most of that time.

**Scaled best response (``method="scaled"``, the default).** Instead of damping, the node
answers as if ``c_n`` nodes alike to it moved with it (``c_n = K_n · min(1, (T + L)/τ)``, per
tenant, at most ``x_n / x_{n,i}`` so that ``b'_n ≥ 0``; divided by θ₀): it predicts tenant
``n``'s total as ``b'_n + c_n x_{n,i}`` with ``b'_n = x_n − c_n x_{n,i}`` and water-fills
against that, i.e. ``x_{n,i}(ℓ) = max(0, ℓ φ_n γ_{n,i} − b'_n) / c_n`` with the node's time
filled. That is ``fairness.node_update`` with ``γ' = c_n γ`` (throughput × c_n), ``φ' = φ/c_n``
and previous ``c_n x_{n,i}``, divided by ``c_n``. The ``c_n`` concurrent moves then sum to about
one correction of each total (no overshoot), while which tenants the node serves is decided at
once, at full speed. The fixed points are those of the plain best response for every ``c_n``
(``x̂ = x`` gives ``x_n = ℓ c_n φ_n γ_{n,i}/c_n``… i.e. equal VDS on every node, the PS-DSF
condition), so the agents still converge to ``fairness.solve``; caps and RDM are handled by
the same water-fill. Simulated as above: 2–6.5 s on 20 nodes, 4.5–42 s on 100 (4 instances;
the 42 s one has two tenants eligible everywhere whose split settles slowly), 2–12.5 s on
300–500.
(Proportional-response dynamics, the textbook distributed Fisher-market method, needed 20–200
synchronous rounds on the same instances, so it was not adopted.)

**Pace (``pace``, per tenant, on by default).** ``c_n`` is right for the mode that moves a
tenant's *total*: a deviation seen by all nodes is corrected once per window. Too small, the
totals overshoot (a delay equation ``D' = −(k/W) D(t − W)``, with ``k`` the ratio of the true to
the estimated concurrency, oscillates for ``k > π/2``: simulated on 500 nodes with 0.6 s write
latency, θ₀ = 4 cycles, and so does θ₀ = 2 when the agents assume half that latency). But it is
far too large for the *exchange* modes, in which tenants swap
nodes around a cycle of GPU types while the totals barely move — on the benchmark's instance
speech moves a100 → t4, rl t4 → v100 and gan v100 → a100, driven only by the small total errors
the exchange leaves; at ``c_n`` they crawl (simulated, 500 nodes, 0.6 s write latency: a plateau
at relative error 1.9e-2 for 90 s, the plateau the real 500-agent run showed). So each node
keeps, per tenant, a factor ``m_n`` on ``c_n`` and the sign of its last move of that tenant: a
move in the same direction as the previous one (a slow, consistent drift) divides ``m_n`` by
``PACE_FASTER`` = 1.25, a reversal (an overshoot) multiplies it by ``PACE_SLOWER`` = 2, within
[1/4, 4] (``c_n m_n ≥ 1`` still holds). The bounds keep an overshoot small: at ``m_n = 1/4`` the
loop gain is at most 4 k, and one reversal halves it. The factor never changes a fixed point
(``x̂ = x`` does not depend on ``c_n``). The pace shortens convergence markedly on the agents'
benchmark (docs/evaluation.md#agents-converging).

**Which steps write.** A move that changes nothing the 1e-3 criterion can see costs the API
server a write (and every agent of the tenant some of its capacity) all the same. A step is not
written when, for every eligible tenant, ``|x'_{n,i} − x_{n,i}| ≤ ε x_n / K_n`` (published total
and eligible-node count, ε = ``WRITE_TOLERANCE`` = 1e-5) and no tenant came or went
(:func:`negligible`). Bound: the at most ``K_n`` nodes of tenant ``n`` then hold back at most
``ε x_n`` in all, so the published totals are within relative ε of what the agents' current
answers sum to. In the scaled method the moves of one window sum to one correction of the total's
error ``e_n`` and every node steps about once per τ ≥ W, so the held-back moves of one τ are at
least ``e_n``: ``e_n ≤ ε x_n``, a hundredth of the 1e-3 criterion, the rest being the margin for
the exchange modes, whose error drives the moves more weakly (simulated, benchmark instance:
final errors 4e-7 to 1.2e-6 at ε = 1e-5, 1.3e-5 at ε = 1e-4; the time to 1e-3 is the same).
A node that writes nothing also does not wait for its own write to be summed. Before the totals
are within 1e-3 nearly every move exceeds ε (0.8 writes per step on the real 500-agent run);
the rule pays after it: simulated, a converged cluster writes nothing but heartbeats (every
``stale_after / 3``), where the agents used to rewrite tiny changes every step (0.63 writes per
step after the real 500-agent run's timeout).

**Why the refill** (damped method). Damping also slows the part of the update that never
overshoots: filling a node's idle capacity (after a tenant leaves, a cap is lifted or the node is
new). The refill scales
the damped point up by the largest ``s ≥ 1`` that keeps it feasible on this node (TDM: time shares
``Σ_n x_{n,i}/γ_{n,i}`` no more than those of ``x̂``; RDM: every resource within capacity), capping
each tenant at the larger of its old value and its best response so no tenant is pushed past what
the server procedure offered. Scaling keeps the split between tenants, so it does not undo the
damping of the split.

A step is skipped (nothing written) when the published totals do not yet include this node's own
last write: ``b_n`` would otherwise count the node's old allocation as "elsewhere". The check
compares the resourceVersion of the NodeAllocation list the totals were summed from with the
resourceVersion of the agent's last write (the per-user version check of
docs/algorithms.md#distributed-ps-dsf).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Default base damping θ₀ (per aggregation window); see the module docstring and
#: ``tests/unit/test_agent_dynamics.py`` for the settings that oscillate.
DEFAULT_DAMPING = 1.0
#: Default jitter: each period is τ · (1 + U(−j, j)).
DEFAULT_JITTER = 0.2

#: Update methods: ``"scaled"`` (best response of the concurrent nodes, the default) and
#: ``"waterfill"`` (damped best response, the earlier method, kept for comparison).
METHODS = ("scaled", "waterfill")
DEFAULT_METHOD = "scaled"

NodeUpdate = Callable[..., FloatArray]


@dataclass(frozen=True)
class Column:
    """Node ``i``'s column of the PS-DSF tenant model (tenants in a stable, sorted order).

    ``throughput`` (per tenant, on this node's GPU type) is None when no job carries a throughput
    table; then tasks are counted in pods.
    """

    node_name: str
    tenant_names: tuple[str, ...]
    capacity: FloatArray  # (M,)
    demand: FloatArray  # (N, M)
    weight: FloatArray  # (N,)
    eligible: BoolArray  # (N,)
    cap: FloatArray | None  # (N,)
    throughput: FloatArray | None  # (N,)
    gpu_type: str | None = None

    def gamma(self) -> FloatArray:
        """Monopoly tasks γ_{n,i} = δ_{n,i} · min_{r: d_{n,r}>0} c_r / d_{n,r} (× throughput)."""
        n = len(self.tenant_names)
        out = np.zeros(n)
        for k in range(n):
            positive = self.demand[k] > 0
            if not self.eligible[k] or not positive.any():
                continue
            out[k] = float(np.min(self.capacity[positive] / self.demand[k, positive]))
            if self.throughput is not None:
                out[k] *= float(self.throughput[k])
        return out


@dataclass(frozen=True)
class PublishedTotals:
    """What the aggregator publishes (one object): x_n, eligible-node counts and its period."""

    tasks: Mapping[str, float]
    nodes: Mapping[str, int]
    period: float
    source_version: int | None
    iteration: int


@dataclass(frozen=True)
class StepResult:
    """The agent's new allocation on its node; ``tasks`` holds every eligible tenant (0 allowed)."""

    tasks: dict[str, float]
    pods: dict[str, float]
    eligible: tuple[str, ...]
    residual: float
    damping: float
    skipped: str | None = None  # reason when the step was not taken; nothing should be written
    method: str = "waterfill"  # the update actually used ("scaled" or "waterfill")
    pace: Pace | None = None  # the scaled method's per-tenant pace for the next step


#: Pace adaptation (scaled method, module docstring "Pace"): the factor on c_n shrinks by
#: ``PACE_FASTER`` after a move in the same direction as the previous one and grows by
#: ``PACE_SLOWER`` after a reversal, within [``PACE_MIN``, ``PACE_MAX``].
PACE_FASTER = 1.25
PACE_SLOWER = 2.0
PACE_MIN = 1.0 / 4.0
PACE_MAX = 4.0
#: Relative tolerance ε of the write rule: a step whose every move is within ε · x_n / K_n is
#: not written (module docstring "Which steps write"); a hundredth of the 1e-3 to which the tests
#: and the benchmark require the totals to converge.
WRITE_TOLERANCE = 1e-5


@dataclass(frozen=True)
class Pace:
    """Per tenant: the factor ``m_n`` on the concurrency estimate and the sign of the last move."""

    factor: Mapping[str, float]
    direction: Mapping[str, int]

    @staticmethod
    def start() -> Pace:
        return Pace({}, {})


def concurrency(column: Column, totals: PublishedTotals, tau: float, latency: float = 0.0) -> float:
    """Expected number of agents acting on one totals snapshot, for the tenants of this node.

    The window is the aggregator's period plus this agent's own read-to-write latency (measured
    on its previous step): under load, agents act on older snapshots and more of them overlap.
    """
    window = totals.period + max(0.0, latency)
    share = min(1.0, window / tau) if tau > 0 and window > 0 else 1.0
    counts = [
        max(1, totals.nodes.get(name, 1))
        for name, ok in zip(column.tenant_names, column.eligible, strict=True)
        if ok
    ]
    return max(1.0, max(counts, default=1) * share)


def tenant_concurrency(
    column: Column, totals: PublishedTotals, tau: float, latency: float = 0.0
) -> FloatArray:
    """Per tenant, the expected number of its nodes acting on one totals snapshot:
    ``c_n = max(1, K_n · min(1, (T + L)/τ))`` (:func:`concurrency` takes the max over tenants)."""
    window = totals.period + max(0.0, latency)
    share = min(1.0, window / tau) if tau > 0 and window > 0 else 1.0
    counts = np.array([max(1, totals.nodes.get(name, 1)) for name in column.tenant_names], float)
    return np.maximum(1.0, counts * share)


def effective_damping(
    base: float, column: Column, totals: PublishedTotals, tau: float, latency: float = 0.0
) -> float:
    """θ = min(1, θ₀ / c) with c from :func:`concurrency`."""
    return min(1.0, base / concurrency(column, totals, tau, latency))


def _max_scale(x: FloatArray, ceiling: FloatArray, cost: FloatArray, budget: float) -> float:
    """Largest s ≥ 1 with Σ_n min(s·x_n, ceiling_n)·cost_n ≤ budget (inf if it never binds).

    The left side is piecewise linear and non-decreasing in s with break points ceiling_n/x_n, so
    the answer is found exactly by one sort and cumulative sums.
    """
    live = (x > 0) & (cost > 0)
    if not live.any():
        return float("inf")
    bp = ceiling[live] / x[live]
    order = np.argsort(bp)
    bp, xc, cc = bp[order], (x[live] * cost[live])[order], (ceiling[live] * cost[live])[order]
    fixed = np.concatenate([[0.0], np.cumsum(cc)[:-1]])  # tenants already at their ceiling
    slope = float(np.sum(xc)) - np.concatenate([[0.0], np.cumsum(xc)[:-1]])
    value_at_bp = fixed + slope * bp
    over = np.flatnonzero(value_at_bp > budget)
    if len(over) == 0:
        return float("inf")
    k = int(over[0])
    return max(1.0, (budget - fixed[k]) / slope[k]) if slope[k] > 0 else 1.0


def _refill(
    column: Column, damped: FloatArray, best: FloatArray, old: FloatArray, mode: str
) -> FloatArray:
    """Scale ``damped`` up into idle capacity: the largest s ≥ 1 with min(s·x, ceiling) feasible.

    The ceiling is max(old, best) per tenant. Feasible means TDM time shares no more than those of
    the best response (so a node the best response leaves partly idle stays so), RDM every
    resource within capacity.
    """
    ceiling = np.maximum(old, best)
    if not (damped > 0).any():
        return damped
    gamma = column.gamma()
    live = gamma > 0
    if mode == "tdm":
        inv = np.where(live, 1.0 / np.where(live, gamma, 1.0), 0.0)
        budget = max(float(np.sum(best * inv)), float(np.sum(damped * inv)))
        scale = _max_scale(damped, ceiling, inv, budget)
    else:
        per_work = column.demand.copy()
        if column.throughput is not None:
            safe = np.where(column.throughput > 0, column.throughput, 1.0)
            per_work = per_work / safe[:, None]
        scale = min(
            _max_scale(damped, ceiling, per_work[:, r], float(column.capacity[r]))
            for r in range(len(column.capacity))
        )
    if not np.isfinite(scale):
        return ceiling.copy() * (damped > 0) + damped * (damped <= 0)
    return np.minimum(scale * damped, ceiling)


def negligible(
    column: Column,
    totals: PublishedTotals,
    previous: Mapping[str, float],
    result: StepResult,
    tolerance: float = WRITE_TOLERANCE,
) -> bool:
    """True when no tenant's move is worth a write (module docstring "Which steps write").

    Every move ``|x'_{n,i} − x_{n,i}|`` is at most ``tolerance · x_n / K_n`` (published total
    and eligible-node count), no tenant appeared or left and eligibility did not change.
    """
    if set(result.tasks) != set(previous):
        return False
    for k, name in enumerate(column.tenant_names):
        if not column.eligible[k]:
            continue
        total = float(totals.tasks.get(name, 0.0))
        bound = tolerance * total / max(1, totals.nodes.get(name, 1))
        if abs(result.tasks[name] - float(previous[name])) > bound:
            return False
    return True


def _next_pace(pace: Pace, names: tuple[str, ...], old: FloatArray, new: FloatArray) -> Pace:
    """The pace after a move from ``old`` to ``new`` (module docstring "Pace")."""
    scale = max(float(np.max(np.abs(new), initial=0.0)), float(np.max(old, initial=0.0)), 1e-12)
    moved = new - old
    factor, direction = dict(pace.factor), dict(pace.direction)
    for k, name in enumerate(names):
        sign = 0 if abs(moved[k]) <= 1e-9 * scale else (1 if moved[k] > 0 else -1)
        if sign == 0:
            continue
        before, m = direction.get(name, 0), factor.get(name, 1.0)
        if before == sign:
            m = max(PACE_MIN, m / PACE_FASTER)
        elif before == -sign:
            m = min(PACE_MAX, m * PACE_SLOWER)
        factor[name], direction[name] = m, sign
    return Pace(factor, direction)


def agent_step(
    column: Column,
    totals: PublishedTotals,
    previous: Mapping[str, float],
    *,
    tau: float,
    base_damping: float = DEFAULT_DAMPING,
    mode: str = "tdm",
    first: bool = False,
    refill: bool = True,
    adaptive: bool = True,
    latency: float = 0.0,
    node_update: NodeUpdate | None = None,
    method: str = DEFAULT_METHOD,
    pace: Pace | None = None,
) -> StepResult:
    """Run the server procedure for ``column`` against ``totals`` and damp it.

    ``previous`` is this node's last written allocation (tenant → x_{n,i}); tenants missing from
    the column (their jobs are gone) drop to zero at once. ``first`` marks an agent without a
    previous allocation: its first step is undamped (it starts from DRF on its own server, as the
    centralised algorithm does). ``adaptive=False`` uses θ₀ itself (kept to show that a fixed θ
    oscillates). ``node_update`` defaults to ``fairness.node_update``. ``method="scaled"``
    (after the first step) runs the best response of ``c_n`` alike concurrent nodes instead of
    damping (module docstring); ``adaptive`` and ``refill`` then do not apply.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if node_update is None:
        from walras.allocator import fairness

        update: NodeUpdate = fairness.node_update
    else:
        update = node_update
    names = column.tenant_names
    old = np.array([float(previous.get(name, 0.0)) for name in names])
    # The published totals include this node's old allocation (the caller checked the version),
    # so x_n ≥ x_{n,i}; clamp against rounding in the JSON round trip.
    published = np.array([float(totals.tasks.get(name, 0.0)) for name in names])
    published = np.maximum(published, old)
    if not first and method == "scaled" and len(names) > 0:
        # Best response of c_n alike nodes moving together (module docstring): tenant n's
        # predicted total is b'_n + c_n x_{n,i} with b'_n = x_n − c_n x_{n,i}. As one water-fill:
        # γ'_n = c_n γ_n (throughput × c_n), φ'_n = φ_n / c_n, previous c_n x_{n,i}.
        c = tenant_concurrency(column, totals, tau, latency) / max(base_damping, 1e-9)
        if pace is not None:
            c = c * np.array([float(pace.factor.get(name, 1.0)) for name in names])
        c = np.maximum(c, 1.0)
        held = old > 0
        c = np.where(held, np.minimum(c, published / np.where(held, old, 1.0)), c)
        c = np.maximum(c, 1.0)
        rate = column.throughput if column.throughput is not None else np.ones(len(names))
        scaled = np.asarray(
            update(
                column.capacity,
                column.demand,
                column.weight / c,
                column.eligible,
                published,
                c * old,
                cap=column.cap,
                throughput_i=c * rate,
                mode=mode,
                damping=1.0,
            ),
            dtype=np.float64,
        )
        new = scaled / c
        result = _result(column, previous, old, new, theta=1.0, method="scaled")
        if pace is None:
            return result
        return dataclasses.replace(result, pace=_next_pace(pace, names, old, new))
    if len(names) == 0:
        best = old
    else:
        best = np.asarray(
            update(
                column.capacity,
                column.demand,
                column.weight,
                column.eligible,
                published,
                old,
                cap=column.cap,
                throughput_i=column.throughput,
                mode=mode,
                damping=1.0,
            ),
            dtype=np.float64,
        )
    if first:
        theta = 1.0
    elif adaptive:
        theta = effective_damping(base_damping, column, totals, tau, latency)
    else:
        theta = min(1.0, base_damping)
    new = old + theta * (best - old)
    if refill and theta < 1.0 and len(names) > 0:
        new = _refill(column, new, best, old, mode)
    return _result(column, previous, old, new, theta=theta, method="waterfill")


def _result(
    column: Column,
    previous: Mapping[str, float],
    old: FloatArray,
    new: FloatArray,
    *,
    theta: float,
    method: str,
) -> StepResult:
    """The step's :class:`StepResult` (tasks, pods, residual) from the old and new column."""
    names = column.tenant_names
    new = np.where(column.eligible, np.maximum(new, 0.0), 0.0)
    dropped = [v for k, v in previous.items() if k not in set(names)]
    scale = max(float(np.max(new, initial=0.0)), float(np.max(old, initial=0.0)), 1e-12)
    change = float(np.max(np.abs(new - old), initial=0.0))
    change = max(change, max(dropped, default=0.0))
    tasks = {name: float(v) for name, v, ok in zip(names, new, column.eligible, strict=True) if ok}
    pods: dict[str, float] = {}
    for k, name in enumerate(names):
        if not column.eligible[k]:
            continue
        rate = 1.0 if column.throughput is None else float(column.throughput[k])
        pods[name] = float(new[k] / rate) if rate > 0 else 0.0
    eligible = tuple(name for name, ok in zip(names, column.eligible, strict=True) if ok)
    return StepResult(
        tasks=tasks,
        pods=pods,
        eligible=eligible,
        residual=change / scale,
        damping=theta,
        method=method,
    )
