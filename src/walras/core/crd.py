"""Names the operator shares with the API server: group, versions, plurals, labels, annotations.

Everything that appears in a URL, a label selector or an annotation key lives here, so that the
CRD YAML in ``crds/``, the handlers, the pods we create and the tests all spell them the same way.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "walras.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

JOB_KIND: Final = "FungibleJob"
JOB_PLURAL: Final = "fungiblejobs"
POOL_KIND: Final = "ResourcePool"
POOL_PLURAL: Final = "resourcepools"

SCHEDULER_NAME: Final = "walras"
DEFAULT_RESOURCE_NAME: Final = "nvidia.com/gpu"

# Node label that devcluster/kind put on GPU nodes; pools usually select on it.
GPU_TYPE_LABEL: Final = "walras.dev/gpu-type"

# Labels on every pod Walras creates (the pod watch selects on LABEL_JOB).
LABEL_JOB: Final = "walras.dev/job"
LABEL_REPLICA: Final = "walras.dev/replica"

# Annotations on every pod Walras creates; written once, at creation (no extra writes).
ANN_ROUND: Final = "walras.dev/round"
ANN_GPU_TYPE: Final = "walras.dev/gpu-type"
ANN_TIME_SLICE: Final = "walras.dev/time-slice"
ANN_PRICE: Final = "walras.dev/price"
# The node the round planned for the pod: lets a restarted operator bind a pod that was created
# but not yet bound before a crash, and count it against that node meanwhile.
ANN_NODE: Final = "walras.dev/node"
# The placement group (GPU type or node) the pod's slice is accounted to.
ANN_GROUP: Final = "walras.dev/group"

# kwok stage hook (see devcluster): the pod moves to Succeeded this many ms after it runs.
ANN_KWOK_COMPLETE_AFTER_MS: Final = "walras.dev/kwok-complete-after-ms"

PHASE_PENDING: Final = "Pending"
PHASE_RUNNING: Final = "Running"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
TERMINAL_PHASES: Final = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})
