"""Failure estimates ``q̂`` by seeded Monte Carlo over earlier-born jobs (SoW paper, App. F).

Under LIFO eviction (see :mod:`.round_step`) a job ``j`` is removed in round ``τ`` exactly when,
after every later-born job has been removed, the load is still too high. So with ``U_g(τ)`` the
committed load on type ``g`` of earlier-born jobs still active at the start of ``τ`` (including
any evicted in ``τ`` itself, which LIFO removes only after ``j``):

    j fails  ⇔  ∃ τ ∈ [t, s):       ∃ g: U_g(τ) > C_g          (cancelled before starting)
             or ∃ τ ∈ [s, s + d):   U_{g_j}(τ) + k > C_{g_j}    (evicted while running)

which depends on earlier-born jobs only (Lemma 3.1). ``U`` itself is built the same way, one
earlier job at a time in birth order: each job's own failure round is found against the loads
of the jobs before it, and it contributes ``k`` to ``U`` from its start up to and including that
round. One sample draws every earlier job's residual (arrival, duration) from its reported
distribution conditioned on what has been observed by round ``t``:

- pending: arrival ``≥ t``;
- waiting: the observed arrival (and duration, if revealed);
- running since ``s``: the observed arrival, and an on-type duration ``> t − s``
  (a running job whose report has no such duration is assumed to end after round ``t``).

With ``cancel_unprofitable`` each earlier job's run ends where the rule would cancel it
(:func:`.cancellation.run_end`, a function of its own report and menu), so ``U`` counts it only
up to then.

``q̂(s, d)`` is the fraction of ``M`` samples in which the job fails; estimates below ``θ`` are
set to 0 (Algorithm 2). With one type this is exactly the paper's rule; the per-type form is
Walras's extension (an overload on any type cancels later-born jobs that have not started;
a running job is evicted only by an overload on its own type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from walras.allocator.sow.cancellation import run_end
from walras.allocator.sow.ledger import Admission, FailureTable, JobState, Phase


@dataclass(frozen=True, slots=True)
class LoadSamples:
    """``loads[m, g, τ − origin]``: ``U_g(τ)`` in sample ``m`` (int64, rounds ≥ ``origin``)."""

    origin: int
    capacities: np.ndarray
    loads: np.ndarray

    @property
    def samples(self) -> int:
        return int(self.loads.shape[0])

    @property
    def horizon(self) -> int:
        return self.origin + int(self.loads.shape[2])

    def overloaded(self) -> np.ndarray:
        """``[m, τ]``: some type's load exceeds its capacity."""
        return np.asarray((self.loads > self.capacities[None, :, None]).any(axis=1))


def empty_samples(capacities: np.ndarray, origin: int, horizon: int, samples: int) -> LoadSamples:
    h = max(1, horizon - origin)
    loads = np.zeros((samples, len(capacities), h), dtype=np.int64)
    return LoadSamples(origin, np.asarray(capacities, dtype=np.int64), loads)


def conditional_probabilities(job: JobState, t: int) -> np.ndarray:
    """Probabilities of the job's support points given what was observed before round ``t``."""
    inst = job.admission.instance
    f = np.asarray(inst.probabilities, dtype=np.float64)
    a = np.asarray(inst.arrivals)
    d = np.asarray(inst.durations)
    if job.phase is Phase.PENDING:
        mask = a >= t
    elif job.phase in (Phase.WAITING, Phase.RUNNING):
        mask = a == job.arrival
        if inst.duration_revealed and job.signal is not None:
            mask &= d == job.signal
        if job.phase is Phase.RUNNING:
            assert job.start is not None and job.gpu_type is not None  # invariant of RUNNING
            dem = next(x for x in inst.demands if x.gpu_type == job.gpu_type)
            on_type = np.array([dem.duration_on(int(x)) for x in d])
            mask &= job.start + on_type > t
    else:
        mask = np.zeros(len(f), dtype=bool)
    w = np.where(mask, f, 0.0)
    total = w.sum()
    return w / total if total > 0 else w


def _point_schedule(
    adm: Admission, gpu_types: Sequence[str], job: JobState | None, cancel: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per support point: runs?, type index, start, end (exclusive), concurrency.

    The end is where the job stops holding GPUs when nothing evicts it: its completion, or
    with ``cancel`` the round the unprofitable-cancellation rule removes it.
    """
    inst, plan = adm.instance, adm.plan
    n = len(inst.probabilities)
    run = np.zeros(n, dtype=bool)
    g = np.zeros(n, dtype=np.int64)
    s = np.zeros(n, dtype=np.int64)
    e = np.zeros(n, dtype=np.int64)
    k = np.zeros(n, dtype=np.int64)
    for i, (a, d) in enumerate(zip(inst.arrivals, inst.durations, strict=True)):
        entry = plan.lookup(inst.key(a, d))
        gpu, start = (entry.gpu_type, entry.start) if entry is not None else (None, None)
        if job is not None and job.phase is Phase.RUNNING:
            gpu, start = job.gpu_type, job.start
        if gpu is None or start is None:
            continue
        di = [x.gpu_type for x in inst.demands].index(gpu)
        dem = inst.demands[di]
        run[i], g[i], s[i] = True, gpu_types.index(gpu), start
        e[i] = run_end(inst, adm.menus[di], dem.concurrency, start, dem.duration_on(d), cancel)
        k[i] = dem.concurrency
    return run, g, s, e, k


def add_job(
    samples: LoadSamples,
    adm: Admission,
    probabilities: np.ndarray,
    gpu_types: Sequence[str],
    rng: np.random.Generator,
    job: JobState | None = None,
    cancel: bool = True,
) -> LoadSamples:
    """Add one more (later-born) job to every sample, applying LIFO against the jobs before it.

    ``probabilities`` are the job's conditional outcome probabilities; ``job`` (if given) is its
    ledger state, for a job already running; ``cancel``: its runs stop where the
    unprofitable-cancellation rule would remove it (known from its report and posted menu).
    """
    m_count, _, h = samples.loads.shape
    u = rng.random(m_count)  # drawn even for an inactive job, so streams stay aligned
    total = float(probabilities.sum())
    if total <= 0:
        if job is not None and job.phase is Phase.RUNNING:
            # Ran past every reported duration: assume it ends after this round (documented).
            return _add_fixed_round(samples, job, gpu_types)
        return samples
    cdf = np.cumsum(probabilities) / total
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)
    run, g, s, e, k = _point_schedule(adm, gpu_types, job, cancel)
    run_m, g_m, k_m = run[idx], g[idx], k[idx]
    s_off = (s[idx] - samples.origin)[:, None]
    e_off = np.minimum(e[idx] - samples.origin, h)[:, None]
    tau = np.arange(h)[None, :]
    rows = np.arange(m_count)
    loads = samples.loads.copy()
    own = loads[rows, g_m, :]
    caps_m = samples.capacities[g_m][:, None]
    running = run_m[:, None] & (tau >= s_off) & (tau < e_off)
    waiting = run_m[:, None] & (tau < s_off)
    fail = (waiting & samples.overloaded()) | (running & (own + k_m[:, None] > caps_m))
    first = np.where(fail.any(axis=1), fail.argmax(axis=1), h)
    contrib = running & (tau <= first[:, None])
    loads[rows, g_m, :] = own + contrib * k_m[:, None]
    return LoadSamples(samples.origin, samples.capacities, loads)


def _add_fixed_round(samples: LoadSamples, job: JobState, gpu_types: Sequence[str]) -> LoadSamples:
    assert job.gpu_type is not None  # only called for RUNNING jobs
    gi = gpu_types.index(job.gpu_type)
    loads = samples.loads.copy()
    loads[:, gi, 0] += job.concurrency_on(job.gpu_type)
    return LoadSamples(samples.origin, samples.capacities, loads)


def failure_table(
    samples: LoadSamples,
    gpu_type: str,
    type_index: int,
    concurrency: int,
    first_start: int,
    n_starts: int,
    durations: Sequence[int],
    theta: float,
) -> FailureTable:
    """``q̂(s, k, d)`` for ``s ∈ [first_start, first_start + n_starts)`` and the given durations."""
    m_count, _, h = samples.loads.shape
    durs = tuple(sorted(set(int(d) for d in durations)))
    s_off = np.arange(n_starts) + (first_start - samples.origin)
    over = samples.overloaded()
    before = np.concatenate(
        (np.zeros((m_count, 1), dtype=bool), np.logical_or.accumulate(over, axis=1)), axis=1
    )
    tight = samples.loads[:, type_index, :] + concurrency > samples.capacities[type_index]
    cum = np.concatenate((np.zeros((m_count, 1), dtype=np.int64), np.cumsum(tight, axis=1)), axis=1)
    q = np.zeros((n_starts, len(durs)))
    for j, d in enumerate(durs):
        stop = np.minimum(s_off + d, h)
        hit = (cum[:, stop] - cum[:, np.minimum(s_off, h)]) > 0
        fail = before[:, np.minimum(s_off, h)] | hit
        q[:, j] = fail.mean(axis=0)
    q[q < theta] = 0.0
    rows = tuple(tuple(float(x) for x in row) for row in q)
    return FailureTable(gpu_type, concurrency, first_start, durs, rows, m_count)
