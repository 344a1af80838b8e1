"""Tenant quotas in PS-DSF: a guarantee carved out of every node of its type, a maximum confined.

TDM PS-DSF is the Eisenberg–Gale program over node time shares ``y_{n,i} = x_{n,i} / γ_{n,i}``
(docs/algorithms.md#ps-dsf)::

    max Σ_n φ_n log x_n    s.t.  x_n = Σ_i γ_{n,i} y_{n,i} ≤ D_n,   Σ_n y_{n,i} ≤ 1,   y ≥ 0

Tenant ``n`` holds ``h_ng = Σ_{i of type g} C_i y_{n,i}`` GPUs of type ``g`` (node ``i``'s ``C_i``
GPUs for ``y_{n,i}`` of the time). Its carve-out ``c_ng = min(G_ng, f_ng)`` (``f_ng``: the GPUs
asked by its jobs that can use ``g`` and whose gang fits in ``G_ng``; ``walras.allocator.quotas``)
is taken from every node of type ``g`` it can use, in proportion to the node's GPUs::

    a_{n,i} = c_ng / R_ng,   R_ng = Σ_{i of type g, γ_{n,i} > 0} C_i,   so Σ_i C_i a_{n,i} = c_ng

and the quota-constrained program adds, per node,

    Σ_n max(y_{n,i} − a_{n,i}, 0) ≤ 1 − Σ_n a_{n,i}             (guarantee: n's first a_{n,i} of
                                                                  node i's time are its own)
    Σ_{i of type g} C_i y_{n,i} ≤ M_ng                            (maximum)

Summed over the nodes of ``g`` with weights ``C_i`` the guarantee rows give the per-type row of
``walras.allocator.quotas`` (``Σ_n max(h_ng − c_ng, 0) ≤ R_g − Σ_n c_ng``): per node is stronger,
and it is what the realiser can keep, since it places gangs per node. Where the shares of a node
add up to more than 1 (tenants' eligible nodes overlap unevenly), that node's are scaled down to
fit: there the guarantee is met only in part.

**The columns are pieces of nodes.** Node ``i`` is split into a private piece of each ``n`` with
``a_{n,i} > 0`` (only ``n`` may use it) and a shared piece of ``1 − Σ_n a_{n,i}``; a piece is the
node for that fraction of the time (TDM) or with that fraction of every resource (RDM): its
capacity is the node's times the fraction, so ``γ`` scales with it. Splitting ``y`` into private
and shared parts is feasible iff the guarantee row holds (take the private part
``min(y_{n,i}, a_{n,i})``), so PS-DSF over the pieces, by the unchanged solver and with its
certificate, is the optimum of the program with the guarantee rows. A tenant's tasks on node
``i`` are the sum over the node's pieces.

Two repairs, as in ``walras.allocator.quotas.enforce``, alternate with the solve:

- **lending**: a private piece its owner leaves idle (its cap ``D_n`` binds first; a tenant below
  its cap always fills a piece only it may use) is shrunk to what it uses, its time on the node
  counting against its own piece first, and the freed time goes to the shared piece;
- **maximum**: a tenant over ``M_ng`` is *barred* from the shared pieces of type ``g`` and confined
  to private pieces of ``a_{n,i} = M_ng / R_ng``: the maximum holds. One pair per pass, the
  largest excess first (a confined tenant moves its demand to its other types, which may bring
  another pair back under its maximum).

What holds with a binding maximum (no caps, so every piece only its owner may use is full and
none is lent): the allocation is the optimum of the program with each barred pair's time on
every node of ``g`` *fixed* at its confinement, ``y_{n,i} = a_{n,i}`` (the pieces are exactly
that program, as for guarantees). That spreads the tenant's ``M_ng`` over its nodes in
proportion to their GPUs, a restriction of the maximum row, so on several nodes of a type the
allocation can be below the program's optimum (which may put the tenant's ``M_ng`` on the nodes
where it gains most, or leave its row slack). With one node of the type the confinement *is* the
row, held with equality; the allocation is then the program's optimum wherever the confined rows
bind at that optimum, which confining one pair at a time made so on every random instance
checked (not proven: a confinement on one type moves demand to another, and a pass never
releases a confinement). The tests check all three against cvxpy.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from walras.allocator.fairness.problem import FairnessProblem, monopoly_tasks
from walras.allocator.fairness.solver import FairnessResult, Mode
from walras.allocator.fairness.solver import solve as solve_psdsf

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Node time below this is no piece (a rounding remainder of 1 − Σ a).
MIN_PIECE = 1e-9
# GPUs: a holding above its maximum by more than this is a violation; a private piece left idle by
# more than this (in GPUs of the node) is lent.
SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class QuotaSolution:
    """PS-DSF with quotas (module docstring).

    Attributes:
        tasks: ``(N, K)`` tasks per tenant and real node (summed over the node's pieces).
        share: ``(N, K)`` each tenant's private piece of each node at the end (``a_{n,i}``, or
            its confinement where barred).
        carve: ``(N, m)`` the carve-outs ``c_ng`` (after scaling nodes that were over 1).
        held: ``(N, m)`` GPUs each tenant holds of each type.
        barred: ``(N, m)`` pairs confined by their maximum.
        result: the last solve, over the pieces; ``piece_node`` ``(P,)`` the real node of each
            piece and ``piece_owner`` ``(P,)`` its tenant (``-1``: shared).
        passes: solves run.
    """

    tasks: FloatArray
    share: FloatArray
    carve: FloatArray
    held: FloatArray
    barred: BoolArray
    result: FairnessResult
    piece_node: IntArray
    piece_owner: IntArray
    passes: int


def node_shares(
    carve: FloatArray, usable: BoolArray, node_type: IntArray, gpus: FloatArray
) -> FloatArray:
    """``a_{n,i} = c_ng / R_ng`` on the nodes of type ``g`` that ``n`` can use, each node's
    shares scaled down to sum to at most 1."""
    m = carve.shape[1]
    share = np.zeros(usable.shape)
    for g in range(m):
        on = node_type == g
        R = (usable[:, on] * gpus[on][None, :]).sum(axis=1)  # (N,)
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(R > 0, carve[:, g] / np.where(R > 0, R, 1.0), 0.0)
        share[:, on] = np.where(usable[:, on], np.minimum(frac, 1.0)[:, None], 0.0)
    total = share.sum(axis=0)
    over = total > 1.0
    share[:, over] /= total[over][None, :]
    return share


def held(
    tasks: FloatArray, gamma: FloatArray, node_type: IntArray, gpus: FloatArray, m: int
) -> FloatArray:
    """``h_ng = Σ_{i of type g} C_i x_{n,i} / γ_{n,i}``, shape ``(N, m)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(gamma > 0, tasks / np.where(gamma > 0, gamma, 1.0), 0.0)
    out = np.zeros((tasks.shape[0], m))
    np.add.at(out.T, node_type, (y * gpus[None, :]).T)
    return out


def pieces(
    problem: FairnessProblem, share: FloatArray, barred: BoolArray, node_type: IntArray
) -> tuple[FairnessProblem, IntArray, IntArray]:
    """The problem over pieces of nodes: ``(problem, piece_node, piece_owner)``."""
    N, K, _ = problem.shape
    node: list[int] = []
    owner: list[int] = []
    frac: list[float] = []
    for i in range(K):
        rest = 1.0 - float(share[:, i].sum())
        if rest > MIN_PIECE:
            node.append(i)
            owner.append(-1)
            frac.append(rest)
        for n in np.flatnonzero(share[:, i] > MIN_PIECE).tolist():
            node.append(i)
            owner.append(n)
            frac.append(float(share[n, i]))
    piece_node = np.array(node, dtype=np.int64)
    piece_owner = np.array(owner, dtype=np.int64)
    f = np.array(frac)
    mine = piece_owner[None, :] == np.arange(N)[:, None]
    shared = (piece_owner == -1)[None, :] & ~barred[:, node_type[piece_node]]
    eligible = problem.delta[:, piece_node] & (mine | shared)
    names = [
        f"{problem.nodes[i]}" if o < 0 else f"{problem.nodes[i]}@{problem.tenants[o]}"
        for i, o in zip(node, owner, strict=True)
    ]
    out = FairnessProblem(
        capacity=problem.capacity[piece_node] * f[:, None],
        demand=problem.demand,
        weight=problem.phi,
        eligible=eligible,
        cap=problem.caps,
        throughput=None if problem.throughput is None else problem.throughput[:, piece_node],
        tenant_names=list(problem.tenants),
        node_names=names,
        resource_names=list(problem.resources),
    )
    return out, piece_node, piece_owner


def solve(
    problem: FairnessProblem,
    node_type: IntArray,
    carve: FloatArray,
    maximum: FloatArray,
    *,
    mode: Mode = "tdm",
    max_passes: int = 8,
) -> QuotaSolution:
    """PS-DSF with the guarantee rows of carve-outs ``carve (N, m)`` and maximums ``maximum
    (N, m)`` (``inf``: none) over GPU types ``node_type (K,)`` (module docstring). The GPUs of a
    node are its first resource (``capacity[:, 0]``, as in the tenant model). ``max_passes``:
    solves for lending, besides one per pair with a maximum."""
    N, K, _ = problem.shape
    m = carve.shape[1]
    gamma = monopoly_tasks(problem)
    usable = gamma > 0
    gpus = np.asarray(problem.capacity[:, 0], dtype=np.float64)
    share = node_shares(carve, usable, node_type, gpus)
    carve_used = np.zeros((N, m))
    np.add.at(carve_used.T, node_type, (share * gpus[None, :]).T)
    barred = np.zeros((N, m), dtype=bool)
    # One confinement per pass: room for every pair with a maximum besides the repair passes.
    limit = max_passes + int(np.isfinite(maximum).sum())
    passes = 0
    while True:
        sub, piece_node, piece_owner = pieces(problem, share, barred, node_type)
        result = solve_psdsf(sub, mode=mode, strict=False)
        passes += 1
        tasks = np.zeros((N, K))
        np.add.at(tasks.T, piece_node, np.asarray(result.tasks).T)
        h = held(tasks, gamma, node_type, gpus, m)
        # Node time each tenant uses of its private piece of each node: its time on the node
        # counts against its own piece first (the guarantee row's accounting; a capped tenant is
        # indifferent between its piece and the shared one, and the solver may pick either).
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(gamma > 0, tasks / np.where(gamma > 0, gamma, 1.0), 0.0)
        own = np.minimum(share, y)
        over = (h > maximum + SLACK) & ~barred
        idle = (share > MIN_PIECE) & ((share - own) * gpus[None, :] > SLACK)
        if (not over.any() and not idle.any()) or passes >= limit:
            break
        # Lend: an idle private piece shrinks to what its owner uses. Shares only shrink here
        # (a confinement replaces them), so the passes cannot cycle.
        share = np.where(idle, own, share)
        # Confine: a tenant over its maximum gets M_ng / R_ng of each node of g it can use. One
        # pair per pass, the largest excess first: a confined tenant moves its demand to its
        # other types, so another pair over its maximum in the same solve may not be once it is
        # confined (confining both would bind a row the program leaves slack).
        if over.any():
            n, g = np.unravel_index(int(np.argmax(np.where(over, h - maximum, -np.inf))), h.shape)
            barred[n, g] = True
            on = (node_type == g) & usable[n]
            R = float(gpus[on].sum())
            share[n, on] = min(float(maximum[n, g]) / R, 1.0) if R > 0 else 0.0
        total = share.sum(axis=0)
        full = total > 1.0
        share[:, full] /= total[full][None, :]
    # Should the pass limit be reached with a pair over its maximum: its tasks on the type are
    # scaled down to it (a last resort; the maximum holds in every case).
    for n, g in zip(*np.nonzero(h > maximum + SLACK), strict=True):
        on = node_type == g
        tasks[n, on] *= float(maximum[n, g]) / float(h[n, g])
    h = held(tasks, gamma, node_type, gpus, m)
    return QuotaSolution(
        tasks=tasks,
        share=share,
        carve=carve_used,
        held=h,
        barred=barred,
        result=result,
        piece_node=piece_node,
        piece_owner=piece_owner,
        passes=passes,
    )
