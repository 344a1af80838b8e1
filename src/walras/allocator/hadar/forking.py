"""HadarE: forked copies of forkable jobs (docs/algorithms.md#hadar-and-hadare).

After Hadar has kept, moved and admitted jobs, HadarE puts the GPUs that are still free to work:

1. **Fill.** A *forked-mode* job (``forkable``, active, and its gang fits on one node) may run one
   copy per node that has room: a whole gang of ``W_j`` pods packed on that node, on a node where
   the job has no pods yet. Copies are added one at a time, the largest marginal payoff first::

       gain(j, k) = U_j(τ with the copy) − U_j(τ without) − k^{type(k)} · W_j,
       τ = e_j + (rem_j + lost_j) / R_j

   where ``R_j`` is the job's summed rate and ``lost_j = Σ_c rate_c · restart`` over its new
   (not kept) gangs, the work their restarts cost. A job with no gang has utility 0, so every job
   gets a first copy before a second one is worth much. Copies fill every node that has room
   (HadarE's goal: no idle node while a copy could run), whatever the sign of the gain; the gain
   only orders them. Ties: lower node, then lower job. Non-forkable jobs are never copied.
   **End game** (fewer forked jobs still open than nodes, with the planner's makespan horizon):
   every such job holds a copy already and the spare nodes decide when the queue drains, so they
   follow the fluid plan the TTD bound is made of: a node of type ``r`` goes first to a job
   whose share of ``r`` in the LP (``HorizonResult.share``, GPUs on average until ``T*``) exceeds
   what it holds this round, a copy that stays in place first, the largest shortfall next; the
   gain orders the rest. (On the Hadar paper's mixes this took the worst mix, M-8, from 1.9 %
   to 0.2 % above the bound; with at least as many jobs as nodes the gain alone did better on
   ``examples/hadare-small.yaml``.)
2. **Last round.** If the job's gangs can finish its remaining work this round
   (``Σ_c cap_c ≥ rem_j`` with ``cap_c = rate_c · (L − restart if not kept)``), only its fastest
   gangs are sure to stay: the fewest, by ``cap_c`` descending (ties: kept first, lower node),
   whose caps cover ``rem_j`` (the paper's "fastest β nodes"). The others are dropped and their
   GPUs refilled with copies of other jobs; the job gets no more copies. Repeat until nothing is
   dropped. **End game** (:func:`restore`, a deviation from the paper): a dropped gang whose node
   no other job took goes back to its job (kept gangs first), so no GPU idles while the job is
   not done; the paper's rule would finish the job later and leave those GPUs idle.
3. **Split.** A forked job's remaining steps are split so that all its gangs finish together
   (:mod:`~walras.allocator.hadar.endgame`: gang ``c`` works from ``s_c`` = 0 if kept, the
   restart if new, and gets ``rate_c · max(0, T − s_c)``, with ``T`` the job's earliest finish).
   The shares sum to ``rem_j``; in the last round every gang finishes its share at ``T ≤ L``; when
   every gang starts together they are in proportion to the rates.
   Example: gangs at 3 and 1 steps/s, both kept, 800 steps left, ``L = 360``, and a second job
   that can use the slower node: caps 1080 and 360 cover 800, so only the fast gang stays
   (1080 ≥ 800) and gets all 800 steps. With no such job both stay and get 600 and 200 steps
   (``T = 200 s``).

The copies' progress adds up; the job is done when the sum reaches its total work (the caller's
tracker, e.g. the simulator, sums it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.hadar.admission import Market
from walras.allocator.hadar.endgame import finish_together
from walras.allocator.hadar.inputs import HadarInputs
from walras.allocator.hadar.prices import job_utility

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(slots=True)
class GangState:
    """A gang while the plan is being built (mutable; frozen into a ``Gang`` at the end)."""

    nodes: tuple[tuple[int, int], ...]
    rate: float
    kept: bool
    cost: float


def pooled(inputs: HadarInputs, free: IntArray) -> IntArray:
    """Free GPUs per type, ``(T,)``."""
    return np.bincount(inputs.node_type, weights=free, minlength=inputs.n_types).astype(np.int64)


def usable_seconds(inputs: HadarInputs, kept: bool) -> float:
    """Seconds of the round a gang computes: all of it if kept, less the restart if new."""
    return inputs.round_seconds - (0.0 if kept else inputs.restart_seconds)


def projected_utility(inputs: HadarInputs, job: int, gangs: list[GangState]) -> float:
    """``U_j`` at ``τ = e + (rem + lost) / R`` (0 without gangs); see the module docstring."""
    rate = sum(g.rate for g in gangs)
    if rate <= 0:
        return 0.0
    lost = sum(g.rate * inputs.restart_seconds for g in gangs if not g.kept)
    tau = inputs.elapsed[job] + (inputs.remaining[job] + lost) / rate
    return float(job_utility(inputs, np.array([job]), np.array([tau]))[0])


def projected_utilities(inputs: HadarInputs, gangs: dict[int, list[GangState]]) -> dict[int, float]:
    """:func:`projected_utility` of every job in ``gangs``, with one utility evaluation for all
    (the same element-wise operations on the same ``τ``, so the same floats)."""
    jobs: list[int] = []
    taus: list[float] = []
    out: dict[int, float] = {}
    for job, job_gangs in gangs.items():
        rate = sum(g.rate for g in job_gangs)
        if rate <= 0:
            out[job] = 0.0
            continue
        lost = sum(g.rate * inputs.restart_seconds for g in job_gangs if not g.kept)
        jobs.append(job)
        taus.append(float(inputs.elapsed[job] + (inputs.remaining[job] + lost) / rate))
    if jobs:
        values = job_utility(inputs, np.array(jobs, dtype=np.int64), np.array(taus))
        out.update(zip(jobs, (float(v) for v in values), strict=True))
    return out


def fork(
    inputs: HadarInputs,
    jobs: IntArray,
    gangs: dict[int, list[GangState]],
    free: IntArray,
    market: Market,
    dropped: dict[int, list[GangState]] | None = None,
    share: FloatArray | None = None,
) -> set[int]:
    """Fill and trim (steps 1–2) in place; returns the jobs in their last round.

    ``dropped`` collects the gangs the trim took from each job (for :func:`restore`)."""
    last: set[int] = set()
    while True:
        _fill(inputs, jobs, gangs, free, market, last, share)
        if not _trim(inputs, jobs, gangs, free, last, {} if dropped is None else dropped):
            return last


def restore(
    inputs: HadarInputs,
    dropped: dict[int, list[GangState]],
    gangs: dict[int, list[GangState]],
    free: IntArray,
) -> None:
    """Step 2, end: a dropped gang whose node no other job took goes back to its job, if it still
    gets work under the equal-finish split (a new copy only if the job runs past its restart).

    Order: jobs ascending; a job's gangs kept first, then fastest, then lower node."""
    for j in sorted(dropped):
        mine = gangs.setdefault(j, [])
        for g in sorted(dropped[j], key=lambda g: (not g.kept, -g.rate, g.nodes)):
            if any(free[k] < pods for k, pods in g.nodes):
                continue
            if {k for k, _ in g.nodes} & {k for h in mine for k, _ in h.nodes}:
                continue
            if mine:
                finish, _ = finish_together(
                    [h.rate for h in mine], [_start(inputs, h) for h in mine], inputs.remaining[j]
                )
                if finish <= _start(inputs, g):
                    continue
            mine.append(g)
            for k, pods in g.nodes:
                free[k] -= pods


def split_steps(inputs: HadarInputs, job: int, gangs: list[GangState]) -> list[float]:
    """Step 3: the job's remaining work split so that its gangs finish together
    (:func:`~walras.allocator.hadar.endgame.finish_together`)."""
    rem = float(inputs.remaining[job])
    if len(gangs) == 1 or not any(g.rate > 0 for g in gangs):
        return [rem] + [0.0] * (len(gangs) - 1)
    _, steps = finish_together([g.rate for g in gangs], [_start(inputs, g) for g in gangs], rem)
    return [float(x) for x in steps]


def _start(inputs: HadarInputs, gang: GangState) -> float:
    """Seconds into the round at which ``gang`` starts working (its restart if placed afresh)."""
    return inputs.round_seconds - usable_seconds(inputs, gang.kept)


def _fill(
    inputs: HadarInputs,
    jobs: IntArray,
    gangs: dict[int, list[GangState]],
    free: IntArray,
    market: Market,
    last: set[int],
    share: FloatArray | None = None,
) -> None:
    cand = np.array([j for j in jobs if int(j) not in last], dtype=np.int64)
    if cand.size == 0:
        return
    K = inputs.n_nodes
    W = inputs.replicas[cand]
    speed = inputs.throughput[cand][:, inputs.node_type]  # (n, K): a copy's rate on node k
    kept_if = inputs.current[cand] == W[:, None]  # a copy there would keep its pods
    occupied = np.zeros((cand.size, K), dtype=bool)
    rate = np.zeros(cand.size)
    lost = np.zeros(cand.size)
    held = np.zeros((cand.size, inputs.n_types))
    for i, job in enumerate(cand):
        for g in gangs.get(int(job), []):
            for k, pods in g.nodes:
                occupied[i, k] = True
                held[i, inputs.node_type[k]] += pods
            rate[i] += g.rate
            lost[i] += 0.0 if g.kept else g.rate * inputs.restart_seconds
    rem = inputs.remaining[cand]
    ela = inputs.elapsed[cand]
    restart = inputs.restart_seconds
    while True:
        ok = (free[None, :] >= W[:, None]) & ~occupied & (speed > 0)
        if not ok.any():
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            tau0 = np.where(rate > 0, ela + (rem + lost) / rate, np.inf)
            new_rate = rate[:, None] + speed
            new_lost = lost[:, None] + np.where(kept_if, 0.0, speed * restart)
            tau1 = ela[:, None] + (rem[:, None] + new_lost) / np.where(ok, new_rate, 1.0)
        u0 = job_utility(inputs, cand, tau0)
        u1 = job_utility(inputs, cand[:, None], tau1)
        node_price = market.prices(pooled(inputs, free))[inputs.node_type]
        gain = u1 - u0[:, None] - node_price[None, :] * W[:, None]
        gain = np.where(ok, gain, -np.inf)
        if share is not None and cand.size < K:
            # End game (fewer jobs than nodes): the spare nodes follow the fluid plan (module
            # docstring, step 1).
            deficit = (share[cand] - held)[:, inputs.node_type]
            tier = np.where(ok, 2.0 * (deficit > 1e-9) + kept_if, -1.0)
            band = ok & (tier == tier.max())
            top = np.where(band, deficit, -np.inf).max()
            gain = np.where(band & (deficit >= top - 1e-9), gain, -np.inf)
        # Transposed so that argmax's first hit is the lowest node, then the lowest job.
        flat = int(np.argmax(gain.T))
        k, i = flat // cand.size, flat % cand.size
        j = int(cand[i])
        w = int(W[i])
        gangs.setdefault(j, []).append(
            GangState(((int(k), w),), float(speed[i, k]), bool(kept_if[i, k]), node_price[k] * w)
        )
        free[k] -= w
        occupied[i, k] = True
        held[i, inputs.node_type[k]] += w
        rate[i] += speed[i, k]
        lost[i] += 0.0 if kept_if[i, k] else speed[i, k] * restart


def _trim(
    inputs: HadarInputs,
    jobs: IntArray,
    gangs: dict[int, list[GangState]],
    free: IntArray,
    last: set[int],
    dropped_gangs: dict[int, list[GangState]],
) -> bool:
    dropped = False
    for j in (int(x) for x in jobs):
        mine = gangs.get(j, [])
        if j in last or not mine:
            continue
        caps = [g.rate * usable_seconds(inputs, g.kept) for g in mine]
        rem = float(inputs.remaining[j])
        if sum(caps) < rem:
            continue
        last.add(j)
        order = sorted(range(len(mine)), key=lambda c: (-caps[c], not mine[c].kept, mine[c].nodes))
        keep: list[int] = []
        covered = 0.0
        for c in order:
            keep.append(c)
            covered += caps[c]
            if covered >= rem:
                break
        for c in order[len(keep) :]:
            dropped_gangs.setdefault(j, []).append(mine[c])
            for k, pods in mine[c].nodes:
                free[k] += pods
            dropped = True
        gangs[j] = [mine[c] for c in sorted(keep)]
    return dropped
