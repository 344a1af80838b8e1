"""Distributed PS-DSF (docs/algorithms.md#distributed-ps-dsf): one node's update, and a simulation.

:func:`node_update` is what each node agent runs every ``τ`` seconds. It needs only

- its own capacity ``c_i`` (and the tenants' demands, weights, eligibility on this node),
- the published tenant totals ``x_n`` (the sum of every agent's last published column),
- its own previously published column ``x_{·,i}``,

and returns the new column ``x_i ← x_i + θ (W_i(b) − x_i)`` with ``b_n = x_n − x_{n,i}`` and
``W_i`` the exact server water-fill of ``fairness.waterfill``. No other node's capacity is needed.

:func:`simulate_async` runs many such agents in one process on a simulated clock, to show when
this converges to the centralised answer. What it shows (and ``tests/unit/
test_fairness_distributed.py`` checks):

- **Converges** (to within 1e-3 of ``solve``, with the certificate going to 0): staggered agents
  — periods jittered by ``jitter ≥ 0.1`` so that two agents rarely read the same snapshot — with
  ``damping = 1``; this is an asynchronous Gauss–Seidel. Also fully simultaneous updates
  (``jitter = 0``) when ``damping ≤ 1/L``, ``L`` the largest number of nodes one tenant is
  eligible on: each of the ``L`` agents then moves at most its ``1/L`` part of the total
  correction, which is a damped Jacobi step that cannot overshoot. Jitter and damping in
  between (e.g. ``jitter = 0.1``, ``damping = 0.5``) also converge in the tests.
- **Oscillates**: simultaneous updates (``jitter = 0``) with ``damping = 1`` whenever a tenant is
  eligible on several nodes that compete for it. Every node sees the same starved tenant, all of
  them raise it at once, its total overshoots by a factor of about ``L``, the next round they all
  take it away again, and the allocation cycles with period 2 instead of settling.
- **Churn**: after a tenant arrives or leaves, or a node disappears, the running agents
  re-converge from where they were (the tests measure it); a departed node's column is simply
  no longer part of the published totals.

Called by the node agents (``walras agent``, engineer E) and by the tests/benchmarks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from walras.allocator.errors import InvalidProblem
from walras.allocator.fairness.certificates import certificate
from walras.allocator.fairness.problem import FairnessProblem, FloatArray, fit_counts
from walras.allocator.fairness.waterfill import rdm_fill, tdm_fill


def node_update(
    capacity_i: FloatArray,
    demand: FloatArray,
    weight: FloatArray,
    eligible_i: np.ndarray,
    totals: FloatArray,
    previous_i: FloatArray,
    *,
    cap: FloatArray | None = None,
    throughput_i: FloatArray | None = None,
    mode: str = "tdm",
    damping: float = 1.0,
) -> FloatArray:
    """One node's PS-DSF update from local information only.

    Args:
        capacity_i: ``(M,)`` this node's capacity.
        demand: ``(N, M)`` per-task demand of every tenant.
        weight: ``(N,)`` weights ``φ > 0``.
        eligible_i: ``(N,)`` bool, tenant may run on this node.
        totals: ``(N,)`` published totals ``x_n`` (including this node's ``previous_i``).
        previous_i: ``(N,)`` this node's last published column.
        cap: ``(N,)`` demand caps in the units of ``x`` (``None``: no caps).
        throughput_i: ``(N,)`` per-task throughput on this node (GPU extension; ``x`` in work).
        mode: ``"tdm"`` or ``"rdm"``.
        damping: ``θ ∈ (0, 1]``; the step is ``previous + θ (fill − previous)``.

    Returns:
        ``(N,)`` the new column; 0 for tenants not eligible here.

    Stale totals are tolerated: ``b = totals − previous_i`` is clipped at 0.
    """
    c = np.asarray(capacity_i, dtype=np.float64)
    d = np.asarray(demand, dtype=np.float64)
    phi = np.asarray(weight, dtype=np.float64)
    prev = np.asarray(previous_i, dtype=np.float64)
    tot = np.asarray(totals, dtype=np.float64)
    N = d.shape[0]
    if d.ndim != 2 or c.shape != (d.shape[1],):
        raise InvalidProblem(
            f"capacity_i must have shape ({d.shape[-1]},) matching demand", field="capacity"
        )
    for name, arr in (("weight", phi), ("totals", tot), ("previous_i", prev)):
        if arr.shape != (N,):
            raise InvalidProblem(f"{name} must have shape ({N},), got {arr.shape}", field=name)
        if not np.isfinite(arr).all():
            raise InvalidProblem(f"{name} contains NaN or infinity", field=name)
    if not (0.0 < damping <= 1.0):
        raise InvalidProblem(f"damping must be in (0, 1], got {damping}", field="damping")
    if mode not in ("tdm", "rdm"):
        raise InvalidProblem(f"mode must be 'tdm' or 'rdm', got {mode!r}", field="mode")
    if not np.isfinite(c).all() or (c < 0).any():
        raise InvalidProblem("capacity_i must be finite and >= 0", field="capacity")

    gamma = fit_counts(c[None, :], d)[:, 0]
    if throughput_i is not None:
        gamma = gamma * np.asarray(throughput_i, dtype=np.float64)
    live = np.asarray(eligible_i, dtype=bool) & (gamma > 0) & np.isfinite(gamma) & (phi > 0)
    caps = np.full(N, np.inf) if cap is None else np.asarray(cap, dtype=np.float64)
    idx = np.flatnonzero(live)
    new = np.zeros(N)
    if len(idx):
        b = np.maximum(tot[idx] - prev[idx], 0.0)
        upper = np.maximum(caps[idx] - b, 0.0)
        if mode == "tdm":
            x, _ = tdm_fill(gamma[idx], phi[idx], b, upper)
        else:
            d_live = d[idx]
            if throughput_i is not None:
                # x counts work units; resources are used per pod, i.e. per x / throughput.
                d_live = d_live / np.asarray(throughput_i, dtype=np.float64)[idx][:, None]
            x, _ = rdm_fill(gamma[idx], phi[idx], b, upper, d_live, c)
        new[idx] = x
    if damping == 1.0:
        return new
    return prev + damping * (new - prev)


@dataclass(frozen=True)
class ChurnEvent:
    """A change applied at simulated time ``at``.

    ``kind`` is ``"tenant_leave"``, ``"tenant_join"`` (``index`` = tenant) or ``"node_leave"``,
    ``"node_join"`` (``index`` = node). A departed tenant has cap 0 from then on; a departed
    node's column is withdrawn from the totals and it stops updating.
    """

    at: float
    kind: str
    index: int


@dataclass(frozen=True)
class SimulationTrace:
    """Outcome of :func:`simulate_async`.

    Attributes:
        times: ``(T,)`` simulated times of the samples (one per period ``τ``).
        residual: ``(T,)`` largest change of any time share ``x_{n,i}/γ_{n,i}`` in the period.
        violation: ``(T,)`` certificate of the allocation at each sample (active tenants/nodes).
        tasks: ``(N, K)`` final allocation.
        updates: node updates performed.
    """

    times: FloatArray
    residual: FloatArray
    violation: FloatArray
    tasks: FloatArray
    updates: int
    history: tuple[FloatArray, ...] = field(default=(), repr=False)


def _active_problem(
    problem: FairnessProblem, tenant_on: np.ndarray, node_on: np.ndarray
) -> FairnessProblem:
    caps = np.where(tenant_on, problem.caps, 0.0)
    eligible = problem.delta & node_on[None, :]
    return FairnessProblem(
        capacity=problem.capacity,
        demand=problem.demand,
        weight=problem.phi,
        eligible=eligible,
        cap=caps,
        throughput=problem.throughput,
        tenant_names=problem.tenants,
        node_names=problem.nodes,
        resource_names=problem.resources,
    )


def simulate_async(
    problem: FairnessProblem,
    *,
    mode: str = "tdm",
    period: float = 1.0,
    jitter: float = 0.2,
    damping: float = 1.0,
    duration: float = 100.0,
    events: Sequence[ChurnEvent] = (),
    seed: int = 0,
    start: FloatArray | None = None,
    keep_history: bool = False,
) -> SimulationTrace:
    """Simulate one agent per node running :func:`node_update` every ``period ± jitter``.

    Each agent ``i`` fires at times ``t_i, t_i + τ_i, …`` with ``τ_i = period·(1 + jitter·u)``,
    ``u ~ U(−1, 1)`` redrawn every firing, and a first firing uniform in ``[0, jitter·period]``.
    Agents firing at the *same* instant read the same published totals (the snapshot at that
    instant) and publish together — this is where simultaneous updates can overshoot. With
    ``jitter = 0`` every agent fires at every multiple of ``period``.

    Args:
        problem: the instance (its caps and eligibility are the starting state).
        mode, damping: passed to :func:`node_update`.
        duration: simulated time to run.
        events: churn applied at their times (see :class:`ChurnEvent`).
        seed: for the jitter.
        start: ``(N, K)`` initial published allocation (default zeros).
        keep_history: also return the allocation at every sample.
    """
    if jitter < 0 or period <= 0 or duration < 0:
        raise InvalidProblem("need period > 0, jitter >= 0, duration >= 0", field="jitter")
    N, K, _ = problem.shape
    rng = np.random.default_rng(seed)
    gamma = fit_counts(problem.capacity, problem.demand)
    if problem.throughput is not None:
        gamma = gamma * problem.throughput
    x = np.zeros((N, K)) if start is None else np.array(start, dtype=np.float64)
    tenant_on = problem.caps > 0
    caps = problem.caps.copy()
    node_on = np.ones(K, dtype=bool)
    next_fire = rng.uniform(0.0, jitter * period, size=K) if jitter > 0 else np.zeros(K)
    pending = sorted(events, key=lambda e: e.at)
    times: list[float] = []
    residual: list[float] = []
    violation: list[float] = []
    history: list[FloatArray] = []
    updates = 0
    sample_at = period
    last_sample = x.copy()
    scale = np.where(gamma > 0, gamma, 1.0)

    def sample(now: float) -> None:
        nonlocal last_sample
        times.append(now)
        residual.append(float(np.max(np.abs(x - last_sample) / scale, initial=0.0)))
        current = _active_problem(problem, tenant_on, node_on)
        violation.append(certificate(current, x, mode))
        if keep_history:
            history.append(x.copy())
        last_sample = x.copy()

    now = 0.0
    while True:
        t_fire = float(np.min(next_fire[node_on])) if node_on.any() else np.inf
        t_event = pending[0].at if pending else np.inf
        t_next = min(t_fire, t_event, sample_at)
        if t_next > duration:
            break
        now = t_next
        if sample_at <= now:
            sample(sample_at)
            sample_at += period
            continue
        if t_event <= now:
            ev = pending.pop(0)
            if ev.kind == "tenant_leave":
                tenant_on[ev.index] = False
                caps[ev.index] = 0.0
                x[ev.index] = 0.0
            elif ev.kind == "tenant_join":
                tenant_on[ev.index] = True
                caps[ev.index] = problem.caps[ev.index]
            elif ev.kind == "node_leave":
                node_on[ev.index] = False
                x[:, ev.index] = 0.0
            elif ev.kind == "node_join":
                node_on[ev.index] = True
                next_fire[ev.index] = now
            else:
                raise InvalidProblem(f"unknown churn event {ev.kind!r}", field="events")
            continue
        firing = np.flatnonzero(node_on & (next_fire <= now))
        totals = x.sum(axis=1)  # the snapshot every simultaneous agent reads
        eligible = problem.delta & tenant_on[:, None]
        cols = {}
        for i in firing:
            tput = None if problem.throughput is None else problem.throughput[:, i]
            cols[i] = node_update(
                problem.capacity[i],
                problem.demand,
                problem.phi,
                eligible[:, i],
                totals,
                x[:, i],
                cap=caps,
                throughput_i=tput,
                mode=mode,
                damping=damping,
            )
        for i, col in cols.items():
            x[:, i] = col
        updates += len(firing)
        step = period * (1.0 + jitter * rng.uniform(-1.0, 1.0, size=len(firing)))
        next_fire[firing] = now + np.maximum(step, 1e-9)
    return SimulationTrace(
        times=np.array(times),
        residual=np.array(residual),
        violation=np.array(violation),
        tasks=x,
        updates=updates,
        history=tuple(history),
    )
