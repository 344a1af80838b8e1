"""``price-discovery``: utility-maximising time shares per GPU type (Agrawal et al. 2021).

Groups are GPU types. ``walras.allocator.pricing`` maximises ``Σ_i u_i(a_i^T x_i)`` subject to
``Σ_i d_i x_i ≤ R`` (``d_i`` = replicas × GPUs per pod, ``R`` = free GPUs per type); the targets are
``X``, and the prices ``p`` (the marginal utility of one more GPU of each type) are shown on the
pools and jobs. Prices are warm-started from the previous round.

Weights are governed (``walras.core.governance.normalised_weights``): each job's
``utility.weight`` is clamped to its tenant's allowed range and normalised inside the tenant, so a
tenant's jobs together weigh what the admin set, however many there are.

**Quotas** (``Tenant.spec.quotas``, per GPU type: ``guaranteed`` ``G_tg``, ``maximum``
``M_tg``) add, with ``h_tg = Σ_{i ∈ t} d_ig x_ig`` the GPUs tenant ``t`` holds,

    h_tg ≤ M_tg,      Σ_t max(h_tg − c_tg, 0) ≤ R_g − Σ_t c_tg,      c_tg = min(G_tg, f_tg)

(``f_tg``: what t's jobs able to use ``g`` ask for; an unused guarantee is lent). The solver
runs unchanged over ``walras.allocator.quotas``' columns: a carve-out ``g@t`` of ``c_tg`` GPUs
only t may buy, the shared ``g`` with the rest, and a private column of ``M_tg`` for a tenant
whose maximum binds. Once guarantees bind, t pays its own price ``p_{g@t} ≤ p_g`` for its
carve-out (a per-tenant discount, the multiplier of its guarantee row), and a tenant at its
maximum pays ``p_{g@t} ≥ p_g`` (a per-tenant surcharge, the multiplier of its maximum). The
prices shown are the market's (shared columns). Without any quota the problem is solved as
before, in one solve.

Jobs the allocator would reject are dropped with a :class:`JobIssue` (``pricing.screen_jobs``, or
the solver's own ``InvalidProblem`` naming a row), and the rest are solved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from walras.allocator import quotas
from walras.allocator.errors import InvalidProblem
from walras.core import governance, model, snapshot, weighting
from walras.core.policies.args import PolicyArgs
from walras.core.policies.base import (
    FloatArray,
    Handle,
    JobIssue,
    Solution,
    SolutionMemo,
    empty_solution,
    inputs_key,
    with_seconds,
)
from walras.core.policies.eligibility import Capacity, usable_types
from walras.core.policies.registry import register


@dataclass(frozen=True, slots=True)
class _Unsolved:
    """What a round reports when quotas leave no job anything to solve."""

    gap: float = 0.0
    converged: bool = True
    timings: Mapping[str, float] = field(default_factory=dict)


class _LazyAlternatives(Mapping[model.JobKey, Mapping[str, float]]):
    """A solution's ``alternatives``, computed when first read.

    Only the operator's Pending condition reads them (``operator.status``); a simulated run never
    does, and three masked best responses per solve were a tenth of a remaining-weighted run's
    time. The arrays they are computed from are the solve's own and never written after it.
    """

    __slots__ = ("_compute", "_data")

    def __init__(self, compute: Callable[[], dict[model.JobKey, dict[str, float]]]) -> None:
        self._compute: Callable[[], dict[model.JobKey, dict[str, float]]] | None = compute
        self._data: dict[model.JobKey, dict[str, float]] = {}

    def _value(self) -> dict[model.JobKey, dict[str, float]]:
        if self._compute is not None:
            self._data, self._compute = self._compute(), None
        return self._data

    def __getitem__(self, key: model.JobKey) -> Mapping[str, float]:
        return self._value()[key]

    def __iter__(self) -> Iterator[model.JobKey]:
        return iter(self._value())

    def __len__(self) -> int:
        return len(self._value())


@dataclass(frozen=True, slots=True)
class _Row:
    """A job's row of the priced problem: its throughput per type where its gang can run (0
    elsewhere), its demand ``replicas × GPUs per pod`` per type, its GPUs per pod over the
    types' resources, or why it cannot run anywhere (``issue``, keyed to the job that made the
    row: callers re-key it)."""

    throughput: tuple[float, ...]
    demand: tuple[float, ...]
    gpus_per_pod: int
    issue: JobIssue | None


class _RowMemo:
    """Rows (:class:`_Row`) per kind of job, kept across rounds while the cluster is the same.

    A row depends on the job only through its filter shape, its gang size and its throughputs
    (:meth:`kind`), and on the cluster only through the view and the pools (the view's types,
    their pools' resource names and what the filters answer: ``Capacity.of(view)``). The
    snapshot's view is the same object while nodes, pools and foreign pods are unchanged
    (``snapshot.cluster_view``), so an unchanged job costs a dictionary lookup per round; a new
    view or pools tuple starts an empty memo. Both are held, so their ids are never reused.
    """

    def __init__(self) -> None:
        self._on: tuple[snapshot.ClusterView, tuple[model.PoolSpec, ...]] | None = None
        self._rows: dict[Hashable, _Row] = {}
        self._view: snapshot.ClusterView | None = None
        self._resources: list[str] = []

    def of(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> _RowMemo:
        on = self._on
        if on is None or on[0] is not view or on[1] is not snap.pools:
            self._on = (view, snap.pools)
            self._rows = {}
            self._view = view
            self._resources = [
                next((p.resource_name for p in snap.pools if p.gpu_type == t), "")
                for t in view.gpu_types
            ]
        return self

    @staticmethod
    def kind(job: model.JobSpec) -> Hashable:
        return (job.filter_shape, job.replicas, tuple(sorted(job.throughput.items())))

    def row(self, job: model.JobSpec) -> _Row:
        kind = self.kind(job)
        found = self._rows.get(kind)
        if found is None:
            found = self._rows[kind] = self._build(job)
        return found

    def _build(self, job: model.JobSpec) -> _Row:
        view = self._view
        assert view is not None  # set by of()
        usable, issue = usable_types(job, view, Capacity.of(view))
        types, resources = view.gpu_types, self._resources
        return _Row(
            throughput=tuple(
                job.throughput.get(t, 0.0) if usable.get(t, False) else 0.0 for t in types
            ),
            demand=tuple(float(job.replicas * job.gpus_per_pod(r)) for r in resources),
            gpus_per_pod=max(job.gpus_per_pod(r) for r in resources) if resources else 1,
            issue=issue,
        )


@dataclass(frozen=True, slots=True)
class PriceDiscoveryArgs(PolicyArgs):
    """Arguments of ``price-discovery``: the solver's tolerance, cap and backend, and the
    remaining-work weighting (``walras.core.weighting``)."""

    eps: float = field(
        default=1e-3,
        metadata={
            "exclusiveMinimum": 0,
            "exclusiveMaximum": 1,
            "description": "stop at an average duality gap of eps",
        },
    )
    max_iter: int = field(default=100, metadata={"minimum": 1, "description": "iteration cap"})
    backend: Literal["auto", "numpy", "torch"] = field(
        default="auto", metadata={"description": "auto: torch on a CUDA device when installed"}
    )
    weighting: Literal["none", "remaining"] = field(
        default="none", metadata={"description": "remaining: weight by remaining time^exponent"}
    )
    weighting_exponent: float = field(
        default=-0.5,
        metadata={"minimum": -4, "maximum": 0, "description": "exponent of 'remaining'"},
    )


@register(
    "price-discovery",
    summary="utility-maximising shares per GPU type, with prices",
    args=PriceDiscoveryArgs,
)
class PriceDiscovery:
    """Price discovery with warm-started prices."""

    name = "price-discovery"
    work_conserving = False
    # The solver's duality gap is the operator's walras_duality_gap.
    reports_gap = True

    def __init__(self, args: PriceDiscoveryArgs, handle: Handle) -> None:
        del handle  # price discovery needs nothing from the shell
        self.eps = args.eps
        self.backend = args.backend
        self.max_iter = args.max_iter
        self.weighting = args.weighting
        self._memo = SolutionMemo()
        self.weighting_exponent = args.weighting_exponent
        self._warm: tuple[tuple[str, ...], FloatArray] | None = None
        self._rows = _RowMemo()

    def warm_up(self) -> None:
        """Import the solver and its backend (torch for ``auto``) before the first round, so the
        first binding after start-up does not pay for it."""
        from walras.allocator import pricing

        problem = pricing.PricingProblem(throughput=[[1.0]], capacity=[1.0])
        pricing.solve(problem, eps=self.eps, backend=self.backend)

    def solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        start = time.perf_counter()
        key: tuple[object, ...] = inputs_key(snap, view)
        if self.weighting != "none":
            key += (
                weighting.factors(
                    snap.active_jobs,
                    snap,
                    weighting=self.weighting,
                    exponent=self.weighting_exponent,
                ).tobytes(),
            )
        cached = self._memo.get(key, snap)
        if cached is not None:
            return cached
        sol = with_seconds(self._solve(snap, view), time.perf_counter() - start)
        self._memo.put(key, sol)
        return sol

    def _solve(self, snap: snapshot.Snapshot, view: snapshot.ClusterView) -> Solution:
        from walras.allocator import pricing

        types = view.gpu_types
        issues: list[JobIssue] = []
        rows: list[model.JobSpec] = []
        built: list[_Row] = []
        memo = self._rows.of(snap, view)
        for job in snap.active_jobs:
            row = memo.row(job)
            if row.issue is not None:
                issues.append(replace(row.issue, key=job.key))
                continue
            rows.append(job)
            built.append(row)
        n, m = len(rows), len(types)
        A = np.array([row.throughput for row in built], dtype=np.float64).reshape(n, m)
        D = np.array([row.demand for row in built], dtype=np.float64).reshape(n, m)
        gpp_of = {job.key: row.gpus_per_pod for job, row in zip(rows, built, strict=True)}
        kinds = [j.utility.kind for j in rows]
        weight = np.zeros(n, dtype=np.float64)

        factor = weighting.factors(
            rows, snap, weighting=self.weighting, exponent=self.weighting_exponent
        )

        governed: list[list[int]] = []

        def govern(sel: Sequence[int]) -> None:
            # Normalised over the jobs actually solved: a dropped job's weight goes back to the
            # rest of its tenant, so the tenant keeps its total.
            idx = list(sel)
            if governed and governed[-1] == idx:
                return  # the same jobs as the last call: the same weights (no job dropped)
            governed.append(idx)
            weight[idx] = governance.normalised_weights([rows[i] for i in idx], snap.tenants)
            weight[idx] *= factor[idx]

        govern(range(n))
        target = np.array([j.utility.target for j in rows], dtype=np.float64)
        alpha = np.array([j.utility.alpha for j in rows], dtype=np.float64)

        def make(a: FloatArray, d: FloatArray, sel: Sequence[int]) -> Any:
            idx = list(sel)
            return pricing.PricingProblem(
                throughput=a[idx],
                capacity=view.type_capacity.copy(),
                demand=d[idx],
                kind=[kinds[i] for i in idx],
                weight=weight[idx],
                target=target[idx],
                alpha=alpha[idx],
            )

        keep = list(range(n))
        if n and m:
            for bad in pricing.screen_jobs(make(A, D, keep)):
                job = rows[keep[bad.index]]
                issues.append(JobIssue(job.key, bad.field, "Unsolvable", bad.reason))
            dropped = {i.key for i in issues}
            keep = [i for i in keep if rows[i].key not in dropped]
            govern(keep)
        solved = [rows[i] for i in keep]
        gpp = np.array([gpp_of[j.key] for j in solved], dtype=np.int64)
        if not solved or m == 0:
            return empty_solution(self.name, view, solved, issues, gpp)
        warm = None
        if self._warm is not None and self._warm[0] == types:
            warm = self._warm[1]
        while True:
            try:
                result, X, prices, iterations = self._priced(
                    pricing, make, A, D, keep, rows, snap, view, warm
                )
                break
            except InvalidProblem as exc:
                # A job the screening missed: drop it with the solver's reason, solve the rest.
                if exc.index is None or not 0 <= exc.index < len(keep) or len(keep) == 1:
                    raise
                job = rows[keep[exc.index]]
                issues.append(JobIssue(job.key, exc.field or "spec", "Unsolvable", str(exc)))
                del keep[exc.index]
                govern(keep)
        solved = [rows[i] for i in keep]
        gpp = np.array([gpp_of[j.key] for j in solved], dtype=np.int64)
        self._warm = (types, prices.copy())
        X = np.clip(X, 0.0, 1.0)
        sums = X.sum(axis=1)
        X = np.where(sums[:, None] > 1.0, X / np.maximum(sums, 1e-300)[:, None], X)
        Ak = A[keep]
        capacity = view.type_capacity
        alternatives = _LazyAlternatives(
            lambda: self._alternatives(
                pricing, make, A, D, keep, X, prices, solved, types, capacity
            )
        )
        return Solution(
            policy=self.name,
            groups=types,
            group_type=types,
            node_group=view.node_type.copy(),
            jobs=tuple(solved),
            targets=X,
            gpus_per_pod=gpp,
            prices={t: float(prices[g]) for g, t in enumerate(types)},
            expected_throughput=(Ak * X).sum(axis=1),
            tenant_tasks={},
            alternatives=alternatives,
            issues=tuple(issues),
            iterations=iterations,
            gap=float(result.gap),
            converged=bool(result.converged),
            timings=dict(result.timings),
        )

    def _priced(
        self,
        pricing: Any,
        make: Callable[[FloatArray, FloatArray, Sequence[int]], Any],
        A: FloatArray,
        D: FloatArray,
        keep: Sequence[int],
        rows: Sequence[model.JobSpec],
        snap: snapshot.Snapshot,
        view: snapshot.ClusterView,
        warm: FloatArray | None,
    ) -> tuple[Any, FloatArray, FloatArray, int]:
        """One solve of the kept rows: ``(last result, X (n, m), prices per type, iterations)``.

        With quotas, the solver runs over :mod:`walras.allocator.quotas`' columns (carve-outs
        and barred pairs, module docstring there) until no pair changes; a type's market price
        is its shared column's (the highest private one where all of it is private).
        """
        from walras.allocator.pricing.problem import usable

        problem = make(A, D, keep)
        types = view.gpu_types
        quota = governance.quota_arrays([rows[i] for i in keep], types, snap.tenants)
        options: dict[str, Any] = {
            "eps": self.eps,
            "max_iter": self.max_iter,
            "backend": self.backend,
            "strict": False,
        }
        if quota is None:
            result = pricing.solve(problem, warm_prices=warm, **options)
            X = np.asarray(result.allocation, dtype=np.float64)
            return result, X, np.asarray(result.prices, dtype=np.float64), int(result.iterations)
        last: list[Any] = []

        n = len(keep)
        job_kinds = problem.kinds()
        per_job = {
            name: np.broadcast_to(np.asarray(getattr(problem, name), dtype=np.float64), (n,))
            for name in ("weight", "target", "alpha")
        }

        def over_columns(cols: quotas.Columns, live: npt.NDArray[np.int64]) -> FloatArray:
            column_problem = pricing.PricingProblem(
                throughput=cols.expand(np.asarray(problem.throughput))[live],
                capacity=cols.capacity,
                gang_capacity=cols.gang,
                demand=cols.spread(problem.demand_matrix())[live],
                kind=[job_kinds[i] for i in live],
                **{name: values[live] for name, values in per_job.items()},
            )
            start = None if warm is None else warm[cols.base]
            try:
                last.append(pricing.solve(column_problem, warm_prices=start, **options))
            except InvalidProblem as exc:
                # Name the row of the kept jobs, as a solve without quotas would.
                index = None if exc.index is None else int(live[exc.index])
                raise InvalidProblem(str(exc), field=exc.field, index=index) from exc
            return np.asarray(last[-1].allocation, dtype=np.float64)

        out = quotas.enforce(
            over_columns,
            quota,
            np.where(usable(problem, strict=False), problem.throughput, 0.0),
            problem.demand_matrix(),
            np.asarray(problem.capacity, dtype=np.float64),
        )
        if not last:
            # No job may hold any column (every gang is over a maximum on its way up): nothing
            # was solved, and no GPU has a price.
            return _Unsolved(), out.allocation, np.zeros(len(types)), 0
        column_prices = np.asarray(last[-1].prices, dtype=np.float64)
        prices = np.zeros(len(types))
        for g in range(len(types)):
            on_g = out.columns.base == g
            shared = on_g & (out.columns.tenant == quotas.SHARED)
            pick = shared if shared.any() else on_g
            prices[g] = float(column_prices[pick].max()) if pick.any() else 0.0
        return last[-1], out.allocation, prices, sum(int(r.iterations) for r in last)

    @staticmethod
    def _alternatives(
        pricing: Any,
        make: Callable[[FloatArray, FloatArray, Sequence[int]], Any],
        A: FloatArray,
        D: FloatArray,
        keep: Sequence[int],
        X: FloatArray,
        prices: FloatArray,
        solved: Sequence[model.JobSpec],
        types: Sequence[str],
        capacity: FloatArray,
    ) -> dict[model.JobKey, dict[str, float]]:
        """For jobs short of a full share: the fraction each type alone would give them.

        ``pricing.best_response`` at the current prices with every other type's throughput
        masked to 0 (the "on k80 you would get 0.90" of the Pending condition). ``A`` and ``D``
        are the full (pre-screening) arrays; ``keep[r]`` is solved row ``r``'s index in them.
        A type whose ``capacity`` (this view's: a POP shard's share) is below the job's gang has
        no alternative for it: no share of it can run the gang, and the solve masked it too.
        """
        out: dict[model.JobKey, dict[str, float]] = {}
        short = [r for r in range(len(solved)) if X[r].sum() < 0.999]
        for g, gpu_type in enumerate(types):
            rows = [r for r in short if A[keep[r], g] > 0 and D[keep[r], g] <= capacity[g]]
            if not rows:
                continue
            masked = np.zeros_like(A)
            masked[:, g] = A[:, g]
            x = np.asarray(
                pricing.best_response(make(masked, D, [keep[r] for r in rows]), prices),
                dtype=np.float64,
            )
            for pos, r in enumerate(rows):
                out.setdefault(solved[r].key, {})[gpu_type] = float(x[pos, g])
        return out
