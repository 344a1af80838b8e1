"""What the throughput estimator returns: every (job, GPU type) value and where it came from."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


class Source(enum.StrEnum):
    """Where a throughput came from (``walras explain`` and the metric's ``source`` label).

    - ``declared``: given, with no measurement behind it (the user's ``spec.throughput``);
    - ``measured``: given, with at least one progress sample behind it;
    - ``estimated-own``: filled in from the job's own known values on other types, scaled by how
      those types compare on all jobs (and its profile group);
    - ``estimated-similar``: the job has no known value at all; filled in from the jobs of its
      group (same ``spec.profile`` or image);
    - ``default``: the admin's per-type default (ResourcePool), nothing better was known;
    - ``unknown``: nothing to go on (value NaN): the caller profiles the job or keeps it off.
    """

    DECLARED = "declared"
    MEASURED = "measured"
    ESTIMATED_OWN = "estimated-own"
    ESTIMATED_SIMILAR = "estimated-similar"
    DEFAULT = "default"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ThroughputEstimate:
    """Estimates for a (job × GPU type) matrix.

    Attributes:
        values: ``(n_jobs, n_types)`` throughputs (read-only array). Given entries are returned
            unchanged (zeros included: a zero means "cannot run there"); missing ones are filled
            in; NaN only where the source is ``unknown``.
        sources: ``sources[j][t]``, the :class:`Source` of each entry.
        iterations: alternating-least-squares sweeps run (0 when the fit is closed-form).
        converged: the last sweep moved no fitted log-value by more than the tolerance.
    """

    values: FloatArray
    sources: tuple[tuple[Source, ...], ...]
    iterations: int
    converged: bool

    def source(self, job: int, gpu_type: int) -> Source:
        return self.sources[job][gpu_type]
