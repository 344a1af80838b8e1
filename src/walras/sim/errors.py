"""Errors of the simulator's inputs: each message names the file, line, field or job at fault.

The CLI prints the message on one line and exits with code 2; nothing here is a bug report.
"""

from __future__ import annotations


class SimInputError(ValueError):
    """A trace, throughput table, cluster spec or option the simulator cannot use."""


class SimulationStuckError(RuntimeError):
    """Active jobs remain but no round can ever dispatch one (the run would never end)."""


class PolicyError(RuntimeError):
    """The policy raised while solving; the message says when, with how many jobs, and why."""
