"""JSON-ready views of an admission and a job, for CRD status and ``walras explain``.

Keys are camelCase like the rest of Walras's custom-resource status. ``failureProbability`` is
the posted ``q̂`` averaged over the support points the plan runs,
``Σ_{planned} f·q̂(s, k, d) / Σ_{planned} f``; ``runProbability`` is ``Σ_{planned} f``.
Example: points ``(0, 1, ½)`` planned at 0 with ``q̂ = 0.2`` and ``(3, 1, ½)`` not run give
``runProbability = 0.5`` and ``failureProbability = 0.2``.
"""

from __future__ import annotations

from typing import Any

from walras.allocator.sow.ledger import Admission, JobState


def plan_summary(adm: Admission) -> dict[str, float]:
    """``runProbability``, ``failureProbability`` and ``expectedUtility`` of the chosen plan."""
    inst = adm.instance
    run = fail = 0.0
    types = [d.gpu_type for d in inst.demands]
    for a, d, f in zip(inst.arrivals, inst.durations, inst.probabilities, strict=True):
        entry = adm.plan.lookup(inst.key(a, d))
        if entry is None or entry.start is None or entry.gpu_type is None:
            continue
        gi = types.index(entry.gpu_type)
        run += f
        fail += f * adm.failure[gi].at(entry.start, inst.demands[gi].duration_on(d))
    return {
        "runProbability": run,
        "failureProbability": fail / run if run > 0 else 0.0,
        "expectedUtility": adm.plan.expected_utility,
    }


def admission_status(adm: Admission) -> dict[str, Any]:
    """Birth, plan, posted menu and failure table of one job."""
    inst = adm.instance
    return {
        "job": inst.job,
        "sow": inst.sow,
        "instance": inst.index,
        "birth": inst.birth,
        "release": inst.release,
        "sequence": adm.sequence,
        "plan": [
            {
                "arrival": e.key[0],
                **({"duration": e.key[1]} if len(e.key) == 2 else {}),
                "gpuType": e.gpu_type,
                "start": e.start,
                "expectedUtility": e.utility,
            }
            for e in adm.plan.entries
        ],
        "menu": {
            m.gpu_type: {"origin": m.origin, "unitPrices": list(m.prices), "pMin": m.p_min}
            for m in adm.menus
        },
        "failure": {
            t.gpu_type: {
                "concurrency": t.concurrency,
                "firstStart": t.first_start,
                "durations": list(t.durations),
                "q": [list(row) for row in t.q],
                "samples": t.samples,
            }
            for t in adm.failure
        },
        **plan_summary(adm),
    }


def job_status(job: JobState) -> dict[str, Any]:
    """Phase, realised times, charge and value of one job."""
    return {
        "job": job.job,
        "phase": job.phase.value,
        "arrival": job.arrival,
        "start": job.start,
        "gpuType": job.gpu_type,
        "finish": job.finish,
        "charge": job.charge,
        "value": job.value,
    }
