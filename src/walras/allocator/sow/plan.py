"""The launch plan: the start per arrival outcome that maximises estimated utility (eq. (1)-(2)).

For a job released at ``r`` with support points ``(a, d, f)`` and posted ``P``, ``q̂``:

    Û(π) = Σ_{(a,d)} f(a,d) · (1 − q̂(π(a), k, d)) · (v(π(a) + d − r) − P(π(a), k, d))

with ``Û = 0`` for outcomes planned "don't run". With ``cancel_unprofitable`` (the default) an
outcome whose completion would cost more than its reported value is cancelled for free before
it completes (:mod:`.cancellation`), so its term is ``(1 − q̂)·(v − P)⁺`` instead.
``Û`` separates over plan keys (the arrival ``a``, or ``(a, d)`` when the duration is revealed at
arrival), so each key is optimised alone by enumerating GPU type × start ``s ≥ a`` (paper §3,
"Computation"), and keeps "don't run" unless some start has positive estimated utility. Ties go
to the earliest start, then the first type by name (deterministic).

Example: one point ``(a = 0, d = 2, f = 1)``, ``v = deadline(3, 5)``, ``k = 1``, flat ``p = 1``,
``q̂ = 0``: start 0 gives ``5 − 2 = 3``, start 1 gives ``5 − 2 = 3`` (tie → 0), start 2
completes at 4 > 3 and gives ``−2`` (``0`` with cancellation). The plan is "start at 0".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from walras.allocator.sow.cancellation import positive_part
from walras.allocator.sow.ledger import FailureTable, LaunchPlan, PlanEntry
from walras.allocator.sow.model import Instance
from walras.allocator.sow.prices import PriceMenu


def last_start(inst: Instance) -> int:
    """Latest start that can still complete with positive value (duration ≥ 1)."""
    h = inst.value.horizon
    if not math.isfinite(h):
        return inst.birth - 1
    return inst.release + math.floor(h + 1e-9) - 1


def best_plan(
    inst: Instance,
    menus: Sequence[PriceMenu],
    tables: Sequence[FailureTable],
    cancel: bool = True,
) -> LaunchPlan:
    """The utility-maximising launch plan for ``inst`` (``menus``/``tables`` per demand).

    ``cancel``: outcomes that cannot pay are cancelled (worth 0, not ``v − P < 0``).
    """
    entries = []
    a_all = np.asarray(inst.arrivals)
    d_all = np.asarray(inst.durations)
    f_all = np.asarray(inst.probabilities, dtype=np.float64)
    for key in inst.keys:
        mask = a_all == key[0]
        if len(key) == 2:
            mask &= d_all == key[1]
        best: tuple[float, str | None, int | None] = (0.0, None, None)
        for dem, menu, table in zip(inst.demands, menus, tables, strict=True):
            on_type = np.array([dem.duration_on(int(d)) for d in d_all[mask]], dtype=np.int64)
            u = _utilities(inst, key[0], on_type, f_all[mask], dem.concurrency, menu, table, cancel)
            if u.size and u.max() > best[0]:
                i = int(np.argmax(u))  # first maximiser = earliest start
                best = (float(u[i]), dem.gpu_type, key[0] + i)
        entries.append(PlanEntry(key, best[1], best[2], best[0]))
    return LaunchPlan(tuple(entries))


def _utilities(
    inst: Instance,
    arrival: int,
    durations: np.ndarray,
    probs: np.ndarray,
    concurrency: int,
    menu: PriceMenu,
    table: FailureTable,
    cancel: bool,
) -> np.ndarray:
    """Estimated utility of each start ``arrival, arrival + 1, …`` for one key on one type."""
    n = last_start(inst) - arrival + 1
    if n <= 0 or probs.sum() <= 0:
        return np.zeros(0)
    starts = arrival + np.arange(n)
    cum = menu.cumulative(arrival, arrival + n + int(durations.max()))
    q_cols = [table.durations.index(int(d)) for d in durations]
    q = table.array[starts[:, None] - table.first_start, np.asarray(q_cols)[None, :]]
    price = concurrency * (cum[np.arange(n)[:, None] + durations[None, :]] - cum[:n, None])
    value = inst.value.values(starts[:, None] + durations[None, :] - inst.release)
    return np.asarray(((1.0 - q) * positive_part(value - price, cancel)) @ probs)
