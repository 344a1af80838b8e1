"""Gang packing inside one placement group: fewest nodes first, then best fit.

Called by :func:`walras.allocator.rounds.plan_round` for every job it does not keep in place.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

_BIG = np.iinfo(np.int64).max


def pack(avail: IntArray, replicas: int, gpus: int) -> list[tuple[int, int]] | None:
    """Fewest nodes, then best fit: ``(position, pods)`` for a gang on nodes with ``avail`` GPUs.

    Positions index ``avail`` (a group's nodes in ascending node order), so ties go to the lower
    node index: argmin returns the first minimum and the sorts are stable.
    """
    need = replicas * gpus
    if int(avail.max()) >= need:
        # One node holds it all: the one left with the fewest free GPUs.
        i = int(np.argmin(np.where(avail >= need, avail, _BIG)))
        return [(i, replicas)]
    pods = avail // gpus
    if int(pods.sum()) < replicas:
        return None
    order = np.argsort(-pods, kind="stable")
    cum = np.cumsum(pods[order])
    m = int(np.searchsorted(cum, replicas))  # order[0..m] suffice; order[m] would be the last
    rest_pods = replicas - int(cum[m - 1]) if m > 0 else replicas
    # Best fit for the remainder among the nodes not filled (order[m] always qualifies); scan them
    # in node order so that equal leftovers go to the lower index.
    rest = np.sort(order[m:])
    left = np.where(pods[rest] >= rest_pods, avail[rest], _BIG)
    last = int(rest[int(np.argmin(left))])
    out = [(int(i), int(pods[i])) for i in order[:m]]
    out.append((last, rest_pods))
    return out
