"""Discrete-event simulation of the node agents and the totals aggregator (no Kubernetes).

Used by ``tests/unit/test_agent_dynamics.py`` to show which damping/jitter settings converge and
which oscillate, and by anyone tuning ``--tau``/``--jitter``/``--damping`` without a cluster. It
models exactly what the real processes do:

- agent ``i`` steps at times ``t_{i,k+1} = t_{i,k} + τ (1 + U(−j, j))`` (seeded), reading the
  latest published totals and running :func:`walras.agent.steps.agent_step`; a write gets a
  monotone version number (the resourceVersion), and a step is skipped while the totals'
  source version is older than the agent's last write;
- a write lands ``latency`` seconds after the agent read the totals (its compute and the PATCH
  under a loaded API server): the aggregator sums it only from then on, and the agent passes
  the same read-to-write latency to the step, as the real agent does (the runner's period
  back-off is not modelled: here the latency does not grow with the load);
- the aggregator publishes every ``T`` seconds the sum of the latest writes, the per-tenant count
  of eligible nodes and its period ``T``;
- ``changes`` replace node columns at given times (``None`` removes a node) to model churn.

The trajectory of the published totals is returned so that tests can compare it with
``fairness.solve`` and measure convergence and oscillation.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from walras.agent import steps


@dataclass(frozen=True)
class SimConfig:
    """Agent and aggregator timing; defaults are the shipped agent defaults."""

    tau: float = 1.0
    jitter: float = steps.DEFAULT_JITTER
    damping: float = steps.DEFAULT_DAMPING
    aggregate_period: float = 0.1
    mode: str = "tdm"
    refill: bool = True
    adaptive: bool = True
    horizon: float = 60.0
    seed: int = 0
    method: str = steps.DEFAULT_METHOD
    latency: float = 0.0
    pace: bool = True
    write_tolerance: float = steps.WRITE_TOLERANCE


@dataclass(frozen=True)
class SimResult:
    """Published totals after each aggregation: ``times`` (T,), ``totals`` (T, N)."""

    tenant_names: tuple[str, ...]
    times: np.ndarray
    totals: np.ndarray
    final_tasks: dict[str, dict[str, float]]  # node -> tenant -> x_{n,i} (latest writes)
    steps: int
    writes: int
    skipped: int


@dataclass
class _Agent:
    column: steps.Column | None
    tasks: dict[str, float] = field(default_factory=dict)  # what the aggregator sums
    version: int = -1  # version of the last write; -1: nothing written yet
    written: dict[str, float] | None = None  # the agent's own last write (None: not yet)
    pace: steps.Pace | None = None


def relative_error(x: np.ndarray, reference: np.ndarray) -> float:
    """max_n |x_n − r_n| / r_n, with tenants whose reference is 0 measured against max(r)."""
    ref = np.asarray(reference, dtype=np.float64)
    floor = max(float(np.max(np.abs(ref), initial=0.0)), 1e-12)
    denom = np.where(np.abs(ref) > 1e-9 * floor, np.abs(ref), floor)
    return float(np.max(np.abs(np.asarray(x) - ref) / denom, initial=0.0))


def convergence_time(
    result: SimResult, reference: Mapping[str, float], *, tol: float = 1e-3, after: float = 0.0
) -> float | None:
    """First publish time ≥ ``after`` from which every later publish is within ``tol``."""
    ref = np.array([float(reference.get(n, 0.0)) for n in result.tenant_names])
    ok = np.array([relative_error(row, ref) <= tol for row in result.totals])
    keep = result.times >= after
    times, ok = result.times[keep], ok[keep]
    if len(ok) == 0 or not ok[-1]:
        return None
    bad = np.nonzero(~ok)[0]
    start = 0 if len(bad) == 0 else int(bad[-1]) + 1
    return float(times[start] - after)


def simulate(
    columns: Sequence[steps.Column],
    config: SimConfig = SimConfig(),
    *,
    changes: Sequence[tuple[float, Sequence[steps.Column | None]]] = (),
    node_update: steps.NodeUpdate | None = None,
) -> SimResult:
    """Run the agents of ``columns`` (one per node) until ``config.horizon``."""
    rng = np.random.default_rng(config.seed)
    tenant_names = tuple(sorted({n for c in columns for n in c.tenant_names}))
    for _, cols in changes:
        tenant_names = tuple(
            sorted(set(tenant_names) | {n for c in cols if c for n in c.tenant_names})
        )
    agents = [_Agent(column=c) for c in columns]
    published = steps.PublishedTotals(
        tasks={}, nodes={}, period=0.0, source_version=None, iteration=0
    )
    version = 0
    events: list[
        tuple[float, int, int]
    ] = []  # (time, order, agent index or -1 aggregator, -2 - k change)
    order = 0

    def push(t: float, who: int) -> None:
        nonlocal order
        heapq.heappush(events, (t, order, who))
        order += 1

    for i in range(len(agents)):
        push(float(rng.uniform(0.0, config.tau)), i)
    push(config.aggregate_period, -1)
    for k, (t, _) in enumerate(changes):
        push(t, -2 - k)
    times: list[float] = []
    rows: list[np.ndarray] = []
    n_steps = n_writes = n_skipped = 0
    landings: list[tuple[float, int, int, dict[str, float]]] = []  # (time, order, agent, tasks)
    while events:
        t, _, who = heapq.heappop(events)
        if t > config.horizon:
            break
        while landings and landings[0][0] <= t:
            _, _, i, landed = heapq.heappop(landings)
            if agents[i].column is not None:
                version += 1
                agents[i].tasks, agents[i].version = landed, version
        if who == -1:
            totals: dict[str, float] = {}
            nodes: dict[str, int] = {}
            for agent in agents:
                if agent.column is None or agent.version < 0:
                    continue
                for name, v in agent.tasks.items():
                    totals[name] = totals.get(name, 0.0) + v
                for name, ok in zip(agent.column.tenant_names, agent.column.eligible, strict=True):
                    if ok:
                        nodes[name] = nodes.get(name, 0) + 1
            published = steps.PublishedTotals(
                tasks=totals,
                nodes=nodes,
                period=config.aggregate_period,
                source_version=version,
                iteration=published.iteration + 1,
            )
            times.append(t)
            rows.append(np.array([totals.get(n, 0.0) for n in tenant_names]))
            push(t + config.aggregate_period, -1)
        elif who <= -2:
            _, cols = changes[-2 - who]
            for i, col in enumerate(cols):
                if i < len(agents):
                    agents[i].column = col
                    if col is None:
                        agents[i].tasks = {}
                        agents[i].version = -1
                        agents[i].written = None
                else:
                    agents.append(_Agent(column=col))
                    push(t + float(rng.uniform(0.0, config.tau)), len(agents) - 1)
        else:
            agent = agents[who]
            busy = 0.0  # a step that writes lasts until its write lands (the PATCH is blocking)
            if agent.column is not None:
                n_steps += 1
                ready = (
                    published.source_version is not None
                    and published.source_version >= agent.version
                )
                if not ready:
                    n_skipped += 1
                else:
                    result = steps.agent_step(
                        agent.column,
                        published,
                        agent.written or {},
                        tau=config.tau,
                        base_damping=config.damping,
                        mode=config.mode,
                        first=agent.written is None,
                        refill=config.refill,
                        adaptive=config.adaptive,
                        node_update=node_update,
                        method=config.method,
                        latency=config.latency,
                        pace=(agent.pace or steps.Pace.start()) if config.pace else None,
                    )
                    # The runner's write rule: a negligible move is not written.
                    quiet = agent.written is not None and steps.negligible(
                        agent.column, published, agent.written, result, config.write_tolerance
                    )
                    if not quiet:
                        n_writes += 1
                        agent.written = result.tasks
                        agent.pace = result.pace
                        if config.latency > 0:
                            heapq.heappush(landings, (t + config.latency, order, who, result.tasks))
                            order += 1
                            busy = config.latency
                        else:
                            version += 1
                            agent.tasks, agent.version = result.tasks, version
            period = config.tau * (1.0 + float(rng.uniform(-config.jitter, config.jitter)))
            push(t + max(period, busy, 1e-3), who)
    final = {
        (a.column.node_name if a.column else f"removed-{i}"): dict(a.tasks)
        for i, a in enumerate(agents)
        if a.column is not None
    }
    return SimResult(
        tenant_names=tenant_names,
        times=np.array(times),
        totals=np.array(rows) if rows else np.zeros((0, len(tenant_names))),
        final_tasks=final,
        steps=n_steps,
        writes=n_writes,
        skipped=n_skipped,
    )


def columns_from_arrays(
    capacity: np.ndarray,
    demand: np.ndarray,
    weight: np.ndarray,
    eligible: np.ndarray,
    *,
    cap: np.ndarray | None = None,
    throughput: np.ndarray | None = None,
    tenant_names: Sequence[str] | None = None,
    node_names: Sequence[str] | None = None,
) -> list[steps.Column]:
    """Split a centralised problem (K nodes, N tenants) into the K agents' columns."""
    n_tenants, n_nodes = eligible.shape
    tenants = tuple(tenant_names or [f"t{n}" for n in range(n_tenants)])
    nodes = list(node_names or [f"node-{i:03d}" for i in range(n_nodes)])
    return [
        steps.Column(
            node_name=nodes[i],
            tenant_names=tenants,
            capacity=np.asarray(capacity[i], dtype=np.float64),
            demand=np.asarray(demand, dtype=np.float64),
            weight=np.asarray(weight, dtype=np.float64),
            eligible=np.asarray(eligible[:, i], dtype=bool),
            cap=None if cap is None else np.asarray(cap, dtype=np.float64),
            throughput=None
            if throughput is None
            else np.asarray(throughput[:, i], dtype=np.float64),
        )
        for i in range(n_nodes)
    ]
