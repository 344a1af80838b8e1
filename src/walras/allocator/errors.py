"""Errors raised by the allocator.

``InvalidProblem`` is *permanent*: the input itself is wrong (NaN, negative, wrong shape,
infeasible), so retrying cannot help. The operator maps it to a condition on the offending custom
resource. The message always names the job, tenant, node or resource type that is wrong, and the
optional ``field``/``index`` attributes let callers point at it programmatically.
"""

from __future__ import annotations


class InvalidProblem(ValueError):  # noqa: N818 (the issue names the error InvalidProblem)
    """The allocation problem is malformed or infeasible.

    Attributes:
        field: name of the offending input array (``"throughput"``, ``"capacity"``, ...), if known.
        index: index of the offending row (job/tenant) or column (type/node), if known.
    """

    def __init__(self, message: str, *, field: str | None = None, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index
