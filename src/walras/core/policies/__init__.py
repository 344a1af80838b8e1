"""Scheduling policies, registered by name (see :mod:`walras.core.policies.registry`).

One module per policy. Importing this package registers the built-in ones; the list below is the
only place that names them.
"""

from walras.core.policies import (  # noqa: F401  (imported for their registration)
    fifo,
    finish_time_fairness,
    hadar,
    max_min_fairness,
    min_total_duration,
    price_discovery,
    psdsf,
    psdsf_distributed,
)
from walras.core.policies.args import PolicyArgError, PolicyArgs
from walras.core.policies.base import (
    DistributedReader,
    Handle,
    JobIssue,
    Policy,
    PolicyUnavailableError,
    Solution,
)
from walras.core.policies.eligibility import Capacity, usable_types
from walras.core.policies.registry import (
    PolicyConfig,
    UnknownPolicyError,
    aliases,
    build,
    canonical,
    check,
    create,
    names,
    parse_arg_flags,
    register,
)

__all__ = [
    "Capacity",
    "DistributedReader",
    "Handle",
    "JobIssue",
    "Policy",
    "PolicyArgError",
    "PolicyArgs",
    "PolicyConfig",
    "PolicyUnavailableError",
    "Solution",
    "UnknownPolicyError",
    "aliases",
    "build",
    "canonical",
    "check",
    "create",
    "names",
    "parse_arg_flags",
    "register",
    "usable_types",
]
